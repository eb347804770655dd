/* --bucket-cap-mb auto and --profile-out: profile the first steps, plan,
 * rebuild the buckets, re-plan on drift. See train_plan.h. */
#include "train_plan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "fault_inject.h"
#include "plan.h"
#include "plan_profile.h"
#include "stats.h"
#include "train_plan_overlap.h"

#define MIB 1048576.0
#define PROF_STEPS 5     /* steps profiled per plan (their medians) */
#define PROF_FIRST 1     /* first profiled step, after the rebuild (0-based) */
#define WINDOW 5         /* steps per drift check */
#define DRIFT 0.20       /* a step this far from the prediction drifts */
#define DRIFT_WINDOWS 2  /* consecutive drifting windows before a re-plan */
#define MAX_REPLANS 3
#define MAX_COLLS 256    /* all-reduces kept from the profiled steps */

static const double caps_mib[] = {1, 2, 5, 10, 25, 50, 100};
#define N_CAPS (sizeof(caps_mib) / sizeof(caps_mib[0]))

enum { ST_OFF, ST_PROFILE, ST_CHECK };

struct dr_train_plan {
  int state;
  double alpha_ms, bytes_per_ms;
  dr_plan_compress_t cmp;   /* the run's compression and its rates */
  size_t n_params;
  uint64_t prof_from;       /* executed-step index of the first profiled */
  size_t prof_n;
  double *ready;            /* [PROF_STEPS][n_params], in fill order */
  double fwd[PROF_STEPS], bwd[PROF_STEPS], opt[PROF_STEPS], stp[PROF_STEPS];
  double ovl[PROF_STEPS];   /* all-reduce ms during the backward pass */
  /* What overlap costs (train_plan_overlap.h), rank 0: 0 before the
   * first plan, 1 while profiling at the chosen cap, 2 measured (or not
   * needed); the first profile kept meanwhile, its overlap. */
  int calib;
  double overlap_cost;
  dr_plan_profile_t base;
  double base_ovl;
  /* With compression: the profiled steps' own all-reduces (bytes sent,
   * ms), up to MAX_COLLS, for the fit of their cost. */
  double coll_bytes[MAX_COLLS], coll_ms[MAX_COLLS];
  size_t n_colls;
  double predicted_ms;      /* of the cap in use */
  uint64_t planned_at;      /* first executed step on the planned cap */
  uint64_t check_from;      /* first step of the current window */
  int drifting, replans;
};

static int probe(dr_run_t *r) {
  struct dr_train_plan *p = r->plan;
  size_t total = dr_model_n_elems(r->model) * sizeof(float);
  char err[256] = "";
  int rc = dr_train_probe(r->pg, total, &p->alpha_ms, &p->bytes_per_ms, err,
                          sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "the all-reduce probe", rc, err);
  if (r->rank == 0)
    printf("plan: all-reduce probe on %u ranks: alpha %.3f ms, bandwidth "
           "%.4f MiB/ms\n", r->world, p->alpha_ms, p->bytes_per_ms / MIB);
  if (r->rank == 0 && r->cmp != NULL) {
    dr_train_rates(r, &p->cmp);
    printf("plan: compute of the compression: products %.2f GFLOP/s, "
           "elementwise %.3f MiB/ms\n", p->cmp.gemm_flops_per_ms / 1e6,
           p->cmp.cast_bytes_per_ms / MIB);
  }
  return 0;
}

