/* The GPU model: construction, weights, and the forward and backward
 * passes. See gpu_model.h.
 *
 * Row-major matrices are column-major transposes, so each of the CPU's
 * row-major GEMMs maps to one column-major cuBLAS call:
 *   forward  Y[n][out] = X W^T      -> Y^T = op_T(W) X^T   (T, N)
 *   weights  dW[out][in] (+)= d^T X -> dW^T = X^T op_T(d)  (N, T)
 *   input    dX[n][in] = d W        -> dX^T = W^T d^T      (N, N)
 */
#include "gpu_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "gpu_check.h"

#define STAGING_BYTES ((size_t)64 << 20)

typedef struct {
  uint32_t in, out;
  size_t w, b;        /* parameter indices */
} linear_t;

struct dr_gpu_model {
  dr_gpu_model_opts_t o;
  dr_model_t *host;
  dr_model_config_t cfg;
  int text;
  uint32_t in_dim, max_dim, n_linear;
  size_t n_params, n_elems;
  size_t *off;          /* [n_params] element offset of each parameter */
  linear_t *lin;
  size_t es;            /* bytes of an activation element */

  float *w;             /* [n_elems] fp32 master weights */
  uint16_t *w16;        /* [n_elems] bf16 or fp16 copy, or NULL */
  void **act;           /* [n_linear]: Linear k's input, max_batch x in */
  float *logits;        /* [max_batch][classes]; softmax in place */
  void *dbuf[2];        /* [max_batch][max_dim] gradients ping-pong */
  float *x32;           /* bf16, fp16: the fp32 input before its cast */
  float *row_loss;      /* [max_batch] */
  float *scratch;       /* bias-gradient partial sums */
  int32_t *labels;      /* [max_batch] */
  uint8_t *tokens;      /* text: [max_batch][context] */
  size_t bytes;
  uint32_t n;           /* rows of the last forward */

  /* The batch's way in: pinned copies, reused once the device has read
   * them (in_done). */
  void *pin_x;
  int32_t *pin_y;
  cudaEvent_t in_done;
  int in_pending;
  dr_gpu_staging_t staging;
};

static int dev_alloc(dr_gpu_model_t *m, void **p, size_t n_bytes) {
  CUDA_CHECK(cudaMalloc(p, n_bytes > 0 ? n_bytes : 1));
  m->bytes += n_bytes;
  return 0;
}

static void layout(dr_gpu_model_t *m) {
  const dr_model_config_t *c = &m->cfg;
  m->text = c->context > 0;
  m->in_dim = m->text ? c->context * c->embed_dim : c->input_dim;
  m->max_dim = m->in_dim;
  if (c->width > m->max_dim)
    m->max_dim = c->width;
  if (c->classes > m->max_dim)
    m->max_dim = c->classes;
  m->n_linear = c->layers + 1;
  size_t p = m->text ? 1 : 0;
  for (uint32_t k = 0; k < m->n_linear; k++) {
    int head = k + 1 == m->n_linear;
    m->lin[k].in = k == 0 ? m->in_dim : c->width;
    m->lin[k].out = head ? c->classes : c->width;
    m->lin[k].w = p++;
    m->lin[k].b = p++;
  }
  size_t o = 0;
  for (size_t i = 0; i < m->n_params; i++) {
    m->off[i] = o;
    o += dr_model_param(m->host, i)->n_elems;
  }
  m->n_elems = o;
}

static int alloc_all(dr_gpu_model_t *m) {
  const size_t rows = m->cfg.max_batch, es = m->es;
  int rc;
#define DEV(ptr, n_bytes)                                                   \
  if ((rc = dev_alloc(m, (void **)&(ptr), (n_bytes))) != 0)                 \
    return rc;
  DEV(m->w, m->n_elems * sizeof(float));
  if (m->o.dtype != DR_F32) {
    DEV(m->w16, m->n_elems * sizeof(uint16_t));
    if (!m->text) {
      DEV(m->x32, rows * m->in_dim * sizeof(float));
    }
  }
  for (uint32_t k = 0; k < m->n_linear; k++) {
    DEV(m->act[k], rows * m->lin[k].in * es);
  }
  DEV(m->logits, rows * m->cfg.classes * sizeof(float));
  DEV(m->dbuf[0], rows * m->max_dim * es);
  DEV(m->dbuf[1], rows * m->max_dim * es);
  DEV(m->row_loss, rows * sizeof(float));
  DEV(m->scratch, dr_k_bias_grad_scratch((uint32_t)rows, m->max_dim) *
                      sizeof(float));
  DEV(m->labels, rows * sizeof(int32_t));
  if (m->text) {
    DEV(m->tokens, rows * m->cfg.context);
  }
#undef DEV
  size_t in_bytes = m->text ? rows * m->cfg.context
                            : rows * m->in_dim * sizeof(float);
  CUDA_CHECK(cudaMallocHost(&m->pin_x, in_bytes));
  CUDA_CHECK(cudaMallocHost((void **)&m->pin_y, rows * sizeof(int32_t)));
  CUDA_CHECK(cudaEventCreateWithFlags(&m->in_done, cudaEventDisableTiming));
  size_t st = m->n_elems * sizeof(float);
  return dr_gpu_staging_new(&m->staging,
                            st < STAGING_BYTES ? (st > 0 ? st : 1)
                                               : STAGING_BYTES);
}

