/* rtool: small helpers of the recovery tests, for what a shell cannot do
 * without polling.
 *
 *   rtool gone SECS PID...
 *       Waits, through pidfds, until every PID has exited (a zombie counts
 *       as exited). Exits 0 when all are gone, 1 when some are still
 *       running after SECS (their pids and command names on stdout), 2 on
 *       bad usage or a system error.
 *
 *   rtool fail-worker FILE NRANKS FAIL_RANK CODE [SECS]
 *       A worker under ddprun. Appends "COUNT RANK PID\n" to FILE (COUNT is
 *       TORCHELASTIC_RESTART_COUNT) in one write() on an O_APPEND
 *       descriptor. Rank FAIL_RANK then waits (inotify) until FILE holds
 *       NRANKS lines of its COUNT, so that every rank of the attempt has
 *       recorded itself, and exits CODE; the other ranks wait until their
 *       agent stops them. SECS (default 60) bounds every wait: past it the
 *       worker exits 124.
 *
 *   rtool reset-listener HOST PORT N [SECS]
 *       Listens on HOST:PORT (SO_REUSEADDR), says "listening on HOST:PORT"
 *       on stdout, then accepts N connections and closes each with a reset
 *       (SO_LINGER 0) once the client has sent its first bytes, as a peer
 *       that dies during the handshake.
 *       Exits 0 after N, 1 when SECS (default 30) pass first, 2 on bad
 *       usage or a system error.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_PIDS 4096
#define EXIT_DEADLINE 124

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
    return -EINVAL;
  *out = v;
  return 0;
}

static void print_comm(long pid) {
  char path[64], comm[64] = "?";
  snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
  FILE *f = fopen(path, "re");
  if (f != NULL) {
    if (fgets(comm, sizeof(comm), f) != NULL)
      comm[strcspn(comm, "\n")] = '\0';
    fclose(f);
  }
  printf("%ld %s\n", pid, comm);
}

static int cmd_gone(int argc, char **argv) {
  long secs;
  if (argc < 1 || parse_long(argv[0], 0, 3600, &secs) != 0) {
    fprintf(stderr, "usage: rtool gone SECS PID...\n");
    return 2;
  }
  int n = argc - 1;
  if (n > MAX_PIDS) {
    fprintf(stderr, "rtool gone: at most %d pids\n", MAX_PIDS);
    return 2;
  }
  static struct pollfd pfd[MAX_PIDS];
  static long pids[MAX_PIDS];
  int live = 0;
  for (int i = 0; i < n; i++) {
    long pid;
    if (parse_long(argv[i + 1], 1, INT32_MAX, &pid) != 0) {
      fprintf(stderr, "rtool gone: bad pid '%s'\n", argv[i + 1]);
      return 2;
    }
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (fd < 0) {
      if (errno == ESRCH)
        continue;
      fprintf(stderr, "rtool gone: pidfd_open(%ld) failed (%d: %s)\n", pid,
              errno, strerror(errno));
      return 2;
    }
    pids[live] = pid;
    pfd[live].fd = fd;
    pfd[live].events = POLLIN;
    live++;
  }
  int64_t deadline = now_ms() + secs * 1000;
  int left = live;
  while (left > 0) {
    int64_t wait = deadline - now_ms();
    if (wait <= 0)
      break;
    int r = poll(pfd, (nfds_t)live, (int)wait);
    if (r < 0 && errno != EINTR) {
      fprintf(stderr, "rtool gone: poll() failed (%d: %s)\n", errno,
              strerror(errno));
      return 2;
    }
    for (int i = 0; r > 0 && i < live; i++)
      if (pfd[i].fd >= 0 && pfd[i].revents != 0) {
        close(pfd[i].fd);
        pfd[i].fd = -1; /* poll() skips negative descriptors */
        left--;
      }
  }
  for (int i = 0; i < live; i++)
    if (pfd[i].fd >= 0)
      print_comm(pids[i]);
  return left == 0 ? 0 : 1;
}

/* Lines of FILE whose first field is count; -errno on a read error. */
static int count_records(const char *path, long count) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return errno == ENOENT ? 0 : -errno;
  int n = 0;
  long c, rank, pid;
  char line[128];
  while (fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "%ld %ld %ld", &c, &rank, &pid) == 3 && c == count)
      n++;
  fclose(f);
  return n;
}

static int env_long(const char *name, long *out) {
  const char *s = getenv(name);
  if (s == NULL || parse_long(s, 0, INT32_MAX, out) != 0) {
    fprintf(stderr, "rtool fail-worker: %s is '%s', not a number\n", name,
            s != NULL ? s : "(unset)");
    return -EINVAL;
  }
  return 0;
}

