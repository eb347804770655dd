/* SGD and AdamW against updates worked out by hand (PyTorch's rules), and
 * the warmup + cosine schedule at its landmarks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "errors.h"
#include "model.h"
#include "optim.h"

/* 1 -> 1 -> 2: six parameters in four tensors. */
static int model_setup(void **state) {
  dr_model_config_t cfg = {.input_dim = 1, .width = 1, .layers = 1,
                           .classes = 2, .max_batch = 1, .seed = 1};
  dr_model_t *m = NULL;
  char err[128];
  if (dr_model_new(&cfg, &m, err, sizeof err) != 0) return -1;
  *state = m;
  return 0;
}

static int model_teardown(void **state) {
  dr_model_t *m = *state;
  dr_model_free(&m);
  return 0;
}

static void set_all(dr_model_t *m, float w, float g) {
  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    dr_param_t *p = dr_model_param(m, i);
    for (size_t j = 0; j < p->n_elems; j++) {
      if (!isnan(w)) p->w[j] = w;
      p->g[j] = g;
    }
  }
}

static void expect_all(dr_model_t *m, double want) {
  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    dr_param_t *p = dr_model_param(m, i);
    for (size_t j = 0; j < p->n_elems; j++)
      assert_true(fabs(p->w[j] - want) <= 1e-6 * fabs(want));
  }
}

static void test_sgd(void **state) {
  dr_model_t *m = *state;
  dr_optim_config_t c = {.kind = DR_OPT_SGD, .lr = 0.1f, .momentum = 0.9f,
                         .weight_decay = 0.01f};
  dr_optim_t *o = NULL;
  assert_int_equal(dr_optim_new(&c, m, &o), 0);
  assert_int_equal(dr_optim_state_elems(o), 6);
  set_all(m, 1.0f, 0.5f);
  /* d = 0.5 + 0.01 * 1 = 0.51; buf = 0.51; w = 1 - 0.1 * 0.51 */
  dr_optim_step(o, m, 0);
  expect_all(m, 0.949);
  for (int i = 0; i < 6; i++)
    assert_true(fabsf(dr_optim_state(o)[i] - 0.51f) <= 1e-6f);
  /* d = 0.5 + 0.01 * 0.949 = 0.50949; buf = 0.9 * 0.51 + 0.50949 = 0.96849;
   * w = 0.949 - 0.096849 */
  set_all(m, NAN, 0.5f);
  dr_optim_step(o, m, 1);
  expect_all(m, 0.852151);
  dr_optim_free(&o);
  assert_null(o);

  /* Without momentum there is no state: w = 1 - 0.1 * (0.5 + 0.01). */
  c.momentum = 0.0f;
  assert_int_equal(dr_optim_new(&c, m, &o), 0);
  assert_int_equal(dr_optim_state_elems(o), 0);
  set_all(m, 1.0f, 0.5f);
  dr_optim_step(o, m, 0);
  expect_all(m, 0.949);
  dr_optim_free(&o);
}

