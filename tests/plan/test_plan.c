/* The bucket planner's model on cases computed by hand, its grouping
 * against the reducer's, and the profile file format. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "errors.h"
#include "plan.h"
#include "plan_profile.h"
#include "reducer.h"

#define MIB 1048576.0
#define EPS 1e-9

static void near(double got, double want) {
  if (got < want - EPS || got > want + EPS)
    fail_msg("got %.12g, want %.12g", got, want);
}

/* 100 MiB over a 100 ms backward pass, alpha 1 ms, B 2 MiB/ms. */
static const dr_plan_cost_t uniform_cost = {1.0, 2.0 * MIB, 100.0, 0.0, 0};

static void uniform(double cap_mib, dr_plan_result_t *r) {
  dr_plan_bucket_t b[256];
  size_t n = dr_plan_uniform(100 * MIB, cap_mib * MIB, 100.0, b, 256);
  assert_true(n <= 256);
  dr_plan_eval(b, n, &uniform_cost, r);
}

/* 1 MiB buckets take 1.5 ms and one is produced per ms: the backlog grows
 * by 0.5 ms a bucket. Bucket k (1..100) is ready at k and ends at
 * 1 + 1.5 k, so the last ends at 151. */
static void test_uniform_backlog(void **state) {
  (void)state;
  dr_plan_result_t r;
  uniform(1, &r);
  assert_int_equal(r.n_buckets, 100);
  near(r.allreduce_ms, 1.5);
  near(r.comm_ms, 150);
  near(r.finish_ms, 151);
  near(r.exposed_ms, 51);
  near(r.hidden_frac, 1 - 51.0 / 150);
  near(r.step_ms, 151);
}

/* 10 MiB buckets are ready every 10 ms and take 6 ms: no backlog, the
 * last (ready at 100) ends at 106. */
static void test_uniform_no_backlog(void **state) {
  (void)state;
  dr_plan_result_t r;
  uniform(10, &r);
  assert_int_equal(r.n_buckets, 10);
  near(r.allreduce_ms, 6);
  near(r.comm_ms, 60);
  near(r.finish_ms, 106);
  near(r.exposed_ms, 6);
  near(r.hidden_frac, 0.9);
  near(r.step_ms, 106);
}

/* 40 MiB: buckets of 40, 40 and 20 MiB ready at 40, 80 and 100, taking
 * 21, 21 and 11 ms: 40-61, 80-101, then 101-112 (it waits for the
 * second). */
static void test_uniform_last_smaller(void **state) {
  (void)state;
  dr_plan_bucket_t b[4];
  assert_int_equal(dr_plan_uniform(100 * MIB, 40 * MIB, 100.0, b, 4), 3);
  near(b[2].bytes, 20 * MIB);
  near(b[2].ready_ms, 100);
  near(b[1].ready_ms, 80);
  dr_plan_result_t r;
  dr_plan_eval(b, 3, &uniform_cost, &r);
  near(r.allreduce_ms, 21);
  near(r.finish_ms, 112);
  near(r.exposed_ms, 12);
}

/* One bucket (the cap at or above the gradients): it starts when the
 * backward pass ends and nothing is hidden. */
static void test_one_bucket(void **state) {
  (void)state;
  for (double cap = 100; cap <= 400; cap *= 2) {
    dr_plan_result_t r;
    uniform(cap, &r);
    assert_int_equal(r.n_buckets, 1);
    near(r.allreduce_ms, 51);
    near(r.finish_ms, 151);
    near(r.exposed_ms, 51);
    near(r.hidden_frac, 0);
    near(r.step_ms, 151);
  }
}

/* Parameters of 1, 5, 1, 1 MiB ready at 2, 10, 12, 20 with a 2 MiB cap:
 * [1] [5, alone: larger than the cap] [1, 1]. At alpha 1 and 1 MiB/ms they
 * take 2, 6 and 3 ms: 2-4, 10-16, 20-23. The step adds 5 ms outside. */
