/* PowerSGD on the GPU (`train --device cuda --grad-compress powersgd[:R]`):
 * the arithmetic of powersgd.h on the device, the products through
 * cuBLAS, the two all-reduces through NCCL, all on the communication
 * stream as each bucket becomes ready.
 *
 * The layout and the host copy of the state are the CPU compressor's
 * (compress.h: which matrices are compressed, Q's and the error
 * feedback's offsets, Q's seeded start), so a checkpoint holds the same
 * tensors whichever device wrote it. Per bucket, in stream order:
 *   round 1   every gradient divided by the loss scale; a compressed one
 *             plus its error feedback is M (kept in the next error
 *             feedback), P = M Q; the uncompressed tensors and the P's
 *             summed in one NCCL all-reduce;
 *   round 2   the uncompressed tensors divided by the world size; each P
 *             orthonormalised (Gram-Schmidt, one block per matrix, in a
 *             fixed order: the same bits on every rank), Q = M^T P, the
 *             Q's averaged in a second all-reduce;
 *   decompress  the gradient := P Q^T, the residual M - P Q^T in place of
 *             M, Q kept as the next step's start.
 * After the optimizer (compute stream) the next state becomes the current
 * one, unless the loss scaler skipped the step. The first start_step
 * steps go uncompressed (the caller's ordinary path).
 */
#ifndef DR_GPU_PSGD_H
#define DR_GPU_PSGD_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "compress.h"
#include "gpu_scale.h"
#include "gpu_sync.h"
#include "gpu_psgd_kernels.h"
#include "nccl_backend.h"

typedef struct dr_gpu_psgd dr_gpu_psgd_t;

typedef struct {
  dr_cmp_t *host;               /* the CPU compressor: layout, host state */
  dr_model_t *model;            /* the host model (param->g: device) */
  cudaStream_t comm, compute;
  dr_nccl_t *nccl;
  const dr_gpu_waiter_t *waiter;
  uint32_t world;
  dr_gpu_scaler_t *scaler;      /* device; NULL without --loss-scale */
} dr_gpu_psgd_opts_t;

/* Device state from the host's (uploaded, waited for). 0 or DR_GPU_E*. */
int dr_gpu_psgd_new(const dr_gpu_psgd_opts_t *o, dr_gpu_psgd_t **out);
/* After the device is idle. */
void dr_gpu_psgd_free(dr_gpu_psgd_t **p);

/* 1 when step is sent compressed. */
int dr_gpu_psgd_active(const dr_gpu_psgd_t *p, uint64_t step);
/* Enqueues the bucket's rounds (above) on the communication stream; the
 * bucket ends unscaled and averaged. */
int dr_gpu_psgd_launch(dr_gpu_psgd_t *p, size_t bucket, float *data,
                       size_t n_elems);
/* On the compute stream after the optimizer: the step's new state
 * becomes the current one, unless skip (the scaler's flags) says it was
 * skipped. */
int dr_gpu_psgd_commit(dr_gpu_psgd_t *p, const float *skip);

/* The host compressor's Q and error feedback from the device and back
 * (a checkpoint, a resume). Both wait. */
int dr_gpu_psgd_download(dr_gpu_psgd_t *p);
int dr_gpu_psgd_upload(dr_gpu_psgd_t *p);

#endif /* DR_GPU_PSGD_H */
