/* train on a GPU: the device, its streams, the GPU model and optimizer,
 * the NCCL backend, and the training step that ties them to the reducer.
 *
 * The step (dr_gpu_train_step) enqueues everything and returns without
 * waiting for the device:
 *   compute stream: batch upload, forward, backward; each gradient bucket
 *     the reducer launches records an event on it once the bucket's last
 *     gradient has been enqueued;
 *   communication stream: waits on that event, then all-reduces the bucket
 *     (NCCL, average) in place in the reducer's device memory; buckets go
 *     in the reducer's fixed order;
 *   compute stream again: waits on the communication stream's last event,
 *     then the fused optimizer updates every parameter.
 * The host waits only where it reads something back: the loss when it is
 * logged (dr_gpu_train_loss), the step times (from CUDA events) at the
 * same point, checkpoints and evaluation; and, to bound how far it runs
 * ahead, for the step 16 steps back. Every wait polls with the
 * --comm-timeout deadline and checks NCCL's asynchronous error.
 *
 * Functions return train's exit codes (train.h): 2 for a configuration
 * that cannot run (no GPU, --precision bf16 on the CPU), 3 for a set-up
 * failure (CUDA, cuBLAS, NCCL init), 4 for a failure or timeout during
 * the run, 5 for a non-finite loss.
 *
 * A CPU-only build links gpu_train_none.c instead: --device cuda and
 * --precision bf16 are configuration errors there, auto means cpu.
 */
#ifndef DR_GPU_TRAIN_H
#define DR_GPU_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "train.h"

/* Resolves --device (auto: cuda when this binary has GPU support and a
 * GPU is visible, else cpu) and checks --precision and --tf32 against it;
 * sets r->use_gpu. 0 or 2 (printed). */
int dr_gpu_train_resolve(dr_run_t *r);

/* After the host model and optimizer exist: picks the device, creates the
 * streams, cuBLAS, the GPU model (the host model's weights) and optimizer
 * (its state), and the NCCL communicator. Then fills rc's launch and
 * memory hooks so the reducer's buckets live on the device and launch on
 * the communication stream. An exit code. */
int dr_gpu_train_open(dr_run_t *r, dr_reducer_config_t *rc);

/* Waits for the device to go idle (bounded), destroys the communicator
 * and frees the device state. Safe when open failed or never ran. Call
 * after dr_reducer_free (whose buckets are device memory). */
void dr_gpu_train_close(dr_run_t *r);

/* Line(s) of the environment summary for the GPU. */
void dr_gpu_train_summary(dr_run_t *r);

/* One optimizer step (all micro-batches), enqueued. st->data_ms is set
 * now; the other times once the step has been harvested (below). */
int dr_gpu_train_step(dr_run_t *r, uint64_t step, dr_step_time_t *st);

/* Waits for every enqueued step, fills r->times of each from its CUDA
 * events (and the trace), then returns the sum of the step losses since
 * the last call in *sum (and resets it). 5 when it is not finite. */
int dr_gpu_train_loss(dr_run_t *r, double *sum);

/* Waits for every enqueued step and fills their times. */
int dr_gpu_train_harvest(dr_run_t *r);

/* This rank's share of the evaluation: correct predictions, summed loss
 * and samples, over eval samples rank, rank + world, ... */
int dr_gpu_train_evaluate(dr_run_t *r, double *correct, double *loss_sum,
                          double *count);

/* Device weights, and with optimizer_too the optimizer state, to the host
 * model and optimizer (before a checkpoint: both; before the final
 * report: the weights), and both back (after a resume). */
int dr_gpu_train_to_host(dr_run_t *r, int optimizer_too);
int dr_gpu_train_from_host(dr_run_t *r);

#endif /* DR_GPU_TRAIN_H */
