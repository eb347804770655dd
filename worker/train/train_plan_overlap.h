/* The bucket planner's contention term (plan.h's overlap_cost), as train
 * measures it: with --bucket-cap-mb auto, the first profile (at the cap
 * in use, typically large: little overlaps) gives the backward pass
 * bwd0 with ov0 ms of all-reduce during it; when the plan then picks a
 * cap at which the all-reduces overlap, the next steps are profiled there
 * (bwd1, ov1), and
 *
 *     overlap_cost = (bwd1 - bwd0) / (ov1 - ov0)
 *
 * the backward pass's loss per ms of all-reduce that overlaps it (the
 * communication thread and the kernel's network work on the compute
 * thread's cores). The plan is then made again from the first profile,
 * brought back to its uncontended times, with that cost: every cap is
 * predicted with the slowdown its own overlap causes. */
#ifndef DR_TRAIN_PLAN_OVERLAP_H
#define DR_TRAIN_PLAN_OVERLAP_H

#include <stdint.h>

#include "plan_profile.h"
#include "reducer.h"

#define DR_PLAN_MAX_OVERLAP_COST 4.0

/* Ms of the last step's bucket all-reduces inside [bwd_start, bwd_end]
 * (monotonic us). */
double dr_plan_step_overlap_ms(const dr_reducer_t *red, uint64_t bwd_start_us,
                               uint64_t bwd_end_us);

/* The fit above; 0 when the second profile overlaps too little more than
 * the first (5% of bwd0) or its backward pass is not longer; at most
 * DR_PLAN_MAX_OVERLAP_COST. */
double dr_plan_fit_overlap_cost(double bwd0, double ov0, double bwd1,
                                double ov1);

/* Sets prof->overlap_cost and takes out of its backward pass and ready
 * times (scaled alike) what overlap_ms of overlap cost it. */
void dr_plan_uncontend(dr_plan_profile_t *prof, double overlap_ms,
                       double overlap_cost);

#endif /* DR_TRAIN_PLAN_OVERLAP_H */
