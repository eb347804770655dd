/* `ddprun diagnose`'s analysis: on the steps every rank has (diag_align.c)
 * computes each (rank, step)'s metrics and their medians, then the
 * recommendation and the patterns. Definitions: diag_analyze.h. */
#include "diag_analyze.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_internal.h"

const double dr_dg_caps_mib[] = {1, 2, 5, 10, 25, 50, 100};
const size_t dr_dg_n_caps = sizeof(dr_dg_caps_mib) / sizeof(dr_dg_caps_mib[0]);

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double dr__dg_median(double *v, size_t n) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (v[i] >= 0)
      v[m++] = v[i];
  if (m == 0)
    return -1;
  qsort(v, m, sizeof(*v), cmp_double);
  return m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
}

void dr_dg_analysis_note(dr_dg_analysis_t *a, const char *fmt, ...) {
  if (a->n_notes >= DR_DG_MAX_NOTES)
    return;
  char *dst = a->notes[a->n_notes++];
  if (a->n_notes == DR_DG_MAX_NOTES) {
    snprintf(dst, sizeof(a->notes[0]), "(more notes left out)");
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, sizeof(a->notes[0]), fmt, ap);
  va_end(ap);
}

/* b - a in ms when both are known and in order, else -1. */
static double span(double a_us, double b_us) {
  return a_us >= 0 && b_us >= a_us ? (b_us - a_us) / 1000.0 : -1;
}

/* ---- one rank in one step ---------------------------------------------- */

typedef struct {
  double s, e;
} ival_t;

static int cmp_ival(const void *a, const void *b) {
  const ival_t *x = a, *y = b;
  return (x->s > y->s) - (x->s < y->s);
}

static int cmp_coll_start(const void *a, const void *b) {
  const dr_dg_coll_t *x = *(const dr_dg_coll_t *const *)a;
  const dr_dg_coll_t *y = *(const dr_dg_coll_t *const *)b;
  return (x->start_us > y->start_us) - (x->start_us < y->start_us);
}

/* A gradient all-reduce: handed over within the backward pass or after
 * it, before the optimizer and within the step (diag_analyze.h). */
static int is_grad(const dr_dg_step_t *st, const dr_dg_coll_t *c, int bwd) {
  if (c->kind != DR_DG_ALLREDUCE || c->start_us < 0 || c->end_us < c->start_us)
    return 0;
  double ref = c->ready_us >= 0 ? c->ready_us : c->start_us;
  if (bwd && ref < st->bwd_t0_us)
    return 0;
  if (!bwd && st->t0_us >= 0 && ref < st->t0_us)
    return 0;
  if (st->opt_t0_us >= 0 && ref >= st->opt_t0_us)
    return 0;
  return !(st->t1_us >= 0 && ref > st->t1_us);
}

/* comm and hidden: the union of the collectives' intervals, and its part
 * inside the backward pass. */
static int fill_union(dr__dg_sample_t *m, int bwd) {
  const dr_dg_step_t *st = m->st;
  ival_t *iv = malloc((st->n_colls > 0 ? st->n_colls : 1) * sizeof(*iv));
  if (iv == NULL)
    return -ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < st->n_colls; i++)
    if (st->colls[i].start_us >= 0 && st->colls[i].end_us >= st->colls[i].start_us)
      iv[n++] = (ival_t){st->colls[i].start_us, st->colls[i].end_us};
  qsort(iv, n, sizeof(*iv), cmp_ival);
  double comm = 0, hidden = 0;
  for (size_t i = 0; i < n;) {
    double s = iv[i].s, e = iv[i].e;
    for (i++; i < n && iv[i].s <= e; i++)
      if (iv[i].e > e)
        e = iv[i].e;
    comm += e - s;
    double hs = s > st->bwd_t0_us ? s : st->bwd_t0_us;
    double he = e < st->bwd_t1_us ? e : st->bwd_t1_us;
    if (he > hs)
      hidden += he - hs;
  }
  free(iv);
  m->comm = comm / 1000.0;
  m->hidden = bwd ? hidden / 1000.0 : -1;
  return 0;
}