int dr_train_plan_start(dr_run_t *r) {
  const dr_train_config_t *c = &r->c;
  if (!c->bucket_cap_auto && c->profile_out == NULL)
    return 0;
  /* Fail before training, not after it, on a profile that cannot be
   * written. */
  if (c->profile_out != NULL && r->rank == 0) {
    FILE *f = fopen(c->profile_out, "a");
    if (f == NULL || fclose(f) != 0) {
      fprintf(stderr, "train: cannot write --profile-out %s (%s)\n",
              c->profile_out, strerror(errno));
      return DR_TRAIN_ECONFIG;
    }
  }
  struct dr_train_plan *p = calloc(1, sizeof(*p));
  size_t n = dr_model_n_params(r->model);
  if (p == NULL || (p->ready = calloc(PROF_STEPS * (n ? n : 1),
                                      sizeof(double))) == NULL) {
    free(p);
    return dr_train_nomem(r, "the bucket planner's profile of ready times");
  }
  p->n_params = n;
  p->state = ST_PROFILE;
  /* PowerSGD's first steps go uncompressed: profile the compressed,
   * after two of them (the first touch of the error feedback's two
   * buffers, which alternate, costs page faults that later steps do not
   * pay). */
  p->prof_from = PROF_FIRST + (r->cmpc.kind == DR_CMP_POWERSGD
                                   ? r->cmpc.start_step + 2 : 0);
  r->plan = p;
  return probe(r);
}

void dr_train_plan_free(dr_run_t *r) {
  if (r->plan == NULL)
    return;
  dr_plan_profile_free(&r->plan->base);
  free(r->plan->ready);
  free(r->plan);
  r->plan = NULL;
}

static void record(dr_run_t *r, const dr_step_marks_t *m) {
  struct dr_train_plan *p = r->plan;
  const size_t *order = dr_reducer_order(r->red);
  const uint64_t *ready = dr_reducer_param_ready_us(r->red);
  double *row = p->ready + p->prof_n * p->n_params;
  double bwd = (m->backward_end_us - m->backward_us) / 1e3;
  for (size_t k = 0; k < p->n_params; k++) {
    uint64_t t = ready[order[k]];
    /* Never marked (unused): ready when the backward pass ends. */
    row[k] = t >= m->backward_us ? (t - m->backward_us) / 1e3 : bwd;
  }
  if (r->cmp != NULL) {
    const dr_bucket_times_t *t = dr_reducer_bucket_times(r->red);
    size_t nb = dr_reducer_n_buckets(r->red), n2 = dr_cmp_n_round2(r->cmp);
    for (size_t i = 0; i < nb + n2 && p->n_colls < MAX_COLLS; i++) {
      uint64_t bytes, us;
      if (i < nb) {
        bytes = dr_cmp_bucket_bytes(r->cmp, i);
        us = t[i].end_us > t[i].start_us ? t[i].end_us - t[i].start_us : 0;
      } else {
        dr_cmp_round2(r->cmp, i - nb, &bytes, &us);
      }
      p->coll_bytes[p->n_colls] = (double)bytes;
      p->coll_ms[p->n_colls++] = us / 1e3;
    }
  }
  p->fwd[p->prof_n] = (m->backward_us - m->start_us) / 1e3;
  p->bwd[p->prof_n] = bwd;
  p->ovl[p->prof_n] =
      dr_plan_step_overlap_ms(r->red, m->backward_us, m->backward_end_us);
  p->opt[p->prof_n] = (m->end_us - m->comm_end_us) / 1e3;
  p->stp[p->prof_n] = (m->end_us - m->start_us) / 1e3;
  p->prof_n++;
}

/* With compression, the cost of an all-reduce as the profiled steps saw
 * it: they overlap the compute, which slows them beside the probe's
 * (run alone), and fewer bytes make that a larger share. Where they sent
 * at least 1 MiB in one all-reduce, alpha and B from them; else (PowerSGD's
 * small factors) the probe's B and their median excess over it. */
static void fit_in_run(const struct dr_train_plan *p, double *alpha_ms,
                       double *bytes_per_ms) {
  if (p->n_colls < 2)
    return;
  double largest = 0, excess[MAX_COLLS];
  for (size_t i = 0; i < p->n_colls; i++) {
    if (p->coll_bytes[i] > largest)
      largest = p->coll_bytes[i];
    excess[i] = p->coll_ms[i] - p->coll_bytes[i] / *bytes_per_ms;
  }
  if (largest >= MIB) {
    dr_plan_fit(p->coll_bytes, p->coll_ms, p->n_colls, alpha_ms,
                bytes_per_ms);
    return;
  }
  double a = dr_median(excess, p->n_colls);
  *alpha_ms = a > 0 ? a : 0;
}

