/* launch_bench: how long ddprun takes to start and finish a job.
 *
 *   launch_bench --mode standalone [--nproc 16] [--runs 20]
 *   launch_bench --mode two-node [--nproc 8] [--runs 10]
 *                [--ddprun PATH] [--server PATH] [--stamp PATH] [--timeout S]
 *
 * standalone: runs `ddprun --standalone --nproc-per-node N /bin/true` and
 * times it from just before fork() to the moment the reaped child's pidfd
 * turns readable. Prints one line per run, then
 *
 *   launch_bench mode=standalone nproc=N runs=R median_ms=.. min_ms=.. max_ms=..
 *
 * two-node: per run, starts ddprun-rdzv (--nnodes 2, port 0) and waits for
 * its port file; only then takes t0, forks two ddprun processes (is_host=0,
 * --nproc-per-node N, both on 127.0.0.1) whose workers are `stamp FILE`.
 * "running" is the latest of the 2N workers' own CLOCK_MONOTONIC start
 * stamps minus t0; "exit" is when the second ddprun was reaped, minus t0.
 * Every stamp must name a distinct RANK in 0..2N-1. Prints one line per
 * run, then
 *
 *   launch_bench mode=two-node nproc=N runs=R median_running_ms=..
 *                median_exit_ms=.. (and min/max of both)
 *
 * ddprun, ddprun-rdzv and stamp default to the files next to this program.
 * --timeout bounds each run (default 30 s); a run past it has its ddprun
 * processes stopped (SIGTERM, then SIGKILL after 2 s) and fails. Output of
 * ddprun goes to a private file that is shown when a run fails. Exit status
 * 0 when every run succeeded, 1 otherwise, 2 on bad usage. The targets
 * (standalone median under 50 ms, two-node running under 100 ms) are
 * reported on stderr when missed but do not change the exit status.
 */
#include "bench_server.h"

#include "errors.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NPROC 1024
#define MAX_RUNS 100000
#define STOP_GRACE_MS 2000
#define TARGET_STANDALONE_MS 50.0
#define TARGET_RUNNING_MS 100.0

typedef enum { MODE_STANDALONE, MODE_TWO_NODE } launch_mode_t;

typedef struct {
  launch_mode_t mode;
  uint32_t nproc;
  uint32_t runs;
  double timeout_s;
  char ddprun[PATH_MAX];
  char server[PATH_MAX];
  char stamp[PATH_MAX];
} opts_t;

/* One ddprun of a run. out_fd is borrowed from the run's context. */
typedef struct {
  pid_t pid;          /* 0 once reaped */
  int pidfd;          /* -1 once reaped */
  int exec_fd;        /* read end of the close-on-exec pipe, -1 after */
  int status;
  int64_t reaped_ns;
  int out_fd;
  const char *name;
  const char *path;   /* argv[0], borrowed from the caller */
} child_t;

/* A private directory for the stamp file and the ddprun output files. */
typedef struct {
  char dir[PATH_MAX - 16]; /* room for "/stamps" and "/out.N" after it */
  char stamps[PATH_MAX];
  char out_path[2][PATH_MAX];
  int out_fd[2];
} scratch_t;

