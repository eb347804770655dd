/* The model of `train` on a GPU: the same MLP and text model as worker/nn,
 * with GEMMs through cuBLAS and the kernels of gpu_kernels.h.
 *
 * The GPU model mirrors a host dr_model_t: same configuration, same
 * parameters in the same registration order and the same flat layout
 * (parameter i at the same offset of one fp32 array), initialised by
 * copying the host model's weights, which dr_model_new drew from the seed.
 * So a checkpoint written from either device loads on the other: copy the
 * weights back with dr_gpu_model_download before saving, and up with
 * dr_gpu_model_upload after loading.
 *
 * Gradients: the backward pass writes parameter i's gradient to the host
 * model's param i ->g, which must then point to device memory (the
 * reducer's buckets, allocated on the device): the device model owns no
 * gradient memory. As on the CPU, ready(arg, i) is called for each
 * parameter in reverse registration order, a Linear's bias then weight,
 * right after the work that writes it has been enqueued on the stream.
 *
 * Precision: fp32 (GEMMs in fp32, or TF32 tensor cores when tf32 is set)
 * or bf16 (activations and GEMM inputs in bf16 with fp32 accumulation; a
 * bf16 copy of the fp32 master weights, refreshed by every optimizer step;
 * weight gradients, logits, the softmax and the loss in fp32).
 *
 * Every call enqueues on the stream given at creation and returns without
 * waiting, except where stated: 0 or a code of gpu_check.h (the failure
 * has been printed).
 */
#ifndef DR_GPU_MODEL_H
#define DR_GPU_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "data.h"
#include "gpu_kernels.h"
#include "gpu_sync.h"
#include "model.h"

typedef struct dr_gpu_model dr_gpu_model_t;

typedef struct {
  dr_dtype_t dtype;         /* compute precision */
  int tf32;                 /* fp32: allow TF32 tensor cores in GEMMs */
  cudaStream_t stream;      /* the compute stream (borrowed) */
  cublasHandle_t blas;      /* bound to stream by the caller (borrowed) */
  const dr_gpu_waiter_t *waiter; /* bounds the blocking calls (borrowed) */
  const float *loss_scale;  /* device: the loss scaler's scale, which the
                               backward pass multiplies in; NULL: none */
} dr_gpu_model_opts_t;

/* Allocates the device model for host's configuration and uploads its
 * weights (waits for the upload). Caller owns *out: free with
 * dr_gpu_model_free (which waits for nothing: free after the stream is
 * idle). */
int dr_gpu_model_new(dr_model_t *host, const dr_gpu_model_opts_t *o,
                     dr_gpu_model_t **out);
void dr_gpu_model_free(dr_gpu_model_t **m);

/* All weights, fp32, registration order (the host layout). */
float *dr_gpu_model_weights(dr_gpu_model_t *m);
/* The two-byte copy (bf16 or fp16, the compute precision), or NULL in
 * fp32. */
uint16_t *dr_gpu_model_weights16(dr_gpu_model_t *m);
dr_dtype_t dr_gpu_model_dtype(const dr_gpu_model_t *m);

/* Host weights -> device (and the bf16 copy); device -> host weights.
 * Both wait for their copies (bounded by the waiter). */
int dr_gpu_model_upload(dr_gpu_model_t *m, dr_model_t *host);
int dr_gpu_model_download(dr_gpu_model_t *m, dr_model_t *host);

/* Copies b to the device (through a pinned buffer: b may be refilled as
 * soon as this returns) and runs the forward pass; *loss_acc (device
 * memory) += the batch's mean cross-entropy. DR_EBADARG (printed) when b
 * does not fit the model. */
int dr_gpu_model_forward(dr_gpu_model_t *m, const dr_batch_t *b,
                         double *loss_acc);

/* Backward of the last forward into the host model's param->g (device
 * pointers): scale * d(mean loss)/dw, added when accumulate. */
int dr_gpu_model_backward(dr_gpu_model_t *m, float scale, int accumulate,
                          dr_grad_ready_fn ready, void *arg);

/* Forward on b, then *count (device memory) += its correct top-1
 * predictions; *loss_acc += its mean loss times b->n. */
int dr_gpu_model_evaluate(dr_gpu_model_t *m, const dr_batch_t *b,
                          double *loss_sum, uint32_t *count);

/* Device bytes the model holds (weights, activations, buffers). */
size_t dr_gpu_model_bytes(const dr_gpu_model_t *m);

#endif /* DR_GPU_MODEL_H */
