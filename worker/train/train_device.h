/* The device under train's step and evaluation. train_loop.c runs one
 * step loop and one evaluation over this table; the CPU implements it in
 * train_cpu.c (OpenBLAS, host memory: each call is done when it returns),
 * the GPU in gpu/gpu_step.c (cuBLAS and NCCL: calls only enqueue
 * work on the device's streams). r->dev is the CPU's until
 * dr_gpu_train_open makes it the GPU's.
 *
 * One optimizer step, as train_loop.c drives it:
 *
 *   step_begin (then the test hooks DDPRUN_SPIN_TEST, DDPRUN_COLL_TEST_EXTRA)
 *   for each micro-batch:
 *     fill, dr_reducer_begin, forward, backward (whose ready callback
 *     marks each gradient for the reducer, which launches its buckets)
 *   dr_reducer_end_backward, dr_reducer_wait (abort when it fails)
 *   with --grad-compress or --loss-scale on the CPU: the compressor's
 *     finish (compress.h) and the ranks' agreement on an overflow, which
 *     skips optimize for the step
 *   the step's loss: exit 5 when it is not finite
 *   optimize
 *
 * then loss at each log line (exit 5 for a sum that is not finite), and
 * harvest before each report of step times. The evaluation: eval_begin, eval_batch for each batch of this
 * rank's share of the held-out split, eval_end.
 *
 * Functions that return int return 0 or one of train's exit codes
 * (train.h), having printed why. Entries marked "may be NULL" are where a
 * device has nothing to do.
 */
#ifndef DR_TRAIN_DEVICE_H
#define DR_TRAIN_DEVICE_H

#include <stdint.h>

#include "model.h"
#include "train.h"

struct dr_train_device {
  const char *name; /* "cpu", "cuda": the summary line's device */
  /* 0: a step's work is done when optimize returns, and the loop takes
   * its times from the host clock and the reducer. 1: it is enqueued; the
   * loop sets data_ms alone, and harvest fills in the rest of r->times
   * (and the trace) later. */
  int async;

  /* Before the step's first micro-batch. May be NULL. */
  int (*step_begin)(dr_run_t *r, uint64_t step);
  /* r->batch := the training samples idx[0..n). */
  void (*fill)(dr_run_t *r, const uint64_t *idx, uint32_t n);
  /* Forward pass of r->batch. *loss: its mean loss where the host has it
   * at once, else 0 (the loss stays on the device until loss reads it). */
  int (*forward)(dr_run_t *r, double *loss);
  /* Backward of the last forward: gradients scale * d(mean loss)/dw into
   * the model's param->g (added when accumulate); ready(arg, i) for each
   * parameter as soon as its gradient is final. */
  int (*backward)(dr_run_t *r, float scale, int accumulate,
                  dr_grad_ready_fn ready, void *arg);
  /* After the gradients' all-reduce: the optimizer step. */
  int (*optimize)(dr_run_t *r, uint64_t step);
  /* The gradient all-reduce failed: release the peers that would wait on
   * this rank's collectives. May be NULL. */
  void (*abort)(dr_run_t *r);
  /* *sum := the sum of the step losses since the last call, with the
   * times of those steps harvested. May be NULL: the sum of forward's
   * losses is it. */
  int (*loss)(dr_run_t *r, double *sum);
  /* Waits for the steps enqueued and fills their r->times. May be NULL
   * (a device that is not async). */
  int (*harvest)(dr_run_t *r);
  /* DDPRUN_COLL_TEST_EXTRA: one all-reduce of one float more than the
   * other ranks issue, on the gradients' path. May be NULL: the process
   * group's (r->pg), waited for. */
  int (*test_allreduce)(dr_run_t *r);

  /* The evaluation's sums start at zero. May be NULL. */
  int (*eval_begin)(dr_run_t *r);
  /* r->batch holds r->batch.n held-out samples: adds their correct top-1
   * predictions to *correct and their loss times r->batch.n to *loss_sum,
   * or, for a device that keeps the sums itself, to its own. */
  int (*eval_batch)(dr_run_t *r, double *correct, double *loss_sum);
  /* *correct, *loss_sum := the device's own sums. May be NULL. */
  int (*eval_end)(dr_run_t *r, double *correct, double *loss_sum);
};

/* train_cpu.c */
extern const dr_train_device_t dr_train_cpu_device;

#endif /* DR_TRAIN_DEVICE_H */