int dr_gpu_model_new(dr_model_t *host, const dr_gpu_model_opts_t *o,
                     dr_gpu_model_t **out) {
  *out = NULL;
  dr_gpu_model_t *m = calloc(1, sizeof(*m));
  if (m == NULL)
    return -ENOMEM;
  m->o = *o;
  m->host = host;
  m->cfg = *dr_model_config(host);
  m->es = dr_dtype_size(o->dtype);
  m->n_params = dr_model_n_params(host);
  m->off = calloc(m->n_params, sizeof(size_t));
  m->lin = calloc(m->cfg.layers + 1, sizeof(linear_t));
  m->act = calloc(m->cfg.layers + 1, sizeof(void *));
  if (m->off == NULL || m->lin == NULL || m->act == NULL) {
    dr_gpu_model_free(&m);
    return -ENOMEM;
  }
  layout(m);
  int rc = alloc_all(m);
  if (rc == 0)
    rc = dr_gpu_model_upload(m, host);
  if (rc != 0) {
    dr_gpu_model_free(&m);
    return rc;
  }
  *out = m;
  return 0;
}

void dr_gpu_model_free(dr_gpu_model_t **mp) {
  dr_gpu_model_t *m = *mp;
  if (m == NULL)
    return;
  cudaFree(m->w);
  cudaFree(m->w16);
  cudaFree(m->x32);
  if (m->act != NULL)
    for (uint32_t k = 0; k < m->n_linear; k++)
      cudaFree(m->act[k]);
  cudaFree(m->logits);
  cudaFree(m->dbuf[0]);
  cudaFree(m->dbuf[1]);
  cudaFree(m->row_loss);
  cudaFree(m->scratch);
  cudaFree(m->labels);
  cudaFree(m->tokens);
  if (m->pin_x != NULL)
    cudaFreeHost(m->pin_x);
  if (m->pin_y != NULL)
    cudaFreeHost(m->pin_y);
  if (m->in_done != NULL)
    cudaEventDestroy(m->in_done);
  dr_gpu_staging_free(&m->staging);
  free(m->off);
  free(m->lin);
  free(m->act);
  free(m);
  *mp = NULL;
}

float *dr_gpu_model_weights(dr_gpu_model_t *m) { return m->w; }
uint16_t *dr_gpu_model_weights16(dr_gpu_model_t *m) { return m->w16; }
dr_dtype_t dr_gpu_model_dtype(const dr_gpu_model_t *m) { return m->o.dtype; }
size_t dr_gpu_model_bytes(const dr_gpu_model_t *m) { return m->bytes; }

int dr_gpu_model_upload(dr_gpu_model_t *m, dr_model_t *host) {
  for (size_t i = 0; i < m->n_params; i++) {
    dr_param_t *p = dr_model_param(host, i);
    int rc = dr_gpu_copy_h2d(m->o.waiter, &m->staging, m->w + m->off[i], p->w,
                             p->n_elems * sizeof(float), m->o.stream);
    if (rc != 0)
      return rc;
  }
  if (m->w16 != NULL)
    KERNEL_CHECK(dr_k_cast_from_f32(m->w, m->w16, m->o.dtype, m->n_elems,
                                    m->o.stream));
  return 0;
}

