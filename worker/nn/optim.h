/* Optimizers and the learning-rate schedule of `train`.
 *
 * The learning rate is that of the global batch (batch per rank x world x
 * grad-accum): the rule is to give --lr for the batch the job runs with;
 * ddprun does not rescale it with the world size unless asked to (train's
 * --lr-scale linear sets the base rate with dr_optim_set_lr). Schedule: linear warmup
 * from 0 over warmup steps (lr * (step + 1) / warmup_steps, so no step runs
 * at 0 and step warmup_steps - 1 runs at lr), then cosine decay from lr at
 * step warmup_steps to min_lr_frac * lr at the last step, total_steps - 1,
 * and after it; total_steps 0 means no decay.
 *
 * Update rules are PyTorch's. SGD: d = g + weight_decay * w;
 * buf = momentum * buf + d (buf starts at 0, so the first buf is d);
 * w -= lr * buf (without momentum, w -= lr * d). AdamW, t = step + 1:
 * w *= 1 - lr * weight_decay; m += (1 - beta1) (g - m);
 * v = beta2 v + (1 - beta2) g^2; w -= lr / (1 - beta1^t) * m /
 * (sqrt(v) / sqrt(1 - beta2^t) + eps).
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

/* 0, DR_EBADARG (a value out of range: lr or weight_decay negative,
 * momentum or a beta outside [0, 1), eps <= 0, min_lr_frac outside [0, 1])
 * or -ENOMEM. The state starts at zero. */
int dr_optim_new(const dr_optim_config_t *cfg, dr_model_t *m, dr_optim_t **out);
void dr_optim_free(dr_optim_t **o);

/* The configuration in effect. */
const dr_optim_config_t *dr_optim_config(const dr_optim_t *o);

/* The learning rate at step (0-based). */
float dr_optim_lr(const dr_optim_t *o, uint64_t step);
/* The learning rate at step of the schedule that c describes. */
float dr_optim_schedule_lr(const dr_optim_config_t *c, uint64_t step);

/* Sets the schedule's total_steps (its decay ends at total_steps - 1):
 * a resumed run whose schedule is not its own --steps. */
void dr_optim_set_total_steps(dr_optim_t *o, uint64_t total_steps);

/* Sets the schedule's base rate (the lr of the config) from the next
 * update on: train's --lr-scale linear (lr_schedule.h). DR_EBADARG for a
 * negative or non-finite rate. */
int dr_optim_set_lr(dr_optim_t *o, float lr);

/* Applies one update with the gradients in the model's params, at the
 * schedule's lr for step (0-based optimizer step, which is also AdamW's
 * bias-correction count: a resumed run passes the step it resumes at). */
void dr_optim_step(dr_optim_t *o, dr_model_t *m, uint64_t step);

/* The update of n elements at w with gradients g, the parameters'
 * elements off .. off + n - 1 in registration order (their state's
 * place), at step: for any split of the elements, the same bits as
 * dr_optim_step. */
void dr_optim_update(dr_optim_t *o, size_t off, float *w, const float *g,
                     size_t n, uint64_t step);

/* The optimizer's state, for checkpoints: slots x n floats, slot-major,
 * n = dr_model_n_elems, each slot in parameter registration order. SGD:
 * one slot (momentum buffer) when momentum > 0, else none (NULL, 0);
 * AdamW: m then v. Writable: a checkpoint restores it in place. */
size_t dr_optim_state_elems(const dr_optim_t *o);
float *dr_optim_state(dr_optim_t *o);

/* Points the state at mem (dr_optim_state_elems floats, holding it
 * already), which outlives the optimizer's use, and frees its own. */
void dr_optim_rebind_state(dr_optim_t *o, float *mem);

#endif /* DR_OPTIM_H */
