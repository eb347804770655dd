/* train on a GPU: the device, its streams, the GPU model and optimizer,
 * the NCCL backend, and train's device interface (train_device.h) that
 * ties them to the reducer in train_loop.c's step and evaluation.
 *
 * A step enqueues everything and returns without waiting for the
 * device:
 *   compute stream: batch upload, forward, backward; each gradient bucket
 *     the reducer launches records an event on it once the bucket's last
 *     gradient has been enqueued;
 *   communication stream: waits on that event, then all-reduces the bucket
 *     (NCCL, average) in place in the reducer's device memory; buckets go
 *     in the reducer's fixed order;
 *   compute stream again: waits on the communication stream's last event,
 *     then the fused optimizer updates every parameter.
 * The host waits only where it reads something back: the loss when it is
 * logged (then train_loop.c exits 5 for one that is not finite), the step
 * times (from CUDA events) at the same point and before each report of
 * them, checkpoints and evaluation; and, to bound how far it runs ahead,
 * for the step 16 steps back. Every wait polls with the --comm-timeout
 * deadline and checks NCCL's asynchronous error.
 *
 * Functions return train's exit codes (train.h): 2 for a configuration
 * that cannot run (no GPU, --precision bf16 on the CPU), 3 for a set-up
 * failure (CUDA, cuBLAS, NCCL init), 4 for a failure or timeout during
 * the run, 9 for a device that fails at set-up.
 *
 * A build with CUDA puts these functions in the module libddprun_gpu.so
 * (gpu_module.h) and links gpu_loader.c into train, which loads it on
 * first use; a CPU-only build links gpu_train_none.c. Where there is no
 * module, or it cannot be loaded, --device cuda and --precision bf16 are
 * configuration errors and auto means cpu.
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
 * the communication stream, and makes r->dev the GPU's step and
 * evaluation. An exit code. */
int dr_gpu_train_open(dr_run_t *r, dr_reducer_config_t *rc);

/* Waits for the device to go idle (bounded), destroys the communicator
 * and frees the device state. Safe when open failed or never ran. Call
 * after dr_reducer_free (whose buckets are device memory). */
void dr_gpu_train_close(dr_run_t *r);

/* The most device memory seen in use on this rank's GPU, in bytes: total
 * minus free (cudaMemGetInfo), sampled after set-up, at the ends of the
 * first 8 steps and of every 100th as their times are read, and now (a
 * peak inside a step that is gone by its end is not seen). It is what nvidia-smi shows for the
 * device: the CUDA context, cuBLAS's and NCCL's buffers and every
 * allocation, and any other process's on the same GPU. 0 without a GPU
 * (r->gpu NULL). */
uint64_t dr_gpu_train_peak_bytes(dr_run_t *r);

/* The line train --version prints after the version, without a newline:
 * "GPU code: PATH (CUDA runtime 13.0, NCCL 2.28.9 from PATH, cuBLAS
 * 13.1.0 from PATH)", "GPU code: PATH, not loadable: REASON" or "GPU
 * code: not found (...)"; empty in a build without GPU code. Loads the
 * module. */
void dr_gpu_train_describe(char *buf, size_t len);

/* Line(s) of the environment summary for the GPU. */
void dr_gpu_train_summary(dr_run_t *r);

/* Device weights, and with optimizer_too the optimizer state, to the host
 * model and optimizer (before a checkpoint: both; before the final
 * report: the weights), and both back (after a resume). */
int dr_gpu_train_to_host(dr_run_t *r, int optimizer_too);
int dr_gpu_train_from_host(dr_run_t *r);

#endif /* DR_GPU_TRAIN_H */
