/* The backward pass's slowest ops (diag_backward.c): which rank, the sums
 * over the steps, the order, the top-5 cut, and both reports, on synthetic
 * ranks whose every figure is worked out by hand here. */
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

static void close_to(double got, double want) {
  if (got < want - 1e-9 || got > want + 1e-9)
    fail_msg("got %.12g, want %.12g", got, want);
}

/* The text (text set) or JSON report of a; caller frees. */
static char *render(const dr_dg_analysis_t *a, int text) {
  char *out = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&out, &n);
  assert_non_null(f);
  assert_int_equal(text ? dr_dg_report_text(f, a) : dr_dg_report_json(f, a),
                   0);
  fclose(f);
  return out;
}

/* A 60 ms backward pass, 70 ms on rank 1 (*arg: the ranks whose pass is
 * 70; -1 none). */
static void shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  (void)k;
  int slow = *(const int *)arg;
  s->data = 1, s->fwd = 10, s->opt = 5;
  s->bwd = (int)r == slow ? 70 : 60;
}

/* Every step of rank r gets the ops (ms, runs) below; rank 0's are all
 * halved. In step 2 AddmmBackward0 shows twice (as a reader gives two
 * names it cut to one): one op of 2 ms more. */
static void add_ops(dr_dg_rank_t *r) {
  static const struct {
    const char *name;
    double ms;
    uint32_t runs;
  } ops[] = {{"ReluBackward0", 5, 3},
             {"ConvolutionBackward0", 20, 2},
             {"ViewBackward0", 8, 1},
             {"AddmmBackward0", 10, 1},
             {"BatchNormBackward0", 8, 2},
             {"torch::autograd::AccumulateGrad", 3, 10},
             {"MaxPool2DWithIndicesBackward0", 1, 1}};
  for (size_t k = 0; k < r->n_steps; k++) {
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
      syn_add_op(&r->steps[k], ops[i].name,
                 r->rank == 0 ? ops[i].ms / 2 : ops[i].ms, ops[i].runs);
    if (k == 2)
      syn_add_op(&r->steps[k], "AddmmBackward0", 2, 1);
  }
}

static void test_slowest_rank(void **state) {
  (void)state;
  int slow = 1;
  dr_dg_rank_t *r = syn_ranks(2, 2, 3, 10, shape, &slow);
  add_ops(&r[0]);
  add_ops(&r[1]);
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  const dr_dg_backward_t *b = &a.bwd;
  assert_int_equal(b->rank, 1);
  assert_int_equal(b->n_steps, 3);
  close_to(b->backward_ms, 3 * 70);
  assert_int_equal(b->n_kinds, 7);
  close_to(b->ops_ms, 3 * (5 + 20 + 8 + 10 + 8 + 3 + 1) + 2);
  /* Totals over the 3 steps: Convolution 60, Addmm 32, BatchNorm and View
   * 24 each (by name), Relu 15; AccumulateGrad 9 and MaxPool 3 cut. */
  static const struct {
    const char *name;
    double total;
    size_t runs;
  } want[] = {{"ConvolutionBackward0", 60, 6},
              {"AddmmBackward0", 32, 4},
              {"BatchNormBackward0", 24, 6},
              {"ViewBackward0", 24, 3},
              {"ReluBackward0", 15, 9}};
  assert_int_equal(b->n_top, 5);
  for (size_t i = 0; i < 5; i++) {
    assert_string_equal(b->top[i].name, want[i].name);
    close_to(b->top[i].total_ms, want[i].total);
    close_to(b->top[i].step_ms, want[i].total / 3);
    close_to(b->top[i].share, want[i].total / 210);
    assert_int_equal(b->top[i].n_runs, want[i].runs);
  }
  char *text = render(&a, 1);
  const char *lines[] = {
      "\nslowest backward ops (rank 1, the longest backward pass; mean per "
      "step over 3 steps):\n"
      "    #  op                                     ms/step  total ms   "
      "share runs/step\n"
      "    1  ConvolutionBackward0                    20.000    60.000   "
      "28.6%         2\n"
      "    2  AddmmBackward0                          10.667    32.000   "
      "15.2%     1.333\n",
      "    5  ReluBackward0                            5.000    15.000    "
      "7.1%         3\n"
      "  all 7 ops: 55.667 ms a step, 79.5% of the backward pass (70.000 ms "
      "a step)\n"};
  for (size_t i = 0; i < 2; i++)
    if (strstr(text, lines[i]) == NULL)
      fail_msg("no\n%s\nin\n%s", lines[i], text);
  free(text);
  char *json = render(&a, 0);
  assert_non_null(strstr(json, "\"backward_ops\": {\"rank\": 1, \"path\": "
                               "\"rank1.json\", \"steps\": 3, "
                               "\"backward_ms\": 210.000000, \"ops_ms\": "
                               "167.000000, \"kinds\": 7, \"top\": ["));
  assert_non_null(strstr(json, "{\"name\": \"AddmmBackward0\", \"total_ms\": "
                               "32.000000, \"ms_per_step\": 10.666667, "
                               "\"share\": 0.152381, \"runs\": 4}"));
  free(json);
  dr_dg_analysis_free(&a);
  syn_free(r, 2);
}

