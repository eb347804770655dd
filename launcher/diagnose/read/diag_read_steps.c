/* From a trace's spans (each with its role) and collectives to the steps
 * of dr_dg_rank_t. The rules, the same for both sources:
 *
 * - The steps are the trace's step spans (train's "step N", PyTorch's
 *   ProfilerStep#N). A trace without them but with optimizer spans has
 *   one step per optimizer span, numbered from 0: a step ends where its
 *   optimizer span ends and starts where the previous one ended (the
 *   first at its first data, forward or backward span). A trace with
 *   neither has no steps.
 * - A span belongs to the step its start lies in (a gradient: its ready
 *   time); a collective to the step its ready time lies in, or its start
 *   where the ready time is unknown. Nothing outside every step counts:
 *   the evaluation after training, the profiler's warm-up.
 * - Within a step, a forward span counts if it starts before the last
 *   backward span ends (or, without a backward, before the optimizer):
 *   an evaluation pass after the optimizer does not.
 * - The backward pass is the backward spans that start after the last
 *   counted forward span: with gradient accumulation (no_sync), the pass
 *   whose gradients are all-reduced; the gradients are those ready from
 *   its start. The note says when earlier passes were left out.
 * - A step span with no forward, backward, optimizer or collective in it
 *   (the stub PyTorch writes where the profiler stopped) is left out.
 * - Bucket numbers, where the source does not give them (PyTorch's DDP),
 *   are the order of the all-reduces handed over within the backward
 *   pass; every other collective has -1.
 * - The backward ops are the backward pass's spans by name, their self
 *   times summed (diag_read_ops.c).
 */
#include "diag_read_internal.h"
#include "grow.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int push(dr__build_t *b, int role, double t0, double dur,
                uint64_t aux, int64_t tid) {
  double t1 = t0 + dur;
  if (!isfinite(t0) || !isfinite(t1) || !(dur >= 0))
    return 0;
  dr__span_t *p = dr_grow(b->sp, &b->cap, b->n + 1, sizeof(*p), 256);
  if (p == NULL)
    return -ENOMEM;
  b->sp = p;
  b->sp[b->n++] = (dr__span_t){t0, t1, dur, aux, tid, role};
  return 0;
}

int dr__build_span(dr__build_t *b, int role, double t0, double dur,
                   uint64_t aux) {
  return push(b, role, t0, dur, role == DR__SP_BWD ? UINT64_MAX : aux, 0);
}

int dr__build_bwd(dr__build_t *b, double t0, double dur, int64_t tid,
                  const char *name) {
  uint64_t index;
  if (dr__opnames_index(&b->names, name, &index) != 0)
    return -ENOMEM;
  return push(b, DR__SP_BWD, t0, dur, index, tid);
}

int dr__build_coll(dr__build_t *b, const dr_dg_coll_t *c) {
  if (b->n_coll == b->cap_coll) {
    size_t cap = b->cap_coll > 0 ? b->cap_coll * 2 : 64;
    dr_dg_coll_t *p = realloc(b->coll, cap * sizeof(*p));
    if (p == NULL)
      return -ENOMEM;
    b->coll = p;
    b->cap_coll = cap;
  }
  b->coll[b->n_coll++] = *c;
  return 0;
}

void dr__build_free(dr__build_t *b) {
  free(b->sp);
  free(b->coll);
  dr__opnames_free(&b->names);
  memset(b, 0, sizeof(*b));
}

static int by_t0(const void *a, const void *b) {
  const dr__span_t *x = a, *y = b;
  if (x->t0 != y->t0)
    return x->t0 < y->t0 ? -1 : 1;
  if (x->t1 != y->t1)
    return x->t1 < y->t1 ? -1 : 1;
  return 0;
}

static int by_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double coll_key(const dr_dg_coll_t *c) {
  return c->start_us >= 0 ? c->start_us : c->ready_us;
}

static int by_coll(const void *a, const void *b) {
  double x = coll_key(a), y = coll_key(b);
  return x < y ? -1 : x > y;
}

