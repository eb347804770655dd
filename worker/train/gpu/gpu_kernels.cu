/* The GPU model's kernels. See gpu_kernels.h.
 *
 * Built with --fmad=false: no multiply-add is contracted, so every update
 * rounds where the CPU's (plain C11, no contraction) rounds, and division
 * and sqrt stay IEEE (nvcc's default without --use_fast_math). The fused
 * optimizer steps therefore produce the CPU's bits from the same inputs.
 * Reductions run in a fixed tree order for a fixed launch shape:
 * repeatable from run to run, not the CPU's order.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "gpu_kernel_util.cuh"
#include "gpu_kernels.h"

typedef __nv_bfloat16 bf16;

#define BIAS_CHUNK 64u /* rows summed by one thread in the bias gradient */

__device__ __forceinline__ float ld(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16 *p, size_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ float ld(const __half *p, size_t i) {
  return __half2float(p[i]);
}
__device__ __forceinline__ void st(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16 *p, size_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void st(__half *p, size_t i, float v) {
  p[i] = __float2half_rn(v);
}

/* Runs the statement with T the element type of t. */
#define DISPATCH(t, T, ...)                                                 \
  do {                                                                      \
    if ((t) == DR_BF16) {                                                   \
      typedef bf16 T;                                                       \
      __VA_ARGS__;                                                          \
    } else if ((t) == DR_F16) {                                             \
      typedef __half T;                                                     \
      __VA_ARGS__;                                                          \
    } else {                                                                \
      typedef float T;                                                      \
      __VA_ARGS__;                                                          \
    }                                                                       \
  } while (0)

extern "C" size_t dr_dtype_size(dr_dtype_t t) {
  return t == DR_F32 ? sizeof(float) : sizeof(uint16_t);
}

/* ---- bias, activation ---------------------------------------------------- */

template <typename T>
__global__ void bias_act_fwd(T *y, const float *bias, size_t n, uint32_t cols,
                             int relu) {
  GRID_STRIDE(i, n) {
    float v = ld(y, i) + bias[i % cols];
    if (relu) v = v > 0.0f ? v : 0.0f;
    st(y, i, v);
  }
}

extern "C" int dr_k_bias_act_fwd(void *y, dr_dtype_t t, const float *bias,
                                 uint32_t rows, uint32_t cols, int relu,
                                 cudaStream_t s) {
  size_t n = (size_t)rows * cols;
  DISPATCH(t, T,
           bias_act_fwd<<<grid_for(n), BLOCK, 0, s>>>((T *)y, bias, n, cols,
                                                      relu));
  return launched();
}

/* Stage 1: scratch[chunk][c] = sum of d[r][c] over the chunk's rows. */
template <typename T>
__global__ void bias_grad_partial(const T *d, uint32_t rows, uint32_t cols,
                                  float *scratch) {
  uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  uint32_t r0 = blockIdx.y * BIAS_CHUNK;
  uint32_t r1 = r0 + BIAS_CHUNK < rows ? r0 + BIAS_CHUNK : rows;
  float sum = 0.0f;
  for (uint32_t r = r0; r < r1; r++) sum += ld(d, (size_t)r * cols + c);
  scratch[(size_t)blockIdx.y * cols + c] = sum;
}

/* Stage 2: g[c] (+)= the chunks' sums, in chunk order. */
__global__ void bias_grad_final(const float *scratch, uint32_t chunks,
                                uint32_t cols, float *g, int accumulate) {
  uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (uint32_t k = 0; k < chunks; k++) sum += scratch[(size_t)k * cols + c];
  g[c] = accumulate ? g[c] + sum : sum;
}

extern "C" size_t dr_k_bias_grad_scratch(uint32_t rows, uint32_t cols) {
  size_t chunks = (rows + BIAS_CHUNK - 1) / BIAS_CHUNK;
  return (chunks > 0 ? chunks : 1) * cols;
}

extern "C" int dr_k_bias_grad(const void *d, dr_dtype_t t, uint32_t rows,
                              uint32_t cols, float *g, int accumulate,
                              float *scratch, cudaStream_t s) {
  uint32_t chunks = (rows + BIAS_CHUNK - 1) / BIAS_CHUNK;
  dim3 grid((cols + BLOCK - 1) / BLOCK, chunks > 0 ? chunks : 1);
  if (rows == 0) {
    cudaMemsetAsync(scratch, 0, cols * sizeof(float), s);
  } else {
    DISPATCH(t, T,
             bias_grad_partial<<<grid, BLOCK, 0, s>>>((const T *)d, rows,
                                                      cols, scratch));
  }
  bias_grad_final<<<grid.x, BLOCK, 0, s>>>(scratch, grid.y, cols, g,
                                           accumulate);
  return launched();
}

template <typename T>
__global__ void relu_bwd(T *dx, const T *a, size_t n) {
  GRID_STRIDE(i, n) {
    if (!(ld(a, i) > 0.0f)) st(dx, i, 0.0f);
  }
}

extern "C" int dr_k_relu_bwd(void *dx, const void *a, dr_dtype_t t,
                             size_t n_elems, cudaStream_t s) {
  DISPATCH(t, T,
           relu_bwd<<<grid_for(n_elems), BLOCK, 0, s>>>((T *)dx, (const T *)a,
                                                        n_elems));
  return launched();
}

/* ---- softmax cross-entropy ----------------------------------------------- */

/* A block-wide reduction in a fixed tree order; every thread gets the
 * result. sh holds BLOCK floats. */
__device__ float block_max(float v, float *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned h = BLOCK / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) {
      float o = sh[threadIdx.x + h];
      sh[threadIdx.x] = o > sh[threadIdx.x] ? o : sh[threadIdx.x];
    }
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

__device__ float block_sum(float v, float *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned h = BLOCK / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

/* The CPU's exp_nonpos: arguments below -87 give exp(-87) rather than a
 * denormal, and a NaN stays NaN (through x - x). */
__device__ __forceinline__ float exp_nonpos(float x) {
  float xc = x > -87.0f ? x : -87.0f;
  return expf(xc) + (x - x);
}

__global__ void xent_fwd(float *probs, const int32_t *labels, uint32_t classes,
                         float *row_loss) {
  __shared__ float sh[BLOCK];
  float *row = probs + (size_t)blockIdx.x * classes;
  /* NaN compares false everywhere, as in the CPU's row_max. */
  float mx = row[0];
  for (uint32_t c = threadIdx.x; c < classes; c += BLOCK)
    mx = row[c] > mx ? row[c] : mx;
  mx = block_max(mx, sh);
  int32_t y = labels[blockIdx.x];
  uint32_t yy = (uint32_t)y < classes ? (uint32_t)y : 0;
  float target = row[yy] - mx;
  __syncthreads(); /* everyone read row[yy] before it is overwritten */
  float part = 0.0f;
  for (uint32_t c = threadIdx.x; c < classes; c += BLOCK) {
    float e = exp_nonpos(row[c] - mx);
    row[c] = e;
    part += e;
  }
  float sum = block_sum(part, sh);
  float inv = 1.0f / sum;
  for (uint32_t c = threadIdx.x; c < classes; c += BLOCK) row[c] *= inv;
  if (threadIdx.x == 0)
    row_loss[blockIdx.x] = (float)((double)logf(sum) - (double)target);
}

extern "C" int dr_k_xent_fwd(float *probs, const int32_t *labels,
                             uint32_t rows, uint32_t classes, float *row_loss,
                             cudaStream_t s) {
  if (rows == 0) return 0;
  xent_fwd<<<rows, BLOCK, 0, s>>>(probs, labels, classes, row_loss);
  return launched();
}

__global__ void loss_add(const float *row_loss, uint32_t rows, int mean,
                         double *acc) {
  __shared__ double sh[BLOCK];
  double v = 0.0;
  for (uint32_t r = threadIdx.x; r < rows; r += BLOCK) v += row_loss[r];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned h = BLOCK / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0 && rows > 0) *acc += mean ? sh[0] / rows : sh[0];
}

extern "C" int dr_k_loss_add(const float *row_loss, uint32_t rows, int mean,
                             double *acc, cudaStream_t s) {
  loss_add<<<1, BLOCK, 0, s>>>(row_loss, rows, mean, acc);
  return launched();
}

template <typename T>
__global__ void xent_bwd(const float *probs, const int32_t *labels, T *d,
                         size_t n, uint32_t classes, float coef_in,
                         const float *scale) {
  const float coef = scale != NULL ? coef_in * *scale : coef_in;
  GRID_STRIDE(i, n) {
    size_t r = i / classes;
    uint32_t c = (uint32_t)(i % classes);
    uint32_t y = (uint32_t)labels[r] < classes ? (uint32_t)labels[r] : 0;
    float v = coef * probs[i];
    if (c == y) v -= coef;
    st(d, i, v);
  }
}

extern "C" int dr_k_xent_bwd(const float *probs, const int32_t *labels,
                             void *d, dr_dtype_t t, uint32_t rows,
                             uint32_t classes, float coef, const float *scale,
                             cudaStream_t s) {
  size_t n = (size_t)rows * classes;
  DISPATCH(t, T,
           xent_bwd<<<grid_for(n), BLOCK, 0, s>>>(probs, labels, (T *)d, n,
                                                  classes, coef, scale));
  return launched();
}

/* ---- embedding ------------------------------------------------------------ */

template <typename T>
__global__ void embed_fwd(const float *table, const uint8_t *tokens, size_t n,
                          uint32_t e, T *x) {
  GRID_STRIDE(i, n) {
    size_t tok = i / e;
    st(x, i, table[(size_t)tokens[tok] * e + i % e]);
  }
}

extern "C" int dr_k_embed_fwd(const float *table, const uint8_t *tokens,
                              size_t n_tok, uint32_t e, void *x, dr_dtype_t t,
                              cudaStream_t s) {
  size_t n = n_tok * e;
  DISPATCH(t, T,
           embed_fwd<<<grid_for(n), BLOCK, 0, s>>>(table, tokens, n, e,
                                                   (T *)x));
  return launched();
}

/* Adds in token order from the old value, as the CPU loop does: fp32
 * results are the CPU's bits. */
template <typename T>
__global__ void embed_bwd(const T *dx, const uint8_t *tokens, size_t n_tok,
                          uint32_t e, float *g, int accumulate) {
  GRID_STRIDE(k, (size_t)256 * e) {
    uint32_t v = (uint32_t)(k / e), j = (uint32_t)(k % e);
    float sum = accumulate ? g[k] : 0.0f;
    for (size_t i = 0; i < n_tok; i++)
      if (tokens[i] == v) sum += ld(dx, i * e + j);
    g[k] = sum;
  }
}

extern "C" int dr_k_embed_bwd(const void *dx, dr_dtype_t t,
                              const uint8_t *tokens, size_t n_tok, uint32_t e,
                              float *g, int accumulate, cudaStream_t s) {
  size_t n = (size_t)256 * e;
  DISPATCH(t, T,
           embed_bwd<<<grid_for(n), BLOCK, 0, s>>>((const T *)dx, tokens,
                                                   n_tok, e, g, accumulate));
  return launched();
}

/* ---- optimizers ----------------------------------------------------------- */

/* A step the loss scaler skips: the ranks' agreed overflow flags. */
__device__ __forceinline__ int skipped(const float *skip) {
  return skip != NULL && (skip[0] > 0.0f || skip[1] > 0.0f);
}

template <typename W>
__global__ void sgd(float *w, const float *g, float *buf, size_t n, float lr,
                    float mu, float wd, W *w16, const float *skip) {
  if (skipped(skip)) return;
  GRID_STRIDE(i, n) {
    float wi = w[i];
    if (buf) {
      const float d = g[i] + wd * wi;
      const float b = mu * buf[i] + d;
      buf[i] = b;
      wi -= lr * b;
    } else {
      wi -= lr * (g[i] + wd * wi);
    }
    w[i] = wi;
    if (w16) st(w16, i, wi);
  }
}

extern "C" int dr_k_sgd(float *w, const float *g, float *buf, size_t n_elems,
                        float lr, float mu, float wd, uint16_t *w16,
                        dr_dtype_t t16, const float *skip, cudaStream_t s) {
  if (t16 == DR_F16)
    sgd<<<grid_for(n_elems), BLOCK, 0, s>>>(w, g, buf, n_elems, lr, mu, wd,
                                            (__half *)w16, skip);
  else
    sgd<<<grid_for(n_elems), BLOCK, 0, s>>>(w, g, buf, n_elems, lr, mu, wd,
                                            (bf16 *)w16, skip);
  return launched();
}

template <typename W>
__global__ void adamw(float *w, const float *g, float *m, float *v, size_t n,
                      float decay, float b1, float b2, float step_size,
                      float bc2_sqrt, float eps, W *w16, const float *skip) {
  if (skipped(skip)) return;
  GRID_STRIDE(i, n) {
    float wi = w[i] * decay;
    const float gi = g[i];
    const float mi = m[i] + (1.0f - b1) * (gi - m[i]);
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    wi -= step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    w[i] = wi;
    if (w16) st(w16, i, wi);
  }
}

extern "C" int dr_k_adamw(float *w, const float *g, float *m, float *v,
                          size_t n_elems, float decay, float b1, float b2,
                          float step_size, float bc2_sqrt, float eps,
                          uint16_t *w16, dr_dtype_t t16, const float *skip,
                          cudaStream_t s) {
  if (t16 == DR_F16)
    adamw<<<grid_for(n_elems), BLOCK, 0, s>>>(w, g, m, v, n_elems, decay, b1,
                                              b2, step_size, bc2_sqrt, eps,
                                              (__half *)w16, skip);
  else
    adamw<<<grid_for(n_elems), BLOCK, 0, s>>>(w, g, m, v, n_elems, decay, b1,
                                              b2, step_size, bc2_sqrt, eps,
                                              (bf16 *)w16, skip);
  return launched();
}

/* ---- casts, evaluation, tests --------------------------------------------- */

__global__ void cast_f32_bf16(const float *in, bf16 *out, size_t n) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void cast_bf16_f32(const bf16 *in, float *out, size_t n) {
  GRID_STRIDE(i, n) out[i] = __bfloat162float(in[i]);
}

extern "C" int dr_k_cast_f32_bf16(const float *in, uint16_t *out,
                                  size_t n_elems, cudaStream_t s) {
  cast_f32_bf16<<<grid_for(n_elems), BLOCK, 0, s>>>(in, (bf16 *)out, n_elems);
  return launched();
}

template <typename T>
__global__ void cast_from_f32(const float *in, T *out, size_t n) {
  GRID_STRIDE(i, n) st(out, i, in[i]);
}

template <typename T>
__global__ void cast_to_f32(const T *in, float *out, size_t n) {
  GRID_STRIDE(i, n) out[i] = ld(in, i);
}

extern "C" int dr_k_cast_from_f32(const float *in, void *out, dr_dtype_t t,
                                  size_t n_elems, cudaStream_t s) {
  DISPATCH(t, T,
           cast_from_f32<<<grid_for(n_elems), BLOCK, 0, s>>>(in, (T *)out,
                                                             n_elems));
  return launched();
}

extern "C" int dr_k_cast_to_f32(const void *in, dr_dtype_t t, float *out,
                                size_t n_elems, cudaStream_t s) {
  DISPATCH(t, T,
           cast_to_f32<<<grid_for(n_elems), BLOCK, 0, s>>>((const T *)in, out,
                                                           n_elems));
  return launched();
}

extern "C" int dr_k_cast_bf16_f32(const uint16_t *in, float *out,
                                  size_t n_elems, cudaStream_t s) {
  cast_bf16_f32<<<grid_for(n_elems), BLOCK, 0, s>>>((const bf16 *)in, out,
                                                    n_elems);
  return launched();
}

__global__ void count_correct(const float *logits, const int32_t *labels,
                              uint32_t rows, uint32_t classes,
                              uint32_t *count) {
  GRID_STRIDE(r, (size_t)rows) {
    const float *row = logits + r * classes;
    uint32_t best = 0;
    for (uint32_t c = 1; c < classes; c++)
      if (row[c] > row[best]) best = c;
    if ((int32_t)best == labels[r]) atomicAdd(count, 1u);
  }
}

extern "C" int dr_k_count_correct(const float *logits, const int32_t *labels,
                                  uint32_t rows, uint32_t classes,
                                  uint32_t *count, cudaStream_t s) {
  if (rows == 0) return 0;
  count_correct<<<grid_for(rows), BLOCK, 0, s>>>(logits, labels, rows, classes,
                                                 count);
  return launched();
}

__global__ void fill_u32(uint32_t *p, size_t n, uint32_t v) {
  GRID_STRIDE(i, n) p[i] = v;
}

__global__ void fill_u16(uint16_t *p, size_t n, uint16_t v) {
  GRID_STRIDE(i, n) p[i] = v;
}

__global__ void to_f16(const float *in, float mul, __half *out, size_t n) {
  GRID_STRIDE(i, n) out[i] = __float2half_rn(in[i] * mul);
}
__global__ void to_bf16(const float *in, float mul, bf16 *out, size_t n) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(in[i] * mul);
}
__global__ void from_f16(const __half *in, float *out, size_t n) {
  GRID_STRIDE(i, n) out[i] = __half2float(in[i]);
}
__global__ void from_bf16(const bf16 *in, float *out, size_t n) {
  GRID_STRIDE(i, n) out[i] = __bfloat162float(in[i]);
}

extern "C" int dr_k_to_half(const float *in, float mul, void *out, int is_bf16,
                            size_t n, cudaStream_t s) {
  if (is_bf16)
    to_bf16<<<grid_for(n), BLOCK, 0, s>>>(in, mul, (bf16 *)out, n);
  else
    to_f16<<<grid_for(n), BLOCK, 0, s>>>(in, mul, (__half *)out, n);
  return launched();
}

extern "C" int dr_k_from_half(const void *in, float *out, int is_bf16,
                              size_t n, cudaStream_t s) {
  if (is_bf16)
    from_bf16<<<grid_for(n), BLOCK, 0, s>>>((const bf16 *)in, out, n);
  else
    from_f16<<<grid_for(n), BLOCK, 0, s>>>((const __half *)in, out, n);
  return launched();
}

extern "C" int dr_k_fill_nan(void *p, dr_dtype_t t, size_t n_elems,
                             cudaStream_t s) {
  if (t == DR_BF16 || t == DR_F16)
    fill_u16<<<grid_for(n_elems), BLOCK, 0, s>>>(
        (uint16_t *)p, n_elems, t == DR_BF16 ? (uint16_t)0x7fc0
                                             : (uint16_t)0x7e00);
  else
    fill_u32<<<grid_for(n_elems), BLOCK, 0, s>>>((uint32_t *)p, n_elems,
                                                 0x7fc00000u);
  return launched();
}
