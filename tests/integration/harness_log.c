/* The server's log, as the harness reads it: waiting for a line, and its
 * tail on stderr. See harness.h. */
#include "harness.h"
#include "harness_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#define DR_H_LOG_MAX (4u << 20) /* bytes of a log we are ready to read */

/* Reads a whole log (up to DR_H_LOG_MAX). Caller frees. */
static char *read_log(const char *path, size_t *n_out) {
  *n_out = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap + 1);
  while (buf != NULL) {
    if (n == cap) {
      if (cap >= DR_H_LOG_MAX)
        break;
      char *nb = realloc(buf, cap * 2 + 1);
      if (nb == NULL)
        break;
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  close(fd);
  if (buf != NULL) {
    buf[n] = '\0';
    *n_out = n;
  }
  return buf;
}

int dr__h_log_has(const char *path, const char *needle) {
  size_t n;
  char *log = read_log(path, &n);
  int found = log != NULL && memmem(log, n, needle, strlen(needle)) != NULL;
  free(log);
  return found;
}

int dr_h_log_contains(const dr_h_server_t *s, const char *needle,
                      int timeout_ms) {
  const char *path = dr_h_server_log_path(s);
  double deadline = dr_h_now_ms() + timeout_ms;
  int ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (ino >= 0)
    inotify_add_watch(ino, path, IN_MODIFY);
  int found;
  while (!(found = dr__h_log_has(path, needle)) &&
         dr__h_ms_left(deadline) > 0) {
    if (ino < 0) {
      dr_h_sleep_ms(5);
      continue;
    }
    struct pollfd p = {ino, POLLIN, 0};
    if (poll(&p, 1, dr__h_ms_left(deadline)) > 0) {
      char ev[4096];
      while (read(ino, ev, sizeof(ev)) > 0) {
      }
    }
  }
  if (ino >= 0)
    close(ino);
  return found;
}

void dr_h_log_dump(const char *log_path, int max_lines) {
  size_t n;
  char *log = read_log(log_path, &n);
  if (log == NULL)
    return;
  size_t start = n;
  int lines = 0;
  while (start > 0) {
    if (log[start - 1] == '\n' && start != n && ++lines >= max_lines)
      break;
    start--;
  }
  fprintf(stderr, "---- %s (last %d lines) ----\n%s%s---- end ----\n", log_path,
          max_lines, log + start, n > 0 && log[n - 1] != '\n' ? "\n" : "");
  free(log);
}