static int by_ready(const void *a, const void *b) {
  const dr_dg_coll_t *x = *(dr_dg_coll_t *const *)a;
  const dr_dg_coll_t *y = *(dr_dg_coll_t *const *)b;
  return x->ready_us < y->ready_us ? -1 : x->ready_us > y->ready_us;
}

typedef struct {
  double t0, t1;
  uint64_t number;
  size_t n_grad, n_coll;
  int used; /* has a forward, backward, optimizer or collective */
} win_t;

/* The window whose start is the last at or before x, if x is within it;
 * else SIZE_MAX. */
static size_t find(const win_t *w, size_t n, double x) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (w[mid].t0 <= x)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0 || x > w[lo - 1].t1)
    return SIZE_MAX;
  return lo - 1;
}

/* The windows from the step spans, or else from the optimizer's. */
static size_t windows(dr__build_t *b, win_t *w, dr_dg_rank_t *r) {
  size_t n = 0;
  for (size_t i = 0; i < b->n; i++)
    if (b->sp[i].role == DR__SP_STEP)
      w[n++] = (win_t){b->sp[i].t0, b->sp[i].t1, b->sp[i].aux, 0, 0, 0};
  if (n > 0)
    return n;
  double first = INFINITY;
  for (size_t i = 0; i < b->n; i++) {
    const dr__span_t *s = &b->sp[i];
    if (s->role == DR__SP_OPT) {
      /* Sorted by start: one that ends inside the last is part of it. */
      if (n > 0 && s->t1 <= w[n - 1].t1)
        continue;
      double t0 = n > 0 ? w[n - 1].t1 : s->t0;
      w[n] = (win_t){t0, s->t1, n, 0, 0, 0};
      n++;
    } else if (n == 0 && s->role != DR__SP_GRAD && s->t0 < first) {
      first = s->t0;
    }
  }
  if (n > 0) {
    if (first < w[0].t0)
      w[0].t0 = first;
    dr__dg_note(r, "no step spans: steps end at the optimizer's spans");
  }
  return n;
}

static void number_buckets(dr_dg_step_t *s) {
  dr_dg_coll_t *ar[64], **v = ar;
  size_t n = 0;
  if (s->n_colls > 64) {
    v = malloc(s->n_colls * sizeof(*v));
    if (v == NULL)
      return; /* the numbers stay unknown */
  }
  for (size_t i = 0; i < s->n_colls; i++) {
    dr_dg_coll_t *c = &s->colls[i];
    if (c->kind == DR_DG_ALLREDUCE && c->bucket < 0 && c->ready_us >= 0 &&
        s->bwd_t0_us >= 0 && c->ready_us >= s->bwd_t0_us &&
        c->ready_us <= s->bwd_t1_us)
      v[n++] = c;
  }
  dr__sort(v, n, sizeof(*v), by_ready);
  for (size_t i = 0; i < n; i++)
    v[i]->bucket = (int)i;
  if (v != ar)
    free(v);
}

static void step_init(dr_dg_step_t *s, const win_t *w) {
  memset(s, 0, sizeof(*s));
  s->step = w->number;
  s->t0_us = w->t0;
  s->t1_us = w->t1;
  s->fwd_t0_us = s->fwd_t1_us = -1;
  s->bwd_t0_us = s->bwd_t1_us = -1;
  s->opt_t0_us = s->opt_t1_us = -1;
}

static void widen(double *t0, double *t1, double a, double z) {
  if (*t0 < 0 || a < *t0)
    *t0 = a;
  if (*t1 < 0 || z > *t1)
    *t1 = z;
}

/* What a step's spans say before it is filled in. */
typedef struct {
  double bwd_end;   /* the last backward span's end, -1 */
  double opt0;      /* the first optimizer span's start, -1 */
  double last_fwd0; /* the last counted forward span's start */
  double fb0, fb1;  /* FWDBWD spans */
  size_t earlier_bwd; /* backward spans of an earlier pass, left out */
} pass_t;

