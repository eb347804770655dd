/* The elementwise and reduction kernels against plain CPU references
 * (the formulas of worker/nn/model_pass.c, in double where it sums).
 * Shapes avoid multiples of the block size so that edges are exercised. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check_util.h"

static const char *tname(dr_dtype_t t) {
  return t == DR_BF16 ? "bf16" : t == DR_F16 ? "fp16" : "fp32";
}
static double tol(dr_dtype_t t) {
  return t == DR_BF16 ? TOL_BF16 : t == DR_F16 ? TOL_F16 : TOL_F32;
}

/* What a value of type t holds. */
static void as_type(float *v, size_t n, dr_dtype_t t) {
  for (size_t i = 0; i < n; i++)
    v[i] = t == DR_BF16 ? bf16_round(v[i]) : t == DR_F16 ? f16_round(v[i])
                                                         : v[i];
}

static const dr_dtype_t TYPES[] = {DR_F32, DR_BF16, DR_F16};

static void bias_act(dr_rng_t *r, dr_dtype_t t, int relu) {
  const uint32_t rows = 37, cols = 300;
  size_t n = (size_t)rows * cols;
  float *y = malloc(n * 4), *b = malloc(cols * 4), *ref = malloc(n * 4),
        *got = malloc(n * 4);
  fill_uniform(r, y, n);
  fill_uniform(r, b, cols);
  as_type(y, n, t);
  for (size_t i = 0; i < n; i++) {
    float v = y[i] + b[i % cols];
    ref[i] = relu && !(v > 0) ? 0.0f : v;
  }
  void *dy = dev_values(y, n, t);
  float *db = dev_copy(b, cols * 4);
  dr_k_bias_act_fwd(dy, t, db, rows, cols, relu, g_stream);
  read_values(got, dy, n, t);
  char what[64];
  snprintf(what, sizeof(what), "bias+%s forward %s", relu ? "relu" : "identity",
           tname(t));
  check(what, got, ref, n, tol(t));
  cudaFree(dy);
  cudaFree(db);
  free(y), free(b), free(ref), free(got);
}

static void bias_grad(dr_rng_t *r, dr_dtype_t t, int accumulate) {
  const uint32_t rows = 200, cols = 300;
  size_t n = (size_t)rows * cols;
  float *d = malloc(n * 4), *g0 = malloc(cols * 4), *ref = malloc(cols * 4),
        *got = malloc(cols * 4);
  fill_uniform(r, d, n);
  fill_uniform(r, g0, cols);
  as_type(d, n, t);
  for (uint32_t c = 0; c < cols; c++) {
    double s = accumulate ? g0[c] : 0.0;
    for (uint32_t k = 0; k < rows; k++)
      s += d[(size_t)k * cols + c];
    ref[c] = (float)s;
  }
  void *dd = dev_values(d, n, t);
  float *dg = dev_copy(g0, cols * 4);
  float *scratch = dev_alloc(dr_k_bias_grad_scratch(rows, cols) * 4);
  if (!accumulate)
    poison(dg, DR_F32, cols);
  dr_k_bias_grad(dd, t, rows, cols, dg, accumulate, scratch, g_stream);
  read_values(got, dg, cols, DR_F32);
  char what[64];
  snprintf(what, sizeof(what), "bias gradient %s%s", tname(t),
           accumulate ? " accumulate" : "");
  check(what, got, ref, cols, tol(t));
  cudaFree(dd), cudaFree(dg), cudaFree(scratch);
  free(d), free(g0), free(ref), free(got);
}

static void relu_bwd(dr_rng_t *r, dr_dtype_t t) {
  const size_t n = 10007;
  float *dx = malloc(n * 4), *a = malloc(n * 4), *ref = malloc(n * 4),
        *got = malloc(n * 4);
  fill_uniform(r, dx, n);
  fill_uniform(r, a, n);
  for (size_t i = 0; i < n; i += 7)
    a[i] = 0.0f; /* ReLU's output is often exactly 0 */
  as_type(dx, n, t);
  as_type(a, n, t);
  for (size_t i = 0; i < n; i++)
    ref[i] = a[i] > 0 ? dx[i] : 0.0f;
  void *ddx = dev_values(dx, n, t), *da = dev_values(a, n, t);
  dr_k_relu_bwd(ddx, da, t, n, g_stream);
  read_values(got, ddx, n, t);
  char what[64];
  snprintf(what, sizeof(what), "relu backward %s", tname(t));
  check(what, got, ref, n, tol(t));
  cudaFree(ddx), cudaFree(da);
  free(dx), free(a), free(ref), free(got);
}

/* Softmax cross-entropy forward (probabilities, row losses, their mean)
 * and backward, for one shape. */