/* The longest run of back-to-back gradient all-reduces, each ready before
 * it could start (DR_DG_BACK_TO_BACK_US; a ready time the trace does not
 * give counts as ready early). */
static void fill_backlog(dr__dg_sample_t *m) {
  double best = 0, run_s = 0, run_e = 0;
  size_t best_n = 0, run_n = 0;
  for (size_t k = 0; k < m->n_grad; k++) {
    const dr_dg_coll_t *c = m->grad[k];
    int b2b = k > 0 && c->start_us <= run_e + DR_DG_BACK_TO_BACK_US &&
              (c->ready_us < 0 ||
               c->start_us - c->ready_us >= DR_DG_BACK_TO_BACK_US);
    if (b2b) {
      run_n++;
      if (c->end_us > run_e)
        run_e = c->end_us;
    } else {
      run_s = c->start_us;
      run_e = c->end_us;
      run_n = 1;
    }
    if (run_n > 1 && run_e - run_s > best) {
      best = run_e - run_s;
      best_n = run_n;
    }
  }
  m->backlog = best / 1000.0;
  m->backlog_n = best_n;
}

static int fill_sample(dr__dg_sample_t *m, const dr_dg_step_t *st) {
  m->st = st;
  m->step = span(st->t0_us, st->t1_us);
  m->data = st->data_us >= 0 ? st->data_us / 1000.0 : -1;
  m->fwd = span(st->fwd_t0_us, st->fwd_t1_us);
  m->bwd = span(st->bwd_t0_us, st->bwd_t1_us);
  m->opt = span(st->opt_t0_us, st->opt_t1_us);
  int bwd = m->bwd >= 0;
  m->arrival = bwd ? span(st->t0_us, st->bwd_t1_us) : -1;
  m->wait = -1;
  m->last_end_us = -1;
  if (st->n_colls > 0) {
    m->grad = malloc(st->n_colls * sizeof(*m->grad));
    if (m->grad == NULL)
      return -ENOMEM;
  }
  for (size_t i = 0; i < st->n_colls; i++)
    if (is_grad(st, &st->colls[i], bwd))
      m->grad[m->n_grad++] = &st->colls[i];
  if (m->n_grad > 1)
    qsort(m->grad, m->n_grad, sizeof(*m->grad), cmp_coll_start);
  for (size_t k = 0; k < m->n_grad; k++)
    if (m->grad[k]->end_us > m->last_end_us)
      m->last_end_us = m->grad[k]->end_us;
  if (fill_union(m, bwd) != 0)
    return -ENOMEM;
  m->exposed = -1;
  if (bwd) {
    double e = m->last_end_us;
    if (m->n_grad > 0 && e > st->bwd_t1_us && st->opt_t0_us > e)
      e = st->opt_t0_us;
    m->exposed = m->n_grad > 0 && e > st->bwd_t1_us ? (e - st->bwd_t1_us) / 1000.0 : 0;
  }
  fill_backlog(m);
  return 0;
}

/* wait and own for every rank of step k (diag_analyze.h). */
static void fill_waits(dr__dg_ctx_t *c, size_t k) {
  double latest = -1;
  for (size_t r = 0; r < c->n_ranks; r++)
    if (dr__dg_at(c, r, k)->arrival > latest)
      latest = dr__dg_at(c, r, k)->arrival;
  for (size_t r = 0; r < c->n_ranks; r++) {
    dr__dg_sample_t *m = dr__dg_at(c, r, k);
    if (m->arrival >= 0 && m->exposed >= 0) {
      double w = latest - m->arrival;
      m->wait = w < m->exposed ? w : m->exposed;
    }
    m->own = m->step >= 0 && m->wait >= 0 ? m->step - m->wait : m->step;
  }
}

/* ---- medians ------------------------------------------------------------ */

#define N_FIELDS 10
static const size_t field_off[N_FIELDS] = {
    offsetof(dr__dg_sample_t, step),    offsetof(dr__dg_sample_t, data),
    offsetof(dr__dg_sample_t, fwd),     offsetof(dr__dg_sample_t, bwd),
    offsetof(dr__dg_sample_t, opt),     offsetof(dr__dg_sample_t, comm),
    offsetof(dr__dg_sample_t, hidden),  offsetof(dr__dg_sample_t, exposed),
    offsetof(dr__dg_sample_t, arrival), offsetof(dr__dg_sample_t, wait)};