/* One span in one pass: 0 bounds, 1 forward, 2 backward, 3 the rest. */
static void fill(dr_dg_step_t *s, pass_t *p, const dr__span_t *sp,
                 int pass) {
  switch (pass * 8 + sp->role) {
  case 0 * 8 + DR__SP_BWD:
    if (sp->t1 > p->bwd_end)
      p->bwd_end = sp->t1;
    break;
  case 0 * 8 + DR__SP_OPT:
    if (p->opt0 < 0 || sp->t0 < p->opt0)
      p->opt0 = sp->t0;
    break;
  case 1 * 8 + DR__SP_FWD: {
    /* A training forward starts before the backward ends (an evaluation
     * pass after the optimizer does not), or, in a step without one,
     * before the optimizer. */
    double limit = p->bwd_end >= 0 ? p->bwd_end
                   : p->opt0 >= 0  ? p->opt0
                                   : INFINITY;
    if (sp->t0 < limit) {
      widen(&s->fwd_t0_us, &s->fwd_t1_us, sp->t0, sp->t1);
      if (sp->t0 > p->last_fwd0)
        p->last_fwd0 = sp->t0;
    }
    break;
  }
  case 2 * 8 + DR__SP_BWD:
    /* The pass after the last forward: with gradient accumulation, the
     * one whose gradients are all-reduced. */
    if (sp->t0 >= p->last_fwd0)
      widen(&s->bwd_t0_us, &s->bwd_t1_us, sp->t0, sp->t1);
    else
      p->earlier_bwd++;
    break;
  case 3 * 8 + DR__SP_GRAD:
    if (s->bwd_t0_us < 0 || sp->t1 >= s->bwd_t0_us)
      s->grad_ready_us[s->n_grad++] = sp->t1;
    break;
  case 3 * 8 + DR__SP_DATA:
    s->data_us += sp->dur;
    break;
  case 3 * 8 + DR__SP_FWDBWD:
    widen(&p->fb0, &p->fb1, sp->t0, sp->t1);
    break;
  case 3 * 8 + DR__SP_OPT:
    widen(&s->opt_t0_us, &s->opt_t1_us, sp->t0, sp->t1);
    break;
  default:
    break;
  }
}