static void test_param_larger_than_cap(void **state) {
  (void)state;
  const double bytes[] = {1 * MIB, 5 * MIB, 1 * MIB, 1 * MIB};
  const double ready[] = {2, 10, 12, 20};
  dr_plan_bucket_t b[4];
  size_t n = dr_plan_group(bytes, ready, 4, 2 * MIB, 2 * MIB, b);
  assert_int_equal(n, 3);
  near(b[0].bytes, 1 * MIB);
  near(b[1].bytes, 5 * MIB);
  near(b[2].bytes, 2 * MIB);
  near(b[0].ready_ms, 2);
  near(b[1].ready_ms, 10);
  near(b[2].ready_ms, 20);
  dr_plan_cost_t c = {1.0, 1.0 * MIB, 20.0, 5.0, 0};
  dr_plan_result_t r;
  dr_plan_eval(b, n, &c, &r);
  near(r.allreduce_ms, 6);
  near(r.comm_ms, 11);
  near(r.finish_ms, 23);
  near(r.exposed_ms, 3);
  near(r.step_ms, 28);
}

/* Contention: one 10 MiB bucket ready at 10 ms of a 50 ms backward pass,
 * 20 ms to all-reduce, overlap_cost 0.5. The backward pass does 20 / 1.5
 * ms of its work while the all-reduce runs (10-30), the rest (26.67 ms)
 * after: it ends at 56.67 ms, the all-reduce at 30, nothing exposed.
 * Two buckets, the second ready at 40 (work): the first all-reduce slows
 * the pass until 30 (work 23.33), so the second is ready at 46.67 and runs
 * to 66.67; work 40-50 then takes 15 ms: backward end 61.67, 5 ms
 * exposed. With overlap_cost 0 the model is the plain one. */
static void test_contention(void **state) {
  (void)state;
  dr_plan_bucket_t one[1] = {{10 * MIB, 10}};
  dr_plan_cost_t c = {0.0, 0.5 * MIB, 50.0, 7.0, 0.5};
  dr_plan_result_t r;
  dr_plan_eval(one, 1, &c, &r);
  near(r.finish_ms, 30);
  near(r.exposed_ms, 0);
  near(r.step_ms, 7 + 50 + 20.0 / 3);
  dr_plan_bucket_t two[2] = {{10 * MIB, 10}, {10 * MIB, 40}};
  dr_plan_eval(two, 2, &c, &r);
  near(r.finish_ms, 46.0 + 2.0 / 3 + 20);
  near(r.exposed_ms, 5);
  near(r.step_ms, 7 + 66.0 + 2.0 / 3);
  c.overlap_cost = 0;
  dr_plan_eval(two, 2, &c, &r);
  near(r.finish_ms, 60);
  near(r.exposed_ms, 10);
  /* The same through the parameter path (plan_compress.c). */
  dr_plan_param_t q[2] = {{10 * MIB, 10, 1, 1}, {10 * MIB, 40, 1, 1}};
  c.overlap_cost = 0.5;
  dr_plan_eval_params(q, 2, 10 * MIB, 10 * MIB, &c, NULL, NULL, &r);
  near(r.finish_ms, 46.0 + 2.0 / 3 + 20);
  near(r.exposed_ms, 5);
}

/* Ready times that are not uniform: 1 MiB parameters at 10, 11, 50, 90, a
 * 1 MiB first bucket and 2 MiB after: [p0] [p1 p2] [p3], ready at 10, 50
 * (the later of 11 and 50), 90. At 0.5 ms + 2 ms/MiB: 10-12.5, 50-54.5,
 * 90-92.5, all before the backward end (95): nothing exposed. */
static void test_non_uniform(void **state) {
  (void)state;
  const double bytes[] = {MIB, MIB, MIB, MIB};
  const double ready[] = {10, 11, 50, 90};
  dr_plan_bucket_t b[4];
  size_t n = dr_plan_group(bytes, ready, 4, 2 * MIB, 1 * MIB, b);
  assert_int_equal(n, 3);
  near(b[1].ready_ms, 50);
  dr_plan_cost_t c = {0.5, 0.5 * MIB, 95.0, 0.0, 0};
  dr_plan_result_t r;
  dr_plan_eval(b, n, &c, &r);
  near(r.finish_ms, 92.5);
  near(r.exposed_ms, 0);
  near(r.hidden_frac, 1);
  near(r.step_ms, 95);
  near(r.comm_ms, 9.5);
}

/* Buckets run in bucket order even when a later one is ready first. */
static void test_bucket_order(void **state) {
  (void)state;
  const dr_plan_bucket_t b[] = {{MIB, 30}, {MIB, 20}};
  dr_plan_cost_t c = {0.0, 1.0 * MIB, 25.0, 0.0, 0};
  dr_plan_result_t r;
  dr_plan_eval(b, 2, &c, &r);
  near(r.finish_ms, 32);
  near(r.exposed_ms, 7);
}

