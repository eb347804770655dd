/* The patterns `ddprun diagnose` names, each with its numbers and what to
 * try. Thresholds: diag_analyze.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_internal.h"
#include "plan.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n), signed values included; 0 when n is 0. */
static double median_signed(double *v, size_t n) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static dr_dg_pattern_t *add(dr_dg_analysis_t *a, dr_dg_pattern_kind_t kind,
                            const char *name) {
  dr_dg_pattern_t *p = &a->patterns[a->n_patterns++];
  memset(p, 0, sizeof(*p));
  p->kind = kind;
  p->name = name;
  p->rank = -1;
  p->cause = "";
  return p;
}

/* The bucket size advice, when there is one. */
static void advise(const dr_dg_analysis_t *a, char *out, size_t len) {
  if (a->rec.ok && a->rec.change)
    snprintf(out, len, " (the model's pick: %g MiB)",
             a->rec.caps_mib[a->rec.best]);
  else
    out[0] = '\0';
}

static void late_start(const dr__dg_ctx_t *c, dr_dg_analysis_t *a, double *buf) {
  size_t n = 0;
  for (size_t i = 0; i < c->n_ranks * c->n_steps; i++) {
    const dr__dg_sample_t *m = &c->s[i];
    if (m->bwd >= 0 && m->n_grad > 0)
      buf[n++] = (m->grad[0]->start_us - m->st->bwd_t0_us) / 1000.0;
  }
  double first = dr__dg_median(buf, n);
  double bwd = a->job.backward_ms;
  if (first < 0 || !(bwd > 0) || first <= DR_DG_LATE_FRAC * bwd)
    return;
  dr_dg_pattern_t *p = add(a, DR_DG_PAT_LATE_START, "late_start");
  p->ms = first;
  p->frac = first / bwd;
  char size[48] = "", pick[48];
  if (a->n_buckets > 0 && a->buckets[0].mib >= 0)
    snprintf(size, sizeof(size), ", its bucket %.3g MiB", a->buckets[0].mib);
  advise(a, pick, sizeof(pick));
  snprintf(p->text, sizeof(p->text),
           "late start: the first all-reduce starts %.1f ms into the backward "
           "pass (%.0f%%%s): the buckets are too large; smaller buckets start "
           "sooner%s", first, 100 * p->frac, size, pick);
}

/* Communication all but hidden behind the backward pass. */
static int mostly_hidden(const dr_dg_stats_t *j) {
  return j->comm_ms > 0 && j->exposed_ms >= 0 &&
         j->exposed_ms <= DR_DG_HIDDEN_FRAC * j->comm_ms;
}

/* A backlog that the backward pass hides costs nothing: only one that
 * leaves communication exposed is named. */
static void backlog(const dr__dg_ctx_t *c, dr_dg_analysis_t *a, double *buf) {
  if (mostly_hidden(&a->job))
    return;
  size_t ns = c->n_ranks * c->n_steps, n = 0;
  for (size_t i = 0; i < ns; i++)
    if (c->s[i].n_grad > 0)
      buf[n++] = c->s[i].backlog;
  double ms = dr__dg_median(buf, n);
  double bwd = a->job.backward_ms;
  if (!(ms > DR_DG_BACKLOG_FRAC * bwd) || !(bwd > 0))
    return;
  n = 0;
  for (size_t i = 0; i < ns; i++)
    if (c->s[i].n_grad > 0)
      buf[n++] = (double)c->s[i].backlog_n;
  dr_dg_pattern_t *p = add(a, DR_DG_PAT_BACKLOG, "backlog");
  p->ms = ms;
  p->frac = ms / bwd;
  p->n = (size_t)(dr__dg_median(buf, n) + 0.5);
  const dr_dg_recommend_t *rec = &a->rec;
  char why[240], pick[48];
  advise(a, pick, sizeof(pick));
  if (rec->n_samples == 0 || rec->fit_weak) {
    p->cause = "unknown";
    snprintf(why, sizeof(why), "per-call cost and bandwidth cannot be told "
             "apart (%s)", rec->n_samples == 0 ? "the all-reduces' sizes are "
             "not in the traces" : "all the all-reduces have one size");
  } else {
    double mean = 0;
    for (size_t k = 0; k < a->n_buckets; k++)
      mean += a->buckets[k].mib * 1048576.0 / (double)a->n_buckets;
    double call = rec->alpha_ms + mean / rec->bytes_per_ms;
    p->cause_ms = rec->alpha_ms;
    p->share = call > 0 ? rec->alpha_ms / call : 0;
    if (p->share >= DR_DG_ALPHA_SHARE) {
      p->cause = "per_call";
      snprintf(why, sizeof(why), "the per-call cost dominates (alpha %.2f ms "
               "of %.2f ms per all-reduce): larger buckets send the same "
               "bytes in fewer calls%s", rec->alpha_ms, call, pick);
    } else {
      p->cause = "bandwidth";
      snprintf(why, sizeof(why), "bandwidth bound (alpha %.2f ms of %.2f ms "
               "per all-reduce, %.3g MiB/ms): not a bucket problem; send "
               "fewer bytes (a bf16 compression hook) or use a faster link",
               rec->alpha_ms, call, rec->bytes_per_ms / 1048576.0);
    }
  }
  snprintf(p->text, sizeof(p->text),
           "backlog: %zu all-reduces back to back for %.1f ms (%.0f%% of the "
           "backward pass), gradients ready faster than they are sent: %s",
           p->n, ms, 100 * p->frac, why);
}

