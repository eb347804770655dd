/* Classifying an HTTP/1.x request head for the metrics endpoint: only the
 * request line matters; header fields are skipped up to the blank line that
 * ends the head. A pure function, so that every prefix of a request can be
 * tested without a socket. */
#include "server_internal.h"

#include <string.h>

static int is_ctl(unsigned char ch) { return ch < 0x20 || ch >= 0x7f; }

/* The end of the head: the index after "\r\n\r\n" or "\n\n" at or after
 * from, or 0 when it has not arrived. */
static size_t head_end(const char *buf, size_t len, size_t from) {
  for (size_t i = from; i < len; i++) {
    if (buf[i] != '\n')
      continue;
    if (i + 1 < len && buf[i + 1] == '\n')
      return i + 2;
    if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
      return i + 3;
  }
  return 0;
}

/* Checks the request line buf[0..n) (no line end). */
static int request_line(const char *buf, size_t n, dr_http_target_t *target) {
  const char *sp1 = memchr(buf, ' ', n);
  if (sp1 == NULL || sp1 == buf)
    return 400;
  const char *rest = sp1 + 1;
  size_t rest_n = n - (size_t)(rest - buf);
  const char *sp2 = memchr(rest, ' ', rest_n);
  if (sp2 == NULL)
    return 400;
  const char *version = sp2 + 1;
  size_t version_n = n - (size_t)(version - buf);
  if (version_n != 8 || (memcmp(version, "HTTP/1.0", 8) != 0 &&
                         memcmp(version, "HTTP/1.1", 8) != 0))
    return 400;
  const char *path = rest;
  size_t path_n = (size_t)(sp2 - rest);
  /* The absolute form, as a proxy sends it: keep the path. */
  if (path_n > 7 && memcmp(path, "http://", 7) == 0) {
    const char *slash = memchr(path + 7, '/', path_n - 7);
    if (slash == NULL)
      return 400;
    path_n -= (size_t)(slash - path);
    path = slash;
  }
  if (path_n == 0 || path[0] != '/')
    return 400;
  const char *q = memchr(path, '?', path_n);
  if (q != NULL)
    path_n = (size_t)(q - path);
  if ((size_t)(sp1 - buf) != 3 || memcmp(buf, "GET", 3) != 0)
    return 405;
  if (path_n == 8 && memcmp(path, "/metrics", 8) == 0)
    *target = DR_HTTP_METRICS;
  else if (path_n == 8 && memcmp(path, "/healthz", 8) == 0)
    *target = DR_HTTP_HEALTHZ;
  else
    return 404;
  return 200;
}

int dr__http_classify(const char *buf, size_t len, size_t cap,
                      dr_http_target_t *target) {
  size_t i = 0;
  /* The method: upper-case letters up to the first space. Anything else
   * is refused at once, without waiting for a line end. */
  for (; i < len && buf[i] != ' '; i++)
    if (buf[i] < 'A' || buf[i] > 'Z')
      return 400;
  for (; i < len && buf[i] != '\n'; i++)
    if (is_ctl((unsigned char)buf[i]) && buf[i] != '\r')
      return 400;
  if (i == len)
    return len >= cap ? 431 : 0;
  size_t line_n = i > 0 && buf[i - 1] == '\r' ? i - 1 : i;
  if (memchr(buf, '\r', line_n) != NULL)
    return 400;
  int code = request_line(buf, line_n, target);
  if (code != 200)
    return code;
  /* The request line alone, as HTTP/1.0 allows, ends at one blank line. */
  size_t end = head_end(buf, len, i);
  if (end == 0)
    return len >= cap ? 431 : 0;
  return 200;
}
