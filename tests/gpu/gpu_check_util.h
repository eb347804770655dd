/* Shared helpers of gpu_kernel_check: device buffers, bf16 rounding, the
 * comparison and its report line. */
#ifndef DR_GPU_CHECK_UTIL_H
#define DR_GPU_CHECK_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "data.h"
#include "model.h"
#include "gpu_kernels.h"
#include "gpu_sync.h"

/* The stream every check runs on, and its bounded waiter. */
extern cudaStream_t g_stream;
extern dr_gpu_waiter_t g_waiter;

/* Failures so far (a failed CUDA call counts as one). */
extern int g_failures;

/* Tolerances: relative error, max |gpu - cpu| / max |cpu|, over all
 * elements (a NaN anywhere fails). */
#define TOL_F32 1e-5
#define TOL_BF16 1e-2
#define TOL_F16 2e-3

void *dev_alloc(size_t n_bytes);
void *dev_copy(const void *host, size_t n_bytes);
void to_host(void *host, const void *dev, size_t n_bytes);
void to_dev(void *dev, const void *host, size_t n_bytes);
void sync_stream(void);
/* Poisons n elements of dev with NaN, so that an element a kernel fails
 * to write fails the comparison. */
void poison(void *dev, dr_dtype_t t, size_t n);

/* Round to bf16 (nearest even) and back: what a bf16 input holds. */
float bf16_round(float x);
uint16_t bf16_bits(float x);
float bf16_value(uint16_t b);
/* Round to fp16 (nearest even) and back (worker/comm/half.h). */
float f16_round(float x);

/* Uniform in [-1, 1). */
void fill_uniform(dr_rng_t *r, float *v, size_t n);

/* A device buffer of n elements of t holding v (rounded for bf16 and
 * fp16). */
void *dev_values(const float *v, size_t n, dr_dtype_t t);
/* n elements of t at dev, as floats. */
void read_values(float *out, const void *dev, size_t n, dr_dtype_t t);

/* Compares and prints one line; returns 1 when within tol. */
int check(const char *what, const float *gpu, const float *ref, size_t n,
          double tol);

/* As check, with the norm-wise relative error ||gpu - cpu|| / ||cpu||. */
int check_l2(const char *what, const float *gpu, const float *ref, size_t n,
             double tol);

/* gpu_check_ref.c: the bf16 GPU model's CPU reference: *loss and every
 * gradient (registration order, scale as dr_model_backward's) of m on b,
 * rounded where the GPU rounds. */
int ref_bf16(dr_model_t *m, const dr_batch_t *b, float scale, float *loss,
             float *grads);
/* The same with fp16's rounding when f16 is set (the rounding stays
 * chosen for later ref_bf16 calls: call ref_half for each). */
int ref_half(dr_model_t *m, const dr_batch_t *b, float scale, float *loss,
             float *grads, int f16);

/* The checks, by file. */
void check_kernels(void);
void check_optimizers(void);
void check_models(void);
void check_scaler(void);

#endif /* DR_GPU_CHECK_UTIL_H */
