/* Optimizers and the learning-rate schedule of `train`.
 *
 * The learning rate is that of the global batch (batch per rank x world x
 * grad-accum): the rule is to give --lr for the batch the job runs with;
 * ddprun does not rescale it with the world size. Schedule: linear warmup
 * from 0 over warmup steps, then cosine decay to min_lr_frac * lr at the
 * last step.
 */
#ifndef DR_OPTIM_H
#define DR_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef enum { DR_OPT_SGD = 0, DR_OPT_ADAMW = 1 } dr_optim_kind_t;

typedef struct {
  dr_optim_kind_t kind;
  float lr;
  float momentum;      /* SGD */
  float weight_decay;  /* decoupled for AdamW, L2 for SGD */
  float beta1, beta2, eps;
  uint64_t warmup_steps;
  uint64_t total_steps;
  float min_lr_frac;
} dr_optim_config_t;

typedef struct dr_optim dr_optim_t;

int dr_optim_new(const dr_optim_config_t *cfg, dr_model_t *m, dr_optim_t **out);
void dr_optim_free(dr_optim_t **o);

/* The learning rate at step (0-based). */
float dr_optim_lr(const dr_optim_t *o, uint64_t step);

/* Applies one update with the gradients in the model's params. */
void dr_optim_step(dr_optim_t *o, dr_model_t *m, uint64_t step);

/* The optimizer's state, for checkpoints: n floats per state slot. */
size_t dr_optim_state_elems(const dr_optim_t *o);
float *dr_optim_state(dr_optim_t *o);

#endif /* DR_OPTIM_H */
