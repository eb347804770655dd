/* `ddprun diagnose`'s bucket size against the planner (plan.h) called
 * directly on the same inputs, and the analysis of traces with data
 * missing: each gives a partial analysis that says what is missing, and
 * both reports render it. */
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
#include "plan.h"
#include "synth.h"

#define MIB 1048576.0

static void close_to(double got, double want) {
  double tol = 1e-6 * (want > 1 ? want : 1);
  if (got < want - tol || got > want + tol)
    fail_msg("got %.12g, want %.12g", got, want);
}

/* Both reports of a; returns the text (caller frees). */
static char *render(const dr_dg_analysis_t *a) {
  char *text = NULL, *json = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  assert_non_null(f);
  assert_int_equal(dr_dg_report_text(f, a), 0);
  fclose(f);
  f = open_memstream(&json, &n);
  assert_non_null(f);
  assert_int_equal(dr_dg_report_json(f, a), 0);
  fclose(f);
  assert_true(n > 2 && json[0] == '{' && json[n - 2] == '}');
  free(json);
  return text;
}

static int has_note(const dr_dg_analysis_t *a, const char *what) {
  for (size_t i = 0; i < a->n_notes; i++)
    if (strstr(a->notes[i], what) != NULL)
      return 1;
  return 0;
}

/* ---- the recommendation ---------------------------------------------- */

/* Gradients ready at 10, 20, ..., 60 ms of a 60 ms backward pass (and one
 * at 70 with arg set, after the last bucket: in no bucket). Buckets of 2,
 * 4 and 3 MiB ready at 20, 40, 60 (with arg, one more of 1 MiB ready at
 * 20 too, with no gradient of its own), each taking 1 + MiB ms: B 1
 * MiB/ms, alpha 1 ms. Data 3, forward 17 (the backward pass starts at 20),
 * optimizer 10: the step is 20 + 64 + 10 = 94 ms. */
static void rec_shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  static const double grad[] = {10, 20, 30, 40, 50, 60, 70};
  static const syn_coll_t plain[] = {
      {2, 20, 20, 23}, {4, 40, 40, 45}, {3, 60, 60, 64}};
  static const syn_coll_t odd[] = {
      {2, 20, 20, 23}, {1, 20, 23, 25}, {4, 40, 40, 45}, {3, 60, 60, 64}};
  int extra = arg != NULL;
  s->data = 3, s->fwd = 17, s->bwd = extra ? 70 : 60, s->opt = 10;
  s->grad = grad;
  s->n_grad = extra ? 7 : 6;
  s->coll = extra ? odd : plain;
  s->n_coll = extra ? 4 : 3;
}

/* What the planner says for these gradients, cap by cap. */
static void check_against_plan(const dr_dg_recommend_t *rec, const double *bytes,
                               const double *ready, size_t n, double bwd) {
  dr_plan_cost_t cost = {1.0, 1.0 * MIB, bwd, 20 + 10, 0};
  close_to(rec->backward_ms, bwd);
  close_to(rec->alpha_ms, 1);
  close_to(rec->bytes_per_ms, MIB);
  close_to(rec->forward_ms, 20);
  close_to(rec->optimizer_ms, 10);
  assert_int_equal(rec->n_params, n);
  dr_plan_result_t want[DR_DG_MAX_CAPS];
  for (size_t k = 0; k < rec->n_caps; k++) {
    dr_plan_bucket_t b[16];
    size_t nb = dr_plan_group(bytes, ready, n, rec->caps_mib[k] * MIB, MIB, b);
    dr_plan_eval(b, nb, &cost, &want[k]);
    assert_int_equal(rec->cand[k].n_buckets, want[k].n_buckets);
    close_to(rec->cand[k].step_ms, want[k].step_ms);
    close_to(rec->cand[k].exposed_ms, want[k].exposed_ms);
    close_to(rec->cand[k].finish_ms, want[k].finish_ms);
  }
  assert_int_equal(rec->best, dr_plan_best(want, rec->n_caps));
}