/* Rank 0: the profile of the recorded steps (medians). */
static int make_profile(dr_run_t *r, dr_plan_profile_t *prof) {
  struct dr_train_plan *p = r->plan;
  memset(prof, 0, sizeof(*prof));
  if (dr_plan_profile_alloc(prof, p->n_params) != 0)
    return -ENOMEM;
  const size_t *order = dr_reducer_order(r->red);
  double v[PROF_STEPS];
  for (size_t k = 0; k < p->n_params; k++) {
    for (size_t s = 0; s < p->prof_n; s++)
      v[s] = p->ready[s * p->n_params + k];
    prof->index[k] = order[k];
    const dr_param_t *pa = dr_model_param(r->model, order[k]);
    prof->bytes[k] = (double)pa->n_elems * 4;
    prof->rows[k] = (double)pa->rows;
    prof->cols[k] = (double)pa->cols;
    prof->ready_ms[k] = dr_median(v, p->prof_n);
  }
  prof->world = r->world;
  prof->cap_bytes = (double)dr_reducer_cap_bytes(r->red);
  prof->first_cap_bytes = r->c.first_bucket_mb * MIB;
  prof->alpha_ms = p->alpha_ms;
  prof->bytes_per_ms = p->bytes_per_ms;
  fit_in_run(p, &prof->alpha_ms, &prof->bytes_per_ms);
  prof->forward_ms = dr_median(p->fwd, p->prof_n);
  prof->backward_ms = dr_median(p->bwd, p->prof_n);
  prof->optimizer_ms = dr_median(p->opt, p->prof_n);
  prof->measured_step_ms = dr_median(p->stp, p->prof_n);
  prof->measured = p->cmp;
  prof->no_overlap = r->c.no_overlap || dr_pg_inline(r->pg);
  /* A cost already measured: this profile's times without it. */
  dr_plan_uncontend(prof, dr_median(p->ovl, p->prof_n), p->overlap_cost);
  return 0;
}

static int write_profile(const char *path, const dr_plan_profile_t *prof) {
  FILE *f = fopen(path, "w");
  if (f == NULL)
    return -errno;
  int rc = dr_plan_profile_write(f, prof);
  if (fclose(f) != 0 && rc == 0)
    rc = -errno;
  return rc;
}

/* Rank 0, on the profile at the cap the first plan chose: the cost of
 * overlap from it and the first profile, which then (uncontended, with
 * that cost) replaces prof. */
static void calibrate(dr_run_t *r, dr_plan_profile_t *prof) {
  struct dr_train_plan *p = r->plan;
  double bwd1 = prof->backward_ms, ov1 = dr_median(p->ovl, p->prof_n);
  double bwd0 = p->base.backward_ms, ov0 = p->base_ovl;
  p->overlap_cost = dr_plan_fit_overlap_cost(bwd0, ov0, bwd1, ov1);
  printf("plan: overlap costs the backward pass %.3f ms per ms of "
         "all-reduce during it (%.2f ms with %.2f ms of overlap at %g MiB, "
         "%.2f ms with %.2f ms at %g MiB)\n", p->overlap_cost, bwd0, ov0,
         p->base.cap_bytes / MIB, bwd1, ov1, prof->cap_bytes / MIB);
  dr_plan_profile_free(prof);
  *prof = p->base;
  memset(&p->base, 0, sizeof(p->base));
  dr_plan_uncontend(prof, ov0, p->overlap_cost);
  p->calib = 2;
}

/* Rank 0: profile, predictions, printout; *cap_bytes and *pred_ms are the
 * choice (with auto) or the cap in use; *again: profile at that cap once
 * more, to measure what its overlap costs. Returns an exit code. */
