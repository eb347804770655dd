/* The launch harness' search of /proc for the processes of a test: every
 * process whose command line carries the test's marker. See
 * launch_harness.h. */
#include "launch_harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness_internal.h"

/* 1 when one of the NUL-separated arguments in buf equals marker. */
static int has_marker(const char *buf, size_t n, const char *marker) {
  size_t mlen = strlen(marker);
  for (size_t i = 0; i < n;) {
    size_t len = strnlen(buf + i, n - i);
    if (len == mlen && memcmp(buf + i, marker, mlen) == 0)
      return 1;
    i += len + 1;
  }
  return 0;
}

size_t dr_l_marker_pids(const char *marker, pid_t *pids, size_t max) {
  DIR *d = opendir("/proc");
  if (d == NULL)
    return 0;
  size_t found = 0;
  pid_t self = getpid();
  struct dirent *e;
  char path[64], buf[16384];
  while ((e = readdir(d)) != NULL) {
    char *end = NULL;
    long pid = strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self)
      continue;
    snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n > 0 && has_marker(buf, (size_t)n, marker)) {
      if (found < max)
        pids[found] = (pid_t)pid;
      found++;
    }
  }
  closedir(d);
  return found;
}

size_t dr_l_wait_marker_gone(const char *marker, int timeout_ms) {
  double deadline = dr_h_now_ms() + timeout_ms;
  pid_t pids[256];
  for (;;) {
    size_t n = dr_l_marker_pids(marker, pids, 256);
    if (n == 0 || dr__h_ms_left(deadline) == 0)
      return n;
    /* Wait for the ones seen to exit, then look again. */
    for (size_t i = 0; i < n && i < 256; i++) {
      int fd = dr__h_pidfd_open(pids[i]);
      if (fd < 0)
        continue;
      struct pollfd p = {fd, POLLIN, 0};
      while (poll(&p, 1, dr__h_ms_left(deadline)) < 0 && errno == EINTR) {
      }
      close(fd);
    }
  }
}
