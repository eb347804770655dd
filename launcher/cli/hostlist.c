/* Slurm hostlist expansion: a checking pass that counts the names (so a
 * list of a billion hosts is refused before anything is allocated), then
 * a pass that writes them. */
#include "hostlist.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

#define MAX_NAME 255   /* a host name, as HOST_NAME_MAX */
#define MAX_DIGITS 18  /* fits a uint64_t with room for HI + 1 */
#define SHOWN 80       /* of the list, in messages */
#define PART 24        /* of a piece of it */

#define CUT(n) ((int)((n) > PART ? PART : (n)))

typedef struct {
  const char *list;
  size_t max_hosts;
  char **hosts;
  size_t n;
  char *err;
  size_t err_len;
} ctx_t;

typedef struct {
  uint64_t lo, hi;
  int width; /* digits of LO: the zero padding */
} range_t;

__attribute__((format(printf, 2, 3))) static int fail(ctx_t *c,
                                                      const char *fmt, ...) {
  if (c->err == NULL || c->err_len == 0)
    return DR_EBADARG;
  size_t len = strlen(c->list);
  int k = snprintf(c->err, c->err_len, "hostlist '%.*s%s': ", SHOWN, c->list,
                   len > SHOWN ? "..." : "");
  if (k >= 0 && (size_t)k < c->err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + k, c->err_len - (size_t)k, fmt, ap);
    va_end(ap);
  }
  return DR_EBADARG;
}

static int name_char_ok(char ch) {
  return (unsigned char)ch > ' ' && ch != 0x7f && ch != '[' && ch != ']' &&
         ch != ',';
}

/* Parses the number at s[0..len) into *v. */
static int parse_num(ctx_t *c, const char *s, size_t len, uint64_t *v) {
  if (len == 0)
    return fail(c, "empty number in a bracket group; write [1-4] or [1,3]");
  if (len > MAX_DIGITS)
    return fail(c, "number '%.*s' has more than %d digits", CUT(len), s,
                MAX_DIGITS);
  uint64_t x = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return fail(c, "'%.*s' in a bracket group is not a number or a range "
                  "LO-HI",
                  CUT(len), s);
    x = x * 10 + (uint64_t)(s[i] - '0');
  }
  *v = x;
  return 0;
}

/* The ranges of the group g[0..len) (between the brackets), one at a time:
 * *pos is where the next one starts. 1 and *r for a range, 0 at the end,
 * or an error. */
static int next_range(ctx_t *c, const char *g, size_t len, size_t *pos,
                      range_t *r) {
  if (*pos > len)
    return 0;
  const char *item = g + *pos;
  const char *end = memchr(item, ',', len - *pos);
  size_t n = end != NULL ? (size_t)(end - item) : len - *pos;
  *pos += n + 1;
  if (n == 0)
    return fail(c, "empty item in the group [%.*s]; remove the extra comma",
                CUT(len), g);
  const char *dash = memchr(item, '-', n);
  size_t lo_len = dash != NULL ? (size_t)(dash - item) : n;
  int rc = parse_num(c, item, lo_len, &r->lo);
  if (rc != 0)
    return rc;
  r->hi = r->lo;
  r->width = (int)lo_len;
  if (dash != NULL) {
    rc = parse_num(c, dash + 1, n - lo_len - 1, &r->hi);
    if (rc != 0)
      return rc;
    if (r->hi < r->lo)
      return fail(c, "range %.*s runs backwards; write LO-HI with LO <= HI",
                  CUT(n), item);
  }
  return 1;
}

/* Names the expression e[0..len) stands for, capped at the list's
 * max_hosts + 1 so that the sum over expressions cannot overflow. */
static int count_expr(ctx_t *c, const char *e, size_t len, size_t *count) {
  size_t total = 1, i = 0;
  if (len == 0)
    return fail(c, "empty host name; remove the extra comma");
  while (i < len) {
    if (e[i] == ']')
      return fail(c, "']' without '['");
    if (e[i] != '[') {
      if (!name_char_ok(e[i]))
        return fail(c, "character 0x%02x is not allowed in a host name",
                    (unsigned char)e[i]);
      i++;
      continue;
    }
    const char *close = memchr(e + i, ']', len - i);
    const char *open = memchr(e + i + 1, '[', len - i - 1);
    if (close == NULL)
      return fail(c, "'[' without ']'");
    if (open != NULL && open < close)
      return fail(c, "brackets do not nest; write n[1-2]m[3-4]");
    const char *g = e + i + 1;
    size_t glen = (size_t)(close - g), pos = 0, in_group = 0;
    range_t r = {0, 0, 0};
    int rc;
    while ((rc = next_range(c, g, glen, &pos, &r)) == 1) {
      uint64_t span = r.hi - r.lo + 1;
      in_group = span > c->max_hosts || in_group + span > c->max_hosts
                     ? c->max_hosts + 1
                     : in_group + (size_t)span;
    }
    if (rc != 0)
      return rc;
    total = in_group != 0 && total > (c->max_hosts + 1) / in_group
                ? c->max_hosts + 1
                : total * in_group;
    i = (size_t)(close - e) + 1;
  }
  *count = total;
  return 0;
}

