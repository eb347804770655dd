/* `ddprun diagnose`: which ranks and which of their steps the analysis
 * takes (diag_analyze.h: only the steps every rank has). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_internal.h"

static int cmp_step_ptr(const void *a, const void *b) {
  const dr_dg_step_t *x = *(const dr_dg_step_t *const *)a;
  const dr_dg_step_t *y = *(const dr_dg_step_t *const *)b;
  if (x->step != y->step)
    return (x->step > y->step) - (x->step < y->step);
  return (x > y) - (x < y); /* the earlier in the trace first */
}

/* Rank r's steps within the range, by number, the first of duplicates. */
static size_t steps_by_number(const dr_dg_rank_t *r, const dr_dg_options_t *o,
                              const dr_dg_step_t **out) {
  size_t n = 0;
  for (size_t i = 0; i < r->n_steps; i++)
    if (r->steps[i].step >= o->step_from && r->steps[i].step <= o->step_to)
      out[n++] = &r->steps[i];
  qsort(out, n, sizeof(*out), cmp_step_ptr);
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (m == 0 || out[m - 1]->step != out[i]->step)
      out[m++] = out[i];
  return m;
}

static const dr_dg_step_t *find_step(const dr_dg_step_t *const *v, size_t n,
                                     uint64_t step) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (v[mid]->step < step)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && v[lo]->step == step ? v[lo] : NULL;
}

static int cmp_rank_ptr(const void *a, const void *b) {
  const dr_dg_rank_t *x = *(const dr_dg_rank_t *const *)a;
  const dr_dg_rank_t *y = *(const dr_dg_rank_t *const *)b;
  int ux = x->rank < 0, uy = y->rank < 0; /* unknown ranks last */
  if (ux != uy)
    return ux - uy;
  if (x->rank != y->rank)
    return (x->rank > y->rank) - (x->rank < y->rank);
  return (x > y) - (x < y);
}

/* The ranks with steps, by rank, and the world and missing ranks. */
int dr__dg_pick_ranks(const dr_dg_rank_t *ranks, size_t n, dr__dg_ctx_t *c,
                      dr_dg_analysis_t *a) {
  c->rank = malloc((n > 0 ? n : 1) * sizeof(*c->rank));
  if (c->rank == NULL)
    return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    if (ranks[i].world > a->world)
      a->world = ranks[i].world;
    if (ranks[i].n_steps == 0)
      dr_dg_analysis_note(a, "rank %d (%s): no steps in the trace; left out",
                  ranks[i].rank, ranks[i].path);
    else
      c->rank[c->n_ranks++] = &ranks[i];
  }
  qsort(c->rank, c->n_ranks, sizeof(*c->rank), cmp_rank_ptr);
  for (size_t i = 1; i < c->n_ranks; i++)
    if (c->rank[i]->rank >= 0 && c->rank[i]->rank == c->rank[i - 1]->rank)
      dr_dg_analysis_note(a, "two traces say rank %d: %s and %s", c->rank[i]->rank,
                  c->rank[i - 1]->path, c->rank[i]->path);
  if (n > 0) {
    snprintf(a->source, sizeof(a->source), "%s", ranks[0].source);
    snprintf(a->backend, sizeof(a->backend), "%s", ranks[0].backend);
    for (size_t i = 1; i < n; i++) {
      if (strcmp(ranks[i].source, ranks[0].source) != 0)
        snprintf(a->source, sizeof(a->source), "mixed");
      if (strcmp(ranks[i].backend, ranks[0].backend) != 0)
        snprintf(a->backend, sizeof(a->backend), "mixed");
    }
  }
  if (a->world <= 0)
    return 0;
  a->missing = malloc((size_t)a->world * sizeof(int));
  if (a->missing == NULL)
    return -ENOMEM;
  char list[160] = "";
  for (int r = 0; r < a->world; r++) {
    size_t i = 0;
    while (i < n && ranks[i].rank != r)
      i++;
    if (i < n)
      continue;
    size_t len = strlen(list);
    if (len < sizeof(list) - 16)
      snprintf(list + len, sizeof(list) - len, "%s%d", len ? ", " : "", r);
    else if (list[len - 1] != '.')
      snprintf(list + len, sizeof(list) - len, ", ...");
    a->missing[a->n_missing++] = r;
  }
  if (a->n_missing > 0)
    dr_dg_analysis_note(a, "the world is %d ranks but %zu traces were given (missing: "
                "%s); the slowest rank may be among the missing", a->world,
                n, list);
  return 0;
}

/* The steps all analysed ranks have: c->n_steps and a [n_ranks][n_steps]
 * table of their step pointers, written into c->s. */
int dr__dg_align_steps(const dr_dg_options_t *o, dr__dg_ctx_t *c,
                       dr_dg_analysis_t *a) {
  const dr_dg_step_t ***by = calloc(c->n_ranks ? c->n_ranks : 1, sizeof(*by));
  size_t *nb = calloc(c->n_ranks ? c->n_ranks : 1, sizeof(*nb));
  int rc = by == NULL || nb == NULL ? -ENOMEM : 0;
  for (size_t r = 0; r < c->n_ranks && rc == 0; r++) {
    by[r] = malloc((c->rank[r]->n_steps + 1) * sizeof(**by));
    if (by[r] == NULL)
      rc = -ENOMEM;
    else
      nb[r] = steps_by_number(c->rank[r], o, by[r]);
  }
  /* Candidates: rank 0's steps that every other rank has. */
  uint64_t *common = NULL;
  size_t nc = 0, lo = (size_t)-1, hi = 0;
  if (rc == 0 && c->n_ranks > 0) {
    common = malloc((nb[0] + 1) * sizeof(*common));
    if (common == NULL)
      rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < nb[0]; i++) {
      size_t r = 1;
      while (r < c->n_ranks && find_step(by[r], nb[r], by[0][i]->step))
        r++;
      if (r == c->n_ranks)
        common[nc++] = by[0][i]->step;
    }
    for (size_t r = 0; r < c->n_ranks; r++) {
      lo = nb[r] < lo ? nb[r] : lo;
      hi = nb[r] > hi ? nb[r] : hi;
    }
  }
  if (rc == 0 && c->n_ranks > 0 && (lo != hi || nc != hi)) {
    if (nc > 0)
      dr_dg_analysis_note(a, "the ranks have different steps (%zu to %zu each); the "
                  "%zu steps every rank has (%llu to %llu) are used", lo, hi,
                  nc, (unsigned long long)common[0],
                  (unsigned long long)common[nc - 1]);
  }
  if (rc == 0 && c->n_ranks > 0 && nc == 0)
    dr_dg_analysis_note(a, "no step number is in every rank's trace%s; nothing to "
                "align", o->step_from > 0 || o->step_to < UINT64_MAX
                                ? " within --steps" : "");
  if (rc == 0 && nc > 0) {
    c->n_steps = nc;
    c->s = calloc(c->n_ranks * nc, sizeof(*c->s));
    if (c->s == NULL)
      rc = -ENOMEM;
    for (size_t r = 0; rc == 0 && r < c->n_ranks; r++)
      for (size_t k = 0; k < nc; k++)
        dr__dg_at(c, r, k)->st = find_step(by[r], nb[r], common[k]);
    a->first_step = common[0];
    a->last_step = common[nc - 1];
  }
  a->n_steps = c->n_steps;
  for (size_t r = 0; by != NULL && r < c->n_ranks; r++)
    free(by[r]);
  free(by);
  free(nb);
  free(common);
  return rc;
}