static int pidfd_open_(pid_t pid) {
  return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Forks argv[0]. On success the child runs or is about to exec; call
 * child_confirm to learn whether exec succeeded. The child dies with this
 * process (PR_SET_PDEATHSIG) and writes stdout and stderr to c->out_fd. */
static int child_fork(child_t *c, char *const argv[], char *errbuf,
                      size_t errbuf_len) {
  int p[2];
  c->pid = 0;
  c->pidfd = -1;
  c->exec_fd = -1;
  c->path = argv[0];
  if (pipe2(p, O_CLOEXEC) != 0) {
    int e = errno;
    snprintf(errbuf, errbuf_len, "pipe2() failed (%d: %s)", e, strerror(e));
    return -e;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    snprintf(errbuf, errbuf_len, "fork() of %s failed (%d: %s)", c->name, e,
             strerror(e));
    close(p[0]);
    close(p[1]);
    return -e;
  }
  if (pid == 0) {
    close(p[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    /* bench_install_signals ignores SIGPIPE, which exec would keep. */
    signal(SIGPIPE, SIG_DFL);
    dup2(c->out_fd, STDOUT_FILENO);
    dup2(c->out_fd, STDERR_FILENO);
    execv(argv[0], argv);
    int e = errno;
    (void)!write(p[1], &e, sizeof(e));
    _exit(127);
  }
  close(p[1]);
  c->pid = pid;
  c->exec_fd = p[0];
  return 0;
}

static void child_reap_blocking(child_t *c) {
  if (c->pid <= 0)
    return;
  while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR)
    ;
  c->pid = 0;
  if (c->pidfd >= 0)
    close(c->pidfd);
  c->pidfd = -1;
}

/* Waits for exec (the pipe closes) or its failure, then opens the pidfd. */
static int child_confirm(child_t *c, char *errbuf, size_t errbuf_len) {
  int exec_err = 0;
  ssize_t n;
  do
    n = read(c->exec_fd, &exec_err, sizeof(exec_err));
  while (n < 0 && errno == EINTR);
  close(c->exec_fd);
  c->exec_fd = -1;
  if (n == (ssize_t)sizeof(exec_err)) {
    snprintf(errbuf, errbuf_len, "cannot execute %s '%.200s' (%d: %s)",
             c->name, c->path, exec_err, strerror(exec_err));
    child_reap_blocking(c);
    return -exec_err;
  }
  c->pidfd = pidfd_open_(c->pid);
  if (c->pidfd < 0) {
    int e = errno;
    snprintf(errbuf, errbuf_len, "pidfd_open() of %s (pid %d) failed "
             "(%d: %s)", c->name, (int)c->pid, e, strerror(e));
    return -e;
  }
  return 0;
}

/* SIGTERM, up to STOP_GRACE_MS, then SIGKILL; reaps every child. */
static void children_stop(child_t *cs, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (cs[i].exec_fd >= 0) {
      close(cs[i].exec_fd);
      cs[i].exec_fd = -1;
    }
  for (size_t i = 0; i < n; i++)
    if (cs[i].pid > 0)
      kill(cs[i].pid, SIGTERM);
  int64_t give_up = bench_now_ns() + (int64_t)STOP_GRACE_MS * 1000000;
  for (size_t i = 0; i < n; i++) {
    while (cs[i].pid > 0) {
      if (waitpid(cs[i].pid, &cs[i].status, WNOHANG) == cs[i].pid) {
        cs[i].pid = 0;
        break;
      }
      if (bench_now_ns() >= give_up) {
        kill(cs[i].pid, SIGKILL);
        child_reap_blocking(&cs[i]);
        break;
      }
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
    }
    if (cs[i].pidfd >= 0)
      close(cs[i].pidfd);
    cs[i].pidfd = -1;
  }
}

/* Waits until every child is reaped, recording when each was; stops them
 * all at deadline_ns or on SIGINT/SIGTERM. */
static int children_wait(child_t *cs, size_t n, int64_t deadline_ns,
                         char *errbuf, size_t errbuf_len) {
  for (;;) {
    struct pollfd pfd[2];
    size_t idx[2];
    nfds_t nfds = 0;
    for (size_t i = 0; i < n && nfds < 2; i++)
      if (cs[i].pid > 0) {
        pfd[nfds].fd = cs[i].pidfd;
        pfd[nfds].events = POLLIN;
        idx[nfds++] = i;
      }
    if (nfds == 0)
      return 0;
    int64_t left_ns = deadline_ns - bench_now_ns();
    if (left_ns <= 0 || bench_stop_requested) {
      snprintf(errbuf, errbuf_len, "%s",
               bench_stop_requested ? "interrupted" : "timed out");
      children_stop(cs, n);
      return bench_stop_requested ? -EINTR : -ETIMEDOUT;
    }
    int r = poll(pfd, nfds, (int)(left_ns / 1000000) + 1);
    int64_t now = bench_now_ns();
    if (r < 0 && errno != EINTR) {
      int e = errno;
      snprintf(errbuf, errbuf_len, "poll() failed (%d: %s)", e, strerror(e));
      children_stop(cs, n);
      return -e;
    }
    for (nfds_t k = 0; r > 0 && k < nfds; k++) {
      if (pfd[k].revents == 0)
        continue;
      child_t *c = &cs[idx[k]];
      if (waitpid(c->pid, &c->status, WNOHANG) == c->pid) {
        c->reaped_ns = now;
        c->pid = 0;
        close(c->pidfd);
        c->pidfd = -1;
      }
    }
  }
}

/* Shows the last bytes a child wrote, after a failed run. */
static void show_output(const char *name, int fd) {
  char buf[4096];
  off_t end = lseek(fd, 0, SEEK_END);
  if (end < 0)
    return;
  off_t from = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
  if (n <= 0)
    return;
  buf[n] = '\0';
  fprintf(stderr, "launch_bench: --- output of %s%s ---\n%s%s", name,
          from > 0 ? " (tail)" : "", buf,
          buf[n - 1] == '\n' ? "" : "\n");
}

static int scratch_open(scratch_t *s, char *errbuf, size_t errbuf_len) {
  memset(s, 0, sizeof(*s));
  s->out_fd[0] = s->out_fd[1] = -1;
  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || tmp[0] == '\0')
    tmp = "/tmp";
  if ((size_t)snprintf(s->dir, sizeof(s->dir), "%s/launch_bench.XXXXXX",
                       tmp) >= sizeof(s->dir)) {
    snprintf(errbuf, errbuf_len, "TMPDIR %.64s... is too long", tmp);
    s->dir[0] = '\0';
    return -ENAMETOOLONG;
  }
  if (mkdtemp(s->dir) == NULL) {
    int e = errno;
    snprintf(errbuf, errbuf_len, "mkdtemp() in %s failed (%d: %s)", tmp, e,
             strerror(e));
    s->dir[0] = '\0';
    return -e;
  }
  snprintf(s->stamps, sizeof(s->stamps), "%s/stamps", s->dir);
  for (int i = 0; i < 2; i++) {
    snprintf(s->out_path[i], sizeof(s->out_path[i]), "%s/out.%d", s->dir, i);
    s->out_fd[i] = open(s->out_path[i],
                        O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                        0600);
    if (s->out_fd[i] < 0) {
      int e = errno;
      snprintf(errbuf, errbuf_len, "open() of %s failed (%d: %s)",
               s->out_path[i], e, strerror(e));
      return -e;
    }
  }
  return 0;
}

static void scratch_close(scratch_t *s) {
  for (int i = 0; i < 2; i++) {
    if (s->out_fd[i] >= 0)
      close(s->out_fd[i]);
    s->out_fd[i] = -1;
    if (s->out_path[i][0] != '\0')
      unlink(s->out_path[i]);
  }
  if (s->stamps[0] != '\0')
    unlink(s->stamps);
  if (s->dir[0] != '\0')
    rmdir(s->dir);
  s->dir[0] = '\0';
}

/* Empties the output files and removes the stamps before a run. */
static int scratch_reset(scratch_t *s) {
  for (int i = 0; i < 2; i++)
    if (ftruncate(s->out_fd[i], 0) != 0)
      return -errno;
  if (unlink(s->stamps) != 0 && errno != ENOENT)
    return -errno;
  return 0;
}

static int status_ok(const child_t *c, char *errbuf, size_t errbuf_len) {
  if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)
    return 0;
  char how[64];
  bench_describe_status(c->status, how, sizeof(how));
  snprintf(errbuf, errbuf_len, "%s %s", c->name, how);
  return DR_EREMOTE;
}

