/* The loss scaler of `train --loss-scale` on the GPU (loss_scale.h has the
 * rules): its state lives on the device, so that no step waits for the
 * host to learn whether it overflowed.
 *
 * Per step, in stream order:
 *   compute stream  the backward pass is seeded with `scale` (read on the
 *                   device by the loss gradient's kernel);
 *   comm stream     per bucket, before its all-reduce: flags[0] := world -
 *                   rank when this rank's own gradients (and, with
 *                   --grad-compress fp16|bf16, their cast) are not finite;
 *                   after it: the reduced bucket divided by the scale, and
 *                   flags[1] := 1 when the result is not finite; after the
 *                   last bucket: flags all-reduced with MAX (NCCL), so every
 *                   rank holds the same verdict and the lowest rank that
 *                   overflowed is world - flags[0];
 *   compute stream  the optimizer kernels do nothing when a flag is set;
 *                   then dr_k_scaler_update applies loss_scale.c's update
 *                   with that verdict, clears the flags, and the state is
 *                   copied to the pinned mirror of the step's ring slot.
 * The host reads the mirror when the step is harvested (in step order),
 * prints each overflow as the CPU path does, and stops the run when an
 * overflow came with the scale at its floor.
 */
#ifndef DR_GPU_SCALE_H
#define DR_GPU_SCALE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  float scale;         /* in force for the next step (a power of two) */
  float flags[2];      /* this step's verdict, cleared by the update */
  int32_t mode;        /* dr_ls_mode_t */
  uint64_t good;       /* steps since the last overflow or growth */
  uint64_t skipped;    /* steps skipped so far */
  int64_t last_rank;   /* as dr_loss_scale_t */
  uint64_t last_step;
  int32_t floor_hit;   /* an overflow with the scale at its floor */
  int32_t pad;
} dr_gpu_scaler_t;

/* Element kinds of dr_k_flag_nonfinite. */
enum { DR_SCALE_F32 = 0, DR_SCALE_F16 = 1, DR_SCALE_BF16 = 2 };

/* *flag := value when any of the n elements of p (kind) is an infinity
 * or a NaN. */
int dr_k_flag_nonfinite(const void *p, int kind, size_t n, float value,
                        float *flag, cudaStream_t s);

/* data[i] := data[i] / sc->scale; sc->flags[1] := 1 when a result is not
 * finite. */
int dr_k_unscale_check(float *data, size_t n, dr_gpu_scaler_t *sc,
                       cudaStream_t s);

/* The verdict in sc->flags (world - rank, sum) applied as
 * dr_loss_scale_update would for step; the flags cleared. */
int dr_k_scaler_update(dr_gpu_scaler_t *sc, uint32_t world, uint64_t step,
                       cudaStream_t s);

/* p[0] := v (the test hooks' overflow). */
int dr_k_set_first(float *p, float v, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* DR_GPU_SCALE_H */
