/* The bucket size for a traced job: the planner's model (plan.h) fitted to
 * the trace, then run on the usual candidate caps.
 *
 * The fit. Each (step, k-th gradient all-reduce) gives one sample: its
 * size and the shortest duration any rank saw. The rank that arrived last
 * waits for no one, so its duration is the collective's own cost; the
 * others' include the wait for it. dr_plan_fit fits alpha + bytes / B.
 *
 * The gradients. The model wants every gradient's size and ready time;
 * the trace gives the gradients' ready times (grad_ready_us) but sizes
 * only per bucket. Bucket j takes the gradients ready after bucket j-1's
 * ready time and no later than its own (ready times taken as a running
 * maximum, so an early bucket cannot take back a later one's gradients);
 * its bytes are split evenly over them. A bucket with no such gradient
 * becomes one gradient of its size at its ready time; gradients ready
 * after the last bucket belong to no bucket and are left out. Fill order
 * is ready order, the order DDP and train rebuild their buckets in after
 * the first step. Ready times, bucket sizes and the step's other parts
 * are medians over the (rank, step) samples of the most common shape
 * (number of gradients and of buckets).
 *
 * The step around the backward pass: forward = bwd_t0 - t0 (data and
 * forward, as plan_profile.h defines it), optimizer = t1 - max(bwd_t1, the
 * last gradient all-reduce's end), so the model's step on the trace's own
 * buckets lands on the measured step when the fit is good. The first
 * bucket's cap is 1 MiB, DDP's and train's default. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_internal.h"
#include "plan.h"
#include "plan_profile.h"

#define READY_EPS_MS 1e-6 /* a gradient at its bucket's ready time */

/* The fit over the fastest rank's duration of every (step, bucket). */
static int fit(const dr__dg_ctx_t *c, dr_dg_recommend_t *rec) {
  size_t cap = 0;
  for (size_t k = 0; k < c->n_steps; k++) {
    size_t most = 0;
    for (size_t r = 0; r < c->n_ranks; r++)
      if (dr__dg_at(c, r, k)->n_grad > most)
        most = dr__dg_at(c, r, k)->n_grad;
    cap += most;
  }
  double *x = malloc((cap ? cap : 1) * sizeof(double));
  double *t = malloc((cap ? cap : 1) * sizeof(double));
  if (x == NULL || t == NULL) {
    free(x);
    free(t);
    return -ENOMEM;
  }
  size_t n = 0;
  for (size_t k = 0; k < c->n_steps; k++)
    for (size_t j = 0;; j++) {
      double best = -1, bytes = 0;
      for (size_t r = 0; r < c->n_ranks; r++) {
        const dr__dg_sample_t *m = dr__dg_at(c, r, k);
        if (m->n_grad <= j || m->grad[j]->n_bytes == 0)
          continue;
        double d = (m->grad[j]->end_us - m->grad[j]->start_us) / 1000.0;
        if (best < 0 || d < best) {
          best = d;
          bytes = (double)m->grad[j]->n_bytes;
        }
      }
      if (best < 0)
        break;
      x[n] = bytes;
      t[n++] = best;
    }
  rec->n_samples = n;
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < i && x[j] != x[i])
      j++;
    rec->n_sizes += j == i;
  }
  rec->fit_weak = rec->n_sizes < 2;
  if (n > 0)
    dr_plan_fit(x, t, n, &rec->alpha_ms, &rec->bytes_per_ms);
  free(x);
  free(t);
  return 0;
}

typedef struct {
  size_t n_grad, n_buckets, idx;
} shape_t;

static int cmp_shape(const void *a, const void *b) {
  const shape_t *x = a, *y = b;
  if (x->n_grad != y->n_grad)
    return (x->n_grad > y->n_grad) - (x->n_grad < y->n_grad);
  if (x->n_buckets != y->n_buckets)
    return (x->n_buckets > y->n_buckets) - (x->n_buckets < y->n_buckets);
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* The samples of the most common shape among those with a backward pass,
 * gradients and gradient all-reduces: writes their indices into pick and
 * returns how many; SIZE_MAX: out of memory. */
static size_t pick_samples(const dr__dg_ctx_t *c, size_t *pick) {
  size_t ns = c->n_ranks * c->n_steps, n = 0;
  shape_t *v = malloc((ns ? ns : 1) * sizeof(*v));
  if (v == NULL)
    return SIZE_MAX;
  for (size_t i = 0; i < ns; i++)
    if (c->s[i].bwd >= 0 && c->s[i].st->n_grad > 0 && c->s[i].n_grad > 0)
      v[n++] = (shape_t){c->s[i].st->n_grad, c->s[i].n_grad, i};
  qsort(v, n, sizeof(*v), cmp_shape);
  size_t best = 0, best_len = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && cmp_shape(&(shape_t){v[i].n_grad, v[i].n_buckets, 0},
                              &(shape_t){v[j].n_grad, v[j].n_buckets, 0}) == 0)
      j++;
    if (j - i > best_len) {
      best = i;
      best_len = j - i;
    }
    i = j;
  }
  for (size_t i = 0; i < best_len; i++)
    pick[i] = v[best + i].idx;
  free(v);
  return best_len;
}

