/* The workers' start stamps; see bench_stamp.h. */
#include "bench_stamp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

long bench_stamp_attempt(void) {
  const char *c = getenv("TORCHELASTIC_RESTART_COUNT");
  return c != NULL && c[0] != '\0' ? strtol(c, NULL, 10) : -1;
}

int bench_stamp_append(const char *path, const struct timespec *ts) {
  const char *r = getenv("RANK");
  char line[128];
  int n = snprintf(line, sizeof(line), "%ld %s %lld %ld\n",
                   bench_stamp_attempt(), r != NULL && r[0] != '\0' ? r : "-1",
                   (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec,
                   (long)getpid());
  if (n < 0 || (size_t)n >= sizeof(line))
    return -ENAMETOOLONG;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  ssize_t w = write(fd, line, (size_t)n);
  int rc = w < 0 ? -errno : w != n ? -EIO : 0;
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  return rc;
}

int bench_stamp_worker(const char *prog, const char *path,
                       const struct timespec *ts) {
  int rc = bench_stamp_append(path, ts);
  if (rc != 0) {
    fprintf(stderr, "%s worker: append to %s failed (%d: %s)\n", prog, path,
            -rc, strerror(-rc));
    return 1;
  }
  if (bench_stamp_attempt() != 0)
    return 0;
  /* The first attempt lives until ddprun stops it, or the run's timeout. */
  const char *t = getenv("DDPRUN_BENCH_TIMEOUT");
  long secs = t != NULL ? strtol(t, NULL, 10) : 60;
  alarm((unsigned)(secs > 0 ? secs : 60));
  for (;;)
    pause();
}
