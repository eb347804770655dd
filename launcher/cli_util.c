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

int dr_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out) {
  if (s == NULL || *s < '0' || *s > '9')
    return DR_EBADARG;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max)
    return DR_EBADARG;
  *out = (uint32_t)v;
  return 0;
}

int dr_parse_nnodes(const char *s, uint32_t *min, uint32_t *max) {
  char buf[64];
  if (s == NULL || strlen(s) >= sizeof(buf))
    return DR_EBADARG;
  strcpy(buf, s);
  char *colon = strchr(buf, ':');
  uint32_t lo, hi;
  if (colon == NULL) {
    if (dr_parse_u32(buf, 1, 1000000, &lo) != 0)
      return DR_EBADARG;
    hi = lo;
  } else {
    *colon = '\0';
    if (dr_parse_u32(buf, 1, 1000000, &lo) != 0 ||
        dr_parse_u32(colon + 1, 1, 1000000, &hi) != 0 || lo > hi)
      return DR_EBADARG;
  }
  *min = lo;
  *max = hi;
  return 0;
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
  char tmp[4096];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >=
      (int)sizeof(tmp))
    return -ENAMETOOLONG;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  char text[16];
  int n = snprintf(text, sizeof(text), "%u\n", port);
  ssize_t w;
  do
    w = write(fd, text, (size_t)n);
  while (w < 0 && errno == EINTR);
  int rc = w == n ? 0 : (w < 0 ? -errno : -EIO);
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  if (rc == 0 && rename(tmp, path) != 0)
    rc = -errno;
  if (rc != 0)
    unlink(tmp);
  return rc;
}

int dr_usage_error(const char *prog, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s: %s; see %s --help\n", prog, msg, prog);
  return 2;
}