/* One standalone run; *ms gets fork-to-reap. */
static int run_standalone(const opts_t *o, scratch_t *s, double *ms,
                          char *errbuf, size_t errbuf_len) {
  char nproc[16];
  snprintf(nproc, sizeof(nproc), "%u", o->nproc);
  char *argv[] = {(char *)o->ddprun, "--standalone", "--nproc-per-node",
                  nproc, "/bin/true", NULL};
  child_t c = {.out_fd = s->out_fd[0], .name = "ddprun"};

  int64_t t0 = bench_now_ns();
  int rc = child_fork(&c, argv, errbuf, errbuf_len);
  if (rc == 0)
    rc = child_confirm(&c, errbuf, errbuf_len);
  if (rc == 0)
    rc = children_wait(&c, 1, t0 + (int64_t)(o->timeout_s * 1e9), errbuf,
                       errbuf_len);
  else
    children_stop(&c, 1);
  if (rc == 0)
    rc = status_ok(&c, errbuf, errbuf_len);
  if (rc != 0) {
    show_output("ddprun", s->out_fd[0]);
    return rc;
  }
  *ms = (double)(c.reaped_ns - t0) / 1e6;
  return 0;
}

/* Reads the stamp file: exactly n lines, ranks 0..n-1 once each; *last
 * gets the latest stamp. */
