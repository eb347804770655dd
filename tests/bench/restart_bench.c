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
 * The worker (bench_stamp_worker): reads CLOCK_MONOTONIC first thing in
 * main, appends "COUNT RANK NANOSECONDS PID\n" to FILE in one write()
 * (COUNT is TORCHELASTIC_RESTART_COUNT), then waits for a signal on the
 * first attempt (bounded by --timeout through alarm(), passed as
 * DDPRUN_BENCH_TIMEOUT) and exits 0 on later ones.
 *
 * ddprun and ddprun-rdzv default to the files next to this program. A run
 * past --timeout has its ddprun processes stopped (SIGTERM, then SIGKILL
 * after 2 s) and fails. Exit status 0 when every run succeeded, 1
 * otherwise, 2 on bad usage. A median over the target (250 ms) is reported
 * on stderr; the exit status reflects only the checks.
 */
#include "bench_job.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define MAX_NPROC 256
#define MAX_RUNS 10000
#define TARGET_MS 250.0

static const char USAGE[] =
    "usage: restart_bench [--nproc N] [--runs R] [--timeout S] "
    "[--ddprun PATH] [--server PATH]\n"
    "defaults: --nproc 8 --runs 10 --timeout 30 (seconds per run); "
    "programs next to restart_bench\n";

/* Kills RANK N (local rank 0 of node 1) once the first attempt has all
 * started, then waits for the second attempt: fig[0] to its latest start,
 * fig[1] to its earliest. */
static int measure(const bench_repeat_t *b, bench_job_t *j,
                   bench_scratch_t *s, int64_t deadline, double fig[2],
                   char *err, size_t err_len) {
  static bench_stamp_t st[2 * MAX_NPROC];
  uint32_t world = 2 * b->nproc;
  int rc = bench_stamps_wait(j->stamps_in, s->stamps, 0, world, st, deadline,
                             err, err_len);
  if (rc != 0)
    return rc;
  bench_stamp_t victim = st[0];
  for (uint32_t i = 0; i < world; i++)
    if (st[i].rank == (long)b->nproc)
      victim = st[i];
  int64_t t0 = bench_now_ns();
  if (kill((pid_t)victim.pid, SIGKILL) != 0) {
    rc = -errno;
    snprintf(err, err_len, "kill() of worker %ld failed (%d: %s)",
             victim.pid, errno, strerror(errno));
    return rc;
  }
  rc = bench_stamps_wait(j->stamps_in, s->stamps, 1, world, st, deadline, err,
                         err_len);
  if (rc != 0)
    return rc;
  int64_t last = st[0].ns, first = st[0].ns;
  for (uint32_t i = 1; i < world; i++) {
    if (st[i].ns > last)
      last = st[i].ns;
    if (st[i].ns < first)
      first = st[i].ns;
  }
  fig[0] = bench_ms(t0, last);
  fig[1] = bench_ms(t0, first);
  return 0;
}

static int run_once(const bench_repeat_t *b, bench_scratch_t *s, uint32_t run,
                    double fig[2], char *err, size_t err_len) {
  static const char *const server_args[] = {"--max-restarts", "1", NULL};
  static const char *const ddprun_args[] = {"--max-restarts", "1",
                                            "--stop-grace", "2", NULL};
  const bench_job_spec_t spec = {server_args, ddprun_args,
                                 {"ddprun (node a)", "ddprun (node b)"}, 1};
  int64_t deadline = bench_now_ns() + (int64_t)(b->timeout_s * 1e9);
  bench_job_t j;
  int rc = bench_job_start(&j, b, &spec, s, deadline, NULL, err, err_len);
  if (rc == 0)
    rc = measure(b, &j, s, deadline, fig, err, err_len);
  /* The new workers exit at once, and both ddprun with them. */
  if (rc == 0)
    rc = bench_children_finish(j.node, 2, deadline, err, err_len);
  for (int i = 0; rc == 0 && i < 2; i++)
    rc = bench_child_check(&j.node[i], 0, err, err_len);
  rc = bench_job_end(&j, b, s, rc, err, err_len);
  if (rc == 0)
    printf("run %u: all %u restarted %.2f ms after the kill (first %.2f ms)\n",
           run + 1, 2 * b->nproc, fig[0], fig[1]);
  return rc;
}

static void report(const bench_repeat_t *b, const bench_summary_t fig[2]) {
  printf("restart_bench nproc=%u runs=%u median_ms=%.2f min_ms=%.2f "
         "max_ms=%.2f median_first_ms=%.2f\n", b->nproc, b->runs,
         fig[0].median, fig[0].min, fig[0].max, fig[1].median);
  bench_check_target("restart_bench", "", fig[0].median, TARGET_MS);
}

int main(int argc, char **argv) {
  static bench_repeat_t b = {
      .prog = "restart_bench", .usage = USAGE, .max_nproc = MAX_NPROC,
      .max_runs = MAX_RUNS, .min_timeout_s = 1, .run = run_once,
      .report = report, .nproc = 8, .runs = 10};
  return bench_repeat_main(&b, argc, argv);
}
