/* The NCCL backend of `train`: one communicator per generation, for the
 * gradient all-reduce on the communication stream.
 *
 * The unique id of each generation travels through the rendezvous store
 * (the same server, run id, secret and generation scope as the CPU
 * process group's bootstrap, worker/comm/pg_boot.c): rank 0 draws it with
 * ncclGetUniqueId and publishes it under "nccl/<instance>/id"; the others
 * wait for that key. Never a file or a fixed port. A restarted group
 * (new generation) reads a new id: an earlier round's key is out of scope.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): init and
 * every call return at once and the host polls ncclCommGetAsyncError with
 * a deadline. On a timeout or an error the communicator is aborted
 * (ncclCommAbort), which also unblocks kernels waiting for a dead peer.
 * Codes: DR_GPU_ETIMEOUT, DR_GPU_ENCCL (gpu_check.h); train exits 3 when
 * set-up fails and 4 when a collective fails.
 *
 * NCCL does not check that the ranks' collectives match (the CPU process
 * group does): ranks out of step hang until a deadline. So each
 * communicator keeps the last DR_COLL_HISTORY collectives it enqueued
 * (coll_history.h), each with an event recorded after it, and a failure
 * (a wait past its deadline, an asynchronous error, an enqueue that does
 * not complete) reports them once, before the abort: the last few on
 * stderr, all in nccl_collectives.txt beside DDPRUN_ERROR_FILE.
 */
#ifndef DR_NCCL_BACKEND_H
#define DR_NCCL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "pg.h"

typedef struct dr_nccl dr_nccl_t;

/* Creates the communicator of cfg's rank and world (a group of one needs
 * no store) within cfg->timeout_ms, on the current CUDA device. 0, or a
 * code with a one-line reason in err. */
int dr_nccl_init(const dr_pg_config_t *cfg, dr_nccl_t **out, char *err,
                 size_t err_len);

/* The unique id of this generation's communicator (128 bytes, an
 * ncclUniqueId) as dr_nccl_init obtains it: drawn by rank 0, through the
 * store to the others, within cfg->timeout_ms. Needs no GPU. 0, or a code
 * with a one-line reason in err. */
#define DR_NCCL_ID_BYTES 128
int dr_nccl_unique_id(const dr_pg_config_t *cfg, uint8_t id[DR_NCCL_ID_BYTES],
                      char *err, size_t err_len);

/* Flushes (ncclCommFinalize, polled within the timeout) and destroys; a
 * communicator that failed or does not finalise in time is aborted.
 * Sets *n to NULL. */
void dr_nccl_destroy(dr_nccl_t **n);

/* Aborts the communicator at once (after a failure elsewhere). */
void dr_nccl_abort(dr_nccl_t *n);

/* Enqueues an in-place fp32 average over the ranks on stream s. 0 or a
 * code (printed). */
int dr_nccl_allreduce_avg(dr_nccl_t *n, float *buf, size_t n_elems,
                          cudaStream_t s);
/* The same, an in-place fp32 sum (PowerSGD's first round) and maximum
 * (the loss scaler's flags). */
int dr_nccl_allreduce_sum(dr_nccl_t *n, float *buf, size_t n_elems,
                          cudaStream_t s);
int dr_nccl_allreduce_max(dr_nccl_t *n, float *buf, size_t n_elems,
                          cudaStream_t s);
/* The same, an in-place sum of n_elems fp16 (bf16 when bf16 is set)
 * values: gradients that travel in two bytes, pre-divided by the caller. */
int dr_nccl_allreduce_sum_half(dr_nccl_t *n, void *buf, size_t n_elems,
                               int bf16, cudaStream_t s);

/* A dr_gpu_poll_fn: 0 while the communicator is healthy; else prints the
 * asynchronous error, aborts, and returns DR_GPU_ENCCL. arg: dr_nccl_t. */
int dr_nccl_poll(void *arg);

/* Reports the history (at most once per communicator; later failures
 * are consequences): reads each collective's state from its event, prints
 *   train: rank 3: last collectives (NCCL, of 553): #546 allreduce 25.0
 *   MiB done, ..., #553 allreduce 4 B pending since 31.2 s; the last 64
 *   in /.../attempt_0/3/nccl_collectives.txt
 * and writes the file (coll_history.h). why: "waiting for a step
 * failed", for the file. Call before dr_nccl_abort (which this backend's
 * own failures do: an asynchronous error, an enqueue that does not
 * complete). */
void dr_nccl_report(dr_nccl_t *n, const char *why);

/* "NCCL 2.28.9" (the library loaded, not the headers). */
void dr_nccl_version(char *buf, size_t len);

#endif /* DR_NCCL_BACKEND_H */
