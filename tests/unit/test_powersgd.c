/* PowerSGD (worker/powersgd.h, worker/compress.h) against a naive
 * reference: the three products, Gram-Schmidt, when compression pays,
 * and the compressor at world 1 (a group of one): a matrix of rank R comes
 * back whole, the 1-D tensors untouched, and error feedback keeps the sum
 * of what the optimizer received within one residual of the sum of the
 * gradients, which it does not without it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compress.h"
#include "model.h"
#include "pg.h"
#include "powersgd.h"

static float rnd(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void fill(float *x, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++)
    x[i] = rnd(&seed);
}

/* C[r][c] = sum_k A(r, k) B(k, c), A and B read through strides. */
static void naive(const float *a, size_t ars, size_t acs, const float *b,
                  size_t brs, size_t bcs, size_t rows, size_t inner,
                  size_t cols, double *c) {
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < cols; j++) {
      double s = 0;
      for (size_t k = 0; k < inner; k++)
        s += (double)a[r * ars + k * acs] * b[k * brs + j * bcs];
      c[r * cols + j] = s;
    }
}

static void assert_close(const float *got, const double *want, size_t n,
                         double tol) {
  for (size_t i = 0; i < n; i++)
    if (fabs(got[i] - want[i]) > tol * (1.0 + fabs(want[i])))
      fail_msg("element %zu: %g, the reference says %g", i, (double)got[i],
               want[i]);
}

static void test_products(void **state) {
  (void)state;
  enum { N = 37, M = 23, R = 3 };
  float m[N * M], q[M * R], p[N * R], q2[M * R], out[N * M];
  double want[N * M];
  fill(m, N * M, 1);
  fill(q, M * R, 2);
  fill(p, N * R, 3);
  dr_psgd_mq(m, N, M, q, R, p);
  naive(m, M, 1, q, R, 1, N, M, R, want); /* M Q */
  assert_close(p, want, N * R, 1e-5);
  dr_psgd_mtp(m, N, M, p, R, q2);
  naive(m, 1, M, p, R, 1, M, N, R, want); /* M^T P */
  assert_close(q2, want, M * R, 1e-5);
  dr_psgd_pqt(p, q2, N, M, R, out);
  naive(p, R, 1, q2, 1, R, N, R, M, want); /* P Q^T */
  assert_close(out, want, N * M, 1e-5);
}

static void test_orthonormalise(void **state) {
  (void)state;
  enum { N = 50, R = 4 };
  float p[N * R];
  double ref[N * R];
  fill(p, N * R, 7);
  for (size_t i = 0; i < N * R; i++)
    ref[i] = p[i];
  /* The reference: classical Gram-Schmidt column by column, in double. */
  for (size_t i = 0; i < R; i++) {
    double nn = 0;
    for (size_t r = 0; r < N; r++)
      nn += ref[r * R + i] * ref[r * R + i];
    for (size_t r = 0; r < N; r++)
      ref[r * R + i] /= sqrt(nn);
    for (size_t j = i + 1; j < R; j++) {
      double d = 0;
      for (size_t r = 0; r < N; r++)
        d += ref[r * R + i] * ref[r * R + j];
      for (size_t r = 0; r < N; r++)
        ref[r * R + j] -= d * ref[r * R + i];
    }
  }
  dr_psgd_orthonormalise(p, N, R);
  assert_close(p, ref, N * R, 1e-5);
  for (size_t i = 0; i < R; i++)
    for (size_t j = 0; j < R; j++) {
      double d = 0;
      for (size_t r = 0; r < N; r++)
        d += (double)p[r * R + i] * p[r * R + j];
      assert_true(fabs(d - (i == j ? 1.0 : 0.0)) < 1e-5);
    }
  /* A zero column stays finite (the epsilon). */
  float z[N * 2];
  memset(z, 0, sizeof(z));
  dr_psgd_orthonormalise(z, N, 2);
  for (size_t i = 0; i < N * 2; i++)
    assert_true(z[i] == 0.0f);
}

static void test_worth(void **state) {
  (void)state;
  assert_false(dr_psgd_worth(1000, 1, 4)); /* a bias */
  assert_false(dr_psgd_worth(8, 8, 4));    /* 2 * 4 * 16 = 128 > 64 */
  assert_true(dr_psgd_worth(64, 64, 4));   /* 1024 < 4096 */
  assert_false(dr_psgd_worth(64, 64, 16)); /* 4096, not below */
  assert_true(dr_psgd_worth(512, 256, 4));
}

typedef struct {
  dr_pg_t *pg;
  dr_model_t *m;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  dr_pg_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.world = 1;
  cfg.local_world = 1;
  cfg.timeout_ms = 10000;
  char err[256];
  if (f == NULL || dr_pg_init(&cfg, &f->pg, err, sizeof(err)) != 0)
    return -1;
  dr_model_config_t mc;
  memset(&mc, 0, sizeof(mc));
  mc.input_dim = 48;
  mc.width = 64;
  mc.layers = 1;
  mc.classes = 40;
  mc.max_batch = 4;
  mc.seed = 5;
  if (dr_model_new(&mc, &f->m, err, sizeof(err)) != 0)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  dr_model_free(&f->m);
  dr_pg_destroy(&f->pg);
  free(f);
  return 0;
}

/* One step of the compressor over every gradient of the model in one
 * bucket (the model's own gradient memory is contiguous). */
