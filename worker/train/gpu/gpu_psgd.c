/* PowerSGD on the GPU. See gpu_psgd.h. */
#include "gpu_psgd.h"

#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "gpu_kernels.h"

/* One gradient of a bucket, on the device (compress.h's layout). */
typedef dr_cmp_item_t item_t;

typedef struct {
  float *data;           /* the bucket and its size: the cache key */
  size_t n_elems;
  item_t *items;
  size_t n_items;
  float *buf1, *buf2;    /* device */
  size_t n1, n2;
} bkt_t;

struct dr_gpu_psgd {
  dr_gpu_psgd_opts_t o;
  dr_cmp_config_t cfg;
  cublasHandle_t blas;   /* bound to the communication stream */
  float *q, *q_next, *ef, *ef_next; /* device */
  size_t nq, ne;
  bkt_t *b;
  size_t nb;
  dr_gpu_staging_t staging;
};

static int dev_alloc(float **p, size_t n) {
  CUDA_CHECK(cudaMalloc((void **)p, (n > 0 ? n : 1) * sizeof(float)));
  CUDA_CHECK(cudaMemset(*p, 0, (n > 0 ? n : 1) * sizeof(float)));
  return 0;
}

int dr_gpu_psgd_new(const dr_gpu_psgd_opts_t *o, dr_gpu_psgd_t **out) {
  dr_gpu_psgd_t *p = calloc(1, sizeof(*p));
  *out = p;
  if (p == NULL)
    return DR_GPU_ECUDA;
  p->o = *o;
  p->cfg = *dr_cmp_config(o->host);
  p->nq = dr_cmp_q_elems(o->host);
  p->ne = dr_cmp_ef_elems(o->host);
  if (dr_gpu_staging_new(&p->staging, (size_t)4 << 20) != 0)
    return DR_GPU_ECUDA;
  CUBLAS_CHECK(cublasCreate(&p->blas));
  CUBLAS_CHECK(cublasSetStream(p->blas, o->comm));
  /* Plain fp32 products, as the CPU's sgemm (no TF32). */
  CUBLAS_CHECK(cublasSetMathMode(p->blas, CUBLAS_DEFAULT_MATH));
  int rc;
  if ((rc = dev_alloc(&p->q, p->nq)) != 0 ||
      (rc = dev_alloc(&p->q_next, p->nq)) != 0 ||
      (rc = dev_alloc(&p->ef, p->ne)) != 0 ||
      (rc = dev_alloc(&p->ef_next, p->ne)) != 0)
    return rc;
  return dr_gpu_psgd_upload(p);
}

static void bkt_clear(bkt_t *b) {
  free(b->items);
  cudaFree(b->buf1);
  cudaFree(b->buf2);
  memset(b, 0, sizeof(*b));
}

void dr_gpu_psgd_free(dr_gpu_psgd_t **pp) {
  dr_gpu_psgd_t *p = *pp;
  if (p == NULL)
    return;
  for (size_t i = 0; i < p->nb; i++)
    bkt_clear(&p->b[i]);
  free(p->b);
  cudaFree(p->q);
  cudaFree(p->q_next);
  cudaFree(p->ef);
  cudaFree(p->ef_next);
  if (p->blas != NULL)
    cublasDestroy(p->blas);
  dr_gpu_staging_free(&p->staging);
  free(p);
  *pp = NULL;
}

int dr_gpu_psgd_active(const dr_gpu_psgd_t *p, uint64_t step) {
  return p != NULL && step >= p->cfg.start_step;
}

/* Bucket `bucket`'s layout (the CPU compressor's, dr_cmp_layout) and its
 * two buffers on the device, made again when it no longer holds (a
 * rebuild of the buckets). */
