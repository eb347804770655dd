/* `ddprun diagnose`'s analysis: from every rank's trace (diag_trace.h) to
 * why the job is slow, with numbers, and which bucket size to use. Pure
 * arithmetic over the model; no I/O.
 *
 * Steps. Ranks are aligned by step number; only the steps every rank has
 * (within --steps) are analysed, and a note says so when ranks differ.
 * Each metric is computed per rank and step, then summarised by medians:
 * a rank's row is the median over its steps, the job's value the median
 * over every (rank, step), except the job's step time, which is the
 * median over steps of the slowest rank's step (a synchronous step lasts
 * as long as its slowest rank).
 *
 * Per rank and step (ms; -1 where the trace does not give what it needs):
 *   step = t1 - t0; forward, backward, optimizer = their t1 - t0; data.
 *   gradient all-reduces: the all-reduces handed to communication (ready,
 *     else start) at or after the backward pass's start, before the
 *     optimizer's start (when known) and within the step. Bucket k's
 *     queue wait = start - ready, its duration = end - start.
 *   comm = the length of the union of all collectives' [start, end] in
 *     the step (gloo can run two at once: overlap counts once).
 *   hidden = the part of that union inside [bwd_t0, bwd_t1].
 *   exposed = what the optimizer waits for after the backward pass: when
 *     the last gradient all-reduce ends at E > bwd_t1, exposed =
 *     max(E, opt_t0) - bwd_t1 (the gap between E and the optimizer's
 *     start is the wait for the work and its copy-back); else 0. Waiting
 *     for a slow peer is part of it (see wait).
 *   arrival = bwd_t1 - t0: how long the rank took to have all its
 *     gradients (data, forward, backward) in the step.
 *   wait (time spent waiting for the slowest rank) =
 *     min(exposed, max over ranks of arrival - own arrival).
 *     Ranks start a step together, within their optimizer's variation,
 *     because they all leave the previous step's last all-reduce at once;
 *     a rank's last all-reduce cannot end before the last rank arrives, so
 *     a rank that arrives d ms before the slowest blocks up to d ms, and
 *     only in its exposed time. Durations from t0 are used, not absolute
 *     times, so unsynchronised clocks do not matter. (A rank's duration of
 *     a collective minus the median duration across ranks would not do:
 *     when one rank is late, most ranks wait, so the median itself holds
 *     the wait.)
 *   own = step - wait: the step the rank would take with no one to wait
 *     for.
 */
#ifndef DR_DIAG_ANALYZE_H
#define DR_DIAG_ANALYZE_H

#include <stddef.h>
#include <stdint.h>

#include "diag_trace.h"
#include "plan.h"

/* ---- thresholds: when a pattern is named ------------------------------- */

/* Late start: the first gradient all-reduce starts more than this
 * fraction of the backward pass after its start. */
#define DR_DG_LATE_FRAC 0.50
/* Backlog: gradient all-reduces run back to back, each ready before the
 * previous one ended, for more than this fraction of the backward pass,
 * and the communication is not all hidden (DR_DG_HIDDEN_FRAC). */
#define DR_DG_BACKLOG_FRAC 0.20
/* Back to back: an all-reduce starting within this of the previous one's
 * end (or before it), and at least this after its own ready time. */
#define DR_DG_BACK_TO_BACK_US 10.0
/* A backlog is per-call bound when alpha is at least this share of the
 * mean gradient all-reduce's modelled time alpha + bytes / B; below it,
 * bandwidth bound. */
#define DR_DG_ALPHA_SHARE 0.50
/* Tail: exposed communication above this fraction of the step. */
#define DR_DG_TAIL_FRAC 0.10
/* All hidden: exposed communication at most this fraction of the
 * communication (and no tail). */
#define DR_DG_HIDDEN_FRAC 0.05
/* A rank makes the others wait when it arrives (see arrival) later than
 * the other ranks (their median) by more than this fraction of the step. */
#define DR_DG_SLOW_FRAC 0.05

