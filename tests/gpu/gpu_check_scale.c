/* The loss scaler's kernels (gpu_scale.h) against loss_scale.c, and
 * PowerSGD's (gpu_psgd_kernels.h) against powersgd.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check_util.h"
#include "gpu_psgd_kernels.h"
#include "gpu_scale.h"
#include "half.h"
#include "loss_scale.h"
#include "powersgd.h"

static void verdict(const char *what, int ok) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok)
    g_failures++;
}

static float read_flag(const float *dflag) {
  float f = 0;
  to_host(&f, dflag, sizeof(f));
  return f;
}

/* One infinity at the last element of n values of each kind is seen, and
 * finite values leave the flag alone. */
static void flags(void) {
  const size_t n = 70001;
  float *v = calloc(n, sizeof(float));
  uint16_t *h = calloc(n, sizeof(uint16_t));
  float *dflag = dev_alloc(sizeof(float));
  for (int kind = 0; kind < 3; kind++) {
    for (int bad = 0; bad < 2; bad++) {
      for (size_t i = 0; i < n; i++) {
        float x = (float)i / (float)n;
        v[i] = x;
        h[i] = kind == DR_SCALE_F16 ? dr_f32_to_f16(x) : dr_f32_to_bf16(x);
      }
      if (bad) {
        v[n - 1] = INFINITY;
        h[n - 1] = kind == DR_SCALE_F16 ? 0x7c00 : 0x7f80;
      }
      void *d = kind == DR_SCALE_F32 ? dev_copy(v, n * 4) : dev_copy(h, n * 2);
      cudaMemsetAsync(dflag, 0, sizeof(float), g_stream);
      dr_k_flag_nonfinite(d, kind, n, 3.0f, dflag, g_stream);
      float got = read_flag(dflag);
      char what[96];
      snprintf(what, sizeof(what), "scaler: non-finite flag, kind %d, %s: %g",
               kind, bad ? "an infinity" : "all finite", got);
      verdict(what, got == (bad ? 3.0f : 0.0f));
      cudaFree(d);
    }
  }
  cudaFree(dflag);
  free(v);
  free(h);
}

/* The unscale divides as the CPU does, bit for bit, and flags the sum. */
static void unscale(dr_rng_t *r) {
  const size_t n = 4099;
  float *v = malloc(n * 4), *got = malloc(n * 4);
  fill_uniform(r, v, n);
  dr_gpu_scaler_t sc;
  memset(&sc, 0, sizeof(sc));
  sc.scale = 1024.0f;
  dr_gpu_scaler_t *dsc = dev_copy(&sc, sizeof(sc));
  float *d = dev_copy(v, n * 4);
  dr_k_unscale_check(d, n, dsc, g_stream);
  to_host(got, d, n * 4);
  to_host(&sc, dsc, sizeof(sc));
  int same = 1;
  for (size_t i = 0; i < n; i++)
    same &= got[i] == v[i] / 1024.0f;
  verdict("scaler: unscale equals the CPU's division", same);
  verdict("scaler: a finite sum leaves flags[1] clear", sc.flags[1] == 0);
  v[7] = NAN;
  to_dev(d, v, n * 4);
  dr_k_unscale_check(d, n, dsc, g_stream);
  to_host(&sc, dsc, sizeof(sc));
  verdict("scaler: a NaN in the sum sets flags[1]", sc.flags[1] == 1.0f);
  cudaFree(d);
  cudaFree(dsc);
  free(v);
  free(got);
}

/* 5000 steps of verdicts through the device update and loss_scale.c: the
 * same scale, growth counter, skips and blame at every step; then the
 * floor. */
