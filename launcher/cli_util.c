#include "cli_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "fs.h"

int dr_parse_uint(const char *s, size_t len, uint64_t max, uint64_t *out) {
  if (s == NULL || len == 0)
    return DR_EBADARG;
  uint64_t v = 0;
  int over = 0;
  /* Every byte is looked at: "99999999999999999999x" is not a number,
   * rather than one too large. */
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return DR_EBADARG;
    uint64_t d = (uint64_t)(s[i] - '0');
    if (over || d > max || v > (max - d) / 10) /* v * 10 + d > max */
      over = 1;
    else
      v = v * 10 + d;
  }
  if (over)
    return -ERANGE;
  *out = v;
  return 0;
}

int dr_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out) {
  uint64_t v;
  if (s == NULL || dr_parse_uint(s, strlen(s), max, &v) != 0 || v < min)
    return DR_EBADARG;
  *out = (uint32_t)v;
  return 0;
}

int dr_parse_nnodes_why(const char *s, uint32_t *min, uint32_t *max, char *why,
                        size_t why_len) {
  if (s == NULL)
    s = "";
  const char *colon = strchr(s, ':');
  size_t len_lo = colon != NULL ? (size_t)(colon - s) : strlen(s);
  const char *hi_s = colon != NULL ? colon + 1 : s;
  uint64_t lo = 0, hi = 0;
  int rc_lo = dr_parse_uint(s, len_lo, DR_MAX_NODES, &lo);
  int rc_hi = dr_parse_uint(hi_s, strlen(hi_s), DR_MAX_NODES, &hi);
  char bad[80];
  if (rc_lo == DR_EBADARG || rc_hi == DR_EBADARG)
    snprintf(bad, sizeof(bad),
             "must be a node count N or a range MIN:MAX, "
             "such as 2 or 1:4");
  else if (rc_lo != 0 || rc_hi != 0)
    snprintf(bad, sizeof(bad), "must be at most %u", DR_MAX_NODES);
  else if (lo == 0 || hi == 0)
    snprintf(bad, sizeof(bad), "must be at least 1");
  else if (lo > hi)
    snprintf(bad, sizeof(bad), "MIN must not exceed MAX");
  else {
    *min = (uint32_t)lo;
    *max = (uint32_t)hi;
    return 0;
  }
  if (why != NULL && why_len > 0)
    snprintf(why, why_len, "%s", bad);
  return DR_EBADARG;
}

int dr_parse_nnodes(const char *s, uint32_t *min, uint32_t *max) {
  return dr_parse_nnodes_why(s, min, max, NULL, 0);
}

int dr_parse_seconds_ms(const char *s, uint32_t min_ms, uint32_t *out_ms) {
  if (s == NULL || ((*s < '0' || *s > '9') && *s != '.'))
    return DR_EBADARG;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || *end != '\0' || !isfinite(v) || v < 0 || v > 86400.0)
    return DR_EBADARG;
  double ms = v * 1000.0 + 0.5;
  if (ms < min_ms)
    return DR_EBADARG;
  *out_ms = (uint32_t)ms;
  return 0;
}

int dr_write_port_file(const char *path, uint16_t port) {
  char text[16];
  int n = snprintf(text, sizeof(text), "%u\n", port);
  return dr_write_file(path, text, (size_t)n);
}

int dr_usage_error(const char *prog, const char *fmt, ...) {
  char msg[512], hint[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(hint, sizeof(hint), "; see %s --help", prog);
  size_t n = strlen(msg), k = strlen(hint);
  int has_hint = n >= k && strcmp(msg + n - k, hint) == 0;
  fprintf(stderr, "%s: %s%s\n", prog, msg, has_hint ? "" : hint);
  return 2;
}