static int decide(dr_run_t *r, uint64_t step, double *cap_bytes,
                  double *pred_ms, int *again) {
  struct dr_train_plan *p = r->plan;
  dr_plan_profile_t prof;
  *again = 0;
  if (make_profile(r, &prof) != 0)
    return dr_train_nomem(r, "the bucket planner's profile");
  int recal = p->calib == 1;
  if (recal)
    calibrate(r, &prof);
  if (r->c.profile_out != NULL) {
    int rc = write_profile(r->c.profile_out, &prof);
    if (rc != 0) {
      fprintf(stderr, "train: cannot write --profile-out %s (%s)\n",
              r->c.profile_out, dr_strerror(rc));
      dr_plan_profile_free(&prof);
      return DR_TRAIN_ECONFIG;
    }
  }
  /* Without overlap every bucket waits for the end of the backward
   * pass (the profile says so: dr_plan_profile_predict starts them
   * there): with --no-overlap, and where the collectives run on the
   * compute thread (pg.h's inline schedule). */
  int overlaps = !prof.no_overlap;
  if (!overlaps && p->calib == 0 && r->c.bucket_cap_auto &&
      dr_pg_inline(r->pg))
    printf("plan: %s: no all-reduce overlaps the backward pass\n",
           dr_pg_schedule_note(r->pg));
  double caps[N_CAPS + 1];
  for (size_t i = 0; i < N_CAPS; i++)
    caps[i] = caps_mib[i] * MIB;
  caps[N_CAPS] = (double)dr_reducer_cap_bytes(r->red); /* the cap in use */
  dr_plan_result_t res[N_CAPS + 1];
  if (dr_plan_profile_predict(&prof, caps, N_CAPS + 1, NULL, res) != 0) {
    dr_plan_profile_free(&prof);
    return dr_train_nomem(r, "the bucket planner's predictions");
  }
  size_t best = r->c.bucket_cap_auto ? dr_plan_best(res, N_CAPS) : N_CAPS;
  if (prof.alpha_ms != p->alpha_ms || prof.bytes_per_ms != p->bytes_per_ms)
    printf("plan: all-reduces of the profiled steps: alpha %.3f ms, "
           "bandwidth %.4f MiB/ms (%zu of them)\n", prof.alpha_ms,
           prof.bytes_per_ms / MIB, p->n_colls);
  if (recal)
    printf("plan: profile of steps %llu-%llu at %g MiB: measured step %.2f "
           "ms (the model's at this cap: %.2f ms); planned from the profile "
           "at %g MiB without its overlap's cost (backward %.2f ms)\n",
           (unsigned long long)(step + 2 - p->prof_n),
           (unsigned long long)(step + 1), caps[N_CAPS] / MIB,
           dr_median(p->stp, p->prof_n), res[N_CAPS].step_ms,
           prof.cap_bytes / MIB, prof.backward_ms);
  else
    printf("plan: profile of steps %llu-%llu at %g MiB: forward %.2f ms, "
           "backward %.2f ms, optimizer %.2f ms, measured step %.2f ms (the "
           "model's at this cap: %.2f ms)\n",
           (unsigned long long)(step + 2 - p->prof_n),
           (unsigned long long)(step + 1), prof.cap_bytes / MIB,
           prof.forward_ms, prof.backward_ms, prof.optimizer_ms,
           prof.measured_step_ms, res[N_CAPS].step_ms);
  for (size_t i = 0; i < N_CAPS; i++)
    printf("plan: cap %g MiB: %zu buckets, all-reduce %.2f ms, finish %.2f "
           "ms, exposed %.2f ms, hidden %.3f, predicted step %.2f ms%s\n",
           caps_mib[i], res[i].n_buckets, res[i].allreduce_ms,
           res[i].finish_ms, res[i].exposed_ms, res[i].hidden_frac,
           res[i].step_ms, i == best ? " (chosen)" : "");
  if (best == N_CAPS)
    printf("plan: cap %g MiB as given: predicted step %.2f ms\n",
           caps[N_CAPS] / MIB, res[N_CAPS].step_ms);
  *cap_bytes = caps[best];
  *pred_ms = res[best].step_ms;
  /* A cap other than the profiled one whose all-reduces would overlap the
   * backward pass by 5% of it or more: measure there what that costs
   * (once; a re-plan keeps the cost). */
  double hidden = res[best].comm_ms - res[best].exposed_ms;
  if (p->calib == 0 && r->c.bucket_cap_auto && overlaps &&
      caps[best] != prof.cap_bytes && hidden > 0.05 * prof.backward_ms) {
    *again = 1;
    p->calib = 1;
    p->base = prof;
    p->base_ovl = dr_median(p->ovl, p->prof_n);
    memset(&prof, 0, sizeof(prof));
    printf("plan: profiling %d steps at %g MiB to measure what its "
           "overlap costs the backward pass\n", PROF_STEPS,
           *cap_bytes / MIB);
  } else if (p->calib == 0) {
    p->calib = 2;
  }
  /* For tests: a prediction the run cannot meet, to exercise re-plans. */
  double scale = dr_fault_plan_scale();
  if (scale > 0) {
    *pred_ms *= scale;
    printf("plan: DDPRUN_PLAN_TEST_SCALE: the prediction is scaled to %.2f "
           "ms\n", *pred_ms);
  }
  dr_plan_profile_free(&prof);
  return 0;
}

