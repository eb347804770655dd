/* The GPU optimizers against dr_optim_step, and the whole GPU model
 * (forward, loss, every gradient, the ready order, accumulation and the
 * evaluation count) against the CPU model of the same seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "gpu_check_util.h"
#include "gpu_model.h"
#include "gpu_optim.h"
#include "model.h"
#include "optim.h"

static cublasHandle_t g_blas;

static dr_model_t *host_model(const dr_model_config_t *mc) {
  dr_model_t *m = NULL;
  char err[256];
  if (dr_model_new(mc, &m, err, sizeof(err)) != 0) {
    fprintf(stderr, "gpu_kernel_check: %s\n", err);
    exit(1);
  }
  return m;
}

/* Points every gradient of m into one device buffer (as the reducer
 * does) and returns it. */
static float *device_grads(dr_model_t *m) {
  float *g = dev_alloc(dr_model_n_elems(m) * sizeof(float));
  size_t off = 0;
  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    dr_param_t *p = dr_model_param(m, i);
    p->g = g + off;
    off += p->n_elems;
  }
  return g;
}

static dr_gpu_model_t *gpu_model(dr_model_t *host, dr_dtype_t t, int tf32) {
  dr_gpu_model_opts_t o = {t, tf32, g_stream, g_blas, &g_waiter, NULL};
  dr_gpu_model_t *gm = NULL;
  if (dr_gpu_model_new(host, &o, &gm) != 0) {
    fprintf(stderr, "gpu_kernel_check: cannot build the GPU model\n");
    exit(1);
  }
  return gm;
}

/* All of m's weights (or, with grads, its gradients at host pointers), in
 * registration order. */
static float *host_values(dr_model_t *m, int grads) {
  float *v = malloc(dr_model_n_elems(m) * sizeof(float)), *o = v;
  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    dr_param_t *p = dr_model_param(m, i);
    memcpy(o, grads ? p->g : p->w, p->n_elems * sizeof(float));
    o += p->n_elems;
  }
  return v;
}

static void optimizer(const char *what, dr_optim_kind_t kind, float momentum,
                      float wd) {
  dr_model_config_t mc = {.input_dim = 13, .width = 29, .layers = 2,
                          .classes = 5, .max_batch = 8, .seed = 7};
  dr_model_t *cpu = host_model(&mc), *mirror = host_model(&mc);
  size_t n = dr_model_n_elems(cpu);
  float *dg = device_grads(mirror);
  dr_gpu_model_t *gm = gpu_model(mirror, DR_F32, 0);
  dr_optim_config_t oc = {kind, 0.01f, momentum, wd, 0.9f, 0.999f, 1e-8f,
                          2, 10, 0.1f};
  dr_optim_t *ocpu = NULL, *omirror = NULL;
  dr_gpu_optim_t *go = NULL;
  if (dr_optim_new(&oc, cpu, &ocpu) != 0 ||
      dr_optim_new(&oc, mirror, &omirror) != 0 ||
      dr_gpu_optim_new(&oc, omirror, n, g_stream, &g_waiter, &go) != 0) {
    fprintf(stderr, "gpu_kernel_check: cannot build the optimizers\n");
    exit(1);
  }
  dr_rng_t r;
  dr_rng_seed(&r, 99);
  for (uint64_t step = 0; step < 4; step++) {
    float *grads = malloc(n * sizeof(float)), *o = grads;
    fill_uniform(&r, grads, n);
    for (size_t i = 0; i < dr_model_n_params(cpu); i++) {
      dr_param_t *p = dr_model_param(cpu, i);
      memcpy(p->g, o, p->n_elems * sizeof(float));
      o += p->n_elems;
    }
    to_dev(dg, grads, n * sizeof(float));
    free(grads);
    dr_optim_step(ocpu, cpu, step);
    if (dr_gpu_optim_step(go, gm, mirror, step, NULL) != 0)
      exit(1);
  }
  if (dr_gpu_model_download(gm, mirror) != 0 || dr_gpu_optim_download(go) != 0)
    exit(1);
  float *want = host_values(cpu, 0), *got = host_values(mirror, 0);
  size_t differ = 0;
  for (size_t i = 0; i < n; i++)
    differ += memcmp(&want[i], &got[i], sizeof(float)) != 0;
  char line[96];
  snprintf(line, sizeof(line), "%s weights, 4 steps", what);
  check(line, got, want, n, TOL_F32);
  printf("     %s: %zu of %zu weights differ in their bits from the CPU's\n",
         what, differ, n);
  size_t sn = dr_optim_state_elems(ocpu);
  if (sn > 0) {
    snprintf(line, sizeof(line), "%s state, 4 steps", what);
    check(line, dr_optim_state(omirror), dr_optim_state(ocpu), sn, TOL_F32);
  }
  free(want), free(got);
  dr_gpu_optim_free(&go);
  dr_gpu_model_free(&gm);
  cudaFree(dg);
  dr_optim_free(&ocpu), dr_optim_free(&omirror);
  dr_model_free(&cpu), dr_model_free(&mirror);
}

