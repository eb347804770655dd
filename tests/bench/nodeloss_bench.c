/* nodeloss_bench: how long the survivors take to stop their workers when a
 * node of the job is lost.
 *
 *   nodeloss_bench [--mode kill|stop] [--nproc 4] [--runs 5] [--timeout 30]
 *                  [--ddprun PATH] [--server PATH]
 *
 * Per run: ddprun-rdzv (--nnodes 2, default heartbeat settings, port 0)
 * and two ddprun (--nnodes 2 --nproc-per-node N, is_host=0, default
 * heartbeat_timeout) on 127.0.0.1, whose workers are this program in its
 * worker mode: each stamps itself into a file and waits. Once all 2N have
 * stamped, the workers of each ddprun are told apart by their parent pid,
 * t0 is read, and the second ddprun gets
 *
 *   kill  SIGKILL: its connection closes at once (the server sees EOF);
 *   stop  SIGSTOP: a host that vanished without closing anything, found
 *         only by the missing heartbeats.
 *
 * "stopped" is when the last of the survivor's N workers has exited (its
 * pidfd turns readable), minus t0; "exit" is when the surviving ddprun was
 * reaped. The survivor must exit 3 (the job needs both nodes), and every
 * worker of the lost node must be gone within 5 s of its agent's death
 * (SIGKILL for a stopped agent, after the measurement). Prints one line per
 * run, then
 *
 *   nodeloss_bench mode=M nproc=N runs=R median_ms=.. min_ms=.. max_ms=..
 *                  median_exit_ms=..
 *
 * A median over the target (3 s) is reported on stderr; the exit status
 * (0, 1 when a run failed, 2 on bad usage) reflects only the checks.
 *
 *   nodeloss_bench --worker FILE
 *
 * The worker: appends "RANK NANOSECONDS PID\n" to FILE in one write(), then
 * waits for a signal, at most DDPRUN_BENCH_TIMEOUT seconds (alarm()).
 */
#include "bench_proc.h"
#include "bench_server.h"

#include "errors.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NPROC 256
#define MAX_RUNS 1000
#define STOP_GRACE_MS 2000
#define VICTIMS_GONE_MS 5000
#define TARGET_MS 3000.0

typedef enum { MODE_KILL, MODE_STOP } loss_mode_t;

typedef struct {
  loss_mode_t mode;
  uint32_t nproc;
  uint32_t runs;
  double timeout_s;
  char ddprun[PATH_MAX];
  char server[PATH_MAX];
  char self[PATH_MAX];
} opts_t;

/* ---- worker mode ---------------------------------------------------------- */

static int worker_main(const char *path, const struct timespec *ts) {
  const char *r = getenv("RANK");
  const char *t = getenv("DDPRUN_BENCH_TIMEOUT");
  char line[128];
  int n = snprintf(line, sizeof(line), "%s %lld %ld\n",
                   r != NULL && r[0] != '\0' ? r : "-1",
                   (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec,
                   (long)getpid());
  if (n < 0 || (size_t)n >= sizeof(line))
    return 1;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, line, (size_t)n) != n) {
    fprintf(stderr, "nodeloss_bench worker: append to %s failed (%d: %s)\n",
            path, errno, strerror(errno));
    return 1;
  }
  close(fd);
  long secs = t != NULL ? strtol(t, NULL, 10) : 60;
  alarm((unsigned)(secs > 0 ? secs : 60));
  for (;;)
    pause();
}

/* Waits until every pidfd in fds[0..n) is readable (the process exited);
 * *last_ns gets when the last one was seen. Closes them. */
static int pids_wait(int *fds, int n, int64_t deadline_ns, int64_t *last_ns) {
  int left = 0;
  for (int i = 0; i < n; i++)
    left += fds[i] >= 0;
  while (left > 0) {
    int64_t wait = deadline_ns - bench_now_ns();
    if (wait <= 0 || bench_stop_requested)
      return bench_stop_requested ? -EINTR : -ETIMEDOUT;
    struct pollfd p[2 * MAX_NPROC];
    for (int i = 0; i < n; i++) {
      p[i].fd = fds[i];
      p[i].events = POLLIN;
      p[i].revents = 0;
    }
    int r = poll(p, (nfds_t)n, (int)(wait / 1000000) + 1);
    if (r < 0 && errno != EINTR)
      return -errno;
    int64_t now = bench_now_ns();
    for (int i = 0; r > 0 && i < n; i++)
      if (fds[i] >= 0 && p[i].revents != 0) {
        close(fds[i]);
        fds[i] = -1; /* poll() skips it from now on */
        left--;
        *last_ns = now;
      }
  }
  return 0;
}