static double field(const dr__dg_sample_t *m, size_t f) {
  return *(const double *)((const char *)m + field_off[f]);
}

static void put_stats(dr_dg_stats_t *s, const double *v) {
  s->step_ms = v[0], s->data_ms = v[1], s->forward_ms = v[2];
  s->backward_ms = v[3], s->optimizer_ms = v[4], s->comm_ms = v[5];
  s->hidden_ms = v[6], s->exposed_ms = v[7], s->arrival_ms = v[8];
  s->wait_ms = v[9];
}

/* Rank rows (medians over steps), the job's (over every sample; its step
 * over steps of the slowest rank's). buf holds n_ranks * n_steps. */
static void fill_stats(const dr__dg_ctx_t *c, dr_dg_analysis_t *a, double *buf) {
  double v[N_FIELDS];
  for (size_t r = 0; r < c->n_ranks; r++) {
    for (size_t f = 0; f < N_FIELDS; f++) {
      for (size_t k = 0; k < c->n_steps; k++)
        buf[k] = field(dr__dg_at(c, r, k), f);
      v[f] = dr__dg_median(buf, c->n_steps);
    }
    dr_dg_stats_t *s = &a->ranks[r];
    put_stats(s, v);
    s->rank = c->rank[r]->rank;
    s->path = c->rank[r]->path;
    s->n_steps = c->rank[r]->n_steps;
  }
  size_t ns = c->n_ranks * c->n_steps;
  for (size_t f = 0; f < N_FIELDS; f++) {
    for (size_t i = 0; i < ns; i++)
      buf[i] = field(&c->s[i], f);
    v[f] = dr__dg_median(buf, ns);
  }
  for (size_t k = 0; k < c->n_steps; k++) {
    buf[k] = -1;
    for (size_t r = 0; r < c->n_ranks; r++)
      if (dr__dg_at(c, r, k)->step > buf[k])
        buf[k] = dr__dg_at(c, r, k)->step;
  }
  v[0] = dr__dg_median(buf, c->n_steps);
  put_stats(&a->job, v);
  a->job.rank = -1;
}

/* The k-th gradient all-reduce's medians. */
static void fill_bucket(const dr__dg_ctx_t *c, size_t k, dr_dg_bucket_stats_t *b,
                        double *buf) {
  size_t ns = c->n_ranks * c->n_steps;
  b->bucket = -1;
  for (int f = 0; f < 6; f++) {
    size_t n = 0;
    for (size_t i = 0; i < ns; i++) {
      const dr__dg_sample_t *m = &c->s[i];
      if (m->n_grad <= k)
        continue;
      const dr_dg_coll_t *g = m->grad[k];
      double t0 = m->bwd >= 0 ? m->st->bwd_t0_us : -1;
      if (b->bucket < 0)
        b->bucket = g->bucket;
      double x = -1;
      switch (f) {
      case 0: x = g->n_bytes > 0 ? (double)g->n_bytes / DR__DG_MIB : -1; break;
      case 1: x = t0 >= 0 && g->ready_us >= 0 ? (g->ready_us - t0) / 1000 : -1; break;
      case 2: x = t0 >= 0 ? (g->start_us - t0) / 1000 : -1; break;
      case 3: x = t0 >= 0 ? (g->end_us - t0) / 1000 : -1; break;
      case 4:
        x = g->ready_us < 0 ? -1
            : g->start_us > g->ready_us ? (g->start_us - g->ready_us) / 1000 : 0;
        break;
      default: x = (g->end_us - g->start_us) / 1000; break;
      }
      buf[n++] = x;
    }
    double med = dr__dg_median(buf, n);
    double *dst[6] = {&b->mib, &b->ready_ms, &b->start_ms, &b->end_ms,
                      &b->queue_ms, &b->dur_ms};
    *dst[f] = med;
    b->n_samples = n;
  }
}