/* Every rank: rank 0's decision, then the rebuild. */
static int plan(dr_run_t *r, uint64_t step, uint64_t i) {
  struct dr_train_plan *p = r->plan;
  /* cap bytes, predicted ms, profile again; or -1, exit code */
  double d[3] = {0, 0, 0};
  int code = 0, again = 0;
  if (r->rank == 0 && (code = decide(r, step, &d[0], &d[1], &again)) != 0) {
    d[0] = -1;
    d[1] = code;
  }
  d[2] = again;
  char err[256] = "";
  if (r->world > 1) {
    if (r->rank != 0)
      dr_train_hold_stop();
    int rc = dr_pg_broadcast_sync(r->pg, d, sizeof(d), 0, err, sizeof(err));
    if (r->rank != 0 && rc == 0 && d[0] < 0)
      return dr_train_peer_failed(r, "rank 0 could not make the bucket plan");
    if (r->rank != 0)
      dr_train_release_stop();
    if (rc != 0)
      return dr_train_comm_failed(r, "the bucket plan broadcast", rc, err);
  }
  if (d[0] < 0)
    return (int)d[1];
  size_t cap = (size_t)d[0];
  if (cap != dr_reducer_cap_bytes(r->red)) {
    int rc = dr_reducer_replan(r->red, cap);
    if (rc == -ENOMEM) {
      char what[96];
      snprintf(what, sizeof(what), "the gradient buckets at %g MiB",
               d[0] / MIB);
      return dr_train_nomem(r, what);
    }
    if (rc != 0) {
      fprintf(stderr, "train: rank %u: cannot rebuild the buckets at %g MiB "
              "(%s)\n", r->rank, d[0] / MIB, dr_strerror(rc));
      return DR_TRAIN_EFAIL;
    }
  }
  if (r->c.bucket_cap_auto) {
    if (r->rank == 0)
      printf("plan: bucket cap %g MiB from step %llu\n", d[0] / MIB,
             (unsigned long long)step + 2);
    fprintf(stderr, "train: rank %u: bucket cap %g MiB from step %llu: %s\n",
            r->rank, d[0] / MIB, (unsigned long long)step + 2,
            dr_reducer_describe(r->red));
  }
  p->predicted_ms = d[1];
  p->planned_at = i + 1;
  p->check_from = i + 1;
  p->drifting = 0;
  p->state = r->c.bucket_cap_auto ? ST_CHECK : ST_OFF;
  if (d[2] != 0) {
    /* The next steps, after the rebuild's first, are profiled at the new
     * cap; the plan is made again from both profiles. */
    p->state = ST_PROFILE;
    p->prof_from = i + 1 + PROF_FIRST;
    p->prof_n = 0;
    p->n_colls = 0;
  }
  return 0;
}

