/* restart_bench: how long a group restart takes across two nodes.
 *
 *   restart_bench [--nproc 8] [--runs 10] [--timeout 30]
 *                 [--ddprun PATH] [--server PATH]
 *
 * Per run: ddprun-rdzv (--nnodes 2 --max-restarts 1, port 0) and two
 * ddprun (--nnodes 2 --nproc-per-node N, is_host=0) on 127.0.0.1, whose
 * workers are this program in its worker mode. Once all 2N workers of the
 * first attempt have stamped, one of them (a local rank 0 of the second
 * ddprun) gets SIGKILL; t0 is read just before the kill(). ddprun then
 * stops the 2N-1 others and starts 2N new workers. "restart" is the latest
 * of the new workers' own start stamps minus t0; "first" the earliest. The
 * new workers exit 0, so each run ends with both ddprun exiting 0, which is
 * checked, as is that every RANK 0..2N-1 started once per attempt. Prints
 * one line per run, then
 *
 *   restart_bench nproc=N runs=R median_ms=.. min_ms=.. max_ms=..
 *                 median_first_ms=..
 *
 *   restart_bench --worker FILE
 *
 * The worker: reads CLOCK_MONOTONIC first thing in main, appends
 * "COUNT RANK NANOSECONDS PID\n" to FILE in one write() (COUNT is
 * TORCHELASTIC_RESTART_COUNT), then waits for a signal on the first attempt
 * (bounded by --timeout through alarm(), passed as DDPRUN_BENCH_TIMEOUT)
 * and exits 0 on later ones.
 *
 * ddprun and ddprun-rdzv default to the files next to this program. A run
 * past --timeout has its ddprun processes stopped (SIGTERM, then SIGKILL
 * after 2 s) and fails. Exit status 0 when every run succeeded, 1
 * otherwise, 2 on bad usage. A median over the target (250 ms) is reported
 * on stderr; the exit status reflects only the checks.
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
#define MAX_RUNS 10000
#define STOP_GRACE_MS 2000
#define TARGET_MS 250.0

typedef struct {
  uint32_t nproc;
  uint32_t runs;
  double timeout_s;
  char ddprun[PATH_MAX];
  char server[PATH_MAX];
  char self[PATH_MAX];
} opts_t;

/* One worker's stamp. */
typedef struct {
  long count, rank, pid;
  int64_t ns;
} stamp_t;

/* ---- worker mode ---------------------------------------------------------- */

static int worker_main(const char *path, const struct timespec *ts) {
  const char *c = getenv("TORCHELASTIC_RESTART_COUNT");
  const char *r = getenv("RANK");
  const char *t = getenv("DDPRUN_BENCH_TIMEOUT");
  long count = c != NULL ? strtol(c, NULL, 10) : -1;
  char line[128];
  int n = snprintf(line, sizeof(line), "%ld %s %lld %ld\n", count,
                   r != NULL && r[0] != '\0' ? r : "-1",
                   (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec,
                   (long)getpid());
  if (n < 0 || (size_t)n >= sizeof(line))
    return 1;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, line, (size_t)n) != n) {
    fprintf(stderr, "restart_bench worker: append to %s failed (%d: %s)\n",
            path, errno, strerror(errno));
    return 1;
  }
  close(fd);
  if (count != 0)
    return 0;
  /* The first attempt lives until ddprun stops it, or the run's timeout. */
  long secs = t != NULL ? strtol(t, NULL, 10) : 60;
  alarm((unsigned)(secs > 0 ? secs : 60));
  for (;;)
    pause();
}

/* ---- the ddprun children --------------------------------------------------- */

/* ---- stamps ---------------------------------------------------------------- */

/* Reads the stamps of attempt count; checks that no RANK of it appears
 * twice or out of 0..n-1. Returns how many there are, or a negative code. */
