/* Synthetic trace models for the diagnose tests. See synth.h. */
#include "synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (p == NULL) {
    fprintf(stderr, "synth: out of memory\n");
    abort();
  }
  return p;
}

void syn_add_coll(dr_dg_step_t *st, dr_dg_kind_t kind, double mib,
                  double ready, double start, double end) {
  dr_dg_coll_t *v = realloc(st->colls, (st->n_colls + 1) * sizeof(*v));
  if (v == NULL)
    abort();
  st->colls = v;
  v[st->n_colls++] = (dr_dg_coll_t){
      kind, (uint64_t)(mib * SYN_MIB), -1,
      ready >= 0 ? ready * 1000 : -1, start * 1000, end * 1000};
}

void syn_add_op(dr_dg_step_t *st, const char *name, double ms,
                uint32_t runs) {
  dr_dg_op_t *v = realloc(st->bwd_ops, (st->n_bwd_ops + 1) * sizeof(*v));
  if (v == NULL)
    abort();
  st->bwd_ops = v;
  dr_dg_op_t *op = &v[st->n_bwd_ops++];
  memset(op, 0, sizeof(*op));
  snprintf(op->name, sizeof(op->name), "%s", name);
  op->self_us = ms * 1000;
  op->n_runs = runs;
}

void syn_fill_step(dr_dg_step_t *st, uint64_t step, const syn_step_t *s) {
  memset(st, 0, sizeof(*st));
  st->step = step;
  st->t0_us = s->t0 * 1000;
  st->data_us = s->data * 1000;
  double b0 = s->t0 + s->data + s->fwd, b1 = b0 + s->bwd;
  st->fwd_t0_us = (s->t0 + s->data) * 1000;
  st->fwd_t1_us = b0 * 1000;
  st->bwd_t0_us = b0 * 1000;
  st->bwd_t1_us = b1 * 1000;
  double last = b1;
  for (size_t i = 0; i < s->n_coll; i++) {
    const syn_coll_t *c = &s->coll[i];
    syn_add_coll(st, DR_DG_ALLREDUCE, c->mib, c->ready >= 0 ? b0 + c->ready : -1,
                 b0 + c->start, b0 + c->end);
    st->colls[i].bucket = (int)i;
    if (b0 + c->end > last)
      last = b0 + c->end;
  }
  st->opt_t0_us = (last + s->gap) * 1000;
  st->opt_t1_us = (last + s->gap + s->opt) * 1000;
  st->t1_us = st->opt_t1_us;
  st->n_grad = s->n_grad;
  st->grad_ready_us = xcalloc(s->n_grad, sizeof(double));
  for (size_t g = 0; g < s->n_grad; g++)
    st->grad_ready_us[g] = (b0 + s->grad[g]) * 1000;
}

dr_dg_rank_t *syn_ranks(size_t n, int world, size_t n_steps, uint64_t first,
                        void (*shape)(size_t r, size_t k, syn_step_t *s,
                                      void *arg),
                        void *arg) {
  dr_dg_rank_t *v = xcalloc(n, sizeof(*v));
  for (size_t r = 0; r < n; r++) {
    v[r].rank = (int)r;
    v[r].world = world;
    snprintf(v[r].source, sizeof(v[r].source), "torch");
    snprintf(v[r].backend, sizeof(v[r].backend), "nccl");
    snprintf(v[r].path, sizeof(v[r].path), "rank%zu.json", r);
    v[r].steps = xcalloc(n_steps, sizeof(dr_dg_step_t));
    v[r].n_steps = n_steps;
    for (size_t k = 0; k < n_steps; k++) {
      syn_step_t s = {0};
      s.t0 = 1000.0 * (double)k; /* each rank's own clock */
      shape(r, k, &s, arg);
      syn_fill_step(&v[r].steps[k], first + k, &s);
    }
  }
  return v;
}

void syn_free(dr_dg_rank_t *r, size_t n) {
  for (size_t i = 0; r != NULL && i < n; i++) {
    for (size_t k = 0; k < r[i].n_steps; k++) {
      free(r[i].steps[k].grad_ready_us);
      free(r[i].steps[k].colls);
      free(r[i].steps[k].bwd_ops);
    }
    free(r[i].steps);
  }
  free(r);
}