/* No gradients at all: no communication, the step is the backward pass. */
static void test_no_buckets(void **state) {
  (void)state;
  dr_plan_cost_t c = {1.0, 1.0 * MIB, 25.0, 3.0, 0};
  dr_plan_result_t r;
  dr_plan_eval(NULL, 0, &c, &r);
  assert_int_equal(r.n_buckets, 0);
  near(r.finish_ms, 0);
  near(r.step_ms, 28);
  near(r.hidden_frac, 1);
}

/* The best of 1, 2, 5, 10, 40 MiB on the uniform case: 2 MiB buckets take
 * as long as they take to produce (2 ms), so the last ends at 102; 5 MiB
 * ends at 103.5, 10 at 106, 40 at 112, 1 at 151. */
static void test_best(void **state) {
  (void)state;
  const double caps[] = {1, 2, 5, 10, 40};
  dr_plan_result_t r[5];
  for (size_t i = 0; i < 5; i++)
    uniform(caps[i], &r[i]);
  near(r[1].step_ms, 102);
  near(r[2].step_ms, 103.5);
  assert_int_equal(dr_plan_best(r, 5), 1);
  /* A tie (within 0.1%) goes to fewer buckets. */
  dr_plan_result_t t[2] = {r[1], r[1]};
  t[1].n_buckets = 3;
  assert_int_equal(dr_plan_best(t, 2), 1);
  t[0].step_ms -= 0.05; /* 0.05% shorter: still a tie */
  assert_int_equal(dr_plan_best(t, 2), 1);
  t[0].step_ms -= 0.1; /* 0.15% shorter */
  assert_int_equal(dr_plan_best(t, 2), 0);
}

/* dr_plan_group groups as the reducer does: same bucket for every
 * parameter, on random sizes and caps. */
static void test_group_matches_reducer(void **state) {
  (void)state;
  srand(7);
  for (int trial = 0; trial < 200; trial++) {
    size_t n = 1 + (size_t)rand() % 40;
    size_t elems[40], order[40], bucket_of[40];
    double bytes[40], ready[40];
    for (size_t k = 0; k < n; k++) {
      elems[k] = 1 + (size_t)rand() % 5000;
      order[k] = n - 1 - k;
    }
    for (size_t k = 0; k < n; k++) {
      bytes[k] = (double)elems[order[k]] * 4;
      ready[k] = (double)k;
    }
    size_t cap = 4 + (size_t)rand() % 40000;
    size_t first = 4 + (size_t)rand() % 40000;
    size_t nb = dr_bucket_plan(order, n, elems, cap, first, bucket_of);
    dr_plan_bucket_t b[40];
    assert_int_equal(dr_plan_group(bytes, ready, n, (double)cap,
                                   (double)first, b), nb);
    double want[40] = {0};
    for (size_t k = 0; k < n; k++)
      want[bucket_of[order[k]]] += bytes[k];
    for (size_t i = 0; i < nb; i++)
      near(b[i].bytes, want[i]);
  }
}

/* The fit recovers an exact line, clamps a negative intercept and copes
 * with times that do not grow. */
static void test_fit(void **state) {
  (void)state;
  const double x[] = {1 * MIB, 2 * MIB, 4 * MIB, 8 * MIB};
  double t[4], alpha, bpm;
  for (size_t i = 0; i < 4; i++)
    t[i] = 0.5 + x[i] / (0.25 * MIB); /* 0.5 ms + 4 ms per MiB */
  dr_plan_fit(x, t, 4, &alpha, &bpm);
  near(alpha, 0.5);
  assert_true(bpm > 0.25 * MIB * (1 - 1e-9) && bpm < 0.25 * MIB * (1 + 1e-9));
  /* 1, 2, 4 and 8 MiB in 1, 3, 7 and 15 ms: the line 2t - 1 has intercept
   * -1; through the origin the slope is sum(xt)/sum(xx) = (1 + 6 + 28 +
   * 120) / (1 + 4 + 16 + 64) = 155/85 ms per MiB. */
  const double t2[] = {1, 3, 7, 15};
  dr_plan_fit(x, t2, 4, &alpha, &bpm);
  near(alpha, 0);
  near(bpm / MIB, 85.0 / 155.0);
  const double flat[] = {2, 2, 2, 2};
  dr_plan_fit(x, flat, 4, &alpha, &bpm);
  near(alpha, 2);
  near(bpm, DR_PLAN_FAST_BPM);
}