static int read_stamps(const char *path, long count, uint32_t n, stamp_t *out,
                       char *errbuf, size_t errbuf_len) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return errno == ENOENT ? 0 : -errno;
  unsigned char seen[2 * MAX_NPROC] = {0};
  int have = 0, rc = 0;
  char line[160];
  stamp_t s;
  long long ns;
  while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "%ld %ld %lld %ld", &s.count, &s.rank, &ns, &s.pid) != 4) {
      snprintf(errbuf, errbuf_len, "bad stamp line: %.64s", line);
      rc = DR_EBADARG;
    } else if (s.count != count) {
      continue;
    } else if (s.rank < 0 || (uint64_t)s.rank >= n || seen[s.rank]++) {
      snprintf(errbuf, errbuf_len, "attempt %ld: RANK %ld out of range or "
               "started twice", count, s.rank);
      rc = DR_EBADARG;
    } else {
      s.ns = ns;
      out[have++] = s;
    }
  }
  fclose(f);
  return rc != 0 ? rc : have;
}

/* Waits (inotify) until attempt count has n stamps. */
static int wait_stamps(int in, const char *path, long count, uint32_t n,
                       stamp_t *out, int64_t deadline_ns, char *errbuf,
                       size_t errbuf_len) {
  for (;;) {
    int have = read_stamps(path, count, n, out, errbuf, errbuf_len);
    if (have < 0)
      return have;
    if ((uint32_t)have == n)
      return 0;
    int64_t left = deadline_ns - bench_now_ns();
    if (left <= 0 || bench_stop_requested) {
      snprintf(errbuf, errbuf_len, "%d of %u workers of attempt %ld started "
               "in time", have, n, count);
      return -ETIMEDOUT;
    }
    struct pollfd p = {in, POLLIN, 0};
    int r = poll(&p, 1, (int)(left / 1000000) + 1);
    if (r > 0) {
      char buf[4096];
      (void)!read(in, buf, sizeof(buf));
    }
  }
}

/* ---- one run ------------------------------------------------------------ */

static int run_once(const opts_t *o, bench_scratch_t *s, double *restart_ms,
                    double *first_ms, char *errbuf, size_t errbuf_len) {
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
  const char *extra[] = {"--nnodes", "2", "--max-restarts", "1", NULL};
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
                  "--rdzv-conf", conf, "--max-restarts", "1", "--stop-grace",
                  "2", (char *)o->self, "--worker", s->stamps, NULL};
  bench_child_t cs[2] = {{.out_fd = s->out_fd[0], .name = "ddprun (node a)"},
                   {.out_fd = s->out_fd[1], .name = "ddprun (node b)"}};
  int started = 0;
  while (rc == 0 && started < 2)
    if ((rc = bench_child_start(&cs[started], argv, errbuf, errbuf_len)) == 0)
      started++;

  static stamp_t st[2 * MAX_NPROC];
  if (rc == 0)
    rc = wait_stamps(in, s->stamps, 0, world, st, deadline, errbuf, errbuf_len);
  if (rc == 0) {
    /* The victim: RANK N, local rank 0 of node 1. */
    stamp_t victim = st[0];
    for (uint32_t i = 0; i < world; i++)
      if (st[i].rank == (long)o->nproc)
        victim = st[i];
    int64_t t0 = bench_now_ns();
    if (kill((pid_t)victim.pid, SIGKILL) != 0) {
      rc = -errno;
      snprintf(errbuf, errbuf_len, "kill() of worker %ld failed (%d: %s)",
               victim.pid, errno, strerror(errno));
    }
    if (rc == 0)
      rc = wait_stamps(in, s->stamps, 1, world, st, deadline, errbuf,
                       errbuf_len);
    if (rc == 0) {
      int64_t last = st[0].ns, first = st[0].ns;
      for (uint32_t i = 1; i < world; i++) {
        if (st[i].ns > last)
          last = st[i].ns;
        if (st[i].ns < first)
          first = st[i].ns;
      }
      *restart_ms = (double)(last - t0) / 1e6;
      *first_ms = (double)(first - t0) / 1e6;
    }
  }
  if (rc == 0) {
    rc = bench_children_wait(cs, started, deadline);
    if (rc != 0)
      snprintf(errbuf, errbuf_len, "ddprun did not finish in time (%s)",
               dr_strerror(rc));
  }
  if (rc != 0)
    bench_children_stop(cs, started, STOP_GRACE_MS);
  for (int i = 0; rc == 0 && i < 2; i++)
    if (!WIFEXITED(cs[i].status) || WEXITSTATUS(cs[i].status) != 0) {
      char how[64];
      bench_describe_status(cs[i].status, how, sizeof(how));
      snprintf(errbuf, errbuf_len, "%s %s", cs[i].name, how);
      rc = DR_EREMOTE;
    }
  char serr[256];
  int src = bench_server_stop(&srv, STOP_GRACE_MS, serr, sizeof(serr));
  if (rc == 0 && src != 0) {
    snprintf(errbuf, errbuf_len, "%s", serr);
    rc = src;
  }
  close(in);
  if (rc != 0) {
    bench_show_output("restart_bench", cs[0].name, s->out_fd[0]);
    bench_show_output("restart_bench", cs[1].name, s->out_fd[1]);
  }
  return rc;
}