/* The bucket size: a candidate is worth the change only when the model
 * predicts its step at least this fraction shorter than the cap in use's
 * (the model is fitted to medians; closer than this is noise). */
#define DR_DG_GAIN_FRAC 0.02

/* ---- what the analysis returns ---------------------------------------- */

/* One rank's medians over the analysed steps, or the job's (rank -1).
 * ms; -1: unknown. */
typedef struct {
  int rank;
  const char *path;        /* borrowed from the input; NULL for the job */
  size_t n_steps;          /* steps in its trace (before alignment) */
  double step_ms, data_ms, forward_ms, backward_ms, optimizer_ms;
  double comm_ms, hidden_ms, exposed_ms;
  double arrival_ms, wait_ms;
} dr_dg_stats_t;

/* The k-th gradient all-reduce of a step: medians over the (rank, step)
 * that have one. Times are ms from the backward pass's start. */
typedef struct {
  int bucket;              /* the trace's bucket index, -1: unknown */
  double mib;              /* -1: size unknown */
  double ready_ms, start_ms, end_ms, queue_ms, dur_ms;
  size_t n_samples;
} dr_dg_bucket_stats_t;

typedef enum {
  DR_DG_PAT_LATE_START,
  DR_DG_PAT_BACKLOG,
  DR_DG_PAT_TAIL,
  DR_DG_PAT_ALL_HIDDEN,
  DR_DG_PAT_SLOW_RANK
} dr_dg_pattern_kind_t;

/* A named pattern with its numbers (those its kind uses; the rest 0) and
 * the one line the text report prints. */
typedef struct {
  dr_dg_pattern_kind_t kind;
  const char *name;        /* "late_start", "backlog", "tail", "all_hidden",
                              "slow_rank" */
  double ms;               /* late: first start from bwd_t0; backlog: its
                              length; tail: exposed; hidden: comm;
                              slow: how much later the rank arrives */
  double frac;             /* late: of backward; backlog: of backward;
                              tail: of the step; hidden: hidden fraction;
                              slow: of the step */
  const char *cause;       /* backlog: "per_call", "bandwidth", "unknown";
                              slow: "data", "compute"; all hidden: the
                              largest phase ("forward", "backward",
                              "optimizer", "data") */
  double cause_ms;         /* backlog: alpha; slow: excess data (data) or
                              forward+backward (compute) over the median;
                              all hidden: the largest phase */
  double share;            /* backlog: alpha / (alpha + mean bytes / B) */
  size_t n;                /* backlog: all-reduces in it */
  int rank;                /* slow: the rank; else -1 */
  double data_excess_ms, compute_excess_ms; /* slow */
  double whatif_step_ms;   /* slow: the step with the rank at the others' */
  double whatif_frac;      /* slow: whatif / step - 1 */
  char text[400];
} dr_dg_pattern_t;

#define DR_DG_MAX_CAPS 16

/* The bucket size from the planner's model fitted to the trace. */
typedef struct {
  int ok;                  /* 0: none; why says why */
  char why[240];
  /* alpha and B by dr_plan_fit over the fastest rank's duration of each
   * (step, gradient all-reduce) pair. */
  double alpha_ms, bytes_per_ms;
  size_t n_samples, n_sizes;  /* samples, distinct sizes among them */
  int fit_weak;            /* fewer than two sizes: alpha and B not apart */
  double forward_ms;       /* t0 to bwd_t0: data and forward */
  double backward_ms;      /* bwd_t1 - bwd_t0 */
  double optimizer_ms;     /* t1 - max(bwd_t1, last all-reduce's end) */
  double first_cap_bytes;  /* DDP's and train's default, 1 MiB */
  size_t n_params;         /* gradients the model was given */
  double caps_mib[DR_DG_MAX_CAPS];
  dr_plan_result_t cand[DR_DG_MAX_CAPS];
  size_t n_caps, best;
  int change;              /* best beats the cap in use by DR_DG_GAIN_FRAC */
  dr_plan_result_t in_use; /* the model on the trace's own buckets */
  double in_use_mib;       /* the largest of them */
  double measured_step_ms;
  char how[120];           /* "pass bucket_cap_mb=N to ..." */
} dr_dg_recommend_t;

