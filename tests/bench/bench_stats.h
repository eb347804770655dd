/* Clock and statistics of the benchmarks.
 *
 * Times are CLOCK_MONOTONIC, which every process on the host shares: a
 * worker's start stamp and the benchmark's t0 compare directly. libc only,
 * so that a worker that links it (stamp, allreduce_bench) starts no slower
 * than one that does not.
 */
#ifndef DR_BENCH_STATS_H
#define DR_BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t bench_now_ns(void);

/* Milliseconds from from_ns to to_ns. */
double bench_ms(int64_t from_ns, int64_t to_ns);

/* Sorts v[0..n) in place (n >= 1) and returns its median (the mean of the
 * two middle values of an even count). */
double bench_median(double *v, size_t n);

typedef struct {
  double median, min, max;
} bench_summary_t;

/* Sorts v[0..n) in place (n >= 1) and summarizes it. */
bench_summary_t bench_summarize(double *v, size_t n);

/* Says on stderr "PROG: median M ms[ WHAT] misses the T ms target" when
 * median_ms is not under target_ms. what may be "" (" to running"). Only
 * says: a missed target never changes a benchmark's exit status. */
void bench_check_target(const char *prog, const char *what, double median_ms,
                        double target_ms);

#endif /* DR_BENCH_STATS_H */
