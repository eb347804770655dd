/* The loss scaler's state machine (worker/loss_scale.h): parsing, growth
 * after 2000 clean steps, backoff and skip on an overflow, the floor, a
 * fixed scale, none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "errors.h"
#include "loss_scale.h"

static void test_parse(void **state) {
  (void)state;
  dr_loss_scale_t s;
  char err[256];
  assert_int_equal(dr_loss_scale_parse("dynamic", &s, err, sizeof(err)), 0);
  assert_int_equal(s.mode, DR_LS_DYNAMIC);
  assert_true(s.scale == 65536.0);
  assert_int_equal(s.last_rank, -2);
  assert_int_equal(dr_loss_scale_parse("dynamic:8", &s, err, sizeof(err)),
                   0);
  assert_true(s.scale == 8.0 && s.mode == DR_LS_DYNAMIC);
  assert_int_equal(dr_loss_scale_parse("128", &s, err, sizeof(err)), 0);
  assert_true(s.scale == 128.0 && s.mode == DR_LS_FIXED);
  assert_int_equal(dr_loss_scale_parse("none", &s, err, sizeof(err)), 0);
  assert_true(s.scale == 1.0 && s.mode == DR_LS_NONE);
  const char *bad[] = {"", "0.5", "dyn", "dynamic:", "dynamic:0", "inf",
                       "12x", "dynamicx"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    assert_int_equal(dr_loss_scale_parse(bad[i], &s, err, sizeof(err)),
                     DR_EBADARG);
    assert_non_null(strstr(err, "--loss-scale"));
  }
}

static void test_dynamic_growth_and_backoff(void **state) {
  (void)state;
  dr_loss_scale_t s;
  char err[64];
  dr_loss_scale_parse("dynamic", &s, err, sizeof(err));
  for (uint64_t i = 0; i < 1999; i++)
    assert_int_equal(dr_loss_scale_update(&s, 0, 0, i), 0);
  assert_true(s.scale == 65536.0);
  assert_int_equal(dr_loss_scale_update(&s, 0, 0, 1999), 0);
  assert_true(s.scale == 131072.0); /* x2 after 2000 clean steps */
  assert_int_equal(s.good, 0);
  for (uint64_t i = 0; i < 100; i++)
    dr_loss_scale_update(&s, 0, 0, 2000 + i);
  assert_int_equal(dr_loss_scale_update(&s, 1, 3, 2100), DR_LS_SKIP);
  assert_true(s.scale == 65536.0);
  assert_int_equal(s.skipped, 1);
  assert_int_equal(s.last_rank, 3);
  assert_int_equal(s.last_step, 2100);
  /* The overflow restarts the count: 1999 clean steps do not grow it. */
  for (uint64_t i = 0; i < 1999; i++)
    dr_loss_scale_update(&s, 0, 0, 2101 + i);
  assert_true(s.scale == 65536.0);
  assert_int_equal(dr_loss_scale_update(&s, 1, -1, 5000), DR_LS_SKIP);
  assert_int_equal(s.last_rank, -1);
  assert_int_equal(s.skipped, 2);
}

static void test_floor(void **state) {
  (void)state;
  dr_loss_scale_t s;
  char err[64];
  dr_loss_scale_parse("dynamic:4", &s, err, sizeof(err));
  assert_int_equal(dr_loss_scale_update(&s, 1, 0, 0), DR_LS_SKIP);
  assert_true(s.scale == 2.0);
  assert_int_equal(dr_loss_scale_update(&s, 1, 0, 1), DR_LS_SKIP);
  assert_true(s.scale == 1.0);
  /* At the floor: a smaller scale cannot help. */
  assert_int_equal(dr_loss_scale_update(&s, 1, 0, 2), DR_LS_EFLOOR);
  assert_true(s.scale == 1.0);
  dr_loss_scale_parse("dynamic:3", &s, err, sizeof(err));
  dr_loss_scale_update(&s, 1, 0, 0);
  assert_true(s.scale == 1.5);
  dr_loss_scale_update(&s, 1, 0, 1);
  assert_true(s.scale == 1.0); /* clamped, never below */
}

static void test_fixed_and_none(void **state) {
  (void)state;
  dr_loss_scale_t s;
  char err[64];
  dr_loss_scale_parse("1024", &s, err, sizeof(err));
  for (uint64_t i = 0; i < 5000; i++)
    dr_loss_scale_update(&s, 0, 0, i);
  assert_true(s.scale == 1024.0);
  assert_int_equal(dr_loss_scale_update(&s, 1, 1, 5000), DR_LS_SKIP);
  assert_true(s.scale == 1024.0);
  dr_loss_scale_parse("1", &s, err, sizeof(err));
  assert_int_equal(dr_loss_scale_update(&s, 1, 1, 0), DR_LS_EFLOOR);
  dr_loss_scale_parse("none", &s, err, sizeof(err));
  assert_int_equal(dr_loss_scale_update(&s, 1, 1, 0), 0);
  assert_int_equal(s.skipped, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_dynamic_growth_and_backoff),
      cmocka_unit_test(test_floor),
      cmocka_unit_test(test_fixed_and_none),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
