/* A trace made by the planner's own model is diagnosed back to the
 * planner's answer: `ddprun plan --grad-mib 100 --backward-ms 100
 * --alpha-ms 1 --bandwidth-mib-per-ms 2`'s job (tests/plan), traced at
 * DDP's default 25 MiB buckets. */
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
#define N 100

static void close_to(double got, double want) {
  if (got < want - 1e-6 || got > want + 1e-6)
    fail_msg("got %.12g, want %.12g", got, want);
}

/* 100 gradients of 1 MiB, one ready per ms of a 100 ms backward pass,
 * grouped as the reducer groups them at a 25 MiB cap (first bucket
 * 1 MiB), each bucket all-reduced in 1 + MiB / 2 ms as the model
 * schedules it: 1 MiB at 1-2.5, 25 MiB at 26-39.5, 51-64.5 and 76-89.5,
 * 24 MiB at 100-113. Forward 10 ms, optimizer 5: the step is 128 ms. */
static void model_shape(size_t r, size_t k, syn_step_t *s, void *arg) {
  static double grad[N], bytes[N];
  static syn_coll_t coll[N];
  dr_plan_bucket_t b[N];
  for (size_t g = 0; g < N; g++) {
    grad[g] = (double)(g + 1);
    bytes[g] = MIB;
  }
  size_t nb = dr_plan_group(bytes, grad, N, 25 * MIB, MIB, b);
  double end = 0;
  for (size_t i = 0; i < nb; i++) {
    double start = b[i].ready_ms > end ? b[i].ready_ms : end;
    end = start + 1 + b[i].bytes / MIB / 2;
    coll[i] = (syn_coll_t){b[i].bytes / MIB, b[i].ready_ms, start, end};
  }
  s->data = 2, s->fwd = 8, s->bwd = N, s->opt = 5;
  s->grad = grad;
  s->n_grad = N;
  s->coll = coll;
  s->n_coll = nb;
}

static void test_round_trip(void **state) {
  (void)state;
  dr_dg_rank_t *r = syn_ranks(2, 2, 5, 1, model_shape, NULL);
  dr_dg_analysis_t a;
  assert_int_equal(dr_dg_analyze(r, 2, NULL, &a), 0);
  const dr_dg_recommend_t *rec = &a.rec;
  assert_true(rec->ok);
  assert_false(rec->fit_weak);
  close_to(rec->alpha_ms, 1);
  close_to(rec->bytes_per_ms, 2 * MIB);
  assert_int_equal(rec->n_params, N);
  close_to(rec->in_use.step_ms, 128);
  close_to(rec->measured_step_ms, 128);
  assert_int_equal(rec->in_use.n_buckets, 5);
  /* ddprun plan's best for this job is 2 MiB. The first bucket of 1 MiB
   * shifts the pairs by one gradient: pairs ready at 3, 5, ..., 99 take
   * 2 ms each (the last ends at 101), then the gradient ready at 100 runs
   * alone from 101 to 102.5: 10 + 5 + 102.5 ms. */
  assert_true(rec->change);
  assert_true(rec->caps_mib[rec->best] == 2);
  close_to(rec->cand[rec->best].step_ms, 10 + 5 + 102.5);
  /* 13 ms after the backward pass: 10.2% of the step, a tail. */
  assert_int_equal(a.n_patterns, 1);
  assert_string_equal(a.patterns[0].name, "tail");
  close_to(a.patterns[0].ms, 13);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(dr_dg_report_text(f, &a), 0);
  fclose(f);
  assert_non_null(strstr(text, "use 2 MiB: pass bucket_cap_mb=2 to "
                               "DistributedDataParallel (predicted 117.500 ms"));
  free(text);
  dr_dg_analysis_free(&a);
  syn_free(r, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
