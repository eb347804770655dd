/* The backward pass's slowest ops (dr_dg_backward_t, diag_analyze.h): the
 * rank with the longest backward pass over the analysed steps, and its
 * ops (dr_dg_op_t, from the readers) summed by name over those steps.
 *
 * One rank rather than a sum over ranks: a synchronous step waits for the
 * slowest rank's gradients, so its ops are the ones worth shortening, and
 * one rank's figures are one process's, not a blend of several hosts. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_internal.h"

typedef struct {
  const char *name; /* borrowed from the step */
  double us;
  size_t runs;
  size_t step;      /* for one order of addition */
} sum_t;

static int by_name(const void *a, const void *b) {
  const sum_t *x = a, *y = b;
  int d = strcmp(x->name, y->name);
  if (d != 0)
    return d;
  return (x->step > y->step) - (x->step < y->step);
}

static int by_total(const void *a, const void *b) {
  const sum_t *x = a, *y = b;
  if (x->us != y->us)
    return x->us > y->us ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* A step that counts: its backward pass known, with ops. */
static int counts(const dr__dg_sample_t *m) {
  return m->bwd >= 0 && m->st->n_bwd_ops > 0;
}

int dr__dg_backward(const dr__dg_ctx_t *c, dr_dg_analysis_t *a) {
  dr_dg_backward_t *b = &a->bwd;
  memset(b, 0, sizeof(*b));
  b->rank = -1;
  size_t best = SIZE_MAX;
  double best_ms = -1;
  for (size_t r = 0; r < c->n_ranks; r++) {
    double ms = 0;
    size_t n = 0;
    for (size_t k = 0; k < c->n_steps; k++) {
      const dr__dg_sample_t *m = dr__dg_at(c, r, k);
      if (counts(m)) {
        ms += m->bwd;
        n++;
      }
    }
    if (n > 0 && ms > best_ms) {
      best = r;
      best_ms = ms;
    }
  }
  if (best == SIZE_MAX)
    return 0;
  size_t n = 0;
  for (size_t k = 0; k < c->n_steps; k++) {
    const dr__dg_sample_t *m = dr__dg_at(c, best, k);
    if (counts(m))
      n += m->st->n_bwd_ops;
  }
  sum_t *v = malloc(n * sizeof(*v));
  if (v == NULL)
    return -ENOMEM;
  size_t m_ops = 0;
  for (size_t k = 0; k < c->n_steps; k++) {
    const dr__dg_sample_t *m = dr__dg_at(c, best, k);
    if (!counts(m))
      continue;
    b->n_steps++;
    b->backward_ms += m->bwd;
    for (size_t i = 0; i < m->st->n_bwd_ops; i++) {
      const dr_dg_op_t *op = &m->st->bwd_ops[i];
      v[m_ops++] = (sum_t){op->name, op->self_us, op->n_runs, k};
    }
  }
  /* One entry per name (two of a step whose names the reader cut to one
   * become one too). */
  qsort(v, n, sizeof(*v), by_name);
  size_t o = 0;
  double ops_us = 0;
  for (size_t i = 0; i < n; i++) {
    ops_us += v[i].us;
    if (o > 0 && strcmp(v[o - 1].name, v[i].name) == 0) {
      v[o - 1].us += v[i].us;
      v[o - 1].runs += v[i].runs;
    } else {
      v[o++] = v[i];
    }
  }
  qsort(v, o, sizeof(*v), by_total);
  b->rank = c->rank[best]->rank;
  b->path = c->rank[best]->path;
  b->n_kinds = o;
  b->ops_ms = ops_us / 1000.0;
  b->n_top = o < DR_DG_TOP_OPS ? o : DR_DG_TOP_OPS;
  for (size_t i = 0; i < b->n_top; i++) {
    dr_dg_op_stats_t *t = &b->top[i];
    snprintf(t->name, sizeof(t->name), "%s", v[i].name);
    t->total_ms = v[i].us / 1000.0;
    t->step_ms = t->total_ms / (double)b->n_steps;
    t->share = b->backward_ms > 0 ? t->total_ms / b->backward_ms : -1;
    t->n_runs = v[i].runs;
  }
  free(v);
  return 0;
}
