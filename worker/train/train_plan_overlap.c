/* What overlap costs the backward pass, for the bucket planner
 * (plan.h's overlap_cost): the all-reduce time that ran during each
 * profiled step's backward pass, the cost fitted from two profiles at two
 * bucket caps, and a profile brought back to its uncontended times. See
 * train_plan_overlap.h. */
#include "train_plan_overlap.h"

#include <stdio.h>

double dr_plan_step_overlap_ms(const dr_reducer_t *red, uint64_t bwd_start_us,
                               uint64_t bwd_end_us) {
  const dr_bucket_times_t *t = dr_reducer_bucket_times(red);
  size_t nb = dr_reducer_n_buckets(red);
  double ov = 0;
  for (size_t b = 0; b < nb; b++) {
    uint64_t lo = t[b].start_us > bwd_start_us ? t[b].start_us : bwd_start_us;
    uint64_t hi = t[b].end_us < bwd_end_us ? t[b].end_us : bwd_end_us;
    if (t[b].start_us != 0 && hi > lo)
      ov += (double)(hi - lo) / 1e3;
  }
  return ov;
}

double dr_plan_fit_overlap_cost(double bwd0, double ov0, double bwd1,
                                double ov1) {
  /* Too little more overlap to tell its cost from the steps' noise. */
  if (!(ov1 - ov0 > 0.05 * bwd0) || !(bwd1 > bwd0))
    return 0;
  double k = (bwd1 - bwd0) / (ov1 - ov0);
  return k > DR_PLAN_MAX_OVERLAP_COST ? DR_PLAN_MAX_OVERLAP_COST : k;
}

void dr_plan_uncontend(dr_plan_profile_t *prof, double overlap_ms,
                       double overlap_cost) {
  prof->overlap_cost = overlap_cost;
  double bwd = prof->backward_ms;
  if (!(overlap_cost > 0) || !(bwd > 0))
    return;
  double base = bwd - overlap_cost * overlap_ms;
  /* The overlap never made the pass more than 3x longer. */
  if (base < bwd / 3)
    base = bwd / 3;
  double f = base / bwd;
  for (size_t k = 0; k < prof->n_params; k++)
    prof->ready_ms[k] *= f;
  prof->backward_ms = base;
}
