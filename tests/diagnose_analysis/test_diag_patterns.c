/* `ddprun diagnose`'s analysis on synthetic models with answers computed
 * by hand: communication hidden and exposed (overlapping collectives
 * included), and each pattern on a model built to show it and on one that
 * does not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "diag_analyze.h"
#include "synth.h"

#define EPS 1e-9

static void near(double got, double want) {
  if (got < want - EPS || got > want + EPS)
    fail_msg("got %.12g, want %.12g", got, want);
}

static const dr_dg_pattern_t *find(const dr_dg_analysis_t *a,
                                   dr_dg_pattern_kind_t kind) {
  for (size_t i = 0; i < a->n_patterns; i++)
    if (a->patterns[i].kind == kind)
      return &a->patterns[i];
  return NULL;
}

/* Analyses n ranks of 3 identical steps of shape. */
static void run(size_t n, void (*shape)(size_t, size_t, syn_step_t *, void *),
                void *arg, dr_dg_analysis_t *a) {
  dr_dg_rank_t *r = syn_ranks(n, (int)n, 3, 1, shape, arg);
  assert_int_equal(dr_dg_analyze(r, n, NULL, a), 0);
  /* a->ranks[i].path dangles from here on; these tests do not read it. */
  syn_free(r, n);
}

/* ---- hidden and exposed -------------------------------------------------- */

/* The backward pass from 10 to 50 ms; a broadcast at 2-4 ms; all-reduces
 * A 20-35 and B 30-45 overlapping (gloo runs two at once), C 48-60; the
 * optimizer starts at 62.
 *   union: [2,4] + [20,45] + [48,60] = 2 + 25 + 12 = 39 ms
 *   hidden: [20,45] + [48,50] = 27 ms
 *   exposed: the last all-reduce ends at 60 > 50 and the optimizer starts
 *            at 62: 62 - 50 = 12 ms */
static void test_hidden_exposed_overlap(void **state) {
  (void)state;
  dr_dg_rank_t r = {.rank = 0, .world = 1, .source = "train"};
  dr_dg_step_t st;
  syn_step_t s = {.t0 = 0, .data = 1, .fwd = 9, .bwd = 40, .opt = 8};
  syn_fill_step(&st, 7, &s);
  syn_add_coll(&st, DR_DG_BROADCAST, 1, -1, 2, 4);
  syn_add_coll(&st, DR_DG_ALLREDUCE, 2, 20, 20, 35);
  syn_add_coll(&st, DR_DG_ALLREDUCE, 2, 28, 30, 45);
  syn_add_coll(&st, DR_DG_ALLREDUCE, 1, 47, 48, 60);
  st.opt_t0_us = 62000;
  st.opt_t1_us = st.t1_us = 70000;
  r.steps = &st;
  r.n_steps = 1;
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(&r, 1, NULL, &a), 0);
  near(a.job.comm_ms, 39);
  near(a.job.hidden_ms, 27);
  near(a.job.exposed_ms, 12);
  near(a.job.step_ms, 70);
  near(a.job.backward_ms, 40);
  near(a.job.optimizer_ms, 8);
  assert_int_equal(a.n_buckets, 3); /* the broadcast is no bucket */
  near(a.buckets[1].ready_ms, 18);
  near(a.buckets[1].start_ms, 20);
  near(a.buckets[1].queue_ms, 2);
  near(a.buckets[1].dur_ms, 15);
  near(a.buckets[2].end_ms, 50);
  dr_dg_analysis_free(&a);
  free(st.colls);
  free(st.grad_ready_us);
}

/* ---- late start ------------------------------------------------------ */

/* A 100 ms backward pass whose first all-reduce is ready and starts at
 * `first` ms (arg), 10 ms long; the second at 100-105. */
static void late_shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  static syn_coll_t c[2];
  double first = *(const double *)arg;
  c[0] = (syn_coll_t){10, first, first, first + 10};
  c[1] = (syn_coll_t){15, 100, 100, 105};
  s->data = 5, s->fwd = 20, s->bwd = 100, s->opt = 10;
  s->coll = c;
  s->n_coll = 2;
}

static void test_late_start(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  double first = 70;
  run(2, late_shape, &first, &a);
  const dr_dg_pattern_t *p = find(&a, DR_DG_PAT_LATE_START);
  assert_non_null(p);
  near(p->ms, 70);
  near(p->frac, 0.70);
  assert_non_null(strstr(p->text, "70.0 ms into the backward pass (70%"));
  dr_dg_analysis_free(&a);
  first = 30; /* 30% into the backward pass: not late */
  run(2, late_shape, &first, &a);
  assert_null(find(&a, DR_DG_PAT_LATE_START));
  dr_dg_analysis_free(&a);
}