static int tail(dr_dg_analysis_t *a) {
  double ex = a->job.exposed_ms, step = a->job.step_ms;
  if (!(step > 0) || !(ex > DR_DG_TAIL_FRAC * step))
    return 0;
  dr_dg_pattern_t *p = add(a, DR_DG_PAT_TAIL, "tail");
  p->ms = ex;
  p->frac = ex / step;
  char why[200], pick[48];
  advise(a, pick, sizeof(pick));
  if (a->job.wait_ms > 0.5 * ex)
    snprintf(why, sizeof(why), "%.1f ms of it is waiting for a slower rank",
             a->job.wait_ms);
  else
    snprintf(why, sizeof(why), "the optimizer waits for the last buckets; "
             "smaller buckets end sooner after the last gradient%s", pick);
  snprintf(p->text, sizeof(p->text),
           "tail: %.1f ms of communication after the backward pass (%.0f%% of "
           "the step): %s", ex, 100 * p->frac, why);
  return 1;
}

static void all_hidden(dr_dg_analysis_t *a) {
  const dr_dg_stats_t *j = &a->job;
  if (!mostly_hidden(j))
    return;
  const char *names[] = {"forward", "backward", "optimizer", "data"};
  double v[] = {j->forward_ms, j->backward_ms, j->optimizer_ms, j->data_ms};
  size_t big = 0;
  for (size_t i = 1; i < 4; i++)
    if (v[i] > v[big])
      big = i;
  dr_dg_pattern_t *p = add(a, DR_DG_PAT_ALL_HIDDEN, "all_hidden");
  p->ms = j->comm_ms;
  p->frac = 1 - j->exposed_ms / j->comm_ms;
  p->cause = names[big];
  p->cause_ms = v[big];
  snprintf(p->text, sizeof(p->text),
           "all hidden: %.0f%% of the %.1f ms of communication runs behind the "
           "backward pass; the buckets are not the bottleneck: most of the "
           "step goes to %s%s (%.1f ms of %.1f ms)", 100 * p->frac, p->ms,
           big == 3 ? "" : "the ", big == 3 ? "data loading" : names[big],
           v[big], j->step_ms);
}

/* Field f (0 arrival, 1 data, 2 forward + backward) of rank r at step k,
 * or -1 when unknown. */
static double field_of(const dr__dg_ctx_t *c, size_t r, size_t k, int f) {
  const dr__dg_sample_t *m = dr__dg_at(c, r, k);
  return f == 0 ? m->arrival : f == 1 ? m->data
         : m->fwd >= 0 && m->bwd >= 0 ? m->fwd + m->bwd : -1;
}

/* The median of sorted s[0..m) less one element equal to x (x one of
 * them), or of all of s when x < 0 (not one of them): what sorting the
 * others alone would give, without sorting them again. -1 when none is
 * left. */
static double median_without(const double *s, size_t m, double x) {
  size_t skip = m; /* none */
  if (x >= 0) {
    size_t lo = 0, hi = m; /* the first element >= x */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (s[mid] < x)
        lo = mid + 1;
      else
        hi = mid;
    }
    skip = lo;
    m--;
  }
  if (m == 0)
    return -1;
#define AT(i) s[(i) < skip ? (i) : (i) + 1]
  return m % 2 ? AT(m / 2) : (AT(m / 2 - 1) + AT(m / 2)) / 2;
#undef AT
}

/* The median of field f at step k over every rank but skip: a rank is
 * compared with the others, so that with few ranks (2: the median of all
 * would be half its own delay) its excess is not halved. -1 when none. */
static double others_median(const dr__dg_ctx_t *c, size_t k, int f,
                            size_t skip, double *tmp) {
  size_t n = 0;
  for (size_t r = 0; r < c->n_ranks; r++) {
    double x = r != skip ? field_of(c, r, k, f) : -1;
    if (x >= 0)
      tmp[n++] = x;
  }
  return n > 0 ? median_signed(tmp, n) : -1;
}

/* The rank that arrives last by most, why (the phase that is longer than
 * the other ranks' by most), and the step if that phase took as long as
 * theirs (see diag_analyze.h for arrival, wait and own). */