static void update(void) {
  const uint32_t world = 4;
  dr_loss_scale_t ls;
  char err[128];
  dr_loss_scale_parse("dynamic", &ls, err, sizeof(err));
  dr_gpu_scaler_t sc;
  memset(&sc, 0, sizeof(sc));
  sc.scale = (float)ls.scale;
  sc.mode = ls.mode;
  sc.last_rank = ls.last_rank;
  dr_gpu_scaler_t *dsc = dev_copy(&sc, sizeof(sc));
  int same = 1;
  uint64_t first_bad = 0;
  for (uint64_t step = 0; step < 5000 && same; step++) {
    float f[2] = {0, 0};
    if (step == 3 || step == 2500)
      f[0] = (float)(world - 1); /* rank 1's own gradient */
    if (step == 4800)
      f[1] = 1.0f; /* the sum */
    to_dev(&dsc->flags[0], f, sizeof(f));
    dr_k_scaler_update(dsc, world, step, g_stream);
    to_host(&sc, dsc, sizeof(sc));
    int ov = f[0] > 0 || f[1] > 0;
    dr_loss_scale_update(&ls, ov, f[0] > 0 ? (int64_t)world - (int64_t)f[0] : -1,
                         step);
    same = sc.scale == (float)ls.scale && sc.good == ls.good &&
           sc.skipped == ls.skipped && sc.last_rank == ls.last_rank &&
           sc.flags[0] == 0 && sc.flags[1] == 0;
    first_bad = step;
  }
  char what[160];
  snprintf(what, sizeof(what), "scaler: 5000 steps as loss_scale.c (scale "
           "%g, skipped %llu, last rank %lld)%s", sc.scale,
           (unsigned long long)sc.skipped, (long long)sc.last_rank,
           same ? "" : " -- differs");
  verdict(what, same);
  if (!same)
    printf("     first difference at step %llu\n",
           (unsigned long long)first_bad);
  /* At the floor: an overflow is fatal, not a skip. */
  sc.scale = 1.0f;
  sc.floor_hit = 0;
  sc.flags[0] = 1.0f;
  to_dev(dsc, &sc, sizeof(sc));
  dr_k_scaler_update(dsc, world, 5000, g_stream);
  to_host(&sc, dsc, sizeof(sc));
  verdict("scaler: an overflow at scale 1 sets floor_hit",
          sc.floor_hit == 1 && sc.scale == 1.0f);
  cudaFree(dsc);
}

/* Gram-Schmidt on the device against powersgd.c's. */
static void orthonormalise(dr_rng_t *r) {
  const size_t rows = 1031, rank = 4;
  float *p = malloc(rows * rank * 4), *ref = malloc(rows * rank * 4),
        *got = malloc(rows * rank * 4);
  fill_uniform(r, p, rows * rank);
  memcpy(ref, p, rows * rank * 4);
  dr_psgd_orthonormalise(ref, rows, rank);
  float *d = dev_copy(p, rows * rank * 4);
  dr_k_psgd_orthonormalise(d, rows, rank, g_stream);
  to_host(got, d, rows * rank * 4);
  check_l2("powersgd: orthonormalise 1031x4", got, ref, rows * rank, 1e-5);
  /* The commit copies, unless the step was skipped. */
  float skip[2] = {0, 1};
  float *ds = dev_copy(skip, sizeof(skip));
  float *dst = dev_copy(p, rows * rank * 4);
  dr_k_psgd_commit(dst, d, rows * rank, ds, g_stream);
  to_host(ref, dst, rows * rank * 4);
  verdict("powersgd: a skipped step keeps the state",
          memcmp(ref, p, rows * rank * 4) == 0);
  dr_k_psgd_commit(dst, d, rows * rank, NULL, g_stream);
  to_host(ref, dst, rows * rank * 4);
  verdict("powersgd: an applied step takes the new state",
          memcmp(ref, got, rows * rank * 4) == 0);
  cudaFree(d);
  cudaFree(ds);
  cudaFree(dst);
  free(p);
  free(ref);
  free(got);
}

void check_scaler(void) {
  dr_rng_t r;
  dr_rng_seed(&r, 20261201);
  flags();
  unscale(&r);
  update();
  orthonormalise(&r);
}
