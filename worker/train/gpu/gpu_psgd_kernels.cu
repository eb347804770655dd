/* PowerSGD's kernels between the GEMMs. See gpu_psgd.h and
 * gpu_psgd_kernels.h. */
#include <math.h>

#include "gpu_kernel_util.cuh"
#include "gpu_psgd_kernels.h"
#include "powersgd.h"

__global__ void psgd_in(const float *g, const float *e,
                        const dr_gpu_scaler_t *sc, float *out, size_t n) {
  const float inv = sc != NULL ? 1.0f / sc->scale : 1.0f;
  GRID_STRIDE(i, n) {
    float v = g[i] * inv;
    out[i] = e != NULL ? v + e[i] : v;
  }
}

extern "C" int dr_k_psgd_in(const float *g, const float *e,
                            const dr_gpu_scaler_t *sc, float *out, size_t n,
                            cudaStream_t s) {
  if (n == 0) return 0;
  psgd_in<<<grid_for(n), BLOCK, 0, s>>>(g, e, sc, out, n);
  return launched();
}

__global__ void psgd_mul(const float *in, float mul, float *out, size_t n) {
  GRID_STRIDE(i, n) out[i] = in[i] * mul;
}

extern "C" int dr_k_psgd_mul(const float *in, float mul, float *out, size_t n,
                             cudaStream_t s) {
  if (n == 0) return 0;
  psgd_mul<<<grid_for(n), BLOCK, 0, s>>>(in, mul, out, n);
  return launched();
}

/* The block's sum of v (every thread's), in a fixed tree order. */
__device__ double block_sum(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = BLOCK / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

/* One block: column by column, as the CPU's loop (double sums, fp32
 * updates), the sums in the block's tree order. */
__global__ void psgd_orth(float *p, size_t rows, size_t rank) {
  __shared__ double sh[BLOCK];
  for (size_t i = 0; i < rank; i++) {
    double nn = 0;
    for (size_t r = threadIdx.x; r < rows; r += BLOCK)
      nn += (double)p[r * rank + i] * p[r * rank + i];
    nn = block_sum(nn, sh);
    const float inv = 1.0f / ((float)sqrt(nn) + DR_PSGD_EPS);
    for (size_t r = threadIdx.x; r < rows; r += BLOCK) p[r * rank + i] *= inv;
    __syncthreads();
    for (size_t j = i + 1; j < rank; j++) {
      double dot = 0;
      for (size_t r = threadIdx.x; r < rows; r += BLOCK)
        dot += (double)p[r * rank + i] * p[r * rank + j];
      const float d = (float)block_sum(dot, sh);
      for (size_t r = threadIdx.x; r < rows; r += BLOCK)
        p[r * rank + j] -= d * p[r * rank + i];
      __syncthreads();
    }
  }
}

extern "C" int dr_k_psgd_orthonormalise(float *p, size_t rows, size_t rank,
                                        cudaStream_t s) {
  psgd_orth<<<1, BLOCK, 0, s>>>(p, rows, rank);
  return launched();
}

__global__ void psgd_commit(float *dst, const float *src, size_t n,
                            const float *skip) {
  if (skip != NULL && (skip[0] > 0.0f || skip[1] > 0.0f)) return;
  GRID_STRIDE(i, n) dst[i] = src[i];
}

extern "C" int dr_k_psgd_commit(float *dst, const float *src, size_t n,
                                const float *skip, cudaStream_t s) {
  if (n == 0) return 0;
  psgd_commit<<<grid_for(n), BLOCK, 0, s>>>(dst, src, n, skip);
  return launched();
}