/* ---- backlog ------------------------------------------------------------ */

/* Eight buckets, alternately 1 and 2 MiB, ready at 1, 2, ..., 8 ms of a
 * 10 ms backward pass, each taking alpha + bytes / B (arg: {alpha, B in
 * MiB/ms, spacing of the ready times}). */
static void backlog_shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  static syn_coll_t c[8];
  const double *p = arg;
  double end = 0;
  for (int i = 0; i < 8; i++) {
    double mib = i % 2 ? 2 : 1, ready = 1 + p[2] * i;
    double start = ready > end ? ready : end;
    end = start + p[0] + mib / p[1];
    c[i] = (syn_coll_t){mib, ready, start, end};
  }
  s->data = 0, s->fwd = 5, s->bwd = 1 + 7 * p[2] + 2, s->opt = 1;
  s->coll = c;
  s->n_coll = 8;
}

/* alpha 2 ms, 10 MiB/ms: 2.1 and 2.2 ms per all-reduce, one ready per ms:
 * all eight back to back from 1 ms, 4 * 2.1 + 4 * 2.2 = 17.2 ms, on a
 * 10 ms backward pass. alpha's share of the mean (1.5 MiB) all-reduce is
 * 2 / (2 + 0.15). */
static void test_backlog_per_call(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  double arg[3] = {2, 10, 1};
  run(1, backlog_shape, arg, &a);
  const dr_dg_pattern_t *p = find(&a, DR_DG_PAT_BACKLOG);
  assert_non_null(p);
  assert_true(p->ms > 17.2 - 1e-6 && p->ms < 17.2 + 1e-6);
  near(p->frac, p->ms / 10);
  assert_int_equal(p->n, 8);
  assert_string_equal(p->cause, "per_call");
  assert_true(p->share > 2 / 2.15 - 1e-6 && p->share < 2 / 2.15 + 1e-6);
  assert_non_null(strstr(p->text, "larger buckets"));
  dr_dg_analysis_free(&a);
}

/* alpha 0.1 ms, 0.5 MiB/ms: 2.1 and 4.1 ms, back to back for 4 * 2.1 +
 * 4 * 4.1 = 24.8 ms; alpha's share 0.1 / (0.1 + 1.5 / 0.5). */
static void test_backlog_bandwidth(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  double arg[3] = {0.1, 0.5, 1};
  run(1, backlog_shape, arg, &a);
  const dr_dg_pattern_t *p = find(&a, DR_DG_PAT_BACKLOG);
  assert_non_null(p);
  assert_true(p->ms > 24.8 - 1e-6 && p->ms < 24.8 + 1e-6);
  assert_string_equal(p->cause, "bandwidth");
  assert_true(p->share > 0.1 / 3.1 - 1e-6 && p->share < 0.1 / 3.1 + 1e-6);
  assert_non_null(strstr(p->text, "not a bucket problem"));
  dr_dg_analysis_free(&a);
}

/* One bucket ready every 3 ms and 2.1 or 2.2 ms long: never a queue. */
static void test_no_backlog(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  double arg[3] = {2, 10, 3};
  run(1, backlog_shape, arg, &a);
  assert_null(find(&a, DR_DG_PAT_BACKLOG));
  dr_dg_analysis_free(&a);
}

/* ---- tail and all hidden -------------------------------------------- */

/* forward 60 ms, backward 40 ms; one all-reduce ready at 30 ms of the
 * backward pass lasting `len` ms (arg); the optimizer 10 ms. */
static void tail_shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  static syn_coll_t c[1];
  double len = *(const double *)arg;
  c[0] = (syn_coll_t){4, 30, 30, 30 + len};
  s->data = 2, s->fwd = 58, s->bwd = 40, s->opt = 10;
  s->coll = c;
  s->n_coll = 1;
}

/* len 30: it ends 20 ms after the backward pass: the step is 2 + 58 + 60
 * + 10 = 130 ms, 20 exposed (15% of the step). */
static void test_tail(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  double len = 30;
  run(2, tail_shape, &len, &a);
  const dr_dg_pattern_t *p = find(&a, DR_DG_PAT_TAIL);
  assert_non_null(p);
  near(p->ms, 20);
  near(p->frac, 20.0 / 130);
  assert_non_null(strstr(p->text, "tail: 20.0 ms"));
  assert_null(find(&a, DR_DG_PAT_ALL_HIDDEN));
  dr_dg_analysis_free(&a);
}

/* len 8: hidden in full; the largest part of the step is the forward
 * pass (58 ms). */