static int read_stamps(const char *path, uint32_t n, int64_t t0,
                       int64_t *last, char *errbuf, size_t errbuf_len) {
  FILE *f = fopen(path, "re");
  if (f == NULL) {
    int e = errno;
    snprintf(errbuf, errbuf_len, "no worker stamped %.200s (%d: %s)", path, e,
             strerror(e));
    return -e;
  }
  unsigned char *seen = calloc(n, 1);
  if (seen == NULL) {
    fclose(f);
    return -ENOMEM;
  }
  uint32_t lines = 0;
  int rc = 0;
  long rank;
  long long ns;
  *last = t0;
  char line[128];
  while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
    lines++;
    if (sscanf(line, "%ld %lld", &rank, &ns) != 2 || rank < 0 ||
        (uint64_t)rank >= n) {
      snprintf(errbuf, errbuf_len, "bad stamp line %u: %.64s", lines, line);
      rc = DR_EBADARG;
    } else if (seen[rank]++) {
      snprintf(errbuf, errbuf_len, "RANK %ld started twice", rank);
      rc = DR_EBADARG;
    } else if (ns < t0) {
      snprintf(errbuf, errbuf_len, "RANK %ld stamped before t0", rank);
      rc = DR_EBADARG;
    } else if (ns > *last) {
      *last = ns;
    }
  }
  if (rc == 0 && lines != n) {
    snprintf(errbuf, errbuf_len, "%u workers stamped, expected %u", lines, n);
    rc = DR_EBADARG;
  }
  free(seen);
  fclose(f);
  return rc;
}

