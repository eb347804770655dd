/* train's automatic bucket size (--bucket-cap-mb auto) and planner
 * profile (--profile-out).
 *
 * At start, every rank all-reduces a few sizes (the probe); rank 0 fits
 * alpha and B and broadcasts them. The five steps after the first bucket
 * rebuild (executed steps 2-6) are the profile: when each gradient became
 * ready after the start of the backward pass, the backward pass's end, the
 * time before it (data and forward) and after the all-reduces (the
 * optimizer); rank 0 takes the median of each. Then rank 0 predicts the
 * step for caps of 1, 2, 5, 10, 25, 50 and 100 MiB, prints the plan,
 * writes the profile, and broadcasts the best cap; every rank rebuilds its
 * buckets with it before the next step.
 *
 * Afterwards, every 5 steps, rank 0 compares the median measured step with
 * the prediction for the chosen cap (both from the step's start to the end
 * of its optimizer step). When two windows in a row are off by more than
 * 20%, every rank probes again, the next 5 steps are profiled again, and
 * the plan is redone; at most 3 times in a run, so a prediction that
 * cannot be met does not make the run re-plan forever, and not when the
 * new plan would have less than a window of steps left.
 */
#ifndef DR_TRAIN_PLAN_H
#define DR_TRAIN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "pg.h"
#include "plan.h"
#include "train.h"

/* When a step's parts started and ended, monotonic us. */
typedef struct {
  uint64_t start_us;        /* the step (data of the first micro-batch) */
  uint64_t backward_us;     /* the last micro-batch's backward pass */
  uint64_t backward_end_us; /* after dr_reducer_end_backward */
  uint64_t comm_end_us;     /* after dr_reducer_wait */
  uint64_t end_us;          /* after the optimizer */
} dr_step_marks_t;

/* Before the first step: the probe, when planning or profiling. Returns
 * an exit code. */
int dr_train_plan_start(dr_run_t *r);

/* After each step: profiles, plans, checks the prediction. May run
 * collectives (every rank calls it at the same steps). Returns an exit
 * code. */
int dr_train_plan_step(dr_run_t *r, uint64_t step, const dr_step_marks_t *m);

void dr_train_plan_free(dr_run_t *r);

/* train_probe.c: all-reduces of a few sizes up to max_bytes on every
 * rank, 3 times each after a warm-up; rank 0's least-squares fit of
 * t = alpha + bytes / B goes to every rank. 0, or a failure code with its
 * message in err. */
int dr_train_probe(dr_pg_t *pg, size_t max_bytes, double *alpha_ms,
                   double *bytes_per_ms, char *err, size_t err_len);

/* train_rates.c: the compression of this run (r->cmpc) with this host's
 * rates for its compute, for the planner. */
void dr_train_rates(const dr_run_t *r, dr_plan_compress_t *c);

#endif /* DR_TRAIN_PLAN_H */
