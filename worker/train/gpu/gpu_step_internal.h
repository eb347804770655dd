/* The GPU context of train, shared by gpu_train.c (set-up, copies,
 * summary) and gpu_step.c (train's device: the step, its timing,
 * evaluation). */
#ifndef DR_GPU_STEP_INTERNAL_H
#define DR_GPU_STEP_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "gpu_model.h"
#include "gpu_optim.h"
#include "gpu_psgd.h"
#include "gpu_scale.h"
#include "gpu_sync.h"
#include "nccl_backend.h"
#include "train.h"

/* Steps whose events are kept until their times are read: the host runs
 * at most this many steps ahead of the device. */
#define DR_GPU_RING 16

/* One step's events. Bucket events (rd: the bucket's gradients written
 * on the compute stream, which its all-reduce waits for; c0/c1: each
 * all-reduce's start and end on the communication stream) grow with the
 * bucket count. */
typedef struct {
  uint64_t step;
  int used;               /* enqueued, times not read yet */
  cudaEvent_t start, bwd_end, opt_start, end;
  cudaEvent_t *rd, *c0, *c1; /* [cap] */
  size_t nb;              /* buckets launched in this step */
} dr_gpu_slot_t;

struct dr_gpu {
  int device;
  dr_dtype_t dtype;
  cudaStream_t compute, comm;
  cublasHandle_t blas;
  dr_gpu_waiter_t waiter;
  dr_gpu_model_t *model;
  dr_gpu_optim_t *optim;
  dr_nccl_t *nccl;

  double *loss_acc;        /* device: [0] step losses since the last read,
                              [1] evaluation loss sum */
  uint32_t *count;         /* device: evaluation's correct predictions */
  double *readback;        /* pinned: [4] */
  cudaEvent_t readback_done;

  cudaEvent_t comm_done;   /* the last all-reduce of a step */
  size_t cap;              /* bucket events allocated per slot */
  dr_gpu_slot_t ring[DR_GPU_RING];
  dr_gpu_slot_t *cur;      /* the step being enqueued */

  cudaEvent_t ref;         /* the device clock's origin ... */
  uint64_t ref_us;         /* ... on the host's monotonic clock */
  double last_end_ms;      /* device time of the last harvested step end */
  int have_last_end;
  uint64_t mem_peak;       /* bytes: the most device memory seen in use
                              (dr__gpu_sample_mem) */
  float *test_buf;         /* device: one float for DDPRUN_COLL_TEST_EXTRA */

  /* --grad-compress fp16|bf16: 0 none, 1 fp16, 2 bf16 (dr_cmp_kind_t).
   * Per bucket a device buffer of its elements in two bytes, made on the
   * communication stream when the bucket first launches (again when its
   * size changes); the cast, the sum and the cast back all run there. */
  int half_kind;
  void **half;             /* [n_half] */
  size_t *half_elems;      /* [n_half] */
  size_t n_half;

  /* --loss-scale (gpu_scale.h): the device state, its pinned mirror per
   * ring slot, the last state harvested, and the test hooks' overflow
   * for the step being enqueued. NULL without a scaler. */
  dr_gpu_scaler_t *scaler;
  dr_gpu_scaler_t *scaler_pin; /* [DR_GPU_RING] */
  dr_gpu_scaler_t seen;
  float poison;

  /* --grad-compress powersgd: the device rounds (gpu_psgd.h); NULL
   * otherwise. */
  dr_gpu_psgd_t *psgd;
};

/* Updates g->mem_peak with the device memory in use now (cudaMemGetInfo:
 * total - free, every process's on this device). */
void dr__gpu_sample_mem(dr_gpu_t *g);

/* The reducer's launch hook (arg: dr_run_t): orders the bucket after the
 * compute stream's work so far, all-reduces it on the communication
 * stream. */
int dr__gpu_launch_bucket(void *arg, size_t bucket, float *data,
                          size_t n_elems, dr_work_t **w);

/* Destroys the ring's events. */
void dr__gpu_ring_free(dr_gpu_t *g);
/* Frees the compressed buckets' buffers (the device idle). */
void dr__gpu_half_free(dr_gpu_t *g);

/* train's step and evaluation on the GPU (gpu_step.c); dr_gpu_train_open
 * makes it r->dev. */
extern const dr_train_device_t dr__gpu_train_device;

#endif /* DR_GPU_STEP_INTERNAL_H */
