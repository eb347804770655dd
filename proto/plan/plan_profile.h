/* A measured profile for the bucket planner: what `train --profile-out`
 * writes and `ddprun plan --profile` reads, and the predictions made from
 * it. The file is one JSON object:
 *
 *   {"version": 1, "world": 2,
 *    "bucket_cap_mib": 25, "first_bucket_mib": 1,
 *    "alpha_ms": 0.41, "bandwidth_mib_per_ms": 0.112,
 *    "forward_ms": 40.2, "backward_ms": 128.0, "optimizer_ms": 12.1,
 *    "measured_step_ms": 330.5,
 *    "compress": "powersgd:4", "gemm_gflops": 20.5,
 *    "cast_mib_per_ms": 2.1,
 *    "params": [{"index": 33, "bytes": 1024, "ready_ms": 0.52,
 *                "rows": 16, "cols": 16}, ...]}
 *
 * compress names the gradient compression the run measured with (its
 * casts and PowerSGD's first products are inside the measured backward
 * pass and ready times); gemm_gflops and cast_mib_per_ms are that host's
 * rates for PowerSGD's products and for elementwise passes over fp32
 * gradients (plan.h); rows and cols a parameter's shape; overlap_cost
 * plan.h's contention (then backward_ms and the ready times are the
 * uncontended ones train derived); "overlaps": 0 a run whose all-reduces
 * wait for the backward pass (--no-overlap, or the CPU backend's inline
 * schedule), whose predictions then start every bucket at the backward
 * end. All are optional: none, rates of 0 (compute not charged), rows x
 * 1, no contention, and overlaps 1.
 *
 * params lists the parameters in the order they fill buckets (the order
 * the backward pass made them ready), with their gradient's size and when
 * it became ready, relative to the start of the backward pass.
 * forward_ms is everything from the step's start to the backward pass
 * (data and forward), optimizer_ms the optimizer step after the
 * all-reduces; the model's step time adds both. Other keys are ignored.
 */
#ifndef DR_PLAN_PROFILE_H
#define DR_PLAN_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "plan.h"

#define DR_PLAN_MAX_PARAMS 1000000u

typedef struct {
  uint32_t world;
  double cap_bytes, first_cap_bytes; /* what the profile was measured at */
  double alpha_ms, bytes_per_ms;
  double forward_ms, backward_ms, optimizer_ms;
  double measured_step_ms;
  size_t n_params;
  size_t *index;                      /* [n_params] parameter numbers */
  double *bytes;                      /* [n_params] */
  double *ready_ms;                   /* [n_params] */
  double *rows, *cols;                /* [n_params] shapes */
  dr_plan_compress_t measured;        /* compress and the two rates */
  double overlap_cost;                /* plan.h's; 0 when not measured */
  int no_overlap;                     /* the run's all-reduces could not
                                         overlap its backward pass */
} dr_plan_profile_t;

/* Allocates the three arrays for n parameters (zeroed); 0 or -ENOMEM. */
int dr_plan_profile_alloc(dr_plan_profile_t *p, size_t n);
void dr_plan_profile_free(dr_plan_profile_t *p);

/* Writes p as JSON (one object, a parameter per line). 0 or -errno. */
int dr_plan_profile_write(FILE *f, const dr_plan_profile_t *p);

/* Reads the JSON text of a profile into *p (which the caller frees with
 * dr_plan_profile_free, also on failure). 0, or DR_EBADARG with a one-line
 * reason in err (where, and what was expected). */
int dr_plan_profile_parse(const char *text, size_t len, dr_plan_profile_t *p,
                          char *err, size_t err_len);

/* Predicts each of caps[0..n) (bytes; the first bucket keeps the
 * profile's first_cap_bytes) into out[0..n), with the compression c
 * (NULL: the one the profile was measured with, at its rates). 0 or
 * -ENOMEM. */
int dr_plan_profile_predict(const dr_plan_profile_t *p, const double *caps,
                            size_t n, const dr_plan_compress_t *c,
                            dr_plan_result_t *out);

#endif /* DR_PLAN_PROFILE_H */