static void xent(dr_rng_t *r, uint32_t rows, uint32_t classes) {
  size_t n = (size_t)rows * classes;
  float *l = malloc(n * 4), *p = malloc(n * 4), *got = malloc(n * 4);
  float *loss = malloc(rows * 4), *gl = malloc(rows * 4);
  int32_t *y = malloc(rows * 4);
  for (size_t i = 0; i < n; i++)
    l[i] = (float)(8.0 * (2.0 * dr_rng_uniform(r) - 1.0));
  for (uint32_t k = 0; k < rows; k++)
    y[k] = (int32_t)(dr_rng_next(r) % classes);
  y[0] = -1; /* out of range: class 0, as on the CPU */
  double mean = 0;
  for (uint32_t k = 0; k < rows; k++) {
    const float *row = l + (size_t)k * classes;
    double mx = row[0], s = 0;
    for (uint32_t c = 1; c < classes; c++)
      mx = row[c] > mx ? row[c] : mx;
    for (uint32_t c = 0; c < classes; c++)
      s += exp(row[c] - mx);
    for (uint32_t c = 0; c < classes; c++)
      p[(size_t)k * classes + c] = (float)(exp(row[c] - mx) / s);
    uint32_t yy = (uint32_t)y[k] < classes ? (uint32_t)y[k] : 0;
    loss[k] = (float)(log(s) - (row[yy] - mx));
    mean += loss[k];
  }
  mean /= rows;
  float *dl = dev_copy(l, n * 4), *drl = dev_alloc(rows * 4);
  int32_t *dy = dev_copy(y, rows * 4);
  double *dacc = dev_alloc(sizeof(double));
  double zero = 0, acc;
  to_dev(dacc, &zero, sizeof(double));
  poison(drl, DR_F32, rows);
  dr_k_xent_fwd(dl, dy, rows, classes, drl, g_stream);
  dr_k_loss_add(drl, rows, 1, dacc, g_stream);
  read_values(got, dl, n, DR_F32);
  read_values(gl, drl, rows, DR_F32);
  to_host(&acc, dacc, sizeof(double));
  char what[64];
  snprintf(what, sizeof(what), "softmax %ux%u", rows, classes);
  check(what, got, p, n, TOL_F32);
  snprintf(what, sizeof(what), "cross-entropy rows %ux%u", rows, classes);
  check(what, gl, loss, rows, TOL_F32);
  float facc = (float)acc, fmean = (float)mean;
  snprintf(what, sizeof(what), "mean loss %ux%u", rows, classes);
  check(what, &facc, &fmean, 1, TOL_F32);

  /* Backward from the GPU's probabilities, against the formula. */
  const float coef = 0.75f / (float)rows;
  for (int ti = 0; ti < 3; ti++) {
    dr_dtype_t t = TYPES[ti];
    float *ref = malloc(n * 4);
    for (uint32_t k = 0; k < rows; k++) {
      uint32_t yy = (uint32_t)y[k] < classes ? (uint32_t)y[k] : 0;
      for (uint32_t c = 0; c < classes; c++) {
        float v = coef * got[(size_t)k * classes + c];
        ref[(size_t)k * classes + c] = c == yy ? v - coef : v;
      }
    }
    void *dd = dev_alloc(n * 4);
    poison(dd, t, n);
    float *out = malloc(n * 4);
    dr_k_xent_bwd(dl, dy, dd, t, rows, classes, coef, NULL, g_stream);
    read_values(out, dd, n, t);
    snprintf(what, sizeof(what), "cross-entropy backward %ux%u %s", rows,
             classes, tname(t));
    check(what, out, ref, n, tol(t));
    cudaFree(dd);
    free(ref), free(out);
  }
  cudaFree(dl), cudaFree(drl), cudaFree(dy), cudaFree(dacc);
  free(l), free(p), free(got), free(loss), free(gl), free(y);
}