/* Equal backward passes: the lower rank. A step whose backward pass is
 * unknown counts for no rank: rank 1's 70 ms a step over 2 steps is less
 * than rank 0's 60 over 3. */
static void test_which_rank(void **state) {
  (void)state;
  int none = -1, slow = 1;
  dr_dg_rank_t *r = syn_ranks(2, 2, 3, 0, shape, &none);
  add_ops(&r[0]);
  add_ops(&r[1]);
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  assert_int_equal(a.bwd.rank, 0);
  close_to(a.bwd.top[0].total_ms, 30);
  dr_dg_analysis_free(&a);
  syn_free(r, 2);

  r = syn_ranks(2, 2, 3, 0, shape, &slow);
  add_ops(&r[0]);
  add_ops(&r[1]);
  r[1].steps[2].bwd_t0_us = -1;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  assert_int_equal(a.bwd.rank, 0);
  assert_int_equal(a.bwd.n_steps, 3);
  close_to(a.bwd.backward_ms, 180);
  dr_dg_analysis_free(&a);
  /* --steps 0:1: only those steps are summed. */
  dr_dg_options_t o = {0, 1};
  assert_int_equal(dr_dg_analyze(r, 2, &o, &a), 0);
  assert_int_equal(a.bwd.rank, 1);
  assert_int_equal(a.bwd.n_steps, 2);
  assert_string_equal(a.bwd.top[0].name, "ConvolutionBackward0");
  close_to(a.bwd.top[0].total_ms, 40);
  close_to(a.bwd.top[1].total_ms, 20); /* step 2's extra Addmm left out */
  dr_dg_analysis_free(&a);
  syn_free(r, 2);
}

/* No backward ops: one line in the text, null in the JSON; nothing at all
 * without a step. */
static void test_none(void **state) {
  (void)state;
  int none = -1;
  dr_dg_rank_t *r = syn_ranks(2, 2, 2, 0, shape, &none);
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  assert_int_equal(a.bwd.n_steps, 0);
  assert_int_equal(a.bwd.n_top, 0);
  char *text = render(&a, 1);
  const char *line = "\nslowest backward ops: none in the traces (PyTorch's "
                     "autograd::engine::evaluate_function events, train's "
                     "LAYER.bwd spans)\n";
  const char *at = strstr(text, line);
  assert_non_null(at);
  assert_string_equal(at + strlen(line), ""); /* the report's last line */
  free(text);
  char *json = render(&a, 0);
  assert_non_null(strstr(json, "\"backward_ops\": null"));
  free(json);
  dr_dg_analysis_free(&a);

  assert_int_equal(dr_dg_analyze(r, 0, NULL, &a), 0);
  assert_int_equal(a.bwd.n_steps, 0);
  text = render(&a, 1);
  assert_null(strstr(text, "slowest backward ops"));
  free(text);
  dr_dg_analysis_free(&a);
  syn_free(r, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slowest_rank),
      cmocka_unit_test(test_which_rank),
      cmocka_unit_test(test_none),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