/* Median over the picked samples of what f gives. */
static double med(const dr__dg_ctx_t *c, const size_t *pick, size_t n,
                  double *buf, double (*f)(const dr__dg_sample_t *, size_t),
                  size_t arg) {
  for (size_t i = 0; i < n; i++)
    buf[i] = f(&c->s[pick[i]], arg);
  return dr__dg_median(buf, n);
}

static double f_grad(const dr__dg_sample_t *m, size_t g) {
  return (m->st->grad_ready_us[g] - m->st->bwd_t0_us) / 1000.0;
}
static double f_bytes(const dr__dg_sample_t *m, size_t j) {
  return (double)m->grad[j]->n_bytes;
}
static double f_ready(const dr__dg_sample_t *m, size_t j) {
  const dr_dg_coll_t *g = m->grad[j];
  return ((g->ready_us >= 0 ? g->ready_us : g->start_us) - m->st->bwd_t0_us) /
         1000.0;
}
static double f_fwd(const dr__dg_sample_t *m, size_t unused) {
  return m->st->t0_us >= 0 ? (m->st->bwd_t0_us - m->st->t0_us) / 1000.0 : -1;
}
static double f_bwd(const dr__dg_sample_t *m, size_t unused) { return m->bwd; }
static double f_opt(const dr__dg_sample_t *m, size_t unused) {
  double e = m->last_end_us > m->st->bwd_t1_us ? m->last_end_us : m->st->bwd_t1_us;
  return m->st->t1_us >= e ? (m->st->t1_us - e) / 1000.0 : -1;
}

/* The gradients (bytes, ready) in fill order from the picked samples'
 * medians, and the trace's own buckets. */
static int build(const dr__dg_ctx_t *c, const size_t *pick, size_t np,
                 dr_plan_profile_t *p, dr_plan_bucket_t **own, size_t *n_own) {
  const dr__dg_sample_t *m0 = &c->s[pick[0]];
  size_t ng = m0->st->n_grad, nb = m0->n_grad;
  double *buf = malloc(np * sizeof(double));
  double *gready = malloc(ng * sizeof(double));
  *own = malloc(nb * sizeof(**own));
  int rc = buf && gready && *own ? dr_plan_profile_alloc(p, ng + nb) : -ENOMEM;
  if (rc != 0)
    goto out;
  for (size_t g = 0; g < ng; g++)
    gready[g] = med(c, pick, np, buf, f_grad, g);
  size_t n = 0, g = 0;
  double upto = -1e300;
  for (size_t j = 0; j < nb; j++) {
    double bytes = med(c, pick, np, buf, f_bytes, j);
    double ready = med(c, pick, np, buf, f_ready, j);
    (*own)[j] = (dr_plan_bucket_t){bytes, ready};
    if (ready > upto)
      upto = ready;
    size_t first = g;
    while (g < ng && gready[g] <= upto + READY_EPS_MS)
      g++;
    if (g == first) {
      p->bytes[n] = bytes;
      p->ready_ms[n] = upto;
      p->index[n] = n;
      n++;
    }
    for (size_t i = first; i < g; i++, n++) {
      p->bytes[n] = bytes / (double)(g - first);
      p->ready_ms[n] = gready[i];
      p->index[n] = n;
    }
  }
  p->n_params = n;
  *n_own = nb;
  p->forward_ms = med(c, pick, np, buf, f_fwd, 0);
  p->backward_ms = med(c, pick, np, buf, f_bwd, 0);
  p->optimizer_ms = med(c, pick, np, buf, f_opt, 0);
out:
  free(buf);
  free(gready);
  return rc;
}

static void how(const char *source, double mib, char *out, size_t len) {
  if (strcmp(source, "torch") == 0)
    snprintf(out, len, "pass bucket_cap_mb=%g to DistributedDataParallel", mib);
  else if (strcmp(source, "train") == 0)
    snprintf(out, len, "run train with --bucket-cap-mb %g", mib);
  else
    snprintf(out, len, "bucket_cap_mb=%g (PyTorch DDP) or --bucket-cap-mb %g "
             "(train)", mib, mib);
}