/* A launch that completes at once: the reducer needs no process group. */
static int launch_none(void *arg, size_t bucket, float *data, size_t n_elems,
                       dr_work_t **w) {
  (void)arg;
  (void)bucket;
  (void)data;
  (void)n_elems;
  *w = NULL;
  return 0;
}

/* dr_reducer_replan: the buckets follow the new cap (as dr_bucket_plan
 * groups the same fill order), every gradient lies in one of them, the
 * fill order stays, and a bad cap changes nothing. 2 layers of 64 over 32
 * inputs and 8 classes: w0 2048, b0 64, w1 4096, b1 64, w2 512, b2 8
 * elements, filled from b2 back to w0; a first bucket of 64 bytes. At
 * 25 MiB: [b2] [w2 b1 w1 b0 w0]. At 4 KiB: [b2] [w2 b1: 2304 bytes]
 * [w1: 16 KiB, alone] [b0] (w0's 8 KiB would overflow it) [w0]. */
static void test_reducer_replan(void **state) {
  (void)state;
  dr_model_config_t mc;
  memset(&mc, 0, sizeof(mc));
  mc.input_dim = 32;
  mc.width = 64;
  mc.layers = 2;
  mc.classes = 8;
  mc.max_batch = 4;
  mc.seed = 1;
  dr_model_t *m = NULL;
  char err[128];
  assert_int_equal(dr_model_new(&mc, &m, err, sizeof(err)), 0);
  dr_reducer_config_t rc;
  memset(&rc, 0, sizeof(rc));
  rc.cap_bytes = 25u << 20;
  rc.first_cap_bytes = 64;
  rc.overlap = 1;
  rc.launch = launch_none;
  dr_reducer_t *r = NULL;
  assert_int_equal(dr_reducer_new(&rc, m, NULL, &r), 0);
  assert_int_equal(dr_reducer_n_buckets(r), 2);
  size_t n = dr_model_n_params(m);
  size_t order[16];
  memcpy(order, dr_reducer_order(r), n * sizeof(size_t));
  size_t elems[16], bucket_of[16];
  for (size_t i = 0; i < n; i++)
    elems[i] = dr_model_param(m, i)->n_elems;
  size_t want = dr_bucket_plan(order, n, elems, 4096, 64, bucket_of);
  assert_int_equal(want, 5);
  assert_int_equal(dr_reducer_replan(r, 4096), 0);
  assert_int_equal(dr_reducer_cap_bytes(r), 4096);
  assert_int_equal(dr_reducer_n_buckets(r), want);
  assert_int_equal(dr_reducer_bucket_elems(r, 1), 512 + 64);
  assert_int_equal(dr_reducer_bucket_elems(r, 2), 4096);
  assert_memory_equal(dr_reducer_order(r), order, n * sizeof(size_t));
  /* The gradients tile the buckets' memory exactly once, in fill order. */
  size_t total = 0;
  for (size_t b = 0; b < dr_reducer_n_buckets(r); b++)
    total += dr_reducer_bucket_elems(r, b);
  assert_int_equal(total, dr_model_n_elems(m));
  float *base = dr_model_param(m, order[0])->g;
  size_t off = 0;
  for (size_t k = 0; k < n; k++) {
    dr_param_t *p = dr_model_param(m, order[k]);
    assert_ptr_equal(p->g, base + off);
    off += p->n_elems;
  }
  assert_int_equal(dr_reducer_replan(r, 0), DR_EBADARG);
  assert_int_equal(dr_reducer_n_buckets(r), want);
  assert_int_equal(dr_reducer_replan(r, 25u << 20), 0);
  assert_int_equal(dr_reducer_n_buckets(r), 2);
  dr_reducer_free(&r);
  dr_model_free(&m);
}

/* ---- profiles ----------------------------------------------------------- */

