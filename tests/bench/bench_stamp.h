/* The workers' start stamps, written by stamp (launch_bench's worker) and
 * by restart_bench and nodeloss_bench in their worker mode, read by the
 * benchmarks (bench_job.h).
 *
 * A stamp is one line "COUNT RANK NANOSECONDS PID\n" appended to the stamp
 * file in one write() on an O_APPEND descriptor, so the lines of concurrent
 * workers never interleave. COUNT is TORCHELASTIC_RESTART_COUNT (the
 * attempt), RANK the worker's RANK, -1 where unset; NANOSECONDS is the
 * CLOCK_MONOTONIC time the worker read first thing in main. libc only: the
 * start of the programs that link it is what the benchmarks time.
 */
#ifndef DR_BENCH_STAMP_H
#define DR_BENCH_STAMP_H

#include <stdint.h>
#include <time.h>

typedef struct {
  long count, rank, pid;
  int64_t ns;
} bench_stamp_t;

/* TORCHELASTIC_RESTART_COUNT, or -1 where unset. */
long bench_stamp_attempt(void);

/* Appends this process's stamp, taken at *ts, to path. 0 or a negative
 * errno (-ENAMETOOLONG for a RANK too long for a line, -EIO for a short
 * write). */
int bench_stamp_append(const char *path, const struct timespec *ts);

/* The worker mode of restart_bench and nodeloss_bench (`PROG --worker
 * FILE`): stamps, then on the first attempt waits for the signal that
 * stops it, at most DDPRUN_BENCH_TIMEOUT seconds (60 where unset) through
 * alarm(); on a later attempt exits at once. Returns the worker's exit
 * status: 0, or 1 when the stamp could not be written (said on stderr). */
int bench_stamp_worker(const char *prog, const char *path,
                       const struct timespec *ts);

#endif /* DR_BENCH_STAMP_H */