void check_optimizers(void) {
  optimizer("adamw", DR_OPT_ADAMW, 0, 0.01f);
  optimizer("sgd momentum", DR_OPT_SGD, 0.9f, 0.001f);
  optimizer("sgd plain", DR_OPT_SGD, 0, 0);
}

typedef struct {
  size_t order[64];
  size_t n;
} ready_t;

static void record(void *arg, size_t i) {
  ready_t *r = arg;
  if (r->n < 64)
    r->order[r->n++] = i;
}

static void random_batch(dr_rng_t *r, const dr_model_config_t *mc,
                         uint32_t rows, dr_batch_t *b) {
  memset(b, 0, sizeof(*b));
  b->n = b->cap = rows;
  b->y = malloc(rows * sizeof(int32_t));
  if (mc->context > 0) {
    b->context = mc->context;
    b->tokens = malloc((size_t)rows * mc->context);
    for (size_t i = 0; i < (size_t)rows * mc->context; i++)
      b->tokens[i] = (uint8_t)(dr_rng_next(r) % 256);
  } else {
    b->input_dim = mc->input_dim;
    b->x = malloc((size_t)rows * mc->input_dim * sizeof(float));
    fill_uniform(r, b->x, (size_t)rows * mc->input_dim);
  }
  uint32_t classes = mc->context > 0 ? 256 : mc->classes;
  for (uint32_t k = 0; k < rows; k++)
    b->y[k] = (int32_t)(dr_rng_next(r) % classes);
}

/* What the GPU model is compared with. */
typedef enum {
  REF_CPU,  /* fp32: the CPU model; each gradient within 1e-5 */
  REF_TF32, /* fp32 with TF32 GEMMs: the CPU model; the loss within 1e-2
               and all gradients together within 5e-2 (norm-wise): TF32
               keeps 10 mantissa bits of each GEMM input, and ReLU masks
               flip near zero */
  REF_BF16, /* bf16: ref_bf16 (gpu_check_ref.c), each within 1e-2 */
  REF_F16   /* fp16: the same reference with fp16's rounding, 2e-3 */
} ref_t;

static void compare(const char *what, const char *part, dr_model_t *cpu,
                    const float *got, const float *want, ref_t ref) {
  char line[96];
  if (ref == REF_TF32) {
    snprintf(line, sizeof(line), "%s %s", what, part);
    check_l2(line, got, want, dr_model_n_elems(cpu), 5e-2);
    return;
  }
  size_t off = 0;
  for (size_t i = 0; i < dr_model_n_params(cpu); i++) {
    dr_param_t *p = dr_model_param(cpu, i);
    snprintf(line, sizeof(line), "%s %s %s", what, part, p->name);
    check(line, got + off, want + off, p->n_elems,
          ref == REF_BF16 ? TOL_BF16 : ref == REF_F16 ? TOL_F16 : TOL_F32);
    off += p->n_elems;
  }
}

/* Forward and backward on the GPU and on its reference from the same
 * weights and batch: the loss, every gradient, the ready order, a second
 * micro-batch accumulated, the evaluation. */
