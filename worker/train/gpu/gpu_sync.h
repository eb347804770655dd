/* Waiting for the device with a deadline, and bounded copies between host
 * and device memory.
 *
 * Nothing here calls cudaStreamSynchronize or cudaDeviceSynchronize: a
 * wait polls cudaEventQuery (or cudaStreamQuery) until the work completes,
 * the deadline passes (DR_GPU_ETIMEOUT, with a one-line message naming
 * what was awaited) or the poll hook reports a failure (the NCCL
 * communicator's asynchronous error: a peer that died must not leave the
 * host waiting for a kernel that never ends). Copies between pageable host
 * memory and the device go through a pinned staging buffer, so that they
 * too are waited for by polling (a cudaMemcpy to pageable memory blocks
 * without a bound).
 */
#ifndef DR_GPU_SYNC_H
#define DR_GPU_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

/* 0 while all is well, else a failure code (it has printed why). */
typedef int (*dr_gpu_poll_fn)(void *arg);

typedef struct {
  uint32_t timeout_ms;  /* every wait's bound */
  dr_gpu_poll_fn poll;  /* may be NULL */
  void *poll_arg;
} dr_gpu_waiter_t;

/* Waits for ev (recorded earlier). 0, DR_GPU_ETIMEOUT, DR_GPU_ECUDA or
 * the poll hook's code. what: "the step's loss", for the message. */
int dr_gpu_wait_event(const dr_gpu_waiter_t *w, cudaEvent_t ev,
                      const char *what);

/* Waits until s has no pending work (cudaStreamQuery). */
int dr_gpu_wait_stream(const dr_gpu_waiter_t *w, cudaStream_t s,
                       const char *what);

/* A pinned host buffer for copies, with the event that says when the
 * device is done with it. */
typedef struct {
  void *pinned;
  size_t n_bytes;
  cudaEvent_t done;
} dr_gpu_staging_t;

/* 0 or DR_GPU_ECUDA. n_bytes: the chunk size (e.g. 64 MiB). */
int dr_gpu_staging_new(dr_gpu_staging_t *st, size_t n_bytes);
void dr_gpu_staging_free(dr_gpu_staging_t *st);

/* Copies n_bytes from device src to host dst after the work already on s,
 * chunk by chunk through the staging buffer; returns when dst holds the
 * bytes. */
int dr_gpu_copy_d2h(const dr_gpu_waiter_t *w, dr_gpu_staging_t *st,
                    void *dst, const void *src, size_t n_bytes,
                    cudaStream_t s);

/* Copies n_bytes from host src to device dst in order on s; returns when
 * src may be reused (the copies have completed). */
int dr_gpu_copy_h2d(const dr_gpu_waiter_t *w, dr_gpu_staging_t *st,
                    void *dst, const void *src, size_t n_bytes,
                    cudaStream_t s);

#endif /* DR_GPU_SYNC_H */