static bkt_t *bkt_for(dr_gpu_psgd_t *p, size_t bucket, float *data,
                      size_t n) {
  if (bucket >= p->nb) {
    bkt_t *nb = realloc(p->b, (bucket + 1) * sizeof(*nb));
    if (nb == NULL)
      return NULL;
    memset(nb + p->nb, 0, (bucket + 1 - p->nb) * sizeof(*nb));
    p->b = nb;
    p->nb = bucket + 1;
  }
  bkt_t *b = &p->b[bucket];
  if (dr_cmp_layout_holds(p->o.host, data, n, b->data, b->n_elems, b->items,
                          b->n_items))
    return b;
  /* cudaFree waits for the device: the old buffers' work is done. */
  bkt_clear(b);
  if (dr_cmp_layout(p->o.host, data, n, &b->items, &b->n_items, &b->n1,
                    &b->n2) != 0 ||
      dev_alloc(&b->buf1, b->n1) != 0 || dev_alloc(&b->buf2, b->n2) != 0)
    return NULL;
  b->data = data;
  b->n_elems = n;
  return b;
}

/* M of a compressed item: in the next error feedback, or, without error
 * feedback, the gradient itself. */
static float *m_of(dr_gpu_psgd_t *p, const item_t *it) {
  return p->cfg.error_feedback
             ? p->ef_next + dr_cmp_ef_off(p->o.host, it->param)
             : it->g;
}

static float *q_of(dr_gpu_psgd_t *p, const item_t *it) {
  return p->q + dr_cmp_q_off(p->o.host, it->param);
}

/* Row-major products as column-major cuBLAS calls (gpu_psgd.h's
 * shapes): P = M Q; Q = M^T P; out = alpha P Q^T + beta out. */
static int mq(dr_gpu_psgd_t *p, const float *m, size_t rows, size_t cols,
              const float *q, float *out) {
  const float one = 1.0f, zero = 0.0f;
  const int R = (int)p->cfg.rank;
  CUBLAS_CHECK(cublasSgemm(p->blas, CUBLAS_OP_N, CUBLAS_OP_N, R, (int)rows,
                           (int)cols, &one, q, R, m, (int)cols, &zero, out,
                           R));
  return 0;
}

static int mtp(dr_gpu_psgd_t *p, const float *m, size_t rows, size_t cols,
               const float *pm, float *q) {
  const float one = 1.0f, zero = 0.0f;
  const int R = (int)p->cfg.rank;
  CUBLAS_CHECK(cublasSgemm(p->blas, CUBLAS_OP_N, CUBLAS_OP_T, R, (int)cols,
                           (int)rows, &one, pm, R, m, (int)cols, &zero, q,
                           R));
  return 0;
}

static int pqt(dr_gpu_psgd_t *p, const float *pm, const float *q, size_t rows,
               size_t cols, float alpha, float beta, float *out) {
  const int R = (int)p->cfg.rank;
  CUBLAS_CHECK(cublasSgemm(p->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)cols,
                           (int)rows, R, &alpha, q, R, pm, R, &beta, out,
                           (int)cols));
  return 0;
}

static int round1(dr_gpu_psgd_t *p, bkt_t *b) {
  cudaStream_t s = p->o.comm;
  for (size_t k = 0; k < b->n_items; k++) {
    item_t *it = &b->items[k];
    size_t n = it->rows * it->cols;
    if (!it->psgd) {
      KERNEL_CHECK(dr_k_psgd_in(it->g, NULL, p->o.scaler, b->buf1 + it->off1,
                                n, s));
      continue;
    }
    float *m = m_of(p, it);
    const float *e = p->cfg.error_feedback
                         ? p->ef + dr_cmp_ef_off(p->o.host, it->param)
                         : NULL;
    KERNEL_CHECK(dr_k_psgd_in(it->g, e, p->o.scaler, m, n, s));
    int rc = mq(p, m, it->rows, it->cols, q_of(p, it), b->buf1 + it->off1);
    if (rc != 0)
      return rc;
  }
  return dr_nccl_allreduce_sum(p->o.nccl, b->buf1, b->n1, s);
}