static void pids_close(int *fds, int n) {
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) {
      close(fds[i]);
      fds[i] = -1;
    }
}

/* The parent of pid, from /proc/PID/stat; 0 when unknown. */
static pid_t parent_of(long pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  char state;
  int ppid;
  if (p == NULL || sscanf(p + 1, " %c %d", &state, &ppid) != 2)
    return 0;
  return (pid_t)ppid;
}

/* ---- stamps ---------------------------------------------------------------- */

typedef struct {
  long rank, pid;
} stamp_t;

/* How many stamps FILE holds (each RANK in 0..n-1 once), or a code. */
static int read_stamps(const char *path, uint32_t n, stamp_t *out,
                       char *errbuf, size_t errbuf_len) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return errno == ENOENT ? 0 : -errno;
  unsigned char seen[2 * MAX_NPROC] = {0};
  int have = 0, rc = 0;
  char line[160];
  long long ns;
  stamp_t s;
  while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "%ld %lld %ld", &s.rank, &ns, &s.pid) != 3 ||
        s.rank < 0 || (uint64_t)s.rank >= n || seen[s.rank]++) {
      snprintf(errbuf, errbuf_len, "bad or repeated stamp: %.64s", line);
      rc = DR_EBADARG;
    } else {
      out[have++] = s;
    }
  }
  fclose(f);
  return rc != 0 ? rc : have;
}

static int wait_stamps(int in, const char *path, uint32_t n, stamp_t *out,
                       int64_t deadline_ns, char *errbuf, size_t errbuf_len) {
  for (;;) {
    int have = read_stamps(path, n, out, errbuf, errbuf_len);
    if (have < 0)
      return have;
    if ((uint32_t)have == n)
      return 0;
    int64_t left = deadline_ns - bench_now_ns();
    if (left <= 0 || bench_stop_requested) {
      snprintf(errbuf, errbuf_len, "%d of %u workers started in time", have,
               n);
      return -ETIMEDOUT;
    }
    struct pollfd p = {in, POLLIN, 0};
    if (poll(&p, 1, (int)(left / 1000000) + 1) > 0) {
      char buf[4096];
      (void)!read(in, buf, sizeof(buf));
    }
  }
}

/* ---- one run ---------------------------------------------------------------- */