static int predict(const dr__dg_ctx_t *c, dr_dg_analysis_t *a, size_t *pick,
                   size_t np) {
  dr_dg_recommend_t *rec = &a->rec;
  dr_plan_profile_t p;
  memset(&p, 0, sizeof(p));
  dr_plan_bucket_t *own = NULL;
  size_t n_own = 0;
  int rc = build(c, pick, np, &p, &own, &n_own);
  if (rc == 0 && !(p.forward_ms >= 0 && p.backward_ms >= 0 && p.optimizer_ms >= 0)) {
    snprintf(rec->why, sizeof(rec->why), "the steps' start and end times are "
             "missing: the parts of the step around the backward pass are "
             "unknown");
    goto out;
  }
  p.alpha_ms = rec->alpha_ms;
  p.bytes_per_ms = rec->bytes_per_ms;
  p.first_cap_bytes = 1 * DR__DG_MIB;
  rec->forward_ms = p.forward_ms;
  rec->backward_ms = p.backward_ms;
  rec->optimizer_ms = p.optimizer_ms;
  rec->first_cap_bytes = p.first_cap_bytes;
  rec->n_params = p.n_params;
  rec->n_caps = dr_dg_n_caps;
  double caps[DR_DG_MAX_CAPS];
  for (size_t k = 0; k < rec->n_caps; k++) {
    rec->caps_mib[k] = dr_dg_caps_mib[k];
    caps[k] = dr_dg_caps_mib[k] * DR__DG_MIB;
  }
  if (rc == 0)
    rc = dr_plan_profile_predict(&p, caps, rec->n_caps, NULL, rec->cand);
  if (rc != 0)
    goto out;
  rec->best = dr_plan_best(rec->cand, rec->n_caps);
  dr_plan_cost_t cost = {p.alpha_ms, p.bytes_per_ms, p.backward_ms,
                         p.forward_ms + p.optimizer_ms, 0};
  dr_plan_eval(own, n_own, &cost, &rec->in_use);
  for (size_t j = 0; j < n_own; j++)
    if (own[j].bytes / DR__DG_MIB > rec->in_use_mib)
      rec->in_use_mib = own[j].bytes / DR__DG_MIB;
  rec->measured_step_ms = a->job.step_ms;
  rec->change = rec->cand[rec->best].step_ms <
                (1 - DR_DG_GAIN_FRAC) * rec->in_use.step_ms;
  how(a->source, rec->caps_mib[rec->best], rec->how, sizeof(rec->how));
  rec->ok = 1;
out:
  free(own);
  dr_plan_profile_free(&p);
  return rc;
}

/* Why there are no sizes when a PyTorch rank was profiled without
 * record_shapes: what to change, and what it gives. */
#define NO_SHAPES_WHY                                                        \
  "the traces have no tensor sizes (profiled without record_shapes); "     \
  "profile with torch.profiler.profile(record_shapes=True) to get a "     \
  "bucket size from the all-reduces' sizes"

int dr__dg_recommend(const dr__dg_ctx_t *c, dr_dg_analysis_t *a) {
  dr_dg_recommend_t *rec = &a->rec;
  int no_shapes = 0;
  for (size_t r = 0; r < c->n_ranks; r++)
    no_shapes |= c->rank[r]->no_shapes;
  const char *why = a->n_steps == 0       ? "no steps to analyse"
                    : !a->have_grad_colls ? "no gradient all-reduces in the traces"
                    : !a->have_sizes && no_shapes ? NO_SHAPES_WHY
                    : !a->have_sizes ? "the traces do not give the all-reduces' "
                                       "sizes, so the model cannot be fitted"
                                     : NULL;
  if (a->have_sizes && fit(c, rec) != 0)
    return -ENOMEM;
  if (why == NULL && !a->have_backward)
    why = "no backward pass in the traces: the gradients' ready times are "
          "unknown";
  size_t ns = c->n_ranks * c->n_steps;
  size_t *pick = malloc((ns ? ns : 1) * sizeof(size_t));
  if (pick == NULL)
    return -ENOMEM;
  size_t np = why == NULL ? pick_samples(c, pick) : 0;
  if (np == SIZE_MAX) {
    free(pick);
    return -ENOMEM;
  }
  if (why == NULL && np == 0)
    why = "the traces give no gradient ready times (the backward ops that "
          "produce gradients)";
  int rc = 0;
  if (why != NULL)
    snprintf(rec->why, sizeof(rec->why), "%s", why);
  else
    rc = predict(c, a, pick, np);
  free(pick);
  return rc;
}