static int slow_rank(const dr__dg_ctx_t *c, dr_dg_analysis_t *a, double *buf) {
  size_t nr = c->n_ranks, nk = c->n_steps;
  if (nr < 2 || nk == 0 || !(a->job.step_ms > 0))
    return 0;
  int rc = 0;
  double *tmp = malloc(nr * sizeof(double));
  if (tmp == NULL)
    return -ENOMEM;
  /* Each rank's arrival against the others' median, at every step: one
   * sort per step (the others' median is then that of the sorted step
   * less the rank's own value), into buf rank-major, NAN where unknown. */
  for (size_t k = 0; k < nk; k++) {
    size_t m = 0;
    for (size_t r = 0; r < nr; r++) {
      double x = field_of(c, r, k, 0);
      if (x >= 0)
        tmp[m++] = x;
    }
    qsort(tmp, m, sizeof(*tmp), cmp_double);
    for (size_t r = 0; r < nr; r++) {
      double mine = field_of(c, r, k, 0);
      double others = median_without(tmp, m, mine);
      buf[r * nk + k] = mine >= 0 && others >= 0 ? mine - others : NAN;
    }
  }
  size_t worst = 0;
  double worst_ex = 0;
  for (size_t r = 0; r < nr; r++) {
    double *row = buf + r * nk;
    size_t n = 0;
    for (size_t k = 0; k < nk; k++)
      if (!isnan(row[k]))
        row[n++] = row[k];
    double ex = median_signed(row, n);
    if (n > 0 && ex > worst_ex) {
      worst = r;
      worst_ex = ex;
    }
  }
  if (!(worst_ex > DR_DG_SLOW_FRAC * a->job.step_ms))
    goto out;
  /* Only a rank the others wait for (their median wait above 0): without
   * a collective that ties them, a slower rank slows no one. */
  size_t n = 0;
  for (size_t r = 0; r < nr; r++)
    if (r != worst)
      buf[n++] = a->ranks[r].wait_ms;
  if (!(dr__dg_median(buf, n) > 0))
    goto out;
  /* Why it is late: its data loading or its forward and backward, each
   * against the other ranks'. */
  double excess[2];
  for (int f = 1; f < 3; f++) {
    n = 0;
    for (size_t k = 0; k < nk; k++) {
      double x = field_of(c, worst, k, f);
      double others = others_median(c, k, f, worst, tmp);
      if (x >= 0 && others >= 0)
        buf[n++] = x - others;
    }
    excess[f - 1] = median_signed(buf, n);
  }
  int by_data = excess[0] >= excess[1];
  int cause_f = by_data ? 1 : 2;
  /* The what-if takes off only the cause's excess: the rank's own step
   * keeps the communication it saw, and a phase that is longer for
   * reasons every rank shares in a normal step (its own communication
   * threads' contention on its CPU) is not counted as late. The step is
   * then the longest own step of all ranks. */
  n = 0;
  for (size_t k = 0; k < nk; k++) {
    const dr__dg_sample_t *j = dr__dg_at(c, worst, k);
    double x = field_of(c, worst, k, cause_f);
    double others = others_median(c, k, cause_f, worst, tmp);
    if (j->own < 0 || x < 0 || others < 0)
      continue;
    double late = x - others;
    double step = j->own - (late > 0 ? late : 0);
    for (size_t r = 0; r < nr; r++)
      if (r != worst && dr__dg_at(c, r, k)->own > step)
        step = dr__dg_at(c, r, k)->own;
    buf[n++] = step;
  }
  double whatif = median_signed(buf, n);
  if (n == 0 || !(whatif < a->job.step_ms))
    goto out;
  dr_dg_pattern_t *p = add(a, DR_DG_PAT_SLOW_RANK, "slow_rank");
  p->rank = c->rank[worst]->rank;
  p->ms = worst_ex;
  p->frac = worst_ex / a->job.step_ms;
  p->data_excess_ms = excess[0];
  p->compute_excess_ms = excess[1];
  p->cause = by_data ? "data" : "compute";
  p->cause_ms = by_data ? excess[0] : excess[1];
  p->whatif_step_ms = whatif;
  p->whatif_frac = whatif / a->job.step_ms - 1;
  snprintf(p->text, sizeof(p->text),
           "slow rank: rank %d finishes its backward pass %.1f ms after the "
           "other ranks (their median) and they wait for it; its %s takes "
           "%.1f ms more than theirs (%s); if rank %d ran at their speed the "
           "step would be %.1f ms (%+.0f%%)", p->rank, worst_ex,
           by_data ? "data loading" : "forward and backward", p->cause_ms,
           by_data ? "look at its input pipeline: loader workers, storage"
                   : "look at its device and host: clocks, other processes, "
                     "CPU binding",
           p->rank, whatif, 100 * p->whatif_frac);
out:
  free(tmp);
  return rc;
}

int dr__dg_patterns(const dr__dg_ctx_t *c, dr_dg_analysis_t *a) {
  size_t ns = c->n_ranks * c->n_steps;
  double *buf = malloc((ns > 0 ? ns : 1) * sizeof(double));
  if (buf == NULL)
    return -ENOMEM;
  late_start(c, a, buf);
  backlog(c, a, buf);
  if (!tail(a))
    all_hidden(a);
  int rc = slow_rank(c, a, buf);
  free(buf);
  return rc;
}
