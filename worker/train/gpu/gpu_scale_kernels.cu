/* The loss scaler's kernels. See gpu_scale.h. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "gpu_kernel_util.cuh"
#include "gpu_scale.h"
#include "loss_scale.h"

__device__ __forceinline__ float val(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float val(const __half *p, size_t i) {
  return __half2float(p[i]);
}
__device__ __forceinline__ float val(const __nv_bfloat16 *p, size_t i) {
  return __bfloat162float(p[i]);
}

/* Every writer stores the same value: no atomics needed. */
template <typename T>
__global__ void flag_nonfinite(const T *p, size_t n, float value,
                               float *flag) {
  GRID_STRIDE(i, n) {
    if (!isfinite(val(p, i))) *flag = value;
  }
}

extern "C" int dr_k_flag_nonfinite(const void *p, int kind, size_t n,
                                   float value, float *flag, cudaStream_t s) {
  if (n == 0) return 0;
  if (kind == DR_SCALE_F16)
    flag_nonfinite<<<grid_for(n), BLOCK, 0, s>>>((const __half *)p, n, value,
                                                 flag);
  else if (kind == DR_SCALE_BF16)
    flag_nonfinite<<<grid_for(n), BLOCK, 0, s>>>((const __nv_bfloat16 *)p, n,
                                                 value, flag);
  else
    flag_nonfinite<<<grid_for(n), BLOCK, 0, s>>>((const float *)p, n, value,
                                                 flag);
  return launched();
}

__global__ void unscale_check(float *data, size_t n, dr_gpu_scaler_t *sc) {
  const float scale = sc->scale;
  GRID_STRIDE(i, n) {
    const float v = data[i] / scale;
    data[i] = v;
    if (!isfinite(v)) sc->flags[1] = 1.0f;
  }
}

extern "C" int dr_k_unscale_check(float *data, size_t n, dr_gpu_scaler_t *sc,
                                  cudaStream_t s) {
  if (n == 0) return 0;
  unscale_check<<<grid_for(n), BLOCK, 0, s>>>(data, n, sc);
  return launched();
}

/* loss_scale.c's dr_loss_scale_update, on the device. */
__global__ void scaler_update(dr_gpu_scaler_t *sc, uint32_t world,
                              uint64_t step) {
  const float own = sc->flags[0], sum = sc->flags[1];
  sc->flags[0] = sc->flags[1] = 0.0f;
  if (sc->mode == DR_LS_NONE) return;
  if (!(own > 0.0f) && !(sum > 0.0f)) {
    if (sc->mode == DR_LS_DYNAMIC && ++sc->good >= DR_LS_GROWTH_INTERVAL) {
      /* fp32 holds 2^127 at most; the double of the CPU path grows on. */
      if (sc->scale < 0x1p126f) sc->scale *= 2.0f;
      sc->good = 0;
    }
    return;
  }
  sc->skipped++;
  sc->good = 0;
  sc->last_rank = own > 0.0f ? (int64_t)world - (int64_t)own : -1;
  sc->last_step = step;
  if (sc->scale <= (float)DR_LS_FLOOR) {
    sc->floor_hit = 1;
    return;
  }
  if (sc->mode == DR_LS_DYNAMIC) {
    sc->scale *= 0.5f;
    if (sc->scale < (float)DR_LS_FLOOR) sc->scale = (float)DR_LS_FLOOR;
  }
}

extern "C" int dr_k_scaler_update(dr_gpu_scaler_t *sc, uint32_t world,
                                  uint64_t step, cudaStream_t s) {
  scaler_update<<<1, 1, 0, s>>>(sc, world, step);
  return launched();
}

__global__ void set_first(float *p, float v) { p[0] = v; }

extern "C" int dr_k_set_first(float *p, float v, cudaStream_t s) {
  set_first<<<1, 1, 0, s>>>(p, v);
  return launched();
}
