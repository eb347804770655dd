/* `ddprun diagnose`'s analysis never crashes and keeps its invariants on
 * whatever a reader may hand it: random models (a fixed seed) with
 * unknown fields, times out of order, duplicate and missing steps,
 * unsized and overlapping collectives, backward ops of any time; both
 * reports render each. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "diag_analyze.h"
#include "diag_report.h"
#include "synth.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next(uint32_t n) { /* uniform enough in [0, n) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 32) % n;
}

/* A time in us, unknown one time in eight. */
static double t(void) {
  return next(8) == 0 ? -1 : (double)next(200000);
}

/* A plausible step (times in order, sized buckets at ready gradients),
 * then one field knocked out or moved half the time. */
static void plausible_step(dr_dg_step_t *st) {
  double grad[8];
  syn_coll_t coll[8];
  syn_step_t s = {.t0 = next(1000), .data = next(20), .fwd = 1 + next(50),
                  .bwd = 1 + next(100), .gap = next(3), .opt = next(20)};
  s.n_grad = 1 + next(8);
  for (size_t g = 0; g < s.n_grad; g++)
    grad[g] = s.bwd * (double)(g + 1) / (double)s.n_grad;
  s.grad = grad;
  s.n_coll = next(s.n_grad + 1);
  double end = 0;
  for (size_t i = 0; i < s.n_coll; i++) {
    double ready = grad[(i + 1) * s.n_grad / (s.n_coll + 1)];
    double start = ready > end ? ready : end;
    end = start + 0.1 + next(40) / 4.0;
    coll[i] = (syn_coll_t){1 + next(16) / 4.0, ready, start, end};
  }
  s.coll = coll;
  syn_fill_step(st, next(8), &s);
  double *f[] = {&st->t0_us, &st->t1_us, &st->bwd_t0_us, &st->bwd_t1_us,
                 &st->opt_t0_us, &st->fwd_t1_us};
  if (next(2))
    *f[next(6)] = next(2) ? -1 : (double)next(200000);
  if (st->n_colls > 0 && next(4) == 0)
    st->colls[next((uint32_t)st->n_colls)].n_bytes = 0;
}

/* Backward ops of a few names (so that steps share some), any time. */
static void random_ops(dr_dg_step_t *st) {
  static const char *const names[] = {"AddmmBackward0", "ReluBackward0",
                                      "fc0.bwd", "", "TBackward0",
                                      "torch::autograd::AccumulateGrad"};
  size_t n = next(9);
  for (size_t i = 0; i < n; i++)
    syn_add_op(st, names[next(6)], next(4) == 0 ? 0 : next(50000) / 1000.0,
               next(5));
}

static void random_step(dr_dg_step_t *st) {
  if (next(2)) {
    plausible_step(st);
    random_ops(st);
    return;
  }
  memset(st, 0, sizeof(*st));
  st->step = next(8);
  st->t0_us = t(), st->t1_us = t();
  st->data_us = next(4) == 0 ? 0 : (double)next(20000);
  st->fwd_t0_us = t(), st->fwd_t1_us = t();
  st->bwd_t0_us = t(), st->bwd_t1_us = t();
  st->opt_t0_us = t(), st->opt_t1_us = t();
  st->n_grad = next(6);
  st->grad_ready_us = calloc(st->n_grad + 1, sizeof(double));
  assert_non_null(st->grad_ready_us);
  for (size_t g = 0; g < st->n_grad; g++)
    st->grad_ready_us[g] = t();
  size_t n = next(7);
  for (size_t i = 0; i < n; i++)
    syn_add_coll(st, (dr_dg_kind_t)next(6), next(3) == 0 ? 0 : next(64) / 8.0,
                 t() / 1000, t() / 1000, t() / 1000);
  random_ops(st);
}

/* The slowest backward ops: ranked, cut at DR_DG_TOP_OPS, means of the
 * totals. */
static void check_bwd(const dr_dg_backward_t *b) {
  if (b->n_steps == 0) {
    assert_int_equal(b->n_top, 0);
    return;
  }
  assert_true(b->path != NULL && b->n_top <= DR_DG_TOP_OPS);
  assert_true(b->n_top <= b->n_kinds && (b->n_top == DR_DG_TOP_OPS ||
                                         b->n_top == b->n_kinds));
  double sum = 0;
  for (size_t i = 0; i < b->n_top; i++) {
    const dr_dg_op_stats_t *t = &b->top[i];
    if (i > 0)
      assert_true(t->total_ms < b->top[i - 1].total_ms ||
                  (t->total_ms == b->top[i - 1].total_ms &&
                   strcmp(t->name, b->top[i - 1].name) > 0));
    assert_true(t->step_ms * (double)b->n_steps <= t->total_ms + 1e-9 &&
                t->step_ms * (double)b->n_steps >= t->total_ms - 1e-9);
    sum += t->total_ms;
  }
  assert_true(sum <= b->ops_ms + 1e-9);
}

/* Per (rank, step); medians over different subsets (hidden needs the
 * backward pass, comm does not) need not keep it, so only one-sample
 * analyses are checked. */
static void check(const dr_dg_stats_t *s) {
  if (s->hidden_ms >= 0)
    assert_true(s->hidden_ms <= s->comm_ms + 1e-9);
  if (s->wait_ms >= 0)
    assert_true(s->exposed_ms >= 0);
}

static void test_random_models(void **state) {
  (void)state;
  for (int iter = 0; iter < 3000; iter++) {
    size_t n = next(6);
    dr_dg_rank_t *r = calloc(n + 1, sizeof(*r));
    assert_non_null(r);
    for (size_t i = 0; i < n; i++) {
      r[i].rank = next(5) == 0 ? -1 : (int)next(8);
      r[i].world = (int)next(9);
      snprintf(r[i].source, sizeof(r[i].source), next(2) ? "torch" : "train");
      r[i].n_steps = next(7);
      r[i].steps = calloc(r[i].n_steps + 1, sizeof(dr_dg_step_t));
      assert_non_null(r[i].steps);
      for (size_t k = 0; k < r[i].n_steps; k++)
        random_step(&r[i].steps[k]);
    }
    dr_dg_options_t o = DR_DG_OPTIONS_ALL;
    if (next(4) == 0)
      o.step_from = next(4), o.step_to = o.step_from + next(4);
    dr_dg_analysis_t a;
    assert_int_equal(dr_dg_analyze(r, n, &o, &a), 0);
    if (a.n_used == 1 && a.n_steps == 1)
      check(&a.job);
    for (size_t i = 0; i < a.n_used; i++)
      if (a.n_steps == 1)
        check(&a.ranks[i]);
    if (a.rec.ok)
      assert_true(a.rec.best < a.rec.n_caps);
    check_bwd(&a.bwd);
    FILE *f = fopen("/dev/null", "w");
    assert_non_null(f);
    assert_int_equal(dr_dg_report_text(f, &a), 0);
    assert_int_equal(dr_dg_report_json(f, &a), 0);
    fclose(f);
    dr_dg_analysis_free(&a);
    syn_free(r, n);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_models),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
