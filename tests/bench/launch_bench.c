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
#include "bench_job.h"

#include <stdio.h>

#include "errors.h"

#define MAX_NPROC 1024
#define MAX_RUNS 100000
#define TARGET_STANDALONE_MS 50.0
#define TARGET_RUNNING_MS 100.0

enum { MODE_STANDALONE, MODE_TWO_NODE };

static const char USAGE[] =
    "usage: launch_bench --mode standalone|two-node [--nproc N] "
    "[--runs R]\n"
    "                    [--ddprun PATH] [--server PATH] "
    "[--stamp PATH] [--timeout S]\n"
    "defaults: standalone --nproc 16 --runs 20; two-node --nproc 8 "
    "--runs 10;\n"
    "          --timeout 30 (seconds per run); programs next to "
    "launch_bench\n";

/* One standalone run; fig[0] gets fork-to-reap. */
static int run_standalone(const bench_repeat_t *b, bench_scratch_t *s,
                          uint32_t run, double fig[2], char *err,
                          size_t err_len) {
  int rc = bench_scratch_reset(s, NULL);
  if (rc != 0) {
    snprintf(err, err_len, "emptying %s failed (%s)", s->dir,
             dr_strerror(rc));
    return rc;
  }
  char nproc[16];
  snprintf(nproc, sizeof(nproc), "%u", b->nproc);
  char *argv[] = {(char *)b->ddprun, "--standalone", "--nproc-per-node",
                  nproc, "/bin/true", NULL};
  bench_child_t c = {.out_fd = s->out_fd[0], .name = "ddprun"};

  int64_t t0 = bench_now_ns();
  rc = bench_child_fork(&c, argv, err, err_len);
  if (rc == 0)
    rc = bench_child_confirm(&c, err, err_len);
  if (rc == 0)
    rc = bench_children_finish(&c, 1, t0 + (int64_t)(b->timeout_s * 1e9),
                               err, err_len);
  else
    bench_children_stop(&c, 1, BENCH_STOP_GRACE_MS);
  if (rc == 0)
    rc = bench_child_check(&c, 0, err, err_len);
  if (rc != 0) {
    bench_show_output(b->prog, c.name, s->out_fd[0]);
    return rc;
  }
  fig[0] = bench_ms(t0, c.reaped_ns);
  printf("run %u: %.2f ms\n", run + 1, fig[0]);
  return 0;
}

/* Exactly n stamps of the first attempt, none before t0; *last gets the
 * latest. */
static int check_stamps(const char *path, uint32_t n, int64_t t0,
                        int64_t *last, char *err, size_t err_len) {
  static bench_stamp_t st[2 * MAX_NPROC];
  int have = bench_stamps_read(path, 0, n, st, err, err_len);
  if (have < 0)
    return have;
  if ((uint32_t)have != n) {
    snprintf(err, err_len, "%d workers stamped, expected %u", have, n);
    return DR_EBADARG;
  }
  *last = t0;
  for (uint32_t i = 0; i < n; i++) {
    if (st[i].ns < t0) {
      snprintf(err, err_len, "RANK %ld stamped before t0", st[i].rank);
      return DR_EBADARG;
    }
    if (st[i].ns > *last)
      *last = st[i].ns;
  }
  return 0;
}

/* One two-node run; fig[0] to running and fig[1] to exit, from t0. */
static int run_two_node(const bench_repeat_t *b, bench_scratch_t *s,
                        uint32_t run, double fig[2], char *err,
                        size_t err_len) {
  const bench_job_spec_t spec = {NULL, NULL,
                                 {"ddprun (node a)", "ddprun (node b)"}, 0};
  int64_t deadline = bench_now_ns() + (int64_t)(b->timeout_s * 1e9);
  bench_job_t j;
  int64_t t0 = 0, last = 0;
  int rc = bench_job_start(&j, b, &spec, s, deadline, &t0, err, err_len);
  if (rc == 0)
    rc = bench_children_finish(j.node, 2, t0 + (int64_t)(b->timeout_s * 1e9),
                               err, err_len);
  for (int i = 0; rc == 0 && i < 2; i++)
    rc = bench_child_check(&j.node[i], 0, err, err_len);
  if (rc == 0)
    rc = check_stamps(s->stamps, 2 * b->nproc, t0, &last, err, err_len);
  rc = bench_job_end(&j, b, s, rc, err, err_len);
  if (rc != 0)
    return rc;
  int64_t reaped = j.node[0].reaped_ns > j.node[1].reaped_ns
                       ? j.node[0].reaped_ns
                       : j.node[1].reaped_ns;
  fig[0] = bench_ms(t0, last);
  fig[1] = bench_ms(t0, reaped);
  printf("run %u: running %.2f ms, exit %.2f ms\n", run + 1, fig[0], fig[1]);
  return 0;
}

static void report(const bench_repeat_t *b, const bench_summary_t fig[2]) {
  if (b->mode == MODE_STANDALONE) {
    printf("launch_bench mode=standalone nproc=%u runs=%u median_ms=%.2f "
           "min_ms=%.2f max_ms=%.2f\n",
           b->nproc, b->runs, fig[0].median, fig[0].min, fig[0].max);
    bench_check_target("launch_bench", "", fig[0].median,
                       TARGET_STANDALONE_MS);
    return;
  }
  printf("launch_bench mode=two-node nproc=%u runs=%u median_running_ms=%.2f "
         "median_exit_ms=%.2f min_running_ms=%.2f max_running_ms=%.2f "
         "min_exit_ms=%.2f max_exit_ms=%.2f\n",
         b->nproc, b->runs, fig[0].median, fig[1].median, fig[0].min,
         fig[0].max, fig[1].min, fig[1].max);
  bench_check_target("launch_bench", " to running", fig[0].median,
                     TARGET_RUNNING_MS);
}

/* The defaults and the run of the mode chosen. */
static int configure(bench_repeat_t *b) {
  int standalone = b->mode == MODE_STANDALONE;
  if (b->nproc == 0)
    b->nproc = standalone ? 16 : 8;
  if (b->runs == 0)
    b->runs = standalone ? 20 : 10;
  b->run = standalone ? run_standalone : run_two_node;
  return 0;
}

int main(int argc, char **argv) {
  static const char *const modes[] = {"standalone", "two-node", NULL};
  static bench_repeat_t b = {
      .prog = "launch_bench", .usage = USAGE, .worker_program = "stamp",
      .modes = modes, .mode = -1, .max_nproc = MAX_NPROC,
      .max_runs = MAX_RUNS, .configure = configure, .report = report};
  return bench_repeat_main(&b, argc, argv);
}