static void sample(dr_plan_profile_t *p) {
  memset(p, 0, sizeof(*p));
  assert_int_equal(dr_plan_profile_alloc(p, 3), 0);
  p->world = 2;
  p->cap_bytes = 25 * MIB;
  p->first_cap_bytes = 1 * MIB;
  p->alpha_ms = 0.25;
  p->bytes_per_ms = 0.5 * MIB;
  p->forward_ms = 4;
  p->backward_ms = 12;
  p->optimizer_ms = 1;
  p->measured_step_ms = 20.5;
  const size_t idx[] = {5, 4, 0};
  const double by[] = {MIB, 2 * MIB, 0.5 * MIB}, rd[] = {1.5, 6, 12};
  for (size_t k = 0; k < 3; k++) {
    p->index[k] = idx[k];
    p->bytes[k] = by[k];
    p->ready_ms[k] = rd[k];
  }
}

static void test_profile_round_trip(void **state) {
  (void)state;
  dr_plan_profile_t p, q;
  sample(&p);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(dr_plan_profile_write(f, &p), 0);
  fclose(f);
  char err[256] = "";
  int rc = dr_plan_profile_parse(text, len, &q, err, sizeof(err));
  if (rc != 0)
    fail_msg("%s", err);
  assert_int_equal(q.world, 2);
  assert_int_equal(q.n_params, 3);
  near(q.cap_bytes, 25 * MIB);
  near(q.alpha_ms, 0.25);
  near(q.bytes_per_ms, 0.5 * MIB);
  near(q.backward_ms, 12);
  near(q.measured_step_ms, 20.5);
  for (size_t k = 0; k < 3; k++) {
    assert_int_equal(q.index[k], p.index[k]);
    near(q.bytes[k], p.bytes[k]);
    near(q.ready_ms[k], p.ready_ms[k]);
    near(q.rows[k], p.bytes[k] / 4); /* no shape: a vector */
    near(q.cols[k], 1);
  }
  assert_int_equal(q.measured.kind, DR_PLAN_F32);
  /* A shape, the compression and the rates go round too. */
  p.rows[1] = 512;
  p.cols[1] = 1024;
  p.measured = (dr_plan_compress_t){DR_PLAN_POWERSGD, 8, 2.5e7, 3 * MIB};
  free(text);
  text = NULL;
  f = open_memstream(&text, &len);
  assert_int_equal(dr_plan_profile_write(f, &p), 0);
  fclose(f);
  dr_plan_profile_free(&q);
  assert_int_equal(dr_plan_profile_parse(text, len, &q, err, sizeof(err)), 0);
  near(q.rows[1], 512);
  near(q.cols[1], 1024);
  assert_int_equal(q.measured.kind, DR_PLAN_POWERSGD);
  assert_int_equal(q.measured.rank, 8);
  near(q.measured.gemm_flops_per_ms, 2.5e7);
  near(q.measured.cast_bytes_per_ms, 3 * MIB);
  q.measured.kind = DR_PLAN_F32; /* the prediction below: uncompressed */
  /* Predictions: at 1 MiB, [1] [2, alone] [0.5] ready at 1.5, 6, 12 take
   * 2.25, 4.25, 1.25 ms: 1.5-3.75, 6-10.25, 12-13.25; the step adds 5. */
  double cap = 1 * MIB;
  dr_plan_result_t r;
  assert_int_equal(dr_plan_profile_predict(&q, &cap, 1, NULL, &r), 0);
  assert_int_equal(r.n_buckets, 3);
  near(r.finish_ms, 13.25);
  near(r.step_ms, 18.25);
  free(text);
  dr_plan_profile_free(&p);
  dr_plan_profile_free(&q);
}

static void expect_bad(const char *text, const char *needle) {
  dr_plan_profile_t p;
  char err[256] = "";
  int rc = dr_plan_profile_parse(text, strlen(text), &p, err, sizeof(err));
  dr_plan_profile_free(&p);
  assert_int_equal(rc, DR_EBADARG);
  if (strstr(err, needle) == NULL)
    fail_msg("'%s' does not say '%s'", err, needle);
}

#define GOOD_HEAD "{\"alpha_ms\": 1, \"bandwidth_mib_per_ms\": 1, "
#define GOOD_TIMES "\"forward_ms\": 1, \"backward_ms\": 2, "
#define GOOD_PARAMS "\"params\": [{\"bytes\": 4, \"ready_ms\": 1}]"

