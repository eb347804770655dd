/* The benchmarks that time a ddprun job on this host, run after run
 * (launch_bench, restart_bench, nodeloss_bench): their common command line
 * and main loop, their scratch files, the workers' stamps as the benchmark
 * reads them, and the job of two ddprun (--nnodes 2, is_host=0) and one
 * ddprun-rdzv on 127.0.0.1.
 *
 * A benchmark describes itself in a bench_repeat_t and its main returns
 * bench_repeat_main(). Each run gets the scratch files and returns two
 * figures (milliseconds); after the last run the benchmark reports their
 * summaries.
 */
#ifndef DR_BENCH_JOB_H
#define DR_BENCH_JOB_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "bench_cli.h"
#include "bench_proc.h"
#include "bench_server.h"
#include "bench_stamp.h"
#include "bench_stats.h"

/* $TMPDIR/PROG.XXXXXX with out.0, out.1 (open, appended: the output of
 * the two ddprun) and stamps (the stamp file). */
typedef struct {
  char dir[4096 - 32]; /* room for "/stamps" and "/out.N" after it */
  char stamps[4096];
  char out_path[2][4096];
  int out_fd[2];
} bench_scratch_t;

int bench_scratch_open(bench_scratch_t *s, const char *prog, char *err,
                       size_t err_len);
void bench_scratch_close(bench_scratch_t *s);
/* Before a run: empties the output files. in == NULL: removes the stamp
 * file; else creates it empty and *in is an inotify descriptor that
 * becomes readable when it is written. 0 or -errno. */
int bench_scratch_reset(bench_scratch_t *s, int *in);

/* Reads the stamps of attempt count from path into out[0..n), checking
 * that each RANK is in 0..n-1 and there at most once; lines of other
 * attempts are skipped, a missing file holds none. Returns how many, or a
 * negative code with the reason in err. */
int bench_stamps_read(const char *path, long count, uint32_t n,
                      bench_stamp_t *out, char *err, size_t err_len);
/* Reads them until attempt count has all n, waiting on in (see
 * bench_scratch_reset) in between. 0, or -ETIMEDOUT at deadline_ns or on
 * SIGINT/SIGTERM ("K of N workers of attempt C started in time"), or
 * bench_stamps_read's code. */
int bench_stamps_wait(int in, const char *path, long count, uint32_t n,
                      bench_stamp_t *out, int64_t deadline_ns, char *err,
                      size_t err_len);

typedef struct bench_repeat bench_repeat_t;

/* One run (run counts from 0): fills fig[0] and fig[1] (milliseconds; a
 * benchmark with one figure leaves fig[1]) and prints its "run N: ..."
 * line. 0, or a negative code with the reason in err. */
typedef int (*bench_run_fn)(const bench_repeat_t *b, bench_scratch_t *s,
                            uint32_t run, double fig[2], char *err,
                            size_t err_len);
/* The result line, from the summaries of the runs' fig[0] and fig[1]. */
typedef void (*bench_report_fn)(const bench_repeat_t *b,
                                const bench_summary_t fig[2]);

struct bench_repeat {
  /* The benchmark's own. */
  const char *prog;  /* its name: messages, the scratch directory */
  const char *usage; /* its usage text */
  /* Its worker: a program found next to it or given as --NAME PATH
   * ("stamp"); NULL: itself in worker mode, `PROG --worker FILE`
   * (bench_stamp_worker), which bench_repeat_main runs. */
  const char *worker_program;
  /* The values of --mode (NULL-terminated), or NULL: no --mode. */
  const char *const *modes;
  uint32_t max_nproc, max_runs;
  double min_timeout_s; /* --timeout must be over 0 and at least this */
  /* Run after the command line is parsed (may be NULL): sets what depends
   * on it (defaults, run, report); BENCH_CLI_USAGE rejects it. */
  int (*configure)(bench_repeat_t *b);
  bench_run_fn run;
  bench_report_fn report;

  /* Defaults on entry (mode -1: --mode is required; timeout_s 0: 30 s),
   * then what the command line says. */
  int mode; /* index into modes */
  uint32_t nproc, runs;
  double timeout_s; /* per run */
  char ddprun[PATH_MAX], server[PATH_MAX], worker[PATH_MAX];
};

/* All of main but its result line: the worker mode when worker_program is
 * NULL (its clock read first thing), the command line (--nproc --runs
 * --timeout --ddprun --server, --NAME of the worker, --mode; the programs
 * next to this one by default), the signal handlers, then the runs, each
 * failure said on stderr, and the report once all have succeeded. Returns
 * main's exit status: 0 when every run succeeded, 1 otherwise, 2 on bad
 * usage; in worker mode, the worker's. */
int bench_repeat_main(bench_repeat_t *b, int argc, char **argv);

/* The job: ddprun-rdzv --nnodes 2 SERVER_ARGS, and two
 *   ddprun --nnodes 2 --nproc-per-node N --rdzv-endpoint 127.0.0.1:PORT
 *          --rdzv-id bench --rdzv-conf is_host=0,join_timeout=T+1
 *          DDPRUN_ARGS WORKER [--worker] STAMPS
 * with T the run's timeout, also given to the workers as
 * DDPRUN_BENCH_TIMEOUT (T+1). */
typedef struct {
  const char *const *server_args; /* NULL-terminated, or NULL */
  const char *const *ddprun_args; /* NULL-terminated, or NULL */
  const char *names[2];           /* of the two ddprun */
  int watch_stamps;               /* an inotify descriptor on the stamps */
} bench_job_spec_t;

typedef struct {
  bench_server_t srv;
  bench_child_t node[2];
  size_t started;
  int stamps_in; /* the inotify descriptor, or -1 */
} bench_job_t;

/* Empties s, starts the server, reads *t0 (may be NULL) just before the
 * first fork, forks both ddprun, then confirms both (so they start close
 * together). 0 or a negative code with the reason in err; call
 * bench_job_end either way. */
int bench_job_start(bench_job_t *j, const bench_repeat_t *b,
                    const bench_job_spec_t *sp, bench_scratch_t *s,
                    int64_t deadline_ns, int64_t *t0, char *err,
                    size_t err_len);
/* Stops what of the job still runs (SIGTERM, SIGKILL after a grace), then
 * the server. Returns rc, or when rc is 0 the server's crash; on failure
 * shows the output of both ddprun. */
int bench_job_end(bench_job_t *j, const bench_repeat_t *b,
                  bench_scratch_t *s, int rc, char *err, size_t err_len);

#endif /* DR_BENCH_JOB_H */
