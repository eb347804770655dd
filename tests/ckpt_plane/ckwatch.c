/* ckwatch: how entries appear in a directory, for the checkpoint plane's
 * tests: a checkpoint must appear by rename, never be created in place.
 *
 *   ckwatch DIR SECS
 *       Makes DIR (mkdir -p), watches it with inotify, prints "ready" once
 *       the watch is set, then one line per event until SECS pass or it is
 *       killed: "create NAME", "moved_to NAME", "close_write NAME" (line
 *       buffered). Exits 0 at the end of SECS, 2 on bad usage or a system
 *       error.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int mkdirs(const char *path) {
  char p[4096];
  snprintf(p, sizeof(p), "%s", path);
  for (char *s = p + 1;; s++) {
    char c = *s;
    if (c != '/' && c != '\0')
      continue;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
      return -1;
    *s = c;
    if (c == '\0')
      return 0;
  }
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: ckwatch DIR SECS\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  long long end = now_ms() + atol(argv[2]) * 1000;
  int fd = inotify_init1(IN_CLOEXEC);
  if (mkdirs(argv[1]) != 0 || fd < 0 ||
      inotify_add_watch(fd, argv[1],
                        IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    fprintf(stderr, "ckwatch: %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  printf("ready\n");
  char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (long long now = now_ms(); now < end; now = now_ms()) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)(end - now)) <= 0)
      continue;
    ssize_t n = read(fd, buf, sizeof(buf));
    for (char *q = buf; n > 0 && q < buf + n;) {
      const struct inotify_event *ev = (const struct inotify_event *)q;
      q += sizeof(*ev) + ev->len;
      if (ev->len == 0)
        continue;
      const char *what = (ev->mask & IN_CREATE)     ? "create"
                         : (ev->mask & IN_MOVED_TO) ? "moved_to"
                                                    : "close_write";
      printf("%s %s\n", what, ev->name);
    }
  }
  return 0;
}