static void test_profile_errors(void **state) {
  (void)state;
  expect_bad("", "expected '{'");
  expect_bad("[1]", "expected '{'");
  expect_bad("{}", "empty object");
  expect_bad(GOOD_HEAD GOOD_TIMES "\"params\": [{\"bytes\": 4, \"ready_ms\"",
             "expected ':'");
  expect_bad(GOOD_HEAD GOOD_TIMES GOOD_PARAMS, "expected '}'");
  expect_bad(GOOD_HEAD GOOD_TIMES GOOD_PARAMS "} x", "text after");
  expect_bad("{\"bandwidth_mib_per_ms\": 1, " GOOD_TIMES GOOD_PARAMS "}",
             "missing \"alpha_ms\"");
  expect_bad(GOOD_HEAD GOOD_TIMES "\"params\": []}", "missing \"params\"");
  expect_bad(GOOD_HEAD GOOD_TIMES "\"params\": {}}", "expected an array");
  expect_bad(GOOD_HEAD GOOD_TIMES "\"params\": [{\"bytes\": 4}]}",
             "needs \"bytes\" and \"ready_ms\"");
  expect_bad(GOOD_HEAD GOOD_TIMES
             "\"params\": [{\"bytes\": -4, \"ready_ms\": 1}]}",
             "params[0].bytes");
  expect_bad("{\"alpha_ms\": \"x\"}", "\"alpha_ms\": expected a number");
  expect_bad("{\"alpha_ms\": 1, \"bandwidth_mib_per_ms\": 0, " GOOD_TIMES
             GOOD_PARAMS "}", "above 0");
  /* Nesting is bounded. */
  char deep[256] = "{\"x\": ";
  for (int i = 0; i < 40; i++)
    strcat(deep, "[");
  expect_bad(deep, "nested deeper");
  /* Unknown keys of any kind are skipped. */
  const char *ok = GOOD_HEAD "\"note\": {\"a\": [1, true, null, \"s\\\"\"]}, "
                   GOOD_TIMES GOOD_PARAMS "}";
  dr_plan_profile_t p;
  char err[256] = "";
  int rc = dr_plan_profile_parse(ok, strlen(ok), &p, err, sizeof(err));
  if (rc != 0)
    fail_msg("%s", err);
  assert_int_equal(p.n_params, 1);
  near(p.first_cap_bytes, 1 * MIB); /* the default when absent */
  dr_plan_profile_free(&p);
}

/* Without compression the parameter model is dr_plan_group + dr_plan_eval:
 * the same step, exposed and comm for every cap on uneven ready times. */
static void test_compress_none_is_plain(void **state) {
  (void)state;
  dr_plan_param_t p[40];
  double bytes[40], ready[40];
  for (int k = 0; k < 40; k++) {
    bytes[k] = (double)((k * 37) % 11 + 1) * 0.3 * MIB;
    ready[k] = k * 1.5 + (k % 3);
    p[k] = (dr_plan_param_t){bytes[k], ready[k], bytes[k] / 4, 1};
  }
  dr_plan_cost_t cost = {0.7, 1.3 * MIB, 70.0, 9.0, 0};
  double caps[] = {0.5 * MIB, 2 * MIB, 5 * MIB, 100 * MIB};
  for (int i = 0; i < 4; i++) {
    dr_plan_bucket_t b[40];
    size_t nb = dr_plan_group(bytes, ready, 40, caps[i], 1 * MIB, b);
    dr_plan_result_t want, got;
    dr_plan_eval(b, nb, &cost, &want);
    dr_plan_eval_params(p, 40, caps[i], 1 * MIB, &cost, NULL, NULL, &got);
    assert_int_equal(got.n_buckets, want.n_buckets);
    near(got.step_ms, want.step_ms);
    near(got.exposed_ms, want.exposed_ms);
    near(got.comm_ms, want.comm_ms);
    near(got.finish_ms, want.finish_ms);
  }
}

/* One 8 MiB gradient ready at 10 ms (the backward's end), alpha 1 ms, B 1
 * MiB/ms, fixed 2 ms. fp16: 4 MiB on the wire; a cast rate of 8 MiB/ms
 * adds 1 ms at launch and 1 ms after: start 11, end 11 + 1 + 4 = 16, then
 * the cast back: 17; step 2 + 17. */