static int round2(dr_gpu_psgd_t *p, bkt_t *b) {
  cudaStream_t s = p->o.comm;
  const size_t R = p->cfg.rank;
  for (size_t k = 0; k < b->n_items; k++) {
    item_t *it = &b->items[k];
    if (!it->psgd) {
      KERNEL_CHECK(dr_k_psgd_mul(b->buf1 + it->off1,
                                 1.0f / (float)p->o.world, it->g,
                                 it->rows * it->cols, s));
      continue;
    }
    float *pm = b->buf1 + it->off1;
    KERNEL_CHECK(dr_k_psgd_orthonormalise(pm, it->rows, R, s));
    int rc = mtp(p, m_of(p, it), it->rows, it->cols, pm, b->buf2 + it->off2);
    if (rc != 0)
      return rc;
  }
  return dr_nccl_allreduce_avg(p->o.nccl, b->buf2, b->n2, s);
}

static int decompress(dr_gpu_psgd_t *p, bkt_t *b) {
  const size_t R = p->cfg.rank;
  for (size_t k = 0; k < b->n_items; k++) {
    item_t *it = &b->items[k];
    if (!it->psgd)
      continue;
    const float *q = b->buf2 + it->off2, *pm = b->buf1 + it->off1;
    int rc = 0;
    /* Without error feedback M is the gradient: the residual is dropped,
     * and the product overwrites it last. */
    if (p->cfg.error_feedback)
      rc = pqt(p, pm, q, it->rows, it->cols, -1.0f, 1.0f, m_of(p, it));
    if (rc == 0)
      rc = pqt(p, pm, q, it->rows, it->cols, 1.0f, 0.0f, it->g);
    if (rc != 0)
      return rc;
    CUDA_CHECK(cudaMemcpyAsync(p->q_next + dr_cmp_q_off(p->o.host, it->param),
                               q, it->cols * R * sizeof(float),
                               cudaMemcpyDeviceToDevice, p->o.comm));
  }
  return 0;
}

int dr_gpu_psgd_launch(dr_gpu_psgd_t *p, size_t bucket, float *data,
                       size_t n_elems) {
  bkt_t *b = bkt_for(p, bucket, data, n_elems);
  if (b == NULL)
    return dr__gpu_fail(DR_GPU_ECUDA, __FILE__, __LINE__,
                        "PowerSGD bucket layout", "out of memory");
  int rc = round1(p, b);
  if (rc == 0)
    rc = round2(p, b);
  if (rc == 0)
    rc = decompress(p, b);
  return rc;
}

int dr_gpu_psgd_commit(dr_gpu_psgd_t *p, const float *skip) {
  KERNEL_CHECK(dr_k_psgd_commit(p->q, p->q_next, p->nq, skip, p->o.compute));
  if (p->cfg.error_feedback)
    KERNEL_CHECK(dr_k_psgd_commit(p->ef, p->ef_next, p->ne, skip,
                                  p->o.compute));
  return 0;
}

int dr_gpu_psgd_download(dr_gpu_psgd_t *p) {
  int rc = dr_gpu_copy_d2h(p->o.waiter, &p->staging, dr_cmp_q(p->o.host),
                           p->q, p->nq * sizeof(float), p->o.compute);
  if (rc == 0)
    rc = dr_gpu_copy_d2h(p->o.waiter, &p->staging, dr_cmp_ef(p->o.host),
                         p->ef, p->ne * sizeof(float), p->o.compute);
  return rc;
}

int dr_gpu_psgd_upload(dr_gpu_psgd_t *p) {
  int rc = dr_gpu_copy_h2d(p->o.waiter, &p->staging, p->q,
                           dr_cmp_q(p->o.host), p->nq * sizeof(float),
                           p->o.compute);
  if (rc == 0)
    rc = dr_gpu_copy_h2d(p->o.waiter, &p->staging, p->ef,
                         dr_cmp_ef(p->o.host), p->ne * sizeof(float),
                         p->o.compute);
  return rc;
}
