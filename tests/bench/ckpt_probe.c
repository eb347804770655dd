/* ckpt_probe: the clocks and the plain copy of ckpt_netns.sh.
 *
 *   ckpt_probe watch SECS DIR...
 *       Watches each DIR (made 0700 with its parents when missing) with
 *       inotify, prints "ready" once every watch is set, then
 *       "TIME INDEX NAME" for each entry renamed into DIR number INDEX
 *       (from 0), until SECS pass or it is killed.
 *   ckpt_probe stamp
 *       Copies stdin to stdout, each line prefixed by "TIME " taken when the
 *       line was read.
 *   ckpt_probe recv SECS FILE
 *       Listens on a free TCP port of every IPv4 address and prints
 *       "port N", takes one connection and writes what it sends to FILE
 *       (created, fsynced, closed), then closes the connection and prints
 *       "recv bytes=N first=TIME end=TIME". Gives up after SECS without a
 *       connection or a byte.
 *   ckpt_probe send HOST PORT FILE
 *       Sends FILE to HOST:PORT (an IPv4 address) in 1 MiB writes, then
 *       waits for the receiver to close, and prints
 *       "send bytes=N start=TIME end=TIME": start before the connect, end
 *       once the receiver has synced its copy and closed.
 *
 * TIME is CLOCK_REALTIME in seconds with microseconds, the clock of bash's
 * $EPOCHREALTIME, so that the script's own stamps compare with these; every
 * namespace shares it. Output is line buffered. Exits 0, 1 on a failure
 * (said on stderr), 2 on bad usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1u << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int failed(const char *what, const char *arg) {
  fprintf(stderr, "ckpt_probe: %s %s failed (%s)\n", what, arg,
          strerror(errno));
  return 1;
}

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

static int do_watch(long secs, int n, char **dirs) {
  int fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0)
    return failed("inotify_init1()", "");
  int wd[16];
  if (n > 16) {
    fprintf(stderr, "ckpt_probe: at most 16 directories\n");
    return 2;
  }
  for (int i = 0; i < n; i++)
    if (mkdirs(dirs[i]) != 0 ||
        (wd[i] = inotify_add_watch(fd, dirs[i], IN_MOVED_TO)) < 0)
      return failed("watching", dirs[i]);
  printf("ready\n");
  char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
  long long end = mono_ms() + secs * 1000;
  for (long long t = mono_ms(); t < end; t = mono_ms()) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)(end - t)) <= 0)
      continue;
    ssize_t k = read(fd, buf, sizeof(buf));
    double at = now_s(); /* the read that saw it: within a poll wake-up */
    for (char *q = buf; k > 0 && q < buf + k;) {
      const struct inotify_event *ev = (const struct inotify_event *)q;
      q += sizeof(*ev) + ev->len;
      for (int i = 0; i < n && ev->len > 0; i++)
        if (wd[i] == ev->wd)
          printf("%.6f %d %s\n", at, i, ev->name);
    }
  }
  return 0;
}

static int do_stamp(void) {
  char line[65536];
  while (fgets(line, sizeof(line), stdin) != NULL)
    printf("%.6f %s", now_s(), line);
  return 0;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Accepts one connection on ls within secs, or -1. */
static int accept_one(int ls, long secs) {
  struct pollfd p = {ls, POLLIN, 0};
  if (poll(&p, 1, (int)(secs * 1000)) <= 0) {
    errno = ETIMEDOUT;
    return -1;
  }
  return accept4(ls, NULL, NULL, SOCK_CLOEXEC);
}

static int do_recv(long secs, const char *file) {
  int rc = 1, ls = -1, c = -1, out = -1;
  char *buf = malloc(CHUNK);
  unsigned long long bytes = 0;
  double first = 0;
  struct timeval tv = {secs, 0};
  struct sockaddr_in sa = {0};
  socklen_t len = sizeof(sa);
  sa.sin_family = AF_INET;
  ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (buf == NULL || ls < 0 ||
      bind(ls, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(ls, 1) != 0 || getsockname(ls, (struct sockaddr *)&sa, &len)) {
    failed("listening", "");
    goto fail;
  }
  printf("port %u\n", ntohs(sa.sin_port));
  if ((c = accept_one(ls, secs)) < 0) {
    failed("accept() on", "the port");
    goto fail;
  }
  out = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) {
    failed("creating", file);
    goto fail;
  }
  /* A sender that stops sending ends the wait too. */
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  for (;;) {
    ssize_t k = recv(c, buf, CHUNK, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      failed("recv() into", file);
      goto fail;
    }
    if (k == 0)
      break;
    if (bytes == 0)
      first = now_s();
    bytes += (unsigned long long)k;
    if (write_all(out, buf, (size_t)k) != 0) {
      failed("writing", file);
      goto fail;
    }
  }
  if (fsync(out) != 0 || close(out) != 0) {
    out = -1;
    failed("syncing", file);
    goto fail;
  }
  out = -1;
  double end = now_s();
  printf("recv bytes=%llu first=%.6f end=%.6f\n", bytes, first, end);
  rc = 0;
fail:
  if (out >= 0)
    close(out);
  if (c >= 0)
    close(c);
  if (ls >= 0)
    close(ls);
  free(buf);
  return rc;
}

static int do_send(const char *host, const char *port, const char *file) {
  int rc = 1, s = -1, in = -1;
  char *buf = malloc(CHUNK);
  unsigned long long bytes = 0;
  double start;
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((unsigned short)atoi(port));
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
    fprintf(stderr, "ckpt_probe: not an IPv4 address: %s\n", host);
    free(buf);
    return 2;
  }
  if (buf == NULL || (in = open(file, O_RDONLY | O_CLOEXEC)) < 0) {
    failed("opening", file);
    goto fail;
  }
  start = now_s();
  s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    failed("connect() to", host);
    goto fail;
  }
  for (;;) {
    ssize_t k = read(in, buf, CHUNK);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      failed("reading", file);
      goto fail;
    }
    if (k == 0)
      break;
    for (ssize_t off = 0; off < k;) {
      ssize_t w = send(s, buf + off, (size_t)(k - off), MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0) {
        failed("send() to", host);
        goto fail;
      }
      off += w;
    }
    bytes += (unsigned long long)k;
  }
  /* The end is the receiver's close, after its fsync. */
  shutdown(s, SHUT_WR);
  while (recv(s, buf, CHUNK, 0) > 0)
    ;
  double end = now_s();
  printf("send bytes=%llu start=%.6f end=%.6f\n", bytes, start, end);
  rc = 0;
fail:
  if (s >= 0)
    close(s);
  if (in >= 0)
    close(in);
  free(buf);
  return rc;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *cmd = argc > 1 ? argv[1] : "";
  if (strcmp(cmd, "watch") == 0 && argc >= 4)
    return do_watch(atol(argv[2]), argc - 3, argv + 3);
  if (strcmp(cmd, "stamp") == 0 && argc == 2)
    return do_stamp();
  if (strcmp(cmd, "recv") == 0 && argc == 4)
    return do_recv(atol(argv[2]), argv[3]);
  if (strcmp(cmd, "send") == 0 && argc == 5)
    return do_send(argv[2], argv[3], argv[4]);
  fprintf(stderr, "usage: ckpt_probe watch SECS DIR... | stamp |\n"
                  "       recv SECS FILE | send HOST PORT FILE\n");
  return 2;
}