static void one_step(dr_cmp_t *c, dr_model_t *m, uint64_t step) {
  dr_cmp_begin_step(c, step, 1.0f);
  float *data = dr_model_param(m, 0)->g;
  dr_work_t *w = NULL;
  assert_int_equal(dr_cmp_launch(c, 0, data, dr_model_n_elems(m), &w), 0);
  char err[256];
  if (w != NULL)
    assert_int_equal(dr_work_wait(&w, err, sizeof(err)), 0);
  int lb, sb;
  assert_int_equal(dr_cmp_finish(c, &lb, &sb, err, sizeof(err)), 0);
  dr_cmp_commit(c, 1);
}

static void test_rank_r_matrix_exact(void **state) {
  fixture_t *f = *state;
  dr_cmp_config_t cc = {DR_CMP_POWERSGD, 2, 0, 1, 9, 0};
  dr_cmp_t *c;
  assert_int_equal(dr_cmp_new(&cc, f->m, f->pg, &c), 0);
  /* fc0.weight 64 x 48 and head.weight 40 x 64 are compressed. */
  assert_int_equal(dr_cmp_ef_elems(c), 64 * 48 + 40 * 64);
  assert_int_equal(dr_cmp_q_elems(c), (48 + 64) * 2);
  dr_param_t *w = dr_model_param(f->m, 0), *b = dr_model_param(f->m, 1);
  /* A rank-2 weight gradient: u1 v1^T + u2 v2^T. */
  float u[2][64], v[2][48];
  fill(u[0], 64, 11);
  fill(u[1], 64, 12);
  fill(v[0], 48, 13);
  fill(v[1], 48, 14);
  float want[64 * 48], bias[64];
  for (size_t r = 0; r < 64; r++)
    for (size_t k = 0; k < 48; k++)
      want[r * 48 + k] = w->g[r * 48 + k] =
          u[0][r] * v[0][k] + u[1][r] * v[1][k];
  fill(bias, 64, 15);
  memcpy(b->g, bias, sizeof(bias));
  one_step(c, f->m, 0);
  double ref[64 * 48];
  for (size_t i = 0; i < 64 * 48; i++)
    ref[i] = want[i];
  assert_close(w->g, ref, 64 * 48, 1e-4);
  assert_memory_equal(b->g, bias, sizeof(bias)); /* sent whole */
  /* The residual of an exact approximation is (nearly) zero. */
  const float *ef = dr_cmp_ef(c);
  for (size_t i = 0; i < 64 * 48; i++)
    assert_true(fabs(ef[i]) < 1e-4);
  dr_cmp_free(&c);
}

/* The same full-rank gradient G every step for T steps: with error
 * feedback the optimizer receives T G - e_T in all (e_T the last
 * residual), so the relative error of the sum falls like 1/T; without it
 * the sum keeps the bias of the rank-R approximation. */
static double drift(fixture_t *f, int ef, double *resid) {
  dr_cmp_config_t cc = {DR_CMP_POWERSGD, 4, 0, ef, 9, 0};
  dr_cmp_t *c;
  assert_int_equal(dr_cmp_new(&cc, f->m, f->pg, &c), 0);
  dr_param_t *w = dr_model_param(f->m, 0);
  enum { T = 200, N = 64 * 48 };
  static float g[N];
  static double sum[N];
  fill(g, N, 21);
  memset(sum, 0, sizeof(sum));
  for (uint64_t t = 0; t < T; t++) {
    memcpy(w->g, g, sizeof(g));
    one_step(c, f->m, t);
    for (size_t i = 0; i < N; i++)
      sum[i] += w->g[i];
  }
  double err = 0, norm = 0, e = 0;
  const float *res = dr_cmp_ef(c);
  for (size_t i = 0; i < N; i++) {
    double d = sum[i] - (double)T * g[i];
    err += d * d;
    norm += (double)T * g[i] * (double)T * g[i];
    if (ef)
      e += fabs(d + res[i]); /* T G - sum == e_T */
  }
  *resid = e;
  dr_cmp_free(&c);
  return sqrt(err / norm);
}

static void test_error_feedback(void **state) {
  fixture_t *f = *state;
  double resid_ef, resid_none;
  double with = drift(f, 1, &resid_ef);
  double without = drift(f, 0, &resid_none);
  print_message("relative error of the sum: %.4f with error feedback, %.4f without; residual identity off by %.3g\n", with, without, resid_ef);
  assert_true(resid_ef < 1e-2 * 64 * 48);
  assert_true(with < 0.2);
  assert_true(without > 0.5);
  assert_true(with * 3 < without);
}

static void test_parse(void **state) {
  (void)state;
  dr_cmp_config_t c;
  char err[256];
  assert_int_equal(dr_cmp_parse("powersgd", &c, err, sizeof(err)), 0);
  assert_int_equal(c.kind, DR_CMP_POWERSGD);
  assert_int_equal(c.rank, 4);
  assert_int_equal(dr_cmp_parse("powersgd:8", &c, err, sizeof(err)), 0);
  assert_int_equal(c.rank, 8);
  assert_int_equal(dr_cmp_parse("bf16", &c, err, sizeof(err)), 0);
  assert_int_equal(c.kind, DR_CMP_BF16);
  const char *bad[] = {"powersgd:0", "powersgd:", "powersgd:x", "fp8", ""};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    assert_int_not_equal(dr_cmp_parse(bad[i], &c, err, sizeof(err)), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_products),
      cmocka_unit_test(test_orthonormalise),
      cmocka_unit_test(test_worth),
      cmocka_unit_test(test_parse),
      cmocka_unit_test_setup_teardown(test_rank_r_matrix_exact, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_error_feedback, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
