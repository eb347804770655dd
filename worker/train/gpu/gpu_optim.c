/* SGD and AdamW steps on the device. See gpu_optim.h; the per-step
 * constants are computed exactly as dr_optim_step computes them. */
#include "gpu_optim.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "gpu_check.h"

#define STAGING_BYTES ((size_t)64 << 20)

struct dr_gpu_optim {
  dr_optim_config_t cfg;
  dr_optim_t *host;
  size_t n_elems, state_elems;
  float *state;          /* device, [state_elems] */
  cudaStream_t s;
  const dr_gpu_waiter_t *waiter;
  dr_gpu_staging_t staging;
};

int dr_gpu_optim_new(const dr_optim_config_t *cfg, dr_optim_t *host,
                     size_t n_elems, cudaStream_t s,
                     const dr_gpu_waiter_t *waiter, dr_gpu_optim_t **out) {
  *out = NULL;
  dr_gpu_optim_t *o = calloc(1, sizeof(*o));
  if (o == NULL)
    return -ENOMEM;
  o->cfg = *cfg;
  o->host = host;
  o->n_elems = n_elems;
  o->state_elems = dr_optim_state_elems(host);
  o->s = s;
  o->waiter = waiter;
  int rc = 0;
  if (o->state_elems > 0) {
    size_t n_bytes = o->state_elems * sizeof(float);
    cudaError_t e = cudaMalloc((void **)&o->state, n_bytes);
    if (e != cudaSuccess)
      rc = dr__gpu_fail(DR_GPU_ECUDA, __FILE__, __LINE__,
                        "cudaMalloc(optimizer state)", cudaGetErrorString(e));
    if (rc == 0)
      rc = dr_gpu_staging_new(&o->staging, n_bytes < STAGING_BYTES
                                               ? n_bytes
                                               : STAGING_BYTES);
    /* The host state starts at zero (optim.h): no need to copy it. */
    if (rc == 0 && cudaMemsetAsync(o->state, 0, n_bytes, s) != cudaSuccess)
      rc = dr__gpu_fail(DR_GPU_ECUDA, __FILE__, __LINE__,
                        "cudaMemsetAsync(optimizer state)",
                        cudaGetErrorString(cudaGetLastError()));
  }
  if (rc != 0) {
    dr_gpu_optim_free(&o);
    return rc;
  }
  *out = o;
  return 0;
}

void dr_gpu_optim_free(dr_gpu_optim_t **op) {
  dr_gpu_optim_t *o = *op;
  if (o == NULL)
    return;
  cudaFree(o->state);
  dr_gpu_staging_free(&o->staging);
  free(o);
  *op = NULL;
}

int dr_gpu_optim_upload(dr_gpu_optim_t *o) {
  if (o->state_elems == 0)
    return 0;
  return dr_gpu_copy_h2d(o->waiter, &o->staging, o->state,
                         dr_optim_state(o->host),
                         o->state_elems * sizeof(float), o->s);
}

int dr_gpu_optim_download(dr_gpu_optim_t *o) {
  if (o->state_elems == 0)
    return 0;
  return dr_gpu_copy_d2h(o->waiter, &o->staging, dr_optim_state(o->host),
                         o->state, o->state_elems * sizeof(float), o->s);
}

int dr_gpu_optim_step(dr_gpu_optim_t *o, dr_gpu_model_t *gm,
                      dr_model_t *host_model, uint64_t step,
                      const float *skip) {
  const dr_optim_config_t *c = &o->cfg;
  const float lr = dr_optim_lr(o->host, step);
  const double t = (double)step + 1.0;
  const double bc1 = 1.0 - pow(c->beta1, t);
  const double bc2 = 1.0 - pow(c->beta2, t);
  float *w = dr_gpu_model_weights(gm);
  uint16_t *w16 = dr_gpu_model_weights16(gm);
  const dr_dtype_t t16 = dr_gpu_model_dtype(gm);
  size_t off = 0;
  for (size_t i = 0; i < dr_model_n_params(host_model); i++) {
    dr_param_t *p = dr_model_param(host_model, i);
    uint16_t *p16 = w16 != NULL ? w16 + off : NULL;
    if (c->kind == DR_OPT_SGD)
      KERNEL_CHECK(dr_k_sgd(w + off, p->g,
                            o->state_elems > 0 ? o->state + off : NULL,
                            p->n_elems, lr, c->momentum, c->weight_decay, p16,
                            t16, skip, o->s));
    else
      KERNEL_CHECK(dr_k_adamw(w + off, p->g, o->state + off,
                              o->state + o->n_elems + off, p->n_elems,
                              1.0f - lr * c->weight_decay, c->beta1, c->beta2,
                              (float)(lr / bc1), (float)sqrt(bc2), c->eps, p16,
                              t16, skip, o->s));
    off += p->n_elems;
  }
  return 0;
}