static void test_adamw(void **state) {
  dr_model_t *m = *state;
  dr_optim_config_t c = {.kind = DR_OPT_ADAMW, .lr = 0.01f, .beta1 = 0.9f,
                         .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
  dr_optim_t *o = NULL;
  assert_int_equal(dr_optim_new(&c, m, &o), 0);
  assert_int_equal(dr_optim_state_elems(o), 12);
  set_all(m, 1.0f, 0.5f);
  /* t = 1: w = 1 * (1 - 0.01 * 0.1) = 0.999; m = 0.05; v = 0.00025;
   * step = 0.01 / 0.1; denom = sqrt(0.00025) / sqrt(0.001) + 1e-8 = 0.5;
   * w = 0.999 - 0.1 * 0.05 / 0.5 = 0.989 */
  dr_optim_step(o, m, 0);
  expect_all(m, 0.989);
  const float *s = dr_optim_state(o);
  for (int i = 0; i < 6; i++) {
    assert_true(fabsf(s[i] - 0.05f) <= 1e-7f);        /* m */
    /* v: 1 - beta2 is 0.99999e-3 once beta2 is a float */
    assert_true(fabsf(s[6 + i] - 0.00025f) <= 1e-4f * 0.00025f);
  }
  /* t = 2, g = -0.25: w = 0.989 * 0.999 = 0.988011; m = 0.02;
   * v = 0.00031225; bias corrections 0.19 and 0.001999;
   * w = 0.988011 - 0.01 / 0.19 * 0.02 / (sqrt(0.00031225 / 0.001999) + 1e-8)
   *   = 0.98534763 */
  set_all(m, NAN, -0.25f);
  dr_optim_step(o, m, 1);
  expect_all(m, 0.9853476298705847);
  dr_optim_free(&o);
}

static void test_schedule(void **state) {
  dr_model_t *m = *state;
  dr_optim_config_t c = {.kind = DR_OPT_SGD, .lr = 1.0f, .warmup_steps = 10,
                         .total_steps = 111, .min_lr_frac = 0.1f};
  dr_optim_t *o = NULL;
  assert_int_equal(dr_optim_new(&c, m, &o), 0);
  const double eps = 1e-6;
  assert_true(fabs(dr_optim_lr(o, 0) - 0.1) < eps);   /* 1/10 of lr */
  assert_true(fabs(dr_optim_lr(o, 4) - 0.5) < eps);
  assert_true(fabs(dr_optim_lr(o, 9) - 1.0) < eps);   /* warmup's last */
  assert_true(fabs(dr_optim_lr(o, 10) - 1.0) < eps);  /* decay's first */
  assert_true(fabs(dr_optim_lr(o, 35) - 0.8681980515) < eps); /* quarter */
  assert_true(fabs(dr_optim_lr(o, 60) - 0.55) < eps); /* middle */
  assert_true(fabs(dr_optim_lr(o, 110) - 0.1) < eps); /* the last step */
  assert_true(fabs(dr_optim_lr(o, 500) - 0.1) < eps);
  for (uint64_t s = 10; s < 110; s++)
    assert_true(dr_optim_lr(o, s + 1) <= dr_optim_lr(o, s));
  /* A resumed run's schedule of another length: the same function of the
   * step as a run created with it, also after a cached update's step. */
  float w = 1.0f, g = 0.0f;
  dr_optim_update(o, 0, &w, &g, 1, 60);
  dr_optim_set_total_steps(o, 211);
  c.total_steps = 211;
  for (uint64_t s = 0; s < 300; s += 7)
    assert_true(dr_optim_lr(o, s) == dr_optim_schedule_lr(&c, s));
  assert_true(dr_optim_lr(o, 60) > 0.55 + eps);
  assert_true(fabs(dr_optim_lr(o, 210) - 0.1) < eps);
  assert_true(dr_optim_config(o)->total_steps == 211);
  w = 1.0f;
  g = 1.0f;
  dr_optim_update(o, 0, &w, &g, 1, 60); /* SGD: w -= lr * g */
  assert_true(w == 1.0f - dr_optim_schedule_lr(&c, 60));
  dr_optim_free(&o);

  /* No warmup, no decay: constant. */
  c.warmup_steps = 0;
  c.total_steps = 0;
  assert_int_equal(dr_optim_new(&c, m, &o), 0);
  assert_true(dr_optim_lr(o, 0) == 1.0f);
  assert_true(dr_optim_lr(o, 12345) == 1.0f);
  dr_optim_free(&o);
}

static void test_bad_config(void **state) {
  dr_model_t *m = *state;
  dr_optim_t *o = NULL;
  dr_optim_config_t c = {.kind = DR_OPT_SGD, .lr = -1.0f};
  assert_int_equal(dr_optim_new(&c, m, &o), DR_EBADARG);
  c = (dr_optim_config_t){.kind = DR_OPT_SGD, .lr = 0.1f, .momentum = 1.0f};
  assert_int_equal(dr_optim_new(&c, m, &o), DR_EBADARG);
  c = (dr_optim_config_t){.kind = DR_OPT_ADAMW, .lr = 0.1f, .beta1 = 0.9f,
                          .beta2 = 0.999f, .eps = 0.0f};
  assert_int_equal(dr_optim_new(&c, m, &o), DR_EBADARG);
  c.eps = 1e-8f;
  c.min_lr_frac = 2.0f;
  assert_int_equal(dr_optim_new(&c, m, &o), DR_EBADARG);
  assert_null(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_sgd, model_setup, model_teardown),
      cmocka_unit_test_setup_teardown(test_adamw, model_setup, model_teardown),
      cmocka_unit_test_setup_teardown(test_schedule, model_setup, model_teardown),
      cmocka_unit_test_setup_teardown(test_bad_config, model_setup,
                                      model_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