/* One two-node run; *running_ms and *exit_ms from t0. */
static int run_two_node(const opts_t *o, scratch_t *s, double *running_ms,
                        double *exit_ms, char *errbuf, size_t errbuf_len) {
  bench_server_t srv;
  const char *extra[] = {"--nnodes", "2", NULL};
  int64_t deadline = bench_now_ns() + (int64_t)(o->timeout_s * 1e9);
  int rc = bench_server_start(&srv, o->server, extra, deadline, errbuf,
                              errbuf_len);
  if (rc != 0)
    return rc;

  char nproc[16], endpoint[32], conf[64];
  snprintf(nproc, sizeof(nproc), "%u", o->nproc);
  snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", (unsigned)srv.port);
  snprintf(conf, sizeof(conf), "is_host=0,join_timeout=%.0f",
           o->timeout_s + 1);
  char *argv[] = {(char *)o->ddprun, "--nnodes", "2", "--nproc-per-node",
                  nproc, "--rdzv-endpoint", endpoint, "--rdzv-id", "bench",
                  "--rdzv-conf", conf, (char *)o->stamp, s->stamps, NULL};
  child_t cs[2] = {{.out_fd = s->out_fd[0], .name = "ddprun (node a)"},
                   {.out_fd = s->out_fd[1], .name = "ddprun (node b)"}};
  size_t forked = 0;

  int64_t t0 = bench_now_ns();
  while (rc == 0 && forked < 2) {
    rc = child_fork(&cs[forked], argv, errbuf, errbuf_len);
    if (rc == 0)
      forked++;
  }
  for (size_t i = 0; rc == 0 && i < forked; i++)
    rc = child_confirm(&cs[i], errbuf, errbuf_len);
  if (rc == 0)
    rc = children_wait(cs, 2, t0 + (int64_t)(o->timeout_s * 1e9), errbuf,
                       errbuf_len);
  else
    children_stop(cs, forked);
  for (size_t i = 0; rc == 0 && i < 2; i++)
    rc = status_ok(&cs[i], errbuf, errbuf_len);

  char serr[256];
  int src = bench_server_stop(&srv, STOP_GRACE_MS, serr, sizeof(serr));
  if (rc == 0 && src != 0) {
    snprintf(errbuf, errbuf_len, "%s", serr);
    rc = src;
  }
  int64_t last = 0;
  if (rc == 0)
    rc = read_stamps(s->stamps, 2 * o->nproc, t0, &last, errbuf, errbuf_len);
  if (rc != 0) {
    show_output(cs[0].name, s->out_fd[0]);
    show_output(cs[1].name, s->out_fd[1]);
    return rc;
  }
  int64_t reaped = cs[0].reaped_ns > cs[1].reaped_ns ? cs[0].reaped_ns
                                                     : cs[1].reaped_ns;
  *running_ms = (double)(last - t0) / 1e6;
  *exit_ms = (double)(reaped - t0) / 1e6;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v in place; returns the median. */
static double median(double *v, size_t n) {
  qsort(v, n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: launch_bench --mode standalone|two-node [--nproc N] "
          "[--runs R]\n"
          "                    [--ddprun PATH] [--server PATH] "
          "[--stamp PATH] [--timeout S]\n"
          "defaults: standalone --nproc 16 --runs 20; two-node --nproc 8 "
          "--runs 10;\n"
          "          --timeout 30 (seconds per run); programs next to "
          "launch_bench\n");
}

static int set_path(char *dst, const char *src) {
  if (strlen(src) >= PATH_MAX)
    return -1;
  strcpy(dst, src);
  return 0;
}

/* Fills an empty path with NAME next to this executable. */
static int default_path(char *dst, const char *name) {
  if (dst[0] != '\0')
    return 0;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n < 0)
    return -errno;
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash == NULL)
    return DR_EBADARG;
  *slash = '\0';
  if ((size_t)snprintf(dst, PATH_MAX, "%s/%s", self, name) >= PATH_MAX)
    return -ENAMETOOLONG;
  return 0;
}