static void test_recommend_matches_plan(void **state) {
  (void)state;
  dr_dg_rank_t *r = syn_ranks(2, 2, 4, 10, rec_shape, NULL);
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  const dr_dg_recommend_t *rec = &a.rec;
  assert_true(rec->ok);
  assert_int_equal(rec->n_caps, 7);
  assert_int_equal(rec->n_sizes, 3);
  assert_int_equal(rec->n_samples, 4 * 3);
  assert_false(rec->fit_weak);
  const double bytes[] = {1 * MIB, 1 * MIB, 2 * MIB, 2 * MIB, 1.5 * MIB,
                          1.5 * MIB};
  const double ready[] = {10, 20, 30, 40, 50, 60};
  check_against_plan(rec, bytes, ready, 6, 60);
  /* The cap in use: the model on the trace's buckets lands on the step. */
  assert_int_equal(rec->in_use.n_buckets, 3);
  close_to(rec->in_use.step_ms, 94);
  close_to(rec->measured_step_ms, 94);
  close_to(rec->in_use_mib, 4);
  /* The best, 1 MiB (six buckets ending at 62.5: 92.5 ms), is within
   * DR_DG_GAIN_FRAC of the cap in use. */
  close_to(rec->cand[rec->best].step_ms, 92.5);
  assert_false(rec->change);
  char *text = render(&a);
  assert_non_null(strstr(text, "in use: 3 buckets, the largest 4 MiB: "
                               "predicted 94.000 ms, measured 94.000 ms"));
  assert_non_null(strstr(text, "keep the cap in use: the best candidate, 1 MiB, "
                               "predicts 92.500 ms (-1.6%)"));
  free(text);
  dr_dg_analysis_free(&a);
  syn_free(r, 2);
}

/* Two buckets: 1.5 MiB with the gradient ready at 10 ms, then 7.5 MiB
 * with the five ready at 20 to 60, ending at 68.5: the step is 20 + 68.5
 * + 10 = 98.5 ms. With 1 MiB buckets each 1.5 MiB gradient goes alone
 * and the last all-reduce ends at 62.5 (92.5 ms): worth the change. */
static void big_shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  static const double grad[] = {10, 20, 30, 40, 50, 60};
  static const syn_coll_t c[] = {{1.5, 10, 10, 12.5}, {7.5, 60, 60, 68.5}};
  s->data = 3, s->fwd = 17, s->bwd = 60, s->opt = 10;
  s->grad = grad;
  s->n_grad = 6;
  s->coll = c;
  s->n_coll = 2;
}

static void test_recommend_change(void **state) {
  (void)state;
  dr_dg_rank_t *r = syn_ranks(1, 1, 3, 0, big_shape, NULL);
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 1, NULL, &a), 0);
  const double bytes[] = {1.5 * MIB, 1.5 * MIB, 1.5 * MIB, 1.5 * MIB,
                          1.5 * MIB, 1.5 * MIB};
  const double ready[] = {10, 20, 30, 40, 50, 60};
  check_against_plan(&a.rec, bytes, ready, 6, 60);
  close_to(a.rec.in_use.step_ms, 98.5);
  close_to(a.rec.cand[a.rec.best].step_ms, 92.5);
  assert_true(a.rec.change);
  assert_string_equal(a.rec.how, "pass bucket_cap_mb=1 to DistributedDataParallel");
  char *text = render(&a);
  assert_non_null(strstr(text, "use 1 MiB: pass bucket_cap_mb=1 to "
                               "DistributedDataParallel (predicted 92.500 ms"));
  free(text);
  dr_dg_analysis_free(&a);
  syn_free(r, 1);
}

/* A bucket with no gradient of its own becomes one of its size at its
 * ready time; a gradient after the last bucket is left out. A train
 * trace is told --bucket-cap-mb. */
static void test_recommend_distribution(void **state) {
  (void)state;
  int extra = 1;
  dr_dg_rank_t *r = syn_ranks(1, 1, 3, 0, rec_shape, &extra);
  snprintf(r[0].source, sizeof(r[0].source), "train");
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 1, NULL, &a), 0);
  assert_true(a.rec.ok);
  const double bytes[] = {1 * MIB, 1 * MIB, 1 * MIB, 2 * MIB, 2 * MIB,
                          1.5 * MIB, 1.5 * MIB};
  const double ready[] = {10, 20, 20, 30, 40, 50, 60};
  check_against_plan(&a.rec, bytes, ready, 7, 70);
  assert_non_null(strstr(a.rec.how, "run train with --bucket-cap-mb "));
  dr_dg_analysis_free(&a);
  syn_free(r, 1);
}

/* Rank 1's all-reduces last 3 ms longer (it waits for rank 0): the fit
 * takes the shorter duration of each, rank 0's. */
static void test_fit_takes_fastest_rank(void **state) {
  (void)state;
  dr_dg_rank_t *r = syn_ranks(2, 2, 2, 0, rec_shape, NULL);
  for (size_t k = 0; k < 2; k++)
    for (size_t i = 0; i < r[1].steps[k].n_colls; i++)
      r[1].steps[k].colls[i].end_us += 3000;
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  close_to(a.rec.alpha_ms, 1);
  close_to(a.rec.bytes_per_ms, MIB);
  dr_dg_analysis_free(&a);
  syn_free(r, 2);
}

