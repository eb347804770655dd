/* SGD with momentum and AdamW with PyTorch's update rules, and the
 * warmup + cosine schedule. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "errors.h"
#include "optim.h"

/* The step's constants: the schedule's lr and AdamW's bias corrections. */
struct step_consts {
  float lr, step_size, bc2_sqrt;
};

struct dr_optim {
  dr_optim_config_t cfg;
  size_t n_elems;   /* the model's, at creation */
  size_t slots;     /* SGD: 1 with momentum, else 0; AdamW: 2 */
  float *state;     /* [slots][n_elems]: own, or rebound */
  float *own;       /* what dr_optim_free frees */
  int have_k;       /* dr_optim_update's constants, of step k_step */
  uint64_t k_step;
  struct step_consts k;
};

static int config_ok(const dr_optim_config_t *c) {
  if (c->kind != DR_OPT_SGD && c->kind != DR_OPT_ADAMW) return 0;
  if (!(c->lr >= 0.0f) || !isfinite(c->lr)) return 0;
  if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay)) return 0;
  if (!(c->min_lr_frac >= 0.0f && c->min_lr_frac <= 1.0f)) return 0;
  if (c->kind == DR_OPT_SGD) return c->momentum >= 0.0f && c->momentum < 1.0f;
  return c->beta1 >= 0.0f && c->beta1 < 1.0f && c->beta2 >= 0.0f &&
         c->beta2 < 1.0f && c->eps > 0.0f && isfinite(c->eps);
}

int dr_optim_new(const dr_optim_config_t *cfg, dr_model_t *m, dr_optim_t **out) {
  *out = NULL;
  if (!config_ok(cfg)) return DR_EBADARG;
  dr_optim_t *o = calloc(1, sizeof *o);
  if (!o) return -ENOMEM;
  o->cfg = *cfg;
  o->n_elems = dr_model_n_elems(m);
  o->slots = cfg->kind == DR_OPT_ADAMW ? 2 : cfg->momentum > 0.0f ? 1 : 0;
  if (o->slots) {
    o->state = o->own = calloc(o->slots * o->n_elems, sizeof(float));
    if (!o->state) {
      free(o);
      return -ENOMEM;
    }
  }
  *out = o;
  return 0;
}

void dr_optim_free(dr_optim_t **op) {
  if (!*op) return;
  free((*op)->own);
  free(*op);
  *op = NULL;
}

const dr_optim_config_t *dr_optim_config(const dr_optim_t *o) {
  return &o->cfg;
}

float dr_optim_lr(const dr_optim_t *o, uint64_t step) {
  return dr_optim_schedule_lr(&o->cfg, step);
}

void dr_optim_set_total_steps(dr_optim_t *o, uint64_t total_steps) {
  o->cfg.total_steps = total_steps;
  o->have_k = 0;
}

int dr_optim_set_lr(dr_optim_t *o, float lr) {
  if (!(lr >= 0.0f) || !isfinite(lr))
    return DR_EBADARG;
  o->cfg.lr = lr;
  o->have_k = 0; /* the step's constants depend on it */
  return 0;
}

float dr_optim_schedule_lr(const dr_optim_config_t *c, uint64_t step) {
  const double lr = c->lr;
  const uint64_t warmup = c->warmup_steps, total = c->total_steps;
  if (step < warmup) return (float)(lr * (double)(step + 1) / (double)warmup);
  if (total == 0) return (float)lr;
  const double min_lr = lr * c->min_lr_frac;
  const uint64_t last = total - 1;
  /* The decay spans [warmup, last]; when that is empty every step after
   * warmup is the last one. */
  double p = 1.0;
  if (last > warmup && step < last)
    p = (double)(step - warmup) / (double)(last - warmup);
  return (float)(min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * p)));
}

static void sgd_update(float *restrict w, const float *restrict g,
                       float *restrict buf, size_t n, float lr, float mu,
                       float wd) {
  if (buf) {
    for (size_t i = 0; i < n; i++) {
      const float d = g[i] + wd * w[i];
      buf[i] = mu * buf[i] + d;
      w[i] -= lr * buf[i];
    }
  } else {
    for (size_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
  }
}

static void adamw_update(float *restrict w, const float *restrict g,
                         float *restrict m, float *restrict v, size_t n,
                         float decay, float b1, float b2, float step_size,
                         float bc2_sqrt, float eps) {
  for (size_t i = 0; i < n; i++) {
    w[i] *= decay;
    m[i] += (1.0f - b1) * (g[i] - m[i]);
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    w[i] -= step_size * (m[i] / denom);
  }
}

typedef struct step_consts step_consts_t;

static step_consts_t consts(const dr_optim_t *o, uint64_t step) {
  const dr_optim_config_t *c = &o->cfg;
  step_consts_t k = {.lr = dr_optim_lr(o, step)};
  /* AdamW's step count t = step + 1, from the caller: the state needs no
   * counter of its own and a resumed run continues the same sequence. */
  const double t = (double)step + 1.0;
  k.step_size = (float)(k.lr / (1.0 - pow(c->beta1, t)));
  k.bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, t));
  return k;
}

static void update(dr_optim_t *o, const step_consts_t *k, size_t off,
                   float *w, const float *g, size_t n) {
  const dr_optim_config_t *c = &o->cfg;
  if (c->kind == DR_OPT_SGD)
    sgd_update(w, g, o->slots ? o->state + off : NULL, n, k->lr, c->momentum,
               c->weight_decay);
  else
    adamw_update(w, g, o->state + off, o->state + o->n_elems + off, n,
                 1.0f - k->lr * c->weight_decay, c->beta1, c->beta2,
                 k->step_size, k->bc2_sqrt, c->eps);
}

void dr_optim_step(dr_optim_t *o, dr_model_t *m, uint64_t step) {
  const step_consts_t k = consts(o, step);
  const size_t np = dr_model_n_params(m);
  size_t off = 0;
  for (size_t i = 0; i < np; i++) {
    dr_param_t *p = dr_model_param(m, i);
    update(o, &k, off, p->w, p->g, p->n_elems);
    off += p->n_elems;
  }
}

void dr_optim_update(dr_optim_t *o, size_t off, float *w, const float *g,
                     size_t n, uint64_t step) {
  /* Called a chunk at a time: the step's constants once. */
  if (!o->have_k || o->k_step != step) {
    o->k = consts(o, step);
    o->k_step = step;
    o->have_k = 1;
  }
  update(o, &o->k, off, w, g, n);
}

size_t dr_optim_state_elems(const dr_optim_t *o) {
  return o->slots * o->n_elems;
}

float *dr_optim_state(dr_optim_t *o) { return o->state; }

void dr_optim_rebind_state(dr_optim_t *o, float *mem) {
  if (!o->slots)
    return;
  free(o->own);
  o->own = NULL;
  o->state = mem;
}