static void test_all_hidden(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  double len = 8;
  run(2, tail_shape, &len, &a);
  const dr_dg_pattern_t *p = find(&a, DR_DG_PAT_ALL_HIDDEN);
  assert_non_null(p);
  near(p->ms, 8);
  near(p->frac, 1);
  assert_string_equal(p->cause, "forward");
  near(p->cause_ms, 58);
  assert_non_null(strstr(p->text, "the forward (58.0 ms of 110.0 ms)"));
  assert_null(find(&a, DR_DG_PAT_TAIL));
  assert_null(find(&a, DR_DG_PAT_SLOW_RANK));
  dr_dg_analysis_free(&a);
  len = 30; /* the tail model: 20 of 30 ms exposed, not all hidden */
  run(2, tail_shape, &len, &a);
  assert_null(find(&a, DR_DG_PAT_ALL_HIDDEN));
  dr_dg_analysis_free(&a);
}

/* ---- a slow rank -------------------------------------------------------- */

/* Four ranks: data 5, forward 10, backward 20 ms (they arrive at 35 ms);
 * rank 2 loads data for arg[2] ms more; rank 3 is slow by arg[0] ms of
 * data and arg[1] ms of backward (arrives at 35 + both).
 * One all-reduce of the last gradient, ready at each rank's backward end;
 * it takes 2 ms on the last rank to arrive, so it ends at the slow rank's
 * arrival + 2 on every rank; then the optimizer, 5 ms. */
static void slow_shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  static syn_coll_t c[4][1];
  const double *slow = arg;
  s->data = r == 2 ? 5 + slow[2] : 5;
  s->fwd = 10;
  s->bwd = 20;
  if (r == 3) {
    s->data += slow[0];
    s->bwd += slow[1];
  }
  double arrive = s->data + s->fwd + s->bwd;
  double last = slow[0] + slow[1] > slow[2] ? 35 + slow[0] + slow[1]
                                            : 35 + slow[2];
  c[r][0] = (syn_coll_t){8, s->bwd, s->bwd, s->bwd + last + 2 - arrive};
  s->opt = 5;
  s->coll = c[r];
  s->n_coll = 1;
}

/* Rank 3 slow by 20 ms of data, rank 2 by 5: arrivals 35, 35, 40, 55;
 * the other ranks' median is 35; every all-reduce ends at 57, every step
 * at 62. Exposed 22, 22, 17, 2; waits min(20, 22), min(20, 22), min(15,
 * 17), 0 = 20, 20, 15, 0; own steps 42, 42, 47, 62. Rank 3 at the others'
 * speed arrives at 35: its own step is 62 - 20 = 42, and the step max(42,
 * 42, 42, 47) = 47 (rank 2 is then the last to arrive: 40 + 2 + 5). Its
 * data, 25 ms, is 20 over the others' (5, 5, 10: 5); its forward and
 * backward are theirs. */
static void test_slow_rank_data(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  double slow[3] = {20, 0, 5};
  run(4, slow_shape, slow, &a);
  near(a.job.step_ms, 62);
  near(a.ranks[0].wait_ms, 20);
  near(a.ranks[2].wait_ms, 15);
  near(a.ranks[3].wait_ms, 0);
  near(a.ranks[3].exposed_ms, 2);
  const dr_dg_pattern_t *p = find(&a, DR_DG_PAT_SLOW_RANK);
  assert_non_null(p);
  assert_int_equal(p->rank, 3);
  near(p->ms, 20);
  assert_string_equal(p->cause, "data");
  near(p->data_excess_ms, 20);
  near(p->cause_ms, 20);
  near(p->compute_excess_ms, 0);
  near(p->whatif_step_ms, 47);
  near(p->whatif_frac, 47.0 / 62 - 1);
  assert_non_null(strstr(p->text, "if rank 3 ran at their speed the "
                                  "step would be 47.0 ms (-24%)"));
  assert_non_null(strstr(p->text, "data loading"));
  dr_dg_analysis_free(&a);
}

/* The same 20 ms in rank 3's backward pass: the cause is its compute
 * (50 ms of forward and backward against the others' 30); the what-if
 * is the same 47 ms. */
static void test_slow_rank_compute(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  double slow[3] = {0, 20, 5};
  run(4, slow_shape, slow, &a);
  const dr_dg_pattern_t *p = find(&a, DR_DG_PAT_SLOW_RANK);
  assert_non_null(p);
  assert_int_equal(p->rank, 3);
  assert_string_equal(p->cause, "compute");
  near(p->compute_excess_ms, 20);
  near(p->data_excess_ms, 0);
  near(p->whatif_step_ms, 47);
  assert_non_null(strstr(p->text, "forward and backward"));
  dr_dg_analysis_free(&a);
}