/* Every bucket of one size: the fit is weak, and the report says so. */
static void test_fit_weak(void **state) {
  (void)state;
  dr_dg_rank_t *r = syn_ranks(1, 1, 2, 0, rec_shape, NULL);
  for (size_t k = 0; k < 2; k++)
    for (size_t i = 0; i < r[0].steps[k].n_colls; i++)
      r[0].steps[k].colls[i].n_bytes = 4 << 20;
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 1, NULL, &a), 0);
  assert_int_equal(a.rec.n_sizes, 1);
  assert_true(a.rec.fit_weak);
  char *text = render(&a);
  assert_non_null(strstr(text, "weak fit"));
  free(text);
  dr_dg_analysis_free(&a);
  syn_free(r, 1);
}

/* ---- missing data --------------------------------------------------- */

static void bare_shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  s->data = 1, s->fwd = 10, s->bwd = 20, s->opt = 5;
}

static void test_no_collectives(void **state) {
  (void)state;
  dr_dg_rank_t *r = syn_ranks(2, 2, 3, 0, bare_shape, NULL);
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  assert_true(has_note(&a, "no collectives"));
  assert_false(a.rec.ok);
  assert_non_null(strstr(a.rec.why, "no gradient all-reduces"));
  assert_int_equal(a.n_patterns, 0);
  assert_int_equal(a.n_buckets, 0);
  close_to(a.job.step_ms, 36);
  char *text = render(&a);
  assert_non_null(strstr(text, "no recommendation"));
  free(text);
  dr_dg_analysis_free(&a);
  syn_free(r, 2);
}

/* The world is 8; ranks 3 and 7 are not given. */
static void test_missing_ranks(void **state) {
  (void)state;
  dr_dg_rank_t *all = syn_ranks(8, 8, 2, 0, rec_shape, NULL);
  dr_dg_rank_t six[6] = {all[0], all[1], all[2], all[4], all[5], all[6]};
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(six, 6, NULL, &a), 0);
  assert_int_equal(a.world, 8);
  assert_int_equal(a.n_used, 6);
  assert_int_equal(a.n_missing, 2);
  assert_int_equal(a.missing[0], 3);
  assert_int_equal(a.missing[1], 7);
  assert_true(has_note(&a, "but 6 traces were given (missing: 3, 7)"));
  assert_true(a.rec.ok);
  free(render(&a));
  dr_dg_analysis_free(&a);
  syn_free(all, 8);
}

/* Rank 0 has steps 1 to 5, rank 1 steps 3 to 5: the three common steps. */
static void test_unequal_steps(void **state) {
  (void)state;
  dr_dg_rank_t *a0 = syn_ranks(1, 2, 5, 1, rec_shape, NULL);
  dr_dg_rank_t *a1 = syn_ranks(1, 2, 3, 3, rec_shape, NULL);
  a1[0].rank = 1;
  dr_dg_rank_t two[2] = {a1[0], a0[0]}; /* any order */
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(two, 2, NULL, &a), 0);
  assert_int_equal(a.n_steps, 3);
  assert_int_equal(a.first_step, 3);
  assert_int_equal(a.last_step, 5);
  assert_int_equal(a.ranks[0].rank, 0);
  assert_int_equal(a.ranks[0].n_steps, 5);
  assert_true(has_note(&a, "different steps (3 to 5 each); the 3 steps every "
                           "rank has (3 to 5) are used"));
  dr_dg_analysis_free(&a);
  /* --steps 4:4, then steps no rank shares. */
  dr_dg_options_t o = {4, 4};
  assert_int_equal(dr_dg_analyze(two, 2, &o, &a), 0);
  assert_int_equal(a.n_steps, 1);
  dr_dg_analysis_free(&a);
  a1[0].steps[0].step = 100, a1[0].steps[1].step = 101, a1[0].steps[2].step = 102;
  assert_int_equal(dr_dg_analyze(two, 2, NULL, &a), 0);
  assert_int_equal(a.n_steps, 0);
  assert_true(has_note(&a, "no step number is in every rank's trace"));
  assert_false(a.rec.ok);
  free(render(&a));
  dr_dg_analysis_free(&a);
  syn_free(a0, 1);
  syn_free(a1, 1);
}

/* Sizes unknown: no recommendation, and a backlog's cause is unknown. Two
 * all-reduces back to back from 1 to 9 ms of a 6 ms backward pass: an
 * 8 ms backlog and a 3 ms tail of a 15 ms step. */
static void backlog_unsized(size_t r, size_t k, syn_step_t *s, void *arg) {
  static const syn_coll_t c[] = {{0, 1, 1, 5}, {0, 2, 5, 9}};
  s->fwd = 5, s->bwd = 6, s->opt = 1;
  s->coll = c;
  s->n_coll = 2;
}

