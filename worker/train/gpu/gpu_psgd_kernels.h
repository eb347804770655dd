/* PowerSGD's kernels between the GEMMs (gpu_psgd.h has the rounds). */
#ifndef DR_GPU_PSGD_KERNELS_H
#define DR_GPU_PSGD_KERNELS_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "gpu_scale.h"

#ifdef __cplusplus
extern "C" {
#endif
/* out[i] := g[i] * (1 / sc->scale) (+ e[i] when e is not NULL); sc may be
 * NULL (scale 1). */
int dr_k_psgd_in(const float *g, const float *e, const dr_gpu_scaler_t *sc,
                 float *out, size_t n, cudaStream_t s);
/* out[i] := in[i] * mul */
int dr_k_psgd_mul(const float *in, float mul, float *out, size_t n,
                  cudaStream_t s);
/* powersgd.h's dr_psgd_orthonormalise of P (rows x rank, row-major). */
int dr_k_psgd_orthonormalise(float *p, size_t rows, size_t rank,
                             cudaStream_t s);
/* dst := src, unless skip (may be NULL) has a flag set. */
int dr_k_psgd_commit(float *dst, const float *src, size_t n,
                     const float *skip, cudaStream_t s);
#ifdef __cplusplus
}
#endif

#endif /* DR_GPU_PSGD_KERNELS_H */
