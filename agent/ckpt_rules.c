/* The checkpoint name rule, the paths a peer may send, and the token
 * bucket of the replication's pace (ckpt_rules.h). */
#include "ckpt_rules.h"

#include <string.h>

#include "errors.h"

/* The rule over name[0..n): n > 0 and no NUL inside. */
static int step_of(const char *name, size_t n, uint64_t *step) {
  if (n == 0 || name[0] == '.')
    return 0;
  if (n >= 4 && memcmp(name + n - 4, ".tmp", 4) == 0)
    return 0;
  for (size_t i = 0; i + 5 <= n; i++)
    if (memcmp(name + i, ".tmp.", 5) == 0)
      return 0;
  const char *dot = memchr(name, '.', n);
  size_t head = dot != NULL ? (size_t)(dot - name) : n;
  /* The last run of digits in name[0..head). */
  size_t end = head;
  while (end > 0 && (name[end - 1] < '0' || name[end - 1] > '9'))
    end--;
  if (end == 0)
    return 0;
  size_t start = end;
  while (start > 0 && name[start - 1] >= '0' && name[start - 1] <= '9')
    start--;
  uint64_t v = 0;
  for (size_t i = start; i < end; i++) {
    uint64_t d = (uint64_t)(name[i] - '0');
    /* DR_NONE (UINT64_MAX) means "none" on the wire: not a step. */
    if (v > (UINT64_MAX - 1 - d) / 10)
      return 0;
    v = v * 10 + d;
  }
  if (step != NULL)
    *step = v;
  return 1;
}

int dr_ckpt_name_step(const char *name, uint64_t *step) {
  return name != NULL && step_of(name, strlen(name), step);
}

static int is_control(uint8_t c) { return c < 0x20 || c == 0x7f; }

int dr_ckpt_wire_name(const uint8_t *p, size_t n, uint64_t *step) {
  if (n == 0 || n > DR_CKPT_NAME_MAX)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (p[i] == '/' || is_control(p[i]))
      return 0;
  return step_of((const char *)p, n, step);
}

int dr_ckpt_path_check(const uint8_t *p, size_t n, int *depth) {
  int parts = 0;
  size_t i = 0;
  if (n == 0 || p[0] == '/')
    return DR_EBADARG;
  while (i <= n) {
    size_t start = i;
    while (i < n && p[i] != '/') {
      if (is_control(p[i]))
        return DR_EBADARG;
      i++;
    }
    size_t len = i - start;
    if (len == 0 || len > DR_CKPT_NAME_MAX)
      return DR_EBADARG; /* empty: "a//b", "a/", or a leading '/' */
    if ((len == 1 && p[start] == '.') ||
        (len == 2 && p[start] == '.' && p[start + 1] == '.'))
      return DR_EBADARG;
    if (++parts > DR_CKPT_DEPTH_MAX)
      return DR_EBADARG;
    i++; /* past the '/', or past the end */
  }
  if (depth != NULL)
    *depth = parts;
  return 0;
}

void dr_tbucket_init(dr_tbucket_t *tb, uint64_t rate, uint64_t burst,
                     uint64_t now_ns) {
  tb->rate = rate;
  tb->burst = burst;
  tb->tokens = (double)burst;
  tb->last_ns = now_ns;
}

uint64_t dr_tbucket_take(dr_tbucket_t *tb, uint64_t n_bytes, uint64_t now_ns) {
  if (tb->rate == 0)
    return 0;
  if (now_ns > tb->last_ns) {
    tb->tokens += (double)tb->rate * (double)(now_ns - tb->last_ns) / 1e9;
    if (tb->tokens > (double)tb->burst)
      tb->tokens = (double)tb->burst;
    tb->last_ns = now_ns;
  }
  tb->tokens -= (double)n_bytes;
  if (tb->tokens >= 0)
    return 0;
  double wait = -tb->tokens * 1e9 / (double)tb->rate;
  uint64_t ns = (uint64_t)wait;
  return (double)ns < wait ? ns + 1 : ns;
}