static void test_unknown_sizes(void **state) {
  (void)state;
  dr_dg_rank_t *r = syn_ranks(1, 1, 2, 0, backlog_unsized, NULL);
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 1, NULL, &a), 0);
  assert_false(a.rec.ok);
  assert_string_equal(a.rec.why, "the traces do not give the all-reduces' "
                                 "sizes, so the model cannot be fitted");
  assert_int_equal(a.n_patterns, 2);
  assert_string_equal(a.patterns[0].name, "backlog");
  assert_string_equal(a.patterns[0].cause, "unknown");
  assert_true(a.patterns[0].ms > 8 - 1e-9 && a.patterns[0].ms < 8 + 1e-9);
  assert_string_equal(a.patterns[1].name, "tail");
  assert_true(a.buckets[0].mib < 0);
  free(render(&a));
  dr_dg_analysis_free(&a);
  /* A PyTorch trace profiled without record_shapes: the reason says what
   * to change, in both reports. */
  r[0].no_shapes = 1;
  assert_int_equal(dr_dg_analyze(r, 1, NULL, &a), 0);
  assert_false(a.rec.ok);
  static const char why[] =
      "the traces have no tensor sizes (profiled without record_shapes); "
      "profile with torch.profiler.profile(record_shapes=True) to get a "
      "bucket size from the all-reduces' sizes";
  assert_string_equal(a.rec.why, why);
  char *text = render(&a);
  char line[400];
  snprintf(line, sizeof(line), "\nbucket size: no recommendation: %s\n", why);
  assert_non_null(strstr(text, line));
  free(text);
  dr_dg_analysis_free(&a);
  syn_free(r, 1);
}

static void test_no_backward(void **state) {
  (void)state;
  dr_dg_rank_t *r = syn_ranks(2, 2, 2, 0, rec_shape, NULL);
  for (size_t i = 0; i < 2; i++)
    for (size_t k = 0; k < 2; k++)
      r[i].steps[k].bwd_t0_us = r[i].steps[k].bwd_t1_us = -1;
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  assert_true(has_note(&a, "no backward pass"));
  assert_true(a.job.hidden_ms < 0 && a.job.exposed_ms < 0 && a.job.wait_ms < 0);
  close_to(a.job.comm_ms, 3 + 5 + 4);
  assert_false(a.rec.ok);
  assert_non_null(strstr(a.rec.why, "backward"));
  assert_int_equal(a.n_patterns, 0);
  free(render(&a));
  dr_dg_analysis_free(&a);
  syn_free(r, 2);
}

/* No gradient ready times: no recommendation, the analysis otherwise. */
static void test_no_ready_times(void **state) {
  (void)state;
  dr_dg_rank_t *r = syn_ranks(1, 1, 2, 0, rec_shape, NULL);
  for (size_t k = 0; k < 2; k++)
    r[0].steps[k].n_grad = 0;
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 1, NULL, &a), 0);
  assert_false(a.rec.ok);
  assert_non_null(strstr(a.rec.why, "ready times"));
  close_to(a.rec.alpha_ms, 1); /* the fit needs no ready times */
  free(render(&a));
  dr_dg_analysis_free(&a);
  syn_free(r, 1);
}

/* No traces, or a trace without steps. */
static void test_empty(void **state) {
  (void)state;
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(NULL, 0, NULL, &a), 0);
  assert_true(has_note(&a, "no traces"));
  char *text = render(&a);
  assert_non_null(strstr(text, "no step to analyse"));
  free(text);
  dr_dg_analysis_free(&a);
  dr_dg_rank_t *r = syn_ranks(2, 2, 2, 0, bare_shape, NULL);
  r[1].n_steps = 0;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  assert_int_equal(a.n_used, 1);
  assert_true(has_note(&a, "rank 1 (rank1.json): no steps in the trace"));
  free(render(&a));
  dr_dg_analysis_free(&a);
  r[1].n_steps = 2;
  syn_free(r, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_recommend_matches_plan),
      cmocka_unit_test(test_recommend_change),
      cmocka_unit_test(test_recommend_distribution),
      cmocka_unit_test(test_fit_takes_fastest_rank),
      cmocka_unit_test(test_fit_weak),
      cmocka_unit_test(test_no_collectives),
      cmocka_unit_test(test_missing_ranks),
      cmocka_unit_test(test_unequal_steps),
      cmocka_unit_test(test_unknown_sizes),
      cmocka_unit_test(test_no_backward),
      cmocka_unit_test(test_no_ready_times),
      cmocka_unit_test(test_empty),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
