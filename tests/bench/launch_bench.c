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
#include "bench_proc.h"
#include "bench_server.h"

#include "errors.h"

#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Waits for the children; on a timeout, a signal or an error stops them
 * all and says why. */
static int wait_all(bench_child_t *cs, size_t n, int64_t deadline_ns,
                    char *errbuf, size_t errbuf_len) {
  int rc = bench_children_wait(cs, n, deadline_ns);
  if (rc != 0) {
    snprintf(errbuf, errbuf_len, "%s",
             rc == -EINTR      ? "interrupted"
             : rc == -ETIMEDOUT ? "timed out"
                                : strerror(-rc));
    bench_children_stop(cs, n, STOP_GRACE_MS);
  }
  return rc;
}

static int status_ok(const bench_child_t *c, char *errbuf, size_t errbuf_len) {
  if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)
    return 0;
  char how[64];
  bench_describe_status(c->status, how, sizeof(how));
  snprintf(errbuf, errbuf_len, "%s %s", c->name, how);
  return DR_EREMOTE;
}

/* One standalone run; *ms gets fork-to-reap. */
static int run_standalone(const opts_t *o, bench_scratch_t *s, double *ms,
                          char *errbuf, size_t errbuf_len) {
  char nproc[16];
  snprintf(nproc, sizeof(nproc), "%u", o->nproc);
  char *argv[] = {(char *)o->ddprun, "--standalone", "--nproc-per-node",
                  nproc, "/bin/true", NULL};
  bench_child_t c = {.out_fd = s->out_fd[0], .name = "ddprun"};

  int64_t t0 = bench_now_ns();
  int rc = bench_child_fork(&c, argv, errbuf, errbuf_len);
  if (rc == 0)
    rc = bench_child_confirm(&c, errbuf, errbuf_len);
  if (rc == 0)
    rc = wait_all(&c, 1, t0 + (int64_t)(o->timeout_s * 1e9), errbuf,
                       errbuf_len);
  else
    bench_children_stop(&c, 1, STOP_GRACE_MS);
  if (rc == 0)
    rc = status_ok(&c, errbuf, errbuf_len);
  if (rc != 0) {
    bench_show_output("launch_bench", "ddprun", s->out_fd[0]);
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
static int run_two_node(const opts_t *o, bench_scratch_t *s, double *running_ms,
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
  bench_child_t cs[2] = {{.out_fd = s->out_fd[0], .name = "ddprun (node a)"},
                   {.out_fd = s->out_fd[1], .name = "ddprun (node b)"}};
  size_t forked = 0;

  int64_t t0 = bench_now_ns();
  while (rc == 0 && forked < 2) {
    rc = bench_child_fork(&cs[forked], argv, errbuf, errbuf_len);
    if (rc == 0)
      forked++;
  }
  for (size_t i = 0; rc == 0 && i < forked; i++)
    rc = bench_child_confirm(&cs[i], errbuf, errbuf_len);
  if (rc == 0)
    rc = wait_all(cs, 2, t0 + (int64_t)(o->timeout_s * 1e9), errbuf,
                       errbuf_len);
  else
    bench_children_stop(cs, forked, STOP_GRACE_MS);
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
    bench_show_output("launch_bench", cs[0].name, s->out_fd[0]);
    bench_show_output("launch_bench", cs[1].name, s->out_fd[1]);
    return rc;
  }
  int64_t reaped = cs[0].reaped_ns > cs[1].reaped_ns ? cs[0].reaped_ns
                                                     : cs[1].reaped_ns;
  *running_ms = (double)(last - t0) / 1e6;
  *exit_ms = (double)(reaped - t0) / 1e6;
  return 0;
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
  bench_scratch_t s;
  char err[PATH_MAX + 256];

  setvbuf(stdout, NULL, _IOLBF, 0);
  setvbuf(stderr, NULL, _IOLBF, 0);
  int prc = parse_args(argc, argv, &o);
  if (prc != 0) {
    usage(prc > 0 ? stdout : stderr);
    return prc > 0 ? 0 : 2;
  }
  if (bench_default_path(o.ddprun, "ddprun") != 0 ||
      bench_default_path(o.server, "ddprun-rdzv") != 0 ||
      bench_default_path(o.stamp, "stamp") != 0) {
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
  int rc = bench_scratch_open(&s, "launch_bench", err, sizeof(err));
  if (rc != 0)
    fprintf(stderr, "launch_bench: %s\n", err);
  uint32_t done = 0;
  while (rc == 0 && done < o.runs && !bench_stop_requested) {
    rc = bench_scratch_reset(&s, NULL);
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
  bench_scratch_close(&s);
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
    double med = bench_median(a, o.runs);
    printf("launch_bench mode=standalone nproc=%u runs=%u median_ms=%.2f "
           "min_ms=%.2f max_ms=%.2f\n",
           o.nproc, o.runs, med, a[0], a[o.runs - 1]);
    if (med >= TARGET_STANDALONE_MS)
      fprintf(stderr, "launch_bench: median %.2f ms misses the %.0f ms "
                      "target\n", med, TARGET_STANDALONE_MS);
  } else {
    double med_run = bench_median(a, o.runs);
    double med_exit = bench_median(b, o.runs);
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