static int cmd_fail_worker(int argc, char **argv) {
  long nranks, fail_rank, code, secs = 60;
  if ((argc != 4 && argc != 5) || parse_long(argv[1], 1, 1 << 20, &nranks) ||
      parse_long(argv[2], 0, 1 << 20, &fail_rank) ||
      parse_long(argv[3], 0, 255, &code) ||
      (argc == 5 && parse_long(argv[4], 1, 3600, &secs))) {
    fprintf(stderr,
            "usage: rtool fail-worker FILE NRANKS FAIL_RANK CODE [SECS]\n");
    return 2;
  }
  const char *path = argv[0];
  long rank, count;
  if (env_long("RANK", &rank) != 0 ||
      env_long("TORCHELASTIC_RESTART_COUNT", &count) != 0)
    return 2;
  /* A worker stuck past the deadline dies of SIGALRM: the test sees it. */
  alarm((unsigned)secs);

  /* The watch comes before the record, so no later record is missed. */
  int in = -1;
  if (rank == fail_rank) {
    in = inotify_init1(IN_CLOEXEC);
    if (in < 0 || inotify_add_watch(in, path, IN_MODIFY) < 0) {
      /* The file may not exist yet: create it, then watch. */
      int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0)
        close(fd);
      if (in < 0 || inotify_add_watch(in, path, IN_MODIFY) < 0) {
        fprintf(stderr, "rtool fail-worker: inotify on %s failed (%d: %s)\n",
                path, errno, strerror(errno));
        return 3;
      }
    }
  }
  char line[96];
  int n = snprintf(line, sizeof(line), "%ld %ld %ld\n", count, rank,
                   (long)getpid());
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, line, (size_t)n) != n) {
    fprintf(stderr, "rtool fail-worker: append to %s failed (%d: %s)\n", path,
            errno, strerror(errno));
    return 3;
  }
  close(fd);

  if (rank != fail_rank) {
    for (;;)
      pause();
  }
  int64_t deadline = now_ms() + secs * 1000;
  for (;;) {
    int have = count_records(path, count);
    if (have < 0) {
      fprintf(stderr, "rtool fail-worker: reading %s failed (%d: %s)\n", path,
              -have, strerror(-have));
      return 3;
    }
    if (have >= nranks)
      break;
    int64_t wait = deadline - now_ms();
    struct pollfd p = {in, POLLIN, 0};
    int r = wait > 0 ? poll(&p, 1, (int)wait) : 0;
    if (r == 0) {
      fprintf(stderr, "rtool fail-worker: rank %ld: only %d of %ld ranks "
              "recorded attempt %ld within %ld s\n", rank, have, nranks,
              count, secs);
      return EXIT_DEADLINE;
    }
    if (r > 0) {
      char buf[4096];
      (void)!read(in, buf, sizeof(buf));
    }
  }
  fprintf(stderr, "rtool fail-worker: rank %ld: attempt %ld: exiting with "
          "code %ld\n", rank, count, code);
  return (int)code;
}

static int cmd_reset_listener(int argc, char **argv) {
  long port, n, secs = 30;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  if ((argc != 3 && argc != 4) || inet_pton(AF_INET, argv[0], &sa.sin_addr) != 1 ||
      parse_long(argv[1], 1, 65535, &port) || parse_long(argv[2], 1, 1000, &n) ||
      (argc == 4 && parse_long(argv[3], 1, 3600, &secs))) {
    fprintf(stderr, "usage: rtool reset-listener IPV4 PORT N [SECS]\n");
    return 2;
  }
  sa.sin_port = htons((uint16_t)port);
  int one = 1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
      bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16)) {
    fprintf(stderr, "rtool reset-listener: listening on %s:%ld failed (%d: %s)\n",
            argv[0], port, errno, strerror(errno));
    return 2;
  }
  printf("listening on %s:%ld\n", argv[0], port);
  fflush(stdout);
  int64_t deadline = now_ms() + secs * 1000;
  for (long done = 0; done < n;) {
    int64_t wait = deadline - now_ms();
    struct pollfd p = {fd, POLLIN, 0};
    int r = wait > 0 ? poll(&p, 1, (int)wait) : 0;
    if (r == 0) {
      fprintf(stderr, "rtool reset-listener: %ld of %ld connections within "
              "%ld s\n", done, n, secs);
      return 1;
    }
    if (r < 0)
      continue;
    int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0)
      continue;
    /* The reset follows the client's first bytes (its HELLO), so that it
     * hits an established connection, not the connect(). */
    struct pollfd q = {c, POLLIN, 0};
    wait = deadline - now_ms();
    if (wait > 0 && poll(&q, 1, (int)wait) > 0) {
      char buf[512];
      (void)!read(c, buf, sizeof(buf));
    }
    struct linger lg = {1, 0};
    setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(c);
    done++;
  }
  close(fd);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "gone") == 0)
    return cmd_gone(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "fail-worker") == 0)
    return cmd_fail_worker(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "reset-listener") == 0)
    return cmd_reset_listener(argc - 2, argv + 2);
  fprintf(stderr, "usage: rtool gone SECS PID... | rtool fail-worker FILE "
          "NRANKS FAIL_RANK CODE [SECS] | rtool reset-listener IPV4 PORT N "
          "[SECS]\n");
  return 2;
}
