/* The loss scaler of `train --loss-scale dynamic|FIXED|none`: one scale
 * for every rank.
 *
 * The loss (in practice its gradients: the backward pass is seeded with
 * the scale) is multiplied by the scale so that small gradients stay
 * representable in fp16; the optimizer sees them divided by it again.
 * After each step's reduction the ranks agree, in one small MAX
 * all-reduce, whether any rank's own gradients or the reduced result
 * overflowed (an infinity or a NaN); every rank then makes the same
 * update here, so the scale and the skipped steps are the same on all.
 *
 * Dynamic, as practitioners configure it by default (PyTorch's
 * GradScaler, Apex, Megatron): an initial scale of 2^16; x2 after 2000
 * steps in a row without an overflow; x0.5 on an overflow, whose step is
 * skipped; never below the floor of 1. An overflow while the scale is
 * already at the floor cannot be cured by a smaller scale: the gradients
 * themselves are not finite, and the run stops (DR_LS_EFLOOR).
 *
 * Fixed: the scale never changes; an overflow skips the step, and stops
 * the run when the scale is at or below the floor. None: no scaling, no
 * check (the loss check of the loop still stops a NaN loss).
 */
#ifndef DR_LOSS_SCALE_H
#define DR_LOSS_SCALE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  DR_LS_NONE = 0,
  DR_LS_FIXED = 1,
  DR_LS_DYNAMIC = 2
} dr_ls_mode_t;

#define DR_LS_INIT 65536.0
#define DR_LS_GROWTH_INTERVAL 2000u
#define DR_LS_FLOOR 1.0

typedef struct {
  dr_ls_mode_t mode;
  double scale;        /* in force for the next step; 1 with none */
  uint64_t good;       /* steps since the last overflow or growth */
  uint64_t skipped;    /* steps skipped so far */
  int64_t last_rank;   /* the rank whose own gradient overflowed last;
                          -1: only the reduced sum; -2: no overflow yet */
  uint64_t last_step;  /* its step index */
} dr_loss_scale_t;

/* "dynamic", "dynamic:INIT" (another initial scale, for tests), "none",
 * or a number >= 1 (fixed). 0, or DR_EBADARG with a one-line message. */
int dr_loss_scale_parse(const char *v, dr_loss_scale_t *s, char *err,
                        size_t err_len);

/* The verdict of step (index): overflow or not, and the rank blamed (as
 * last_rank). 0, DR_LS_SKIP (the step is skipped; the scale may have
 * changed), or DR_LS_EFLOOR (the run must stop). With mode none always 0
 * and nothing changes. */
enum { DR_LS_SKIP = 1, DR_LS_EFLOOR = 2 };
int dr_loss_scale_update(dr_loss_scale_t *s, int overflow, int64_t rank,
                         uint64_t step);

/* "dynamic 65536", "fixed 128", "none" */
const char *dr_loss_scale_describe(const dr_loss_scale_t *s, char *buf,
                                   size_t n);

#endif /* DR_LOSS_SCALE_H */