static void test_compress_fp16(void **state) {
  (void)state;
  dr_plan_param_t p = {8 * MIB, 10.0, 2 * MIB, 1};
  dr_plan_cost_t cost = {1.0, 1.0 * MIB, 10.0, 2.0, 0};
  dr_plan_compress_t c = {DR_PLAN_FP16, 0, 0, 8 * MIB};
  dr_plan_result_t r;
  dr_plan_eval_params(&p, 1, 25 * MIB, 25 * MIB, &cost, &c, NULL, &r);
  near(r.comm_ms, 5.0);
  near(r.finish_ms, 17.0);
  near(r.exposed_ms, 6.0);
  near(r.step_ms, 19.0);
  /* Measured with fp16 already: the launch cast is in the 10 ms. */
  dr_plan_eval_params(&p, 1, 25 * MIB, 25 * MIB, &cost, &c, &c, &r);
  near(r.step_ms, 2.0 + 10.0 + 5.0 + 1.0);
  /* bf16 sends the same bytes; none sends twice them. */
  c.kind = DR_PLAN_BF16;
  c.cast_bytes_per_ms = 0;
  dr_plan_eval_params(&p, 1, 25 * MIB, 25 * MIB, &cost, &c, NULL, &r);
  near(r.step_ms, 2.0 + 10.0 + 5.0);
  dr_plan_eval_params(&p, 1, 25 * MIB, 25 * MIB, &cost, NULL, NULL, &r);
  near(r.step_ms, 2.0 + 10.0 + 9.0);
}

/* PowerSGD at rank 1 on a 1000 x 1000 matrix (4 MB) and its 1000-float
 * bias, both ready at 5 ms, backward 5 ms, alpha 1 ms, B 1000 B/ms, GEMMs
 * at 2e6 flop/ms (1 ms per product of 2 x 1e6 x 1), passes free. The first
 * round: the bias (4000 B) and P (4000 B) after P = MQ (1 ms): start 6,
 * end 6 + 1 + 8 = 15; Q = M^T P: 16; the second round (Q, 4000 B): end
 * 16 + 1 + 4 = 21; P Q^T: 22. Step 3 + 22. */
static void test_compress_powersgd(void **state) {
  (void)state;
  assert_true(dr_plan_psgd_worth(1000, 1000, 4));
  assert_false(dr_plan_psgd_worth(1000, 1, 4));
  assert_false(dr_plan_psgd_worth(8, 8, 4));
  dr_plan_param_t p[2] = {{4000, 5.0, 1000, 1}, {4e6, 5.0, 1000, 1000}};
  dr_plan_cost_t cost = {1.0, 1000.0, 5.0, 3.0, 0};
  dr_plan_compress_t c = {DR_PLAN_POWERSGD, 1, 2e6, 0};
  dr_plan_result_t r;
  dr_plan_eval_params(p, 2, 25 * MIB, 25 * MIB, &cost, &c, NULL, &r);
  assert_int_equal(r.n_buckets, 1);
  near(r.comm_ms, 9.0 + 5.0);
  near(r.finish_ms, 22.0);
  near(r.step_ms, 25.0);
  /* Parsing. */
  dr_plan_compress_t q;
  assert_int_equal(dr_plan_compress_parse("powersgd:8", &q), 0);
  assert_int_equal(q.kind, DR_PLAN_POWERSGD);
  assert_int_equal(q.rank, 8);
  assert_int_equal(dr_plan_compress_parse("powersgd", &q), 0);
  assert_int_equal(q.rank, 4);
  assert_int_equal(dr_plan_compress_parse("fp8", &q), -1);
  assert_int_equal(dr_plan_compress_parse("powersgd:0", &q), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uniform_backlog),
      cmocka_unit_test(test_contention),
      cmocka_unit_test(test_uniform_no_backlog),
      cmocka_unit_test(test_uniform_last_smaller),
      cmocka_unit_test(test_one_bucket),
      cmocka_unit_test(test_param_larger_than_cap),
      cmocka_unit_test(test_non_uniform),
      cmocka_unit_test(test_bucket_order),
      cmocka_unit_test(test_no_buckets),
      cmocka_unit_test(test_best),
      cmocka_unit_test(test_group_matches_reducer),
      cmocka_unit_test(test_fit),
      cmocka_unit_test(test_reducer_replan),
      cmocka_unit_test(test_profile_round_trip),
      cmocka_unit_test(test_profile_errors),
      cmocka_unit_test(test_compress_none_is_plain),
      cmocka_unit_test(test_compress_fp16),
      cmocka_unit_test(test_compress_powersgd),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
