/* The loss scaler on the GPU, as gpu_step.c and gpu_train.c drive it
 * (gpu_scale.c). Each function is a no-op (0) without --loss-scale.
 * Functions returning int return 0 or a DR_GPU_E* code (printed). */
#ifndef DR_GPU_SCALE_INTERNAL_H
#define DR_GPU_SCALE_INTERNAL_H

#include "gpu_scale.h"
#include "gpu_step_internal.h"

/* After the streams exist: the device state from r->ls. */
int dr__gpu_scale_open(dr_run_t *r);
void dr__gpu_scale_free(dr_gpu_t *g);
/* r->ls to the device (at the start, and after a resume). The way back is
 * dr__gpu_scale_harvest: once every enqueued step is harvested, r->ls is
 * the device's state. */
int dr__gpu_scale_upload(dr_run_t *r);

/* At a step's start: the test hooks' overflow for this step, if any. */
void dr__gpu_scale_step(dr_run_t *r, uint64_t step);
/* On the communication stream, before a bucket's all-reduce: the check of
 * this rank's own gradients (the test hook's overflow put in first), and
 * with --grad-compress fp16|bf16 of their two-byte cast; after it: the
 * unscale and the check of the sum; after the last bucket: the
 * agreement. */
int dr__gpu_scale_own(dr_run_t *r, float *data, size_t n);
int dr__gpu_scale_own_half(dr_run_t *r, const void *half, size_t n);
int dr__gpu_scale_sum(dr_run_t *r, float *data, size_t n);
/* The check of the sum alone, for a bucket already unscaled (PowerSGD). */
int dr__gpu_scale_check_sum(dr_run_t *r, const float *data, size_t n);
int dr__gpu_scale_agree(dr_run_t *r);
/* Device pointers: the agreed flags (the optimizer's skip) and the scale
 * (the backward pass's seed); NULL without a scaler. */
const float *dr__gpu_scale_flags(const dr_gpu_t *g);
const float *dr__gpu_scale_value(const dr_gpu_t *g);
/* On the compute stream after the optimizer: the update, and the state to
 * the mirror of ring slot `slot`. */
int dr__gpu_scale_update(dr_run_t *r, size_t slot, uint64_t step);
/* When the step of slot is harvested: its verdict into r->ls, said as the
 * CPU path says it; a train exit code (5 at the floor). */
int dr__gpu_scale_harvest(dr_run_t *r, size_t slot, uint64_t step);

#endif /* DR_GPU_SCALE_INTERNAL_H */