/* Ranks 2 and 3 1 ms slower (arrivals 35, 35, 36, 36; 1 ms after the
 * others' median at most, 2% of the 36 + 2 + 5 = 43 ms step): no slow
 * rank. */
static void test_no_slow_rank(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  double slow[3] = {1, 0, 1};
  run(4, slow_shape, slow, &a);
  near(a.job.step_ms, 43);
  assert_null(find(&a, DR_DG_PAT_SLOW_RANK));
  dr_dg_analysis_free(&a);
}

/* The same slow rank in traces without collectives: a longer step, but no
 * one waits for it, so it is no slow rank. */
static void test_slow_rank_without_collectives(void **state) {
  (void)state;
  double slow[3] = {20, 0, 5};
  dr_dg_rank_t *r = syn_ranks(4, 4, 3, 1, slow_shape, slow);
  for (size_t i = 0; i < 4; i++)
    for (size_t k = 0; k < 3; k++)
      r[i].steps[k].n_colls = 0;
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 4, NULL, &a), 0);
  near(a.ranks[0].wait_ms, 0);
  assert_null(find(&a, DR_DG_PAT_SLOW_RANK));
  dr_dg_analysis_free(&a);
  for (size_t i = 0; i < 4; i++)
    for (size_t k = 0; k < 3; k++)
      r[i].steps[k].n_colls = 1;
  syn_free(r, 4);
}

/* ---- many ranks ---------------------------------------------------------- */

/* Every element handed to qsort, counted: this test links with
 * -Wl,--wrap=qsort, so the analysis's calls come here. */
static size_t sorted_elems;
void __real_qsort(void *base, size_t n, size_t size,
                  int (*cmp)(const void *, const void *));
void __wrap_qsort(void *base, size_t n, size_t size,
                  int (*cmp)(const void *, const void *));
void __wrap_qsort(void *base, size_t n, size_t size,
                  int (*cmp)(const void *, const void *)) {
  sorted_elems += n;
  __real_qsort(base, n, size, cmp);
}

/* As slow_shape, for any number of ranks: rank *arg loads its data 20 ms
 * slower (arrives at 55 ms, the others at 35). */
static void many_shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  static syn_coll_t c[1];
  (void)k;
  s->data = r == *(const size_t *)arg ? 25 : 5;
  s->fwd = 10;
  s->bwd = 20;
  double arrive = s->data + s->fwd + s->bwd;
  c[0] = (syn_coll_t){8, s->bwd, s->bwd, s->bwd + 55 + 2 - arrive};
  s->opt = 5;
  s->coll = c;
  s->n_coll = 1;
}

/* 1000 ranks: the slow one is named as with four, and the analysis sorts
 * a few times ranks x steps elements in all, not ranks x ranks x steps
 * (comparing each rank with the others' median at each step must not
 * sort the others again for every rank). */
static void test_slow_rank_among_many(void **state) {
  (void)state;
  size_t n = 1000, slow = 617;
  dr_dg_rank_t *r = syn_ranks(n, (int)n, 3, 1, many_shape, &slow);
  dr_dg_analysis_t a;
  sorted_elems = 0;
  assert_int_equal(dr_dg_analyze(r, n, NULL, &a), 0);
  size_t sorted = sorted_elems;
  syn_free(r, n);
  const dr_dg_pattern_t *p = find(&a, DR_DG_PAT_SLOW_RANK);
  assert_non_null(p);
  assert_int_equal(p->rank, (int)slow);
  assert_string_equal(p->cause, "data");
  near(p->ms, 20);
  near(p->data_excess_ms, 20);
  near(a.ranks[0].wait_ms, 20);
  dr_dg_analysis_free(&a);
  if (sorted > 100 * n * 3)
    fail_msg("%zu elements sorted for %zu ranks x 3 steps", sorted, n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hidden_exposed_overlap),
      cmocka_unit_test(test_late_start),
      cmocka_unit_test(test_backlog_per_call),
      cmocka_unit_test(test_backlog_bandwidth),
      cmocka_unit_test(test_no_backlog),
      cmocka_unit_test(test_tail),
      cmocka_unit_test(test_all_hidden),
      cmocka_unit_test(test_slow_rank_data),
      cmocka_unit_test(test_slow_rank_compute),
      cmocka_unit_test(test_no_slow_rank),
      cmocka_unit_test(test_slow_rank_without_collectives),
      cmocka_unit_test(test_slow_rank_among_many),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
