/* --lr-scale and --lr-ref-batch: the scale's arithmetic (lr_schedule.h),
 * the line rank 0 says at start, and the rate handed to the optimizer
 * before each step. */
#include "lr_schedule.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "optim.h"
#include "train.h"

double dr_lr_scale_at(const dr_lr_scale_t *s, uint64_t step) {
  if (s->warmup == 0 || step >= s->warmup)
    return s->factor;
  return 1.0 + (s->factor - 1.0) * (double)step / (double)s->warmup;
}

float dr_lr_base_at(const dr_lr_scale_t *s, uint64_t step) {
  return (float)(s->lr * dr_lr_scale_at(s, step));
}

void dr_train_lr_step(dr_run_t *r, uint64_t step) {
  if (r->lrs.factor == 1.0)
    return; /* the optimizer has --lr from its creation */
  float lr = dr_lr_base_at(&r->lrs, step);
  if (dr_optim_config(r->opt)->lr != lr)
    dr_optim_set_lr(r->opt, lr); /* finite and >= 0: --lr is checked */
}

int dr_train_lr_start(dr_run_t *r, uint64_t start) {
  const dr_train_config_t *c = &r->c;
  const int linear = strcmp(c->lr_scale, "linear") == 0;
  const uint64_t global = r->global_batch;
  uint64_t ref = c->lr_ref_batch;
  const char *ref_name = "--lr-ref-batch";
  if (ref == 0 && r->ckpt_global_batch > 0) {
    ref = r->ckpt_global_batch;
    ref_name = "the resumed checkpoint's global batch";
  }
  r->lrs.lr = c->lr;
  r->lrs.factor = linear && ref > 0 ? (double)global / (double)ref : 1.0;
  r->lrs.warmup = c->lr_warmup;
  dr_train_lr_step(r, start);
  if (r->rank != 0)
    return 0;
  if (ref == 0) {
    if (linear)
      fprintf(stderr, "train: rank 0: --lr-scale linear has no reference "
              "(no --lr-ref-batch, no checkpoint resumed): --lr %g is used "
              "as is for the global batch %" PRIu64 "\n", c->lr, global);
    return 0;
  }
  if (ref == global)
    return 0;
  char batch[128];
  snprintf(batch, sizeof(batch), "--batch %u x %u rank%s x --grad-accum %u",
           c->batch, r->world, r->world > 1 ? "s" : "", c->grad_accum);
  const double scaled = c->lr * (double)global / (double)ref;
  if (!linear) {
    fprintf(stderr, "train: rank 0: global batch %" PRIu64 " (%s) differs "
            "from %s %" PRIu64 "; --lr %g is used as is (--lr-scale linear "
            "would use %g)\n", global, batch, ref_name, ref, c->lr, scaled);
    return 0;
  }
  char ramp[128] = "";
  if (c->lr_warmup > 0)
    snprintf(ramp, sizeof(ramp), ", ramped up from %g over --lr-warmup %"
             PRIu64 " steps", c->lr, c->lr_warmup);
  fprintf(stderr, "train: rank 0: global batch %" PRIu64 " (%s) differs "
          "from %s %" PRIu64 "; --lr-scale linear uses %g (--lr %g x %"
          PRIu64 "/%" PRIu64 ")%s; step %" PRIu64 " runs at lr %.3g (with "
          "--warmup %" PRIu64 " and the cosine decay)\n", global, batch,
          ref_name, ref, scaled, c->lr, global, ref, ramp, start + 1,
          dr_optim_lr(r->opt, start), c->warmup);
  return 0;
}