static int run_once(const opts_t *o, bench_scratch_t *s, double *stopped_ms,
                    double *exit_ms, char *errbuf, size_t errbuf_len) {
  uint32_t world = 2 * o->nproc;
  int64_t deadline = bench_now_ns() + (int64_t)(o->timeout_s * 1e9);
  int in = -1;
  int rc = bench_scratch_reset(s, &in);
  if (rc != 0) {
    snprintf(errbuf, errbuf_len, "preparing %s failed (%s)", s->dir,
             dr_strerror(rc));
    return rc;
  }
  bench_server_t srv;
  const char *extra[] = {"--nnodes", "2", NULL};
  rc = bench_server_start(&srv, o->server, extra, deadline, errbuf, errbuf_len);
  if (rc != 0) {
    close(in);
    return rc;
  }
  char nproc[16], endpoint[32], conf[64], tmo[32];
  snprintf(nproc, sizeof(nproc), "%u", o->nproc);
  snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", (unsigned)srv.port);
  snprintf(conf, sizeof(conf), "is_host=0,join_timeout=%.0f", o->timeout_s + 1);
  snprintf(tmo, sizeof(tmo), "%.0f", o->timeout_s + 1);
  setenv("DDPRUN_BENCH_TIMEOUT", tmo, 1);
  char *argv[] = {(char *)o->ddprun, "--nnodes", "2", "--nproc-per-node",
                  nproc, "--rdzv-endpoint", endpoint, "--rdzv-id", "bench",
                  "--rdzv-conf", conf, "--stop-grace", "2", (char *)o->self,
                  "--worker", s->stamps, NULL};
  bench_child_t cs[2] = {{.out_fd = s->out_fd[0], .name = "ddprun (survivor)"},
                   {.out_fd = s->out_fd[1], .name = "ddprun (lost)"}};
  int started = 0;
  while (rc == 0 && started < 2)
    if ((rc = bench_child_start(&cs[started], argv, errbuf, errbuf_len)) == 0)
      started++;

  static stamp_t st[2 * MAX_NPROC];
  int surv[MAX_NPROC], lost[MAX_NPROC], n_surv = 0, n_lost = 0;
  if (rc == 0)
    rc = wait_stamps(in, s->stamps, world, st, deadline, errbuf, errbuf_len);
  for (uint32_t i = 0; rc == 0 && i < world; i++) {
    pid_t pp = parent_of(st[i].pid);
    int fd = bench_pidfd_open((pid_t)st[i].pid);
    if (fd < 0 || (pp != cs[0].pid && pp != cs[1].pid)) {
      snprintf(errbuf, errbuf_len, "worker %ld (RANK %ld) is not a child of "
               "either ddprun", st[i].pid, st[i].rank);
      rc = DR_EBADARG;
      if (fd >= 0)
        close(fd);
    } else if (pp == cs[0].pid && n_surv < (int)o->nproc) {
      surv[n_surv++] = fd;
    } else if (pp == cs[1].pid && n_lost < (int)o->nproc) {
      lost[n_lost++] = fd;
    } else {
      close(fd);
      snprintf(errbuf, errbuf_len, "more than %u workers under one ddprun",
               o->nproc);
      rc = DR_EBADARG;
    }
  }
  if (rc == 0) {
    int64_t t0 = bench_now_ns(), t_stopped = t0;
    kill(cs[1].pid, o->mode == MODE_KILL ? SIGKILL : SIGSTOP);
    rc = pids_wait(surv, n_surv, deadline, &t_stopped);
    if (rc != 0)
      snprintf(errbuf, errbuf_len, "the survivor's workers still run (%s)",
               dr_strerror(rc));
    if (rc == 0) {
      *stopped_ms = (double)(t_stopped - t0) / 1e6;
      rc = bench_children_wait(&cs[0], 1, deadline);
      if (rc != 0)
        snprintf(errbuf, errbuf_len, "the surviving ddprun did not exit");
    }
    if (rc == 0) {
      *exit_ms = (double)(cs[0].reaped_ns - t0) / 1e6;
      if (!WIFEXITED(cs[0].status) || WEXITSTATUS(cs[0].status) != 3) {
        char how[64];
        bench_describe_status(cs[0].status, how, sizeof(how));
        snprintf(errbuf, errbuf_len, "the surviving ddprun %s, not with "
                 "code 3", how);
        rc = DR_EREMOTE;
      }
    }
    /* The lost agent's workers go with it (its watchdog, their parent-
     * death signal). */
    if (cs[1].pid > 0)
      kill(cs[1].pid, SIGKILL);
    if (bench_children_wait(&cs[1], 1,
                            bench_now_ns() + STOP_GRACE_MS * 1000000LL) != 0 &&
        rc == 0) {
      snprintf(errbuf, errbuf_len, "the lost ddprun survived SIGKILL");
      rc = -ETIMEDOUT;
    }
    int64_t t_gone = 0;
    int grc = pids_wait(lost, n_lost, bench_now_ns() +
                        VICTIMS_GONE_MS * 1000000LL, &t_gone);
    if (grc != 0 && rc == 0) {
      snprintf(errbuf, errbuf_len, "workers of the lost node still run %d ms "
               "after its agent died", VICTIMS_GONE_MS);
      rc = grc;
    }
  }
  pids_close(surv, n_surv);
  pids_close(lost, n_lost);
  for (int i = 0; i < started; i++)
    bench_children_stop(&cs[i], 1, STOP_GRACE_MS);
  char serr[256];
  int src = bench_server_stop(&srv, STOP_GRACE_MS, serr, sizeof(serr));
  if (rc == 0 && src != 0) {
    snprintf(errbuf, errbuf_len, "%s", serr);
    rc = src;
  }
  close(in);
  if (rc != 0) {
    bench_show_output("nodeloss_bench", cs[0].name, s->out_fd[0]);
    bench_show_output("nodeloss_bench", cs[1].name, s->out_fd[1]);
  }
  return rc;
}

static void usage(FILE *f) {
  fprintf(f, "usage: nodeloss_bench [--mode kill|stop] [--nproc N] [--runs R] "
             "[--timeout S]\n"
             "                      [--ddprun PATH] [--server PATH]\n"
             "defaults: --mode kill --nproc 4 --runs 5 --timeout 30 (seconds "
             "per run); programs next to nodeloss_bench\n");
}