static void model(const char *what, const dr_model_config_t *mc,
                  dr_dtype_t t, int tf32, ref_t ref) {
  dr_rng_t r;
  dr_rng_seed(&r, mc->seed + 1);
  dr_batch_t b;
  random_batch(&r, mc, mc->max_batch, &b);
  dr_model_t *cpu = host_model(mc), *mirror = host_model(mc);
  size_t n = dr_model_n_elems(cpu), np = dr_model_n_params(cpu);
  ready_t rc = {{0}, 0}, rg = {{0}, 0};
  float loss = dr_model_forward(cpu, &b);
  dr_model_backward(cpu, 0.5f, 0, record, &rc);
  float *want = host_values(cpu, 1);
  if (ref == REF_BF16 || ref == REF_F16)
    ref_half(cpu, &b, 0.5f, &loss, want, ref == REF_F16);
  const double loss_tol = ref == REF_CPU ? TOL_F32 : TOL_BF16;

  float *dg = device_grads(mirror);
  dr_gpu_model_t *gm = gpu_model(mirror, t, tf32);
  double *dacc = dev_alloc(2 * sizeof(double));
  uint32_t *dcount = dev_alloc(sizeof(uint32_t));
  double zero[2] = {0, 0}, acc[2];
  to_dev(dacc, zero, sizeof(zero));
  poison(dg, DR_F32, n);
  if (dr_gpu_model_forward(gm, &b, &dacc[0]) != 0 ||
      dr_gpu_model_backward(gm, 0.5f, 0, record, &rg) != 0)
    exit(1);
  float *got = malloc(n * sizeof(float));
  to_host(got, dg, n * sizeof(float));
  to_host(acc, dacc, sizeof(acc));
  char line[96];
  float gloss = (float)acc[0];
  snprintf(line, sizeof(line), "%s loss", what);
  check(line, &gloss, &loss, 1, loss_tol);
  compare(what, "grad", cpu, got, want, ref);
  int same = rc.n == rg.n && rc.n == np &&
             memcmp(rc.order, rg.order, rc.n * sizeof(size_t)) == 0;
  snprintf(line, sizeof(line), "%s gradient ready order", what);
  printf("%s %-44s %s\n", same ? "ok  " : "FAIL", line,
         same ? "as on the CPU" : "differs from the CPU's");
  g_failures += !same;

  /* A second micro-batch accumulates: twice the gradient. */
  if (dr_gpu_model_forward(gm, &b, &dacc[0]) != 0 ||
      dr_gpu_model_backward(gm, 0.5f, 1, NULL, NULL) != 0)
    exit(1);
  to_host(got, dg, n * sizeof(float));
  for (size_t i = 0; i < n; i++)
    want[i] *= 2.0f;
  compare(what, "grad x2 (accumulated)", cpu, got, want, ref);

  /* Evaluation: the summed loss and the correct count. */
  to_dev(dacc, zero, sizeof(zero));
  uint32_t z = 0, count;
  to_dev(dcount, &z, sizeof(z));
  if (dr_gpu_model_evaluate(gm, &b, &dacc[1], dcount) != 0)
    exit(1);
  to_host(acc, dacc, sizeof(acc));
  to_host(&count, dcount, sizeof(count));
  float esum = (float)acc[1], wsum = loss * (float)b.n;
  snprintf(line, sizeof(line), "%s evaluation loss sum", what);
  check(line, &esum, &wsum, 1, loss_tol);
  if (ref == REF_CPU) {
    float fc = (float)count, wc = (float)dr_model_correct(cpu, &b);
    snprintf(line, sizeof(line), "%s evaluation correct (exact)", what);
    check(line, &fc, &wc, 1, 0.0);
  }
  free(want), free(got);
  cudaFree(dacc), cudaFree(dcount), cudaFree(dg);
  dr_gpu_model_free(&gm);
  dr_model_free(&cpu), dr_model_free(&mirror);
  free(b.x), free(b.tokens), free(b.y);
}

void check_models(void) {
  if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(g_blas, g_stream) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "gpu_kernel_check: cublasCreate failed\n");
    exit(1);
  }
  dr_model_config_t mlp = {.input_dim = 37, .width = 70, .layers = 2,
                           .classes = 11, .max_batch = 45, .seed = 5};
  dr_model_config_t text = {.width = 33, .layers = 1, .context = 5,
                            .embed_dim = 6, .max_batch = 20, .seed = 6};
  model("mlp fp32", &mlp, DR_F32, 0, REF_CPU);
  model("text fp32", &text, DR_F32, 0, REF_CPU);
  model("mlp tf32", &mlp, DR_F32, 1, REF_TF32);
  model("mlp bf16", &mlp, DR_BF16, 0, REF_BF16);
  model("text bf16", &text, DR_BF16, 0, REF_BF16);
  model("mlp fp16", &mlp, DR_F16, 0, REF_F16);
  model("text fp16", &text, DR_F16, 0, REF_F16);
  cublasDestroy(g_blas);
}