int dr_gpu_model_download(dr_gpu_model_t *m, dr_model_t *host) {
  for (size_t i = 0; i < m->n_params; i++) {
    dr_param_t *p = dr_model_param(host, i);
    int rc = dr_gpu_copy_d2h(m->o.waiter, &m->staging, p->w, m->w + m->off[i],
                             p->n_elems * sizeof(float), m->o.stream);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* The GEMM operand of a weight: the two-byte copy in bf16 or fp16. */
static const void *weight(const dr_gpu_model_t *m, size_t param) {
  return m->w16 != NULL ? (const void *)(m->w16 + m->off[param])
                        : (const void *)(m->w + m->off[param]);
}

static cudaDataType_t act_type(const dr_gpu_model_t *m) {
  return m->o.dtype == DR_BF16   ? CUDA_R_16BF
         : m->o.dtype == DR_F16 ? CUDA_R_16F
                                : CUDA_R_32F;
}

/* C (ldc) = alpha op(A) op(B) + beta C, column-major; A and B in the
 * compute precision, C in ct. */
static int gemm(dr_gpu_model_t *m, cublasOperation_t ta, cublasOperation_t tb,
                int rows, int cols, int inner, const void *a, int lda,
                const void *b, int ldb, float beta, void *c,
                cudaDataType_t ct, int ldc) {
  const float alpha = 1.0f;
  cudaDataType_t ab = act_type(m);
  cublasComputeType_t comp = m->o.dtype == DR_F32 && m->o.tf32
                                 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasGemmEx(m->o.blas, ta, tb, rows, cols, inner, &alpha, a,
                            ab, lda, b, ab, ldb, &beta, c, ct, ldc, comp,
                            CUBLAS_GEMM_DEFAULT));
  return 0;
}


/* The batch to the device, through the pinned buffers. */
static int upload_batch(dr_gpu_model_t *m, const dr_batch_t *b) {
  const uint32_t n = b->n;
  cudaStream_t s = m->o.stream;
  if (m->in_pending) {
    int rc = dr_gpu_wait_event(m->o.waiter, m->in_done,
                               "the previous batch's copy to the device");
    if (rc != 0)
      return rc;
    m->in_pending = 0;
  }
  size_t x_bytes = m->text ? (size_t)n * m->cfg.context
                           : (size_t)n * m->in_dim * sizeof(float);
  memcpy(m->pin_x, m->text ? (const void *)b->tokens : (const void *)b->x,
         x_bytes);
  memcpy(m->pin_y, b->y, (size_t)n * sizeof(int32_t));
  void *x_dst = m->text ? (void *)m->tokens
                        : m->x32 != NULL ? (void *)m->x32 : m->act[0];
  CUDA_CHECK(cudaMemcpyAsync(x_dst, m->pin_x, x_bytes,
                             cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(m->labels, m->pin_y, (size_t)n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaEventRecord(m->in_done, s));
  m->in_pending = 1;
  if (m->text)
    KERNEL_CHECK(dr_k_embed_fwd(m->w + m->off[0], m->tokens,
                                (size_t)n * m->cfg.context, m->cfg.embed_dim,
                                m->act[0], m->o.dtype, s));
  else if (m->x32 != NULL)
    KERNEL_CHECK(dr_k_cast_from_f32(m->x32, m->act[0], m->o.dtype,
                                    (size_t)n * m->in_dim, s));
  return 0;
}

/* Upload and every Linear: the logits of b in m->logits. */
static int forward_logits(dr_gpu_model_t *m, const dr_batch_t *b) {
  const uint32_t n = b->n;
  if (n > m->cfg.max_batch ||
      (m->text ? (b->context != m->cfg.context || (n && !b->tokens))
               : (b->input_dim != m->cfg.input_dim || (n && !b->x)))) {
    fprintf(stderr, "train: the batch does not fit the GPU model (%u rows, "
            "at most %u)\n", n, m->cfg.max_batch);
    m->n = 0;
    return DR_EBADARG;
  }
  m->n = n;
  if (n == 0)
    return 0;
  int rc = upload_batch(m, b);
  if (rc != 0)
    return rc;
  for (uint32_t k = 0; k < m->n_linear; k++) {
    const linear_t *l = &m->lin[k];
    int head = k + 1 == m->n_linear;
    void *y = head ? (void *)m->logits : m->act[k + 1];
    rc = gemm(m, CUBLAS_OP_T, CUBLAS_OP_N, (int)l->out, (int)n, (int)l->in,
              weight(m, l->w), (int)l->in, m->act[k], (int)l->in, 0.0f, y,
              head ? CUDA_R_32F : act_type(m), (int)l->out);
    if (rc != 0)
      return rc;
    KERNEL_CHECK(dr_k_bias_act_fwd(y, head ? DR_F32 : m->o.dtype,
                                   m->w + m->off[l->b], n, l->out, !head,
                                   m->o.stream));
  }
  return 0;
}

int dr_gpu_model_forward(dr_gpu_model_t *m, const dr_batch_t *b,
                         double *loss_acc) {
  int rc = forward_logits(m, b);
  if (rc != 0 || m->n == 0)
    return rc;
  KERNEL_CHECK(dr_k_xent_fwd(m->logits, m->labels, m->n, m->cfg.classes,
                             m->row_loss, m->o.stream));
  KERNEL_CHECK(dr_k_loss_add(m->row_loss, m->n, 1, loss_acc, m->o.stream));
  return 0;
}

int dr_gpu_model_evaluate(dr_gpu_model_t *m, const dr_batch_t *b,
                          double *loss_sum, uint32_t *count) {
  int rc = forward_logits(m, b);
  if (rc != 0 || m->n == 0)
    return rc;
  /* The argmax of the logits before the softmax overwrites them. */
  KERNEL_CHECK(dr_k_count_correct(m->logits, m->labels, m->n, m->cfg.classes,
                                  count, m->o.stream));
  KERNEL_CHECK(dr_k_xent_fwd(m->logits, m->labels, m->n, m->cfg.classes,
                             m->row_loss, m->o.stream));
  KERNEL_CHECK(dr_k_loss_add(m->row_loss, m->n, 0, loss_sum, m->o.stream));
  /* The logits are gone: nothing is left for a backward. */
  m->n = 0;
  return 0;
}

static int zero_backward(dr_gpu_model_t *m, int accumulate,
                         dr_grad_ready_fn ready, void *arg) {
  for (size_t i = m->n_params; i-- > 0;) {
    dr_param_t *p = dr_model_param(m->host, i);
    if (!accumulate)
      CUDA_CHECK(cudaMemsetAsync(p->g, 0, p->n_elems * sizeof(float),
                                 m->o.stream));
    if (ready != NULL)
      ready(arg, i);
  }
  return 0;
}

int dr_gpu_model_backward(dr_gpu_model_t *m, float scale, int accumulate,
                          dr_grad_ready_fn ready, void *arg) {
  const uint32_t n = m->n;
  if (n == 0)
    return zero_backward(m, accumulate, ready, arg);
  cudaStream_t s = m->o.stream;
  void *d = m->dbuf[0], *dx = m->dbuf[1];
  KERNEL_CHECK(dr_k_xent_bwd(m->logits, m->labels, d, m->o.dtype, n,
                             m->cfg.classes, scale / (float)n,
                             m->o.loss_scale, s));
  const float beta = accumulate ? 1.0f : 0.0f;
  for (uint32_t k = m->n_linear; k-- > 0;) {
    const linear_t *l = &m->lin[k];
    float *gw = dr_model_param(m->host, l->w)->g;
    float *gb = dr_model_param(m->host, l->b)->g;
    int rc = gemm(m, CUBLAS_OP_N, CUBLAS_OP_T, (int)l->in, (int)l->out,
                  (int)n, m->act[k], (int)l->in, d, (int)l->out, beta, gw,
                  CUDA_R_32F, (int)l->in);
    if (rc != 0)
      return rc;
    KERNEL_CHECK(dr_k_bias_grad(d, m->o.dtype, n, l->out, gb, accumulate,
                                m->scratch, s));
    if (ready != NULL) {
      ready(arg, l->b);
      ready(arg, l->w);
    }
    if (k > 0 || m->text) {
      rc = gemm(m, CUBLAS_OP_N, CUBLAS_OP_N, (int)l->in, (int)n, (int)l->out,
                weight(m, l->w), (int)l->in, d, (int)l->out, 0.0f, dx,
                act_type(m), (int)l->in);
      if (rc != 0)
        return rc;
      if (k > 0)
        KERNEL_CHECK(dr_k_relu_bwd(dx, m->act[k], m->o.dtype,
                                   (size_t)n * l->in, s));
      void *t = d;
      d = dx;
      dx = t;
    }
  }
  if (m->text) {
    KERNEL_CHECK(dr_k_embed_bwd(d, m->o.dtype, m->tokens,
                                (size_t)n * m->cfg.context, m->cfg.embed_dim,
                                dr_model_param(m->host, 0)->g, accumulate, s));
    if (ready != NULL)
      ready(arg, 0);
  }
  return 0;
}