/* The backward pass's slowest ops (diag_backward.c), on one rank: the
 * rank whose backward pass, summed over the analysed steps that have one
 * with ops, is the longest (the one the others wait for, when they wait
 * for a backward pass; the lowest rank of equals). Its ops are summed by
 * name (dr_dg_op_t: self time, host time) over those steps, and ranked by
 * that total. */
#define DR_DG_TOP_OPS 5

typedef struct {
  char name[DR_DG_OP_NAME];
  double total_ms;         /* over the steps */
  double step_ms;          /* total_ms / steps: the mean per step */
  double share;            /* total_ms / the backward pass over the same
                              steps (ops on two threads at once can take
                              the sum of shares past 1) */
  size_t n_runs;           /* over the steps */
} dr_dg_op_stats_t;

typedef struct {
  size_t n_steps;          /* the steps summed; 0: no backward ops in the
                              analysed steps (nothing else is set) */
  int rank;                /* -1: unknown (the trace does not say) */
  const char *path;        /* its trace, borrowed from the input */
  double backward_ms;      /* the rank's backward pass, summed over them */
  double ops_ms;           /* all its backward ops, summed over them */
  size_t n_kinds;          /* distinct op names */
  dr_dg_op_stats_t top[DR_DG_TOP_OPS]; /* the largest totals first (equal
                              ones by name) */
  size_t n_top;
} dr_dg_backward_t;

#define DR_DG_MAX_NOTES 16
#define DR_DG_MAX_PATTERNS 8

typedef struct {
  char source[16], backend[16]; /* the first rank's; "mixed" if they differ */
  size_t n_ranks;          /* traces given */
  size_t n_used;           /* ranks analysed (with steps) */
  int world;               /* the largest the traces say, 0: unknown */
  int *missing;            /* ranks of [0, world) without a trace */
  size_t n_missing;
  size_t n_steps;          /* the common steps analysed */
  uint64_t first_step, last_step;
  dr_dg_stats_t job;
  dr_dg_stats_t *ranks;    /* [n_used], by rank */
  dr_dg_bucket_stats_t *buckets;
  size_t n_buckets;
  int have_backward, have_colls, have_grad_colls, have_sizes;
  dr_dg_pattern_t patterns[DR_DG_MAX_PATTERNS];
  size_t n_patterns;
  dr_dg_recommend_t rec;
  dr_dg_backward_t bwd;    /* the backward pass's slowest ops */
  char notes[DR_DG_MAX_NOTES][240]; /* what is missing or was left out */
  size_t n_notes;
} dr_dg_analysis_t;

typedef struct {
  /* Only steps numbered in [step_from, step_to] (both inclusive). */
  uint64_t step_from, step_to;
} dr_dg_options_t;

/* Every step. */
#define DR_DG_OPTIONS_ALL {0, UINT64_MAX}

/* Analyses ranks[0..n) (borrowed: *out points into their paths; keep them
 * until dr_dg_analysis_free). opt NULL: every step. Missing data (no
 * steps, no collectives, no backward pass, unknown sizes, missing ranks,
 * unequal steps) gives a partial analysis whose notes say what is
 * missing, never an error. 0, or -ENOMEM (then *out holds nothing to
 * free). */
int dr_dg_analyze(const dr_dg_rank_t *ranks, size_t n,
                  const dr_dg_options_t *opt, dr_dg_analysis_t *out);

void dr_dg_analysis_free(dr_dg_analysis_t *a);

/* Adds a note (printf-style), as the analysis does for what is missing;
 * the command adds the files it could not read. Past DR_DG_MAX_NOTES the
 * last says more were left out. */
void dr_dg_analysis_note(dr_dg_analysis_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The default candidates, MiB: those of `ddprun plan`. */
extern const double dr_dg_caps_mib[];
extern const size_t dr_dg_n_caps;

#endif /* DR_DIAG_ANALYZE_H */