static int parse_args(int argc, char **argv, opts_t *o) {
  static const struct option longopts[] = {
      {"mode", required_argument, NULL, 'm'},
      {"nproc", required_argument, NULL, 'n'},
      {"runs", required_argument, NULL, 'r'},
      {"ddprun", required_argument, NULL, 'd'},
      {"server", required_argument, NULL, 'S'},
      {"timeout", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int ch;
  unsigned long v;
  char *end;
  memset(o, 0, sizeof(*o));
  o->mode = MODE_KILL;
  o->nproc = 4;
  o->runs = 5;
  o->timeout_s = 30;
  while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (ch) {
    case 'm':
      if (strcmp(optarg, "kill") == 0)
        o->mode = MODE_KILL;
      else if (strcmp(optarg, "stop") == 0)
        o->mode = MODE_STOP;
      else
        return -1;
      break;
    case 'n':
    case 'r':
      errno = 0;
      v = strtoul(optarg, &end, 10);
      if (errno != 0 || end == optarg || *end != '\0' || v == 0 ||
          v > (ch == 'n' ? MAX_NPROC : MAX_RUNS))
        return -1;
      *(ch == 'n' ? &o->nproc : &o->runs) = (uint32_t)v;
      break;
    case 'd':
    case 'S':
      if (strlen(optarg) >= PATH_MAX)
        return -1;
      strcpy(ch == 'd' ? o->ddprun : o->server, optarg);
      break;
    case 't':
      o->timeout_s = strtod(optarg, &end);
      if (end == optarg || *end != '\0' || !(o->timeout_s >= 5) ||
          o->timeout_s > 86400)
        return -1;
      break;
    case 'h':
      return 1;
    default:
      return -1;
    }
  }
  return optind == argc ? 0 : -1;
}

int main(int argc, char **argv) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  if (argc == 3 && strcmp(argv[1], "--worker") == 0)
    return worker_main(argv[2], &ts);

  setvbuf(stdout, NULL, _IOLBF, 0);
  setvbuf(stderr, NULL, _IOLBF, 0);
  opts_t o;
  int prc = parse_args(argc, argv, &o);
  if (prc != 0) {
    usage(prc > 0 ? stdout : stderr);
    return prc > 0 ? 0 : 2;
  }
  if (bench_default_path(o.ddprun, "ddprun") != 0 ||
      bench_default_path(o.server, "ddprun-rdzv") != 0 ||
      bench_default_path(o.self, NULL) != 0) {
    fprintf(stderr, "nodeloss_bench: cannot locate ddprun and ddprun-rdzv "
                    "next to nodeloss_bench; pass --ddprun and --server\n");
    return 2;
  }
  bench_install_signals();

  double *a = calloc(o.runs, sizeof(*a));
  double *b = calloc(o.runs, sizeof(*b));
  bench_scratch_t s;
  char err[PATH_MAX + 256];
  int rc = a == NULL || b == NULL ? -ENOMEM : bench_scratch_open(&s, "nodeloss_bench", err, sizeof(err));
  if (rc != 0)
    fprintf(stderr, "nodeloss_bench: %s\n",
            rc == -ENOMEM ? "out of memory" : err);
  const char *mode = o.mode == MODE_KILL ? "kill" : "stop";
  uint32_t done = 0;
  while (rc == 0 && done < o.runs && !bench_stop_requested) {
    rc = run_once(&o, &s, &a[done], &b[done], err, sizeof(err));
    if (rc != 0) {
      fprintf(stderr, "nodeloss_bench: run %u failed: %s\n", done + 1, err);
      break;
    }
    printf("run %u: %s of an agent: the survivor's %u workers stopped after "
           "%.2f ms, it exited after %.2f ms\n", done + 1,
           o.mode == MODE_KILL ? "SIGKILL" : "SIGSTOP", o.nproc, a[done],
           b[done]);
    done++;
  }
  if (a != NULL && b != NULL)
    bench_scratch_close(&s);
  if (rc == 0 && done == o.runs) {
    double med_exit = bench_median(b, done);
    double med = bench_median(a, done);
    printf("nodeloss_bench mode=%s nproc=%u runs=%u median_ms=%.2f "
           "min_ms=%.2f max_ms=%.2f median_exit_ms=%.2f\n", mode, o.nproc,
           done, med, a[0], a[done - 1], med_exit);
    if (med > TARGET_MS)
      fprintf(stderr, "nodeloss_bench: median %.2f ms misses the target of "
              "%.0f ms\n", med, TARGET_MS);
  }
  free(a);
  free(b);
  return rc == 0 && done == o.runs ? 0 : 1;
}