/* 0: run; 1: --help; -1: bad usage. */
static int parse_args(int argc, char **argv, opts_t *o) {
  static const struct option longopts[] = {
      {"mode", required_argument, NULL, 'm'},
      {"nproc", required_argument, NULL, 'n'},
      {"runs", required_argument, NULL, 'r'},
      {"ddprun", required_argument, NULL, 'd'},
      {"server", required_argument, NULL, 'S'},
      {"stamp", required_argument, NULL, 's'},
      {"timeout", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int ch, have_mode = 0;
  unsigned long v;
  char *end;
  memset(o, 0, sizeof(*o));
  o->timeout_s = 30;
  while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (ch) {
    case 'm':
      if (strcmp(optarg, "standalone") == 0)
        o->mode = MODE_STANDALONE;
      else if (strcmp(optarg, "two-node") == 0)
        o->mode = MODE_TWO_NODE;
      else
        return -1;
      have_mode = 1;
      break;
    case 'n':
    case 'r':
      errno = 0;
      v = strtoul(optarg, &end, 10);
      if (errno != 0 || end == optarg || *end != '\0' || v == 0 ||
          v > (ch == 'n' ? MAX_NPROC : MAX_RUNS))
        return -1;
      if (ch == 'n')
        o->nproc = (uint32_t)v;
      else
        o->runs = (uint32_t)v;
      break;
    case 'd':
      if (set_path(o->ddprun, optarg) != 0)
        return -1;
      break;
    case 'S':
      if (set_path(o->server, optarg) != 0)
        return -1;
      break;
    case 's':
      if (set_path(o->stamp, optarg) != 0)
        return -1;
      break;
    case 't':
      o->timeout_s = strtod(optarg, &end);
      if (end == optarg || *end != '\0' || !(o->timeout_s > 0) ||
          o->timeout_s > 86400)
        return -1;
      break;
    case 'h':
      return 1;
    default:
      return -1;
    }
  }
  if (!have_mode || optind != argc)
    return -1;
  if (o->nproc == 0)
    o->nproc = o->mode == MODE_STANDALONE ? 16 : 8;
  if (o->runs == 0)
    o->runs = o->mode == MODE_STANDALONE ? 20 : 10;
  return 0;
}

int main(int argc, char **argv) {
  opts_t o;
  scratch_t s;
  char err[PATH_MAX + 256];

  setvbuf(stdout, NULL, _IOLBF, 0);
  setvbuf(stderr, NULL, _IOLBF, 0);
  int prc = parse_args(argc, argv, &o);
  if (prc != 0) {
    usage(prc > 0 ? stdout : stderr);
    return prc > 0 ? 0 : 2;
  }
  if (default_path(o.ddprun, "ddprun") != 0 ||
      default_path(o.server, "ddprun-rdzv") != 0 ||
      default_path(o.stamp, "stamp") != 0) {
    fprintf(stderr, "launch_bench: cannot locate the programs next to "
                    "launch_bench; pass --ddprun, --server and --stamp\n");
    return 2;
  }
  bench_install_signals();

  double *a = calloc(o.runs, sizeof(*a));
  double *b = calloc(o.runs, sizeof(*b));
  if (a == NULL || b == NULL) {
    fprintf(stderr, "launch_bench: out of memory for %u runs\n", o.runs);
    free(a);
    free(b);
    return 1;
  }
  int rc = scratch_open(&s, err, sizeof(err));
  if (rc != 0)
    fprintf(stderr, "launch_bench: %s\n", err);
  uint32_t done = 0;
  while (rc == 0 && done < o.runs && !bench_stop_requested) {
    rc = scratch_reset(&s);
    if (rc != 0) {
      fprintf(stderr, "launch_bench: emptying %s failed (%s)\n", s.dir,
              dr_strerror(rc));
      break;
    }
    if (o.mode == MODE_STANDALONE) {
      rc = run_standalone(&o, &s, &a[done], err, sizeof(err));
      if (rc == 0)
        printf("run %u: %.2f ms\n", done + 1, a[done]);
    } else {
      rc = run_two_node(&o, &s, &a[done], &b[done], err, sizeof(err));
      if (rc == 0)
        printf("run %u: running %.2f ms, exit %.2f ms\n", done + 1, a[done],
               b[done]);
    }
    if (rc != 0)
      fprintf(stderr, "launch_bench: run %u of %u failed: %s\n", done + 1,
              o.runs, err);
    else
      done++;
  }
  scratch_close(&s);
  if (rc == 0 && done < o.runs) {
    fprintf(stderr, "launch_bench: interrupted after %u runs\n", done);
    rc = -EINTR;
  }
  if (rc != 0) {
    free(a);
    free(b);
    return 1;
  }

  if (o.mode == MODE_STANDALONE) {
    double med = median(a, o.runs);
    printf("launch_bench mode=standalone nproc=%u runs=%u median_ms=%.2f "
           "min_ms=%.2f max_ms=%.2f\n",
           o.nproc, o.runs, med, a[0], a[o.runs - 1]);
    if (med >= TARGET_STANDALONE_MS)
      fprintf(stderr, "launch_bench: median %.2f ms misses the %.0f ms "
                      "target\n", med, TARGET_STANDALONE_MS);
  } else {
    double med_run = median(a, o.runs);
    double med_exit = median(b, o.runs);
    printf("launch_bench mode=two-node nproc=%u runs=%u median_running_ms=%.2f "
           "median_exit_ms=%.2f min_running_ms=%.2f max_running_ms=%.2f "
           "min_exit_ms=%.2f max_exit_ms=%.2f\n",
           o.nproc, o.runs, med_run, med_exit, a[0], a[o.runs - 1], b[0],
           b[o.runs - 1]);
    if (med_run >= TARGET_RUNNING_MS)
      fprintf(stderr, "launch_bench: median %.2f ms to running misses the "
                      "%.0f ms target\n", med_run, TARGET_RUNNING_MS);
  }
  free(a);
  free(b);
  return 0;
}