static int fill_all(dr__dg_ctx_t *c, dr_dg_analysis_t *a) {
  size_t ns = c->n_ranks * c->n_steps;
  for (size_t i = 0; i < ns; i++)
    if (fill_sample(&c->s[i], c->s[i].st) != 0)
      return -ENOMEM;
  for (size_t k = 0; k < c->n_steps; k++)
    fill_waits(c, k);
  size_t n_bwd = 0, n_grad_total = 0, n_sized = 0;
  for (size_t i = 0; i < ns; i++) {
    const dr__dg_sample_t *m = &c->s[i];
    n_bwd += m->bwd >= 0;
    a->have_colls |= m->st->n_colls > 0;
    if (m->n_grad > a->n_buckets)
      a->n_buckets = m->n_grad;
    for (size_t g = 0; g < m->n_grad; g++)
      n_sized += m->grad[g]->n_bytes > 0;
    n_grad_total += m->n_grad;
  }
  a->have_backward = n_bwd > 0;
  a->have_grad_colls = n_grad_total > 0;
  a->have_sizes = n_grad_total > 0 && n_sized == n_grad_total;
  if (ns > 0 && !a->have_colls)
    dr_dg_analysis_note(a, "no collectives in the traces: nothing to say about "
                "communication or buckets");
  else if (ns > 0 && !a->have_grad_colls)
    dr_dg_analysis_note(a, "no gradient all-reduces (all-reduces from the backward "
                "pass to the optimizer) in the traces");
  if (ns > 0 && n_bwd == 0)
    dr_dg_analysis_note(a, "no backward pass in the traces: hidden and exposed "
                "communication, waits, ready times and the bucket size need "
                "it");
  else if (n_bwd < ns)
    dr_dg_analysis_note(a, "%zu of %zu rank-steps have no backward pass; their "
                "hidden, exposed and wait are unknown", ns - n_bwd, ns);
  double *buf = malloc((ns > 0 ? ns : 1) * sizeof(double));
  a->ranks = calloc(c->n_ranks ? c->n_ranks : 1, sizeof(*a->ranks));
  a->buckets = calloc(a->n_buckets ? a->n_buckets : 1, sizeof(*a->buckets));
  if (buf == NULL || a->ranks == NULL || a->buckets == NULL) {
    free(buf);
    return -ENOMEM;
  }
  a->n_used = c->n_ranks;
  fill_stats(c, a, buf);
  for (size_t k = 0; k < a->n_buckets; k++)
    fill_bucket(c, k, &a->buckets[k], buf);
  free(buf);
  return 0;
}

int dr_dg_analyze(const dr_dg_rank_t *ranks, size_t n,
                  const dr_dg_options_t *opt, dr_dg_analysis_t *out) {
  static const dr_dg_options_t all = DR_DG_OPTIONS_ALL;
  memset(out, 0, sizeof(*out));
  out->job.rank = -1;
  dr__dg_ctx_t c = {0};
  out->n_ranks = n;
  if (n == 0)
    dr_dg_analysis_note(out, "no traces");
  int rc = dr__dg_pick_ranks(ranks, n, &c, out);
  if (rc == 0)
    rc = dr__dg_align_steps(opt != NULL ? opt : &all, &c, out);
  if (rc == 0)
    rc = fill_all(&c, out);
  if (rc == 0)
    rc = dr__dg_recommend(&c, out);
  if (rc == 0)
    rc = dr__dg_patterns(&c, out);
  if (rc == 0)
    rc = dr__dg_backward(&c, out);
  for (size_t i = 0; c.s != NULL && i < c.n_ranks * c.n_steps; i++)
    free(c.s[i].grad);
  free(c.s);
  free(c.rank);
  if (rc != 0)
    dr_dg_analysis_free(out);
  return rc;
}

void dr_dg_analysis_free(dr_dg_analysis_t *a) {
  free(a->missing);
  free(a->ranks);
  free(a->buckets);
  a->missing = NULL;
  a->ranks = NULL;
  a->buckets = NULL;
  a->n_missing = a->n_used = a->n_buckets = 0;
}