int dr__build_steps(dr__build_t *b, dr_dg_rank_t *r) {
  int rc = -ENOMEM;
  pass_t *tmp = NULL;
  size_t *at = NULL, *cat = NULL;
  win_t *w = NULL;
  dr_dg_step_t *steps = NULL;
  size_t n = 0;
  dr__sort(b->sp, b->n, sizeof(*b->sp), by_t0);
  w = malloc((b->n + 1) * sizeof(*w));
  at = malloc((b->n + 1) * sizeof(*at));
  cat = malloc((b->n_coll + 1) * sizeof(*cat));
  if (w == NULL || at == NULL || cat == NULL)
    goto out;
  size_t nw = windows(b, w, r);
  if (nw == 0) {
    dr__dg_note(r, "no steps (neither step spans nor optimizer spans)");
    rc = 0;
    goto out;
  }
  for (size_t i = 0; i < b->n; i++) {
    const dr__span_t *s = &b->sp[i];
    at[i] = SIZE_MAX;
    if (s->role == DR__SP_STEP)
      continue;
    at[i] = find(w, nw, s->role == DR__SP_GRAD ? s->t1 : s->t0);
    if (at[i] == SIZE_MAX)
      continue;
    if (s->role == DR__SP_GRAD)
      w[at[i]].n_grad++;
    if (s->role != DR__SP_DATA && s->role != DR__SP_GRAD)
      w[at[i]].used = 1;
  }
  size_t unplaced = 0;
  for (size_t i = 0; i < b->n_coll; i++) {
    const dr_dg_coll_t *c = &b->coll[i];
    double x = c->ready_us >= 0 ? c->ready_us : c->start_us;
    cat[i] = x >= 0 ? find(w, nw, x) : SIZE_MAX;
    if (cat[i] == SIZE_MAX) {
      unplaced += x < 0;
      continue;
    }
    w[cat[i]].n_coll++;
    w[cat[i]].used = 1;
  }
  if (unplaced > 0)
    dr__dg_note(r, "%zu collectives with neither a ready nor a start time "
                   "left out",
                unplaced);
  /* Step index of each window, SIZE_MAX for one left out. */
  size_t *idx = malloc(nw * sizeof(*idx)), dropped = 0;
  uint64_t first_dropped = 0;
  if (idx == NULL)
    goto out;
  for (size_t i = 0; i < nw; i++) {
    if (w[i].used) {
      idx[i] = n++;
    } else {
      idx[i] = SIZE_MAX;
      if (dropped++ == 0)
        first_dropped = w[i].number;
    }
  }
  if (dropped > 0)
    dr__dg_note(r, "%zu step%s with no forward, backward, optimizer or "
                   "collective left out (step %llu%s)",
                dropped, dropped > 1 ? "s" : "",
                (unsigned long long)first_dropped, dropped > 1 ? ", ..." : "");
  steps = calloc(n > 0 ? n : 1, sizeof(*steps));
  if (steps == NULL) {
    free(idx);
    goto out;
  }
  for (size_t i = 0; i < nw; i++) {
    if (idx[i] == SIZE_MAX)
      continue;
    dr_dg_step_t *s = &steps[idx[i]];
    step_init(s, &w[i]);
    s->grad_ready_us = malloc((w[i].n_grad + 1) * sizeof(double));
    s->colls = malloc((w[i].n_coll + 1) * sizeof(dr_dg_coll_t));
    if (s->grad_ready_us == NULL || s->colls == NULL) {
      free(idx);
      goto out;
    }
  }
  tmp = calloc(n + 1, sizeof(*tmp));
  if (tmp == NULL) {
    free(idx);
    goto out;
  }
  for (size_t k = 0; k < n; k++)
    tmp[k] = (pass_t){-1, -1, -INFINITY, -1, -1, 0};
  /* The passes over the step's spans, in start order (see the rules). */
  for (int pass = 0; pass < 4; pass++) {
    for (size_t i = 0; i < b->n; i++) {
      if (at[i] == SIZE_MAX || idx[at[i]] == SIZE_MAX)
        continue;
      size_t k = idx[at[i]];
      fill(&steps[k], &tmp[k], &b->sp[i], pass);
    }
  }
  /* Each span's step, for its backward ops. */
  for (size_t i = 0; i < b->n; i++)
    if (at[i] != SIZE_MAX)
      at[i] = idx[at[i]];
  if (dr__build_ops(b, at, steps, n) != 0) {
    free(tmp);
    tmp = NULL;
    free(idx);
    goto out;
  }
  size_t accumulated = 0;
  for (size_t i = 0; i < b->n_coll; i++)
    if (cat[i] != SIZE_MAX && idx[cat[i]] != SIZE_MAX) {
      dr_dg_step_t *s = &steps[idx[cat[i]]];
      s->colls[s->n_colls++] = b->coll[i];
    }
  for (size_t k = 0; k < n; k++) {
    dr_dg_step_t *s = &steps[k];
    if (tmp[k].fb0 >= 0 && s->fwd_t0_us < 0 && s->bwd_t0_us < 0) {
      /* One span for both: where the forward ends is not known. */
      s->fwd_t0_us = tmp[k].fb0;
      s->bwd_t1_us = tmp[k].fb1;
    }
    accumulated += tmp[k].earlier_bwd > 0;
    dr__sort(s->grad_ready_us, s->n_grad, sizeof(double), by_double);
    dr__sort(s->colls, s->n_colls, sizeof(*s->colls), by_coll);
    if (b->number_buckets)
      number_buckets(s);
  }
  if (accumulated > 0)
    dr__dg_note(r, "%zu step%s accumulate%s gradients: the backward is "
                   "the last pass",
                accumulated, accumulated > 1 ? "s" : "",
                accumulated > 1 ? "" : "s");
  free(tmp);
  free(idx);
  r->steps = steps;
  r->n_steps = n;
  steps = NULL;
  rc = 0;
out:
  if (steps != NULL) {
    for (size_t k = 0; k < n; k++) {
      free(steps[k].grad_ready_us);
      free(steps[k].colls);
      free(steps[k].bwd_ops);
    }
    free(steps);
  }
  free(w);
  free(at);
  free(cat);
  dr__build_free(b);
  return rc;
}
