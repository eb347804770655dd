/* Clock and statistics of the benchmarks; see bench_stats.h. */
#include "bench_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double bench_ms(int64_t from_ns, int64_t to_ns) {
  return (double)(to_ns - from_ns) / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *v, size_t n) {
  qsort(v, n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bench_summary_t bench_summarize(double *v, size_t n) {
  bench_summary_t s;
  s.median = bench_median(v, n);
  s.min = v[0];
  s.max = v[n - 1];
  return s;
}

void bench_check_target(const char *prog, const char *what, double median_ms,
                        double target_ms) {
  if (median_ms >= target_ms)
    fprintf(stderr, "%s: median %.2f ms%s misses the %.0f ms target\n", prog,
            median_ms, what, target_ms);
}
