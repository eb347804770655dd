/* The last collectives of a communicator. See coll_history.h. */
#include "coll_history.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t dr_coll_history_add(dr_coll_history_t *h, const char *kind,
                           uint64_t n_bytes, uint64_t now_us) {
  size_t i = (size_t)(h->n % DR_COLL_HISTORY);
  dr_coll_entry_t *e = &h->slot[i];
  e->seq = ++h->n;
  e->kind = kind;
  e->n_bytes = n_bytes;
  e->start_us = now_us;
  e->state = DR_COLL_ENQUEUING;
  return i;
}

size_t dr_coll_history_len(const dr_coll_history_t *h) {
  return h->n < DR_COLL_HISTORY ? (size_t)h->n : DR_COLL_HISTORY;
}

dr_coll_entry_t *dr_coll_history_at(dr_coll_history_t *h, size_t k,
                                    size_t *slot) {
  size_t len = dr_coll_history_len(h);
  if (k >= len)
    return NULL;
  size_t i = (size_t)((h->n - len + k) % DR_COLL_HISTORY);
  if (slot != NULL)
    *slot = i;
  return &h->slot[i];
}

const char *dr_coll_state_name(dr_coll_state_t s) {
  switch (s) {
  case DR_COLL_ENQUEUING:
    return "enqueuing";
  case DR_COLL_PENDING:
    return "pending";
  case DR_COLL_DONE:
    return "done";
  case DR_COLL_UNKNOWN:
    break;
  }
  return "unknown";
}

static void fmt_bytes(char *out, size_t out_len, uint64_t n) {
  if (n < 1024)
    snprintf(out, out_len, "%" PRIu64 " B", n);
  else if (n < (1u << 20))
    snprintf(out, out_len, "%.1f KiB", n / 1024.0);
  else if (n < (1ull << 30))
    snprintf(out, out_len, "%.1f MiB", n / 1048576.0);
  else
    snprintf(out, out_len, "%.1f GiB", n / 1073741824.0);
}

static double age_s(const dr_coll_entry_t *e, uint64_t now_us) {
  return now_us > e->start_us ? (now_us - e->start_us) / 1e6 : 0.0;
}

void dr_coll_history_line(dr_coll_history_t *h, size_t last, uint64_t now_us,
                          char *out, size_t out_len) {
  size_t len = dr_coll_history_len(h), used = 0;
  if (out_len == 0)
    return;
  out[0] = '\0';
  if (len == 0) {
    snprintf(out, out_len, "none");
    return;
  }
  size_t from = last < len ? len - last : 0;
  for (size_t k = from; k < len && used < out_len; k++) {
    const dr_coll_entry_t *e = dr_coll_history_at(h, k, NULL);
    char size[32], since[48] = "";
    fmt_bytes(size, sizeof(size), e->n_bytes);
    if (e->state != DR_COLL_DONE)
      snprintf(since, sizeof(since), " since %.1f s", age_s(e, now_us));
    int w = snprintf(out + used, out_len - used, "%s#%" PRIu64 " %s %s %s%s",
                     k > from ? ", " : "", e->seq, e->kind, size,
                     dr_coll_state_name(e->state), since);
    if (w < 0)
      break;
    used += (size_t)w;
  }
}

/* Writes all n bytes; 0 or -errno. */
static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -errno;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int dr_coll_history_write(dr_coll_history_t *h, uint32_t rank, uint32_t world,
                          const char *why, uint64_t now_us, const char *path) {
  char tmp[4096];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
    return -ENAMETOOLONG;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  size_t len = dr_coll_history_len(h);
  char line[512];
  int n = snprintf(line, sizeof(line),
                   "# rank %" PRIu32 " of %" PRIu32 ": the last %zu of %" PRIu64
                   " NCCL collectives, oldest first,\n#   when %s\n",
                   rank, world, len, h->n, why);
  int rc = write_all(fd, line, n < (int)sizeof(line) ? (size_t)n
                                                     : sizeof(line) - 1);
  for (size_t k = 0; k < len && rc == 0; k++) {
    const dr_coll_entry_t *e = dr_coll_history_at(h, k, NULL);
    n = snprintf(line, sizeof(line),
                 "rank=%" PRIu32 " seq=%" PRIu64 " kind=%s bytes=%" PRIu64
                 " state=%s age_s=%.3f\n",
                 rank, e->seq, e->kind, e->n_bytes,
                 dr_coll_state_name(e->state), age_s(e, now_us));
    rc = write_all(fd, line, n < (int)sizeof(line) ? (size_t)n
                                                   : sizeof(line) - 1);
  }
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  if (rc == 0 && rename(tmp, path) != 0)
    rc = -errno;
  if (rc != 0)
    unlink(tmp);
  return rc;
}

int dr_coll_history_path(char *out, size_t out_len) {
  const char *f = getenv("DDPRUN_ERROR_FILE");
  if (f == NULL || f[0] == '\0')
    f = getenv("TORCHELASTIC_ERROR_FILE");
  if (f == NULL || f[0] == '\0')
    return -1;
  const char *slash = strrchr(f, '/');
  int n = slash == NULL
              ? snprintf(out, out_len, "%s", DR_COLL_HISTORY_FILE)
              : snprintf(out, out_len, "%.*s/%s", (int)(slash - f), f,
                         DR_COLL_HISTORY_FILE);
  return n < 0 || (size_t)n >= out_len ? -1 : 0;
}
