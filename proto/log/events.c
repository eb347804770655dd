#include "events.h"

#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

struct dr_events {
  int fd;
  char source[16];
  char host[256];
};

int dr_events_open(const char *log_dir, const char *run_id, const char *source,
                   const char *host, dr_events_t **out) {
  *out = NULL;
  if (log_dir == NULL)
    return 0;
  char path[4096];
  if (snprintf(path, sizeof(path), "%s/%s", log_dir, run_id) >=
      (int)sizeof(path) - 16)
    return -ENAMETOOLONG;
  int rc = dr_mkdirs(path);
  if (rc != 0)
    return rc;
  strcat(path, "/events.jsonl");
  dr_events_t *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return -ENOMEM;
  e->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (e->fd < 0) {
    rc = -errno;
    free(e);
    return rc;
  }
  snprintf(e->source, sizeof(e->source), "%s", source);
  dr_json_escape(host, e->host, sizeof(e->host));
  *out = e;
  return 0;
}

char *dr_json_escape(const char *s, char *out, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (; s != NULL && *s != '\0' && o + 7 < n; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[o++] = '\\';
      out[o++] = (char)c;
    } else if (c < 0x20) {
      memcpy(out + o, "\\u00", 4);
      out[o + 4] = hex[c >> 4];
      out[o + 5] = hex[c & 15];
      o += 6;
    } else {
      out[o++] = (char)c;
    }
  }
  if (n > 0)
    out[o] = '\0';
  return out;
}

void dr_events_emit(dr_events_t *e, const char *event, const char *fields, ...) {
  if (e == NULL)
    return;
  struct timeval tv;
  gettimeofday(&tv, NULL);
  char line[4096];
  int k = snprintf(line, sizeof(line),
                   "{\"time\":%ld.%03ld,\"source\":\"%s\",\"host\":\"%s\","
                   "\"pid\":%d,\"event\":\"%s\"",
                   (long)tv.tv_sec, (long)tv.tv_usec / 1000, e->source, e->host,
                   (int)getpid(), event);
  if (k < 0 || (size_t)k >= sizeof(line) - 3)
    return;
  if (fields != NULL) {
    va_list ap;
    va_start(ap, fields);
    int m = vsnprintf(line + k, sizeof(line) - (size_t)k - 3, fields, ap);
    va_end(ap);
    if (m < 0 || (size_t)(k + m) >= sizeof(line) - 3)
      return; /* a cut line would not be JSON: drop it */
    k += m;
  }
  line[k++] = '}';
  line[k++] = '\n';
  ssize_t w;
  do
    w = write(e->fd, line, (size_t)k);
  while (w < 0 && errno == EINTR);
}

void dr_events_close(dr_events_t **e) {
  if (*e == NULL)
    return;
  close((*e)->fd);
  free(*e);
  *e = NULL;
}