static void embed(dr_rng_t *r, dr_dtype_t t) {
  const size_t n_tok = 333;
  const uint32_t e = 17;
  size_t tn = (size_t)256 * e, xn = n_tok * e;
  float *table = malloc(tn * 4), *x = malloc(xn * 4), *got = malloc(xn * 4);
  float *dx = malloc(xn * 4), *g = malloc(tn * 4), *gref = malloc(tn * 4),
        *ggot = malloc(tn * 4);
  uint8_t *tok = malloc(n_tok);
  fill_uniform(r, table, tn);
  for (size_t i = 0; i < n_tok; i++)
    tok[i] = (uint8_t)(dr_rng_next(r) % 40); /* repeats, and unused rows */
  for (size_t i = 0; i < xn; i++)
    x[i] = table[(size_t)tok[i / e] * e + i % e];
  as_type(x, xn, t);
  float *dtable = dev_copy(table, tn * 4);
  uint8_t *dtok = dev_copy(tok, n_tok);
  void *dxo = dev_alloc(xn * 4);
  poison(dxo, t, xn);
  dr_k_embed_fwd(dtable, dtok, n_tok, e, dxo, t, g_stream);
  read_values(got, dxo, xn, t);
  char what[64];
  snprintf(what, sizeof(what), "embedding forward %s", tname(t));
  check(what, got, x, xn, tol(t));

  fill_uniform(r, dx, xn);
  as_type(dx, xn, t);
  fill_uniform(r, g, tn);
  for (int accumulate = 0; accumulate < 2; accumulate++) {
    for (size_t k = 0; k < tn; k++)
      gref[k] = accumulate ? g[k] : 0.0f;
    for (size_t i = 0; i < n_tok; i++)
      for (uint32_t j = 0; j < e; j++)
        gref[(size_t)tok[i] * e + j] += dx[i * e + j];
    void *ddx = dev_values(dx, xn, t);
    float *dg = dev_copy(g, tn * 4);
    if (!accumulate)
      poison(dg, DR_F32, tn);
    dr_k_embed_bwd(ddx, t, dtok, n_tok, e, dg, accumulate, g_stream);
    read_values(ggot, dg, tn, DR_F32);
    snprintf(what, sizeof(what), "embedding backward %s%s", tname(t),
             accumulate ? " accumulate" : "");
    check(what, ggot, gref, tn, tol(t));
    cudaFree(ddx), cudaFree(dg);
  }
  cudaFree(dtable), cudaFree(dtok), cudaFree(dxo);
  free(table), free(x), free(got), free(dx), free(g), free(gref), free(ggot);
  free(tok);
}

static void casts(dr_rng_t *r) {
  const size_t n = 4099;
  float *v = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
  fill_uniform(r, v, n);
  for (size_t i = 0; i < n; i++)
    ref[i] = bf16_round(v[i] * 1000.0f);
  for (size_t i = 0; i < n; i++)
    v[i] *= 1000.0f;
  float *dv = dev_copy(v, n * 4);
  uint16_t *db = dev_alloc(n * 2);
  float *back = dev_alloc(n * 4);
  poison(db, DR_BF16, n);
  poison(back, DR_F32, n);
  dr_k_cast_f32_bf16(dv, db, n, g_stream);
  dr_k_cast_bf16_f32(db, back, n, g_stream);
  read_values(got, back, n, DR_F32);
  /* Rounding to nearest even is exact: no tolerance. */
  check("cast fp32 -> bf16 -> fp32 (exact)", got, ref, n, 0.0);
  cudaFree(dv), cudaFree(db), cudaFree(back);
  free(v), free(ref), free(got);
}

static void correct(dr_rng_t *r) {
  const uint32_t rows = 300, classes = 19;
  float *l = malloc((size_t)rows * classes * 4);
  int32_t *y = malloc(rows * 4);
  fill_uniform(r, l, (size_t)rows * classes);
  for (uint32_t k = 0; k < rows; k++) {
    y[k] = (int32_t)(dr_rng_next(r) % classes);
    if (k % 5 == 0) { /* a tie: the lower class wins */
      l[(size_t)k * classes + 3] = 2.0f;
      l[(size_t)k * classes + 7] = 2.0f;
    }
  }
  uint32_t want = 0;
  for (uint32_t k = 0; k < rows; k++) {
    uint32_t best = 0;
    for (uint32_t c = 1; c < classes; c++)
      if (l[(size_t)k * classes + c] > l[(size_t)k * classes + best])
        best = c;
    want += (int32_t)best == y[k];
  }
  float *dl = dev_copy(l, (size_t)rows * classes * 4);
  int32_t *dy = dev_copy(y, rows * 4);
  uint32_t *dc = dev_alloc(4), zero = 0, got;
  to_dev(dc, &zero, 4);
  dr_k_count_correct(dl, dy, rows, classes, dc, g_stream);
  to_host(&got, dc, 4);
  float fg = (float)got, fw = (float)want;
  check("correct predictions (exact)", &fg, &fw, 1, 0.0);
  cudaFree(dl), cudaFree(dy), cudaFree(dc);
  free(l), free(y);
}

void check_kernels(void) {
  dr_rng_t r;
  dr_rng_seed(&r, 20240601);
  for (int ti = 0; ti < 3; ti++) {
    dr_dtype_t t = TYPES[ti];
    bias_act(&r, t, 1);
    bias_act(&r, t, 0);
    bias_grad(&r, t, 0);
    bias_grad(&r, t, 1);
    relu_bwd(&r, t);
    embed(&r, t);
  }
  xent(&r, 50, 1000);
  xent(&r, 129, 3);
  casts(&r);
  correct(&r);
}