static int too_long(ctx_t *c) {
  return fail(c, "a host name is longer than %d characters", MAX_NAME);
}

static int emit(ctx_t *c, const char *name, size_t len) {
  char *copy = strndup(name, len);
  if (copy == NULL)
    return -ENOMEM;
  c->hosts[c->n++] = copy;
  return 0;
}

/* Writes every name of e[0..len) (already checked) after the prefix
 * acc[0..acc_len). */
static int expand_expr(ctx_t *c, const char *e, size_t len, char *acc,
                       size_t acc_len) {
  const char *open = memchr(e, '[', len);
  size_t lit = open != NULL ? (size_t)(open - e) : len;
  if (acc_len + lit > MAX_NAME)
    return too_long(c);
  memcpy(acc + acc_len, e, lit);
  acc_len += lit;
  if (open == NULL)
    return emit(c, acc, acc_len);
  const char *close = memchr(open, ']', len - lit);
  const char *g = open + 1, *rest = close + 1;
  size_t glen = (size_t)(close - g), pos = 0;
  size_t rest_len = len - (size_t)(rest - e);
  range_t r = {0, 0, 0};
  int rc;
  while ((rc = next_range(c, g, glen, &pos, &r)) == 1) {
    for (uint64_t v = r.lo;; v++) {
      char num[MAX_DIGITS + 2];
      int k = snprintf(num, sizeof(num), "%0*llu", r.width,
                       (unsigned long long)v);
      if (acc_len + (size_t)k > MAX_NAME)
        return too_long(c);
      memcpy(acc + acc_len, num, (size_t)k);
      rc = expand_expr(c, rest, rest_len, acc, acc_len + (size_t)k);
      if (rc != 0)
        return rc;
      if (v == r.hi)
        break;
    }
  }
  return rc;
}

/* Calls fn on each expression of the list: the commas outside brackets
 * separate them. */
static int each_expr(ctx_t *c, int (*fn)(ctx_t *, const char *, size_t, void *),
                     void *arg) {
  const char *s = c->list;
  size_t start = 0, i = 0;
  int depth = 0;
  for (;; i++) {
    char ch = s[i];
    if (ch == '[')
      depth = 1;
    else if (ch == ']')
      depth = 0;
    if ((ch == ',' && depth == 0) || ch == '\0') {
      int rc = fn(c, s + start, i - start, arg);
      if (rc != 0 || ch == '\0')
        return rc;
      start = i + 1;
    }
  }
}

static int count_cb(ctx_t *c, const char *e, size_t len, void *arg) {
  size_t *total = arg, n = 0;
  int rc = count_expr(c, e, len, &n);
  if (rc == 0)
    *total = *total > c->max_hosts || n > c->max_hosts - *total
                 ? c->max_hosts + 1
                 : *total + n;
  return rc;
}

static int expand_cb(ctx_t *c, const char *e, size_t len, void *arg) {
  (void)arg;
  char acc[MAX_NAME + MAX_DIGITS + 2];
  return expand_expr(c, e, len, acc, 0);
}

int dr_hostlist_expand(const char *list, size_t max_hosts, char ***hosts,
                       size_t *n, char *err, size_t err_len) {
  ctx_t c = {list, max_hosts, NULL, 0, err, err_len};
  *hosts = NULL;
  *n = 0;
  if (err != NULL && err_len > 0)
    err[0] = '\0';
  if (list[0] == '\0')
    return fail(&c, "the list is empty");
  size_t total = 0;
  int rc = each_expr(&c, count_cb, &total);
  if (rc != 0)
    return rc;
  if (total > max_hosts)
    return fail(&c, "more than %zu hosts", max_hosts);
  c.hosts = calloc(total, sizeof(char *));
  if (c.hosts == NULL)
    return -ENOMEM;
  rc = each_expr(&c, expand_cb, NULL);
  if (rc != 0) {
    dr_hostlist_free(&c.hosts, c.n);
    return rc;
  }
  *hosts = c.hosts;
  *n = c.n;
  return 0;
}

void dr_hostlist_free(char ***hosts, size_t n) {
  if (*hosts == NULL)
    return;
  for (size_t i = 0; i < n; i++)
    free((*hosts)[i]);
  free(*hosts);
  *hosts = NULL;
}