static void usage(FILE *f) {
  fprintf(f, "usage: restart_bench [--nproc N] [--runs R] [--timeout S] "
             "[--ddprun PATH] [--server PATH]\n"
             "defaults: --nproc 8 --runs 10 --timeout 30 (seconds per run); "
             "programs next to restart_bench\n");
}

/* 0: run; 1: --help; -1: bad usage. */
static int parse_args(int argc, char **argv, opts_t *o) {
  static const struct option longopts[] = {
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
  o->nproc = 8;
  o->runs = 10;
  o->timeout_s = 30;
  while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (ch) {
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
      if (end == optarg || *end != '\0' || !(o->timeout_s >= 1) ||
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
    fprintf(stderr, "restart_bench: cannot locate ddprun and ddprun-rdzv "
                    "next to restart_bench; pass --ddprun and --server\n");
    return 2;
  }
  bench_install_signals();

  double *a = calloc(o.runs, sizeof(*a));
  double *b = calloc(o.runs, sizeof(*b));
  bench_scratch_t s;
  char err[PATH_MAX + 256];
  int rc = a == NULL || b == NULL ? -ENOMEM : bench_scratch_open(&s, "restart_bench", err, sizeof(err));
  if (rc != 0)
    fprintf(stderr, "restart_bench: %s\n",
            rc == -ENOMEM ? "out of memory" : err);
  uint32_t done = 0;
  while (rc == 0 && done < o.runs && !bench_stop_requested) {
    rc = run_once(&o, &s, &a[done], &b[done], err, sizeof(err));
    if (rc != 0) {
      fprintf(stderr, "restart_bench: run %u failed: %s\n", done + 1, err);
      break;
    }
    printf("run %u: all %u restarted %.2f ms after the kill (first %.2f ms)\n",
           done + 1, 2 * o.nproc, a[done], b[done]);
    done++;
  }
  if (a != NULL && b != NULL)
    bench_scratch_close(&s);
  if (rc == 0 && done == o.runs) {
    double med_first = bench_median(b, done);
    double med = bench_median(a, done);
    printf("restart_bench nproc=%u runs=%u median_ms=%.2f min_ms=%.2f "
           "max_ms=%.2f median_first_ms=%.2f\n", o.nproc, done, med, a[0],
           a[done - 1], med_first);
    if (med > TARGET_MS)
      fprintf(stderr, "restart_bench: median %.2f ms misses the target of "
              "%.0f ms\n", med, TARGET_MS);
  }
  free(a);
  free(b);
  return rc == 0 && done == o.runs ? 0 : 1;
}
