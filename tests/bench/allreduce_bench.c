/* allreduce_bench: fp32 all-reduce (SUM) throughput of the process group,
 * beside this machine's memcpy bandwidth measured in the same run.
 *
 *   ddprun --standalone --nproc-per-node 2 build/allreduce_bench \
 *          --sizes-mib 1,4,16,64,256
 *
 * Rank 0 first measures memcpy (256 MiB buffers, best of 6, the other
 * ranks idle in a barrier) and prints it with the ring's links, then per
 * size runs warm-up all-reduces and timed ones. An iteration's time is
 * the slowest rank's (each rank times from a barrier to its completion),
 * the figure is the median over iterations. Buffers are refilled before
 * each iteration, outside the timing, so every all-reduce starts from
 * memory as a training step's gradients would. Rank 0 prints one line
 * per size:
 *
 *   allreduce_bench ranks=2 size_mib=64 iters=12 median_ms=.. algbw_gibps=..
 *     busbw_gibps=.. memcpy_gibps=.. frac_of_memcpy=..
 *
 * algbw = size / time; busbw = algbw * 2 (n - 1) / n, the bytes each rank
 * moves through its links, comparable across rank counts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_stats.h"
#include "pg.h"

/* Seconds since t0_ns. */
static double since_s(int64_t t0_ns) {
  return (double)(bench_now_ns() - t0_ns) / 1e9;
}

/* Best of `rounds` copies of n bytes, in GiB/s. */
static double memcpy_gibps(size_t n, int rounds) {
  char *a = malloc(n), *b = malloc(n);
  if (a == NULL || b == NULL) {
    free(a);
    free(b);
    return 0;
  }
  memset(a, 1, n);
  memset(b, 2, n);
  double best = 1e30;
  for (int i = 0; i < rounds; i++) {
    int64_t t0 = bench_now_ns();
    memcpy(i % 2 ? a : b, i % 2 ? b : a, n);
    double t = since_s(t0);
    if (t < best)
      best = t;
  }
  /* Keeps the copies from being optimised away. */
  volatile char sink = a[n / 2] + b[n / 3];
  (void)sink;
  free(a);
  free(b);
  return (double)n / best / (1024.0 * 1024.0 * 1024.0);
}

static int fail(const char *what, const char *err) {
  fprintf(stderr, "allreduce_bench: %s: %s\n", what, err);
  return 4;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *sizes_arg = "1,4,16,64,256";
  int iters_arg = 0, warmup = 2;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--sizes-mib") == 0 && i + 1 < argc) {
      sizes_arg = argv[++i];
    } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters_arg = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
      warmup = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: allreduce_bench [--sizes-mib N,N,...] "
                      "[--iters N] [--warmup N]\n");
      return 2;
    }
  }
  size_t sizes[32];
  int n_sizes = 0;
  for (const char *s = sizes_arg; *s && n_sizes < 32;) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || end == s || v == 0 || (*end != ',' && *end != '\0')) {
      fprintf(stderr, "allreduce_bench: bad --sizes-mib '%s'\n", sizes_arg);
      return 2;
    }
    sizes[n_sizes++] = (size_t)v << 20;
    s = *end == ',' ? end + 1 : end;
  }

  dr_pg_config_t cfg;
  char err[512];
  if (dr_pg_config_from_env(&cfg, err, sizeof(err)) != 0) {
    fprintf(stderr, "allreduce_bench: %s\n", err);
    return 2;
  }
  cfg.timeout_ms = 120000;
  dr_pg_t *pg;
  int rc = dr_pg_init(&cfg, &pg, err, sizeof(err));
  dr_pg_config_free(&cfg);
  if (rc != 0)
    return fail("process group", err);
  uint32_t rank = dr_pg_rank(pg), world = dr_pg_world(pg);

  double mc = 0;
  if (rank == 0) {
    mc = memcpy_gibps((size_t)256 << 20, 6);
    printf("allreduce_bench ranks=%u memcpy_gibps=%.2f memcpy_buffer_mib=256 "
           "memcpy_runs=6 links=\"%s\"\n",
           world, mc, dr_pg_describe(pg));
  }
  if ((rc = dr_pg_barrier_sync(pg, err, sizeof(err))) != 0)
    return fail("barrier", err);

  for (int k = 0; k < n_sizes; k++) {
    size_t n_bytes = sizes[k], n_elems = n_bytes / sizeof(float);
    int iters = iters_arg > 0 ? iters_arg : (int)((size_t)(3u << 30) / n_bytes);
    if (iters_arg <= 0)
      iters = iters < 5 ? 5 : iters > 20 ? 20 : iters;
    float *x = malloc(n_bytes);
    double *t = calloc((size_t)iters, sizeof(double));
    double *all = calloc((size_t)iters * world, sizeof(double));
    if (x == NULL || t == NULL || all == NULL)
      return fail("malloc", "out of memory");
    for (int it = -warmup; it < iters; it++) {
      for (size_t i = 0; i < n_elems; i++)
        x[i] = (float)((i + rank) & 7);
      if ((rc = dr_pg_barrier_sync(pg, err, sizeof(err))) != 0)
        return fail("barrier", err);
      int64_t t0 = bench_now_ns();
      if ((rc = dr_pg_allreduce_sync(pg, x, n_elems, DR_PG_SUM, err,
                                     sizeof(err))) != 0)
        return fail("allreduce", err);
      if (it >= 0)
        t[it] = since_s(t0);
    }
    /* Spot check: element i summed over ranks. */
    float want = 0;
    for (uint32_t r = 0; r < world; r++)
      want += (float)((n_elems / 2 + r) & 7);
    if (x[n_elems / 2] != want) {
      fprintf(stderr, "allreduce_bench: wrong result %g, expected %g\n",
              (double)x[n_elems / 2], (double)want);
      return 1;
    }
    if ((rc = dr_pg_allgather_sync(pg, t, (size_t)iters * sizeof(double), all,
                                   err, sizeof(err))) != 0)
      return fail("allgather", err);
    for (int it = 0; it < iters; it++)
      for (uint32_t r = 0; r < world; r++)
        if (all[(size_t)r * iters + it] > t[it])
          t[it] = all[(size_t)r * iters + it];
    double med = bench_median(t, (size_t)iters);
    double algbw = (double)n_bytes / med / (1024.0 * 1024.0 * 1024.0);
    double busbw = algbw * 2.0 * (world - 1) / world;
    if (rank == 0)
      printf("allreduce_bench ranks=%u size_mib=%zu iters=%d median_ms=%.3f "
             "algbw_gibps=%.2f busbw_gibps=%.2f memcpy_gibps=%.2f "
             "frac_of_memcpy=%.3f\n",
             world, n_bytes >> 20, iters, med * 1e3, algbw, busbw, mc,
             mc > 0 ? algbw / mc : 0.0);
    free(x);
    free(t);
    free(all);
  }
  dr_pg_destroy(&pg);
  return 0;
}
