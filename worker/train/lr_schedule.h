/* --lr-scale, --lr-ref-batch and --lr-warmup: the learning rate against
 * the global batch.
 *
 * The global batch is --batch x world x --grad-accum, so at a fixed
 * --batch it follows the world size, and --lr (optim.h) is the rate of
 * whatever global batch the job runs with. --lr-ref-batch names the
 * global batch --lr was tuned for; where the run's differs, rank 0 says
 * so in one line at start. --lr-scale linear applies the linear scaling
 * rule: the rate is --lr x factor, factor = global / reference, ramped in
 * over --lr-warmup steps:
 *
 *     scale(step) = 1 + (factor - 1) x step / lr_warmup   step < lr_warmup
 *                 = factor                                 otherwise
 *
 * (step 0-based: the first step runs at --lr, step lr_warmup at the
 * scaled rate), and the optimizer's --warmup and cosine schedule runs
 * over that rate: step s runs at schedule(s) of --lr x scale(s). The
 * reference is --lr-ref-batch, else the resumed checkpoint's global batch
 * (which is always the run's own: a resume keeps the checkpoint's global
 * batch or is refused, train_elastic.c and train_ckpt_fit.c), else there
 * is none and the rate is --lr, said at start.
 *
 * The rate of a step is a function of the step and the settings alone,
 * in double precision rounded once to float, so a resumed run takes the
 * same rate at every step as a run that never stopped. A checkpoint
 * records --lr, not these settings: a resume must be given the same ones.
 *
 * Arithmetic only; train.h declares what the run does with it
 * (dr_train_lr_start, dr_train_lr_step in lr_schedule.c). */
#ifndef DR_LR_SCHEDULE_H
#define DR_LR_SCHEDULE_H

#include <stdint.h>

typedef struct {
  double lr;        /* --lr */
  double factor;    /* global / reference; 1 without scaling */
  uint64_t warmup;  /* --lr-warmup */
} dr_lr_scale_t;

/* The scale of --lr at step (0-based): see the top. */
double dr_lr_scale_at(const dr_lr_scale_t *s, uint64_t step);

/* The base rate of step, --lr x scale(step), as the optimizer takes it. */
float dr_lr_base_at(const dr_lr_scale_t *s, uint64_t step);

#endif /* DR_LR_SCHEDULE_H */
