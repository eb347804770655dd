/* Forward + backward time of one configuration on synthetic data, beside
 * the time of its GEMMs alone (the same cblas_sgemm calls on the same
 * shapes), so the share of everything else is visible. Not a test.
 *
 *   OMP_NUM_THREADS=1 nn_step_bench --layers 4 --width 1024 \
 *       --input-dim 256 --classes 256 --batch 64 --iters 50
 * Prints one line of key=value pairs (times in ms, medians). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "model.h"
#include "optim.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp_d);
  return v[n / 2];
}

int main(int argc, char **argv) {
  dr_model_config_t mc = {.input_dim = 256, .width = 1024, .layers = 4,
                          .classes = 256, .max_batch = 64, .seed = 1};
  int iters = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    unsigned v = (unsigned)strtoul(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--layers")) mc.layers = v;
    else if (!strcmp(argv[i], "--width")) mc.width = v;
    else if (!strcmp(argv[i], "--input-dim")) mc.input_dim = v;
    else if (!strcmp(argv[i], "--classes")) mc.classes = v;
    else if (!strcmp(argv[i], "--batch")) mc.max_batch = v;
    else if (!strcmp(argv[i], "--iters")) iters = (int)v;
    else {
      fprintf(stderr, "nn_step_bench: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (iters < 1) iters = 1;
  char err[256];
  dr_model_t *m = NULL;
  dr_dataset_t *d = NULL;
  dr_optim_t *o = NULL;
  dr_batch_t b;
  const uint32_t n = mc.max_batch;
  if (dr_model_new(&mc, &m, err, sizeof err) != 0) {
    fprintf(stderr, "nn_step_bench: %s\n", err);
    return 2;
  }
  dr_optim_config_t oc = {.kind = DR_OPT_SGD, .lr = 0.01f, .momentum = 0.9f};
  if (dr_data_synthetic(1, 1u << 20, 0, mc.input_dim, mc.classes, &d) != 0 ||
      dr_batch_new(d, n, &b) != 0 || dr_optim_new(&oc, m, &o) != 0) {
    fprintf(stderr, "nn_step_bench: setup failed\n");
    return 1;
  }
  uint64_t *idx = malloc(n * sizeof *idx);
  double *fill = malloc(iters * sizeof(double)), *fb = malloc(iters * sizeof(double)),
         *opt = malloc(iters * sizeof(double)), *gemm = malloc(iters * sizeof(double));
  float loss = 0;
  for (int it = -3; it < iters; it++) { /* three warm-up iterations */
    for (uint32_t i = 0; i < n; i++) idx[i] = (uint64_t)(it + 3) * n + i;
    double t0 = now_ms();
    dr_data_fill(d, DR_SPLIT_TRAIN, idx, n, &b);
    double t1 = now_ms();
    loss = dr_model_forward(m, &b);
    dr_model_backward(m, 1.0f, 0, NULL, NULL);
    double t2 = now_ms();
    dr_optim_step(o, m, (uint64_t)(it + 3));
    double t3 = now_ms();
    if (it >= 0) {
      fill[it] = t1 - t0;
      fb[it] = t2 - t1;
      opt[it] = t3 - t2;
    }
  }

  /* The pass's GEMMs alone: per Linear, forward y = x W^T, dW = dy^T x,
   * and dx = dy W except for the first. */
  const uint32_t L = mc.layers + 1;
  size_t maxd = mc.width > mc.input_dim ? mc.width : mc.input_dim;
  maxd = mc.classes > maxd ? mc.classes : maxd;
  float *x = calloc((size_t)n * maxd, sizeof(float)),
        *y = calloc((size_t)n * maxd, sizeof(float)),
        *w = calloc(maxd * maxd, sizeof(float)),
        *g = calloc(maxd * maxd, sizeof(float));
  for (int it = -3; it < iters; it++) {
    double t0 = now_ms();
    for (uint32_t k = 0; k < 2 * L; k++) {
      const uint32_t l = k < L ? k : 2 * L - 1 - k;
      const int in = (int)(l == 0 ? mc.input_dim : mc.width);
      const int out = (int)(l + 1 == L ? mc.classes : mc.width);
      if (k < L) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, out, in,
                    1.0f, x, in, w, in, 0.0f, y, out);
      } else {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, (int)n,
                    1.0f, y, out, x, in, 0.0f, g, in);
        if (l > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, in,
                      out, 1.0f, y, out, w, in, 0.0f, x, in);
      }
    }
    if (it >= 0) gemm[it] = now_ms() - t0;
  }
  char blas[512];
  dr_model_blas_info(blas, sizeof blas);
  const double fb_ms = median(fb, iters), gemm_ms = median(gemm, iters);
  const double gflop = 2.0 * n * (3.0 * dr_model_n_elems(m)) / 1e9;
  printf("nn_step_bench params=%zu batch=%u iters=%d fwd_bwd_ms=%.3f "
         "gemm_only_ms=%.3f gemm_share=%.2f gflops=%.1f fill_ms=%.3f "
         "sgd_step_ms=%.3f loss=%.4f\n",
         dr_model_n_elems(m), n, iters, fb_ms, gemm_ms, gemm_ms / fb_ms,
         gflop / (fb_ms / 1e3), median(fill, iters), median(opt, iters), loss);
  fprintf(stderr, "blas: %s\n", blas);
  free(x);
  free(y);
  free(w);
  free(g);
  free(idx);
  free(fill);
  free(fb);
  free(opt);
  free(gemm);
  dr_batch_free(&b);
  dr_optim_free(&o);
  dr_data_free(&d);
  dr_model_free(&m);
  return 0;
}