/* Rank 0 compares the window's median step with the prediction; every
 * rank learns whether to re-plan. Returns an exit code. */
static int check(dr_run_t *r, uint64_t step, uint64_t i) {
  struct dr_train_plan *p = r->plan;
  int32_t replan = 0;
  if (r->rank == 0) {
    double med = dr_report_median_step_ms(r, step + 1 - WINDOW, step + 1);
    double off = p->predicted_ms > 0 ? med / p->predicted_ms - 1 : 0;
    p->drifting = fabs(off) > DRIFT ? p->drifting + 1 : 0;
    if (p->drifting > 0)
      printf("plan: steps %llu-%llu: median step %.2f ms, %+.0f%% from the "
             "predicted %.2f ms\n", (unsigned long long)(step + 2 - WINDOW),
             (unsigned long long)step + 1, med, off * 100, p->predicted_ms);
    replan = p->drifting >= DRIFT_WINDOWS;
  }
  if (r->world > 1) {
    char err[256] = "";
    int rc = dr_pg_broadcast_sync(r->pg, &replan, sizeof(replan), 0, err,
                                  sizeof(err));
    if (rc != 0)
      return dr_train_comm_failed(r, "the re-plan broadcast", rc, err);
  }
  p->check_from = i + 1;
  if (!replan)
    return 0;
  p->replans++;
  if (r->rank == 0)
    printf("plan: re-planning (%d of at most %d)\n", p->replans, MAX_REPLANS);
  p->state = ST_PROFILE;
  p->prof_from = i + 1;
  p->prof_n = 0;
  p->n_colls = 0;
  return probe(r);
}

/* Rank 0, at the last step: how the plan held up. */
static void report(dr_run_t *r, uint64_t step) {
  struct dr_train_plan *p = r->plan;
  if (r->rank != 0)
    return;
  if (r->c.profile_out != NULL && p->planned_at == 0)
    fprintf(stderr, "train: the run ended before the profile (it needs %d "
            "steps); --profile-out %s holds nothing\n",
            PROF_FIRST + PROF_STEPS, r->c.profile_out);
  if (!r->c.bucket_cap_auto)
    return;
  uint64_t from = r->start_step + p->planned_at;
  if (p->planned_at == 0 || from > step) {
    printf("plan: the run ended before a plan (it needs %d steps); the "
           "bucket cap stayed %g MiB\n", PROF_FIRST + PROF_STEPS + 1,
           dr_reducer_cap_bytes(r->red) / MIB);
    return;
  }
  printf("plan: bucket cap %g MiB over steps %llu-%llu: median step %.2f ms, "
         "predicted %.2f ms\n", dr_reducer_cap_bytes(r->red) / MIB,
         (unsigned long long)from + 1, (unsigned long long)step + 1,
         dr_report_median_step_ms(r, from, step + 1), p->predicted_ms);
}

int dr_train_plan_step(dr_run_t *r, uint64_t step, const dr_step_marks_t *m) {
  struct dr_train_plan *p = r->plan;
  if (p == NULL)
    return 0;
  uint64_t i = step - r->start_step; /* steps executed by this run */
  int code = 0;
  if (p->state == ST_PROFILE && i >= p->prof_from) {
    record(r, m);
    if (p->prof_n == PROF_STEPS)
      code = plan(r, step, i);
  } else if (p->state == ST_CHECK && i + 1 - p->check_from == WINDOW) {
    /* Every rank knows as well as rank 0 when a re-plan is no longer
     * allowed, or would not take effect before the end: then no more
     * checks. */
    if (p->replans < MAX_REPLANS &&
        step + 1 + PROF_STEPS + WINDOW <= r->total_steps)
      code = check(r, step, i);
    else
      p->state = ST_OFF;
  }
  if (code == 0 && step + 1 == r->total_steps)
    report(r, step);
  return code;
}
