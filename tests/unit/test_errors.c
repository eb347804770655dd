/* The error table: complete, distinct, and apart from errno. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "errors.h"

/* Every code strictly between the sentinels has its own non-empty message
 * and a DR_E name, and none of them can be mistaken for a -errno. */
static void test_table_complete(void **state) {
  for (int a = DR__ERR_FIRST + 1; a < DR__ERR_LAST; a++) {
    const char *msg = dr_strerror(a);
    const char *name = dr_err_name(a);
    assert_true(dr_is_own_error(a));
    assert_true(a < -4096);
    assert_non_null(msg);
    assert_true(strlen(msg) > 0);
    assert_string_not_equal(msg, "unknown error");
    assert_non_null(name);
    assert_int_equal(strncmp(name, "DR_E", 4), 0);
    assert_true(strlen(name) > 4);
    for (int b = DR__ERR_FIRST + 1; b < a; b++) {
      assert_string_not_equal(msg, dr_strerror(b));
      assert_string_not_equal(name, dr_err_name(b));
    }
  }
  assert_true(DR__ERR_LAST - DR__ERR_FIRST > 1);
}

static void test_known_names(void **state) {
  assert_string_equal(dr_err_name(DR_ETOOBIG), "DR_ETOOBIG");
  assert_string_equal(dr_err_name(DR_EUNEXPECTED), "DR_EUNEXPECTED");
  assert_string_equal(dr_err_name(DR_EMAGIC), "DR_EMAGIC");
  /* Codes count up from the base sentinel; ERROR frames carry their
   * absolute values (9999 for DR_EMAGIC), so none may move. */
  assert_int_equal(DR_EMAGIC, DR__ERR_BASE + 1);
}

static void test_sentinels_are_not_codes(void **state) {
  assert_false(dr_is_own_error(DR__ERR_FIRST));
  assert_false(dr_is_own_error(DR__ERR_LAST));
  assert_false(dr_is_own_error(0));
  assert_false(dr_is_own_error(-EINVAL));
  assert_false(dr_is_own_error(1));
  assert_string_equal(dr_strerror(DR__ERR_FIRST), "unknown error");
  assert_string_equal(dr_strerror(DR__ERR_LAST), "unknown error");
}

static void test_errno_codes(void **state) {
  static const int codes[] = {EPERM,        ENOENT,      EINTR,
                              ENOMEM,       EINVAL,      EPIPE,
                              ECONNREFUSED, ETIMEDOUT,   EHOSTUNREACH,
                              ENETUNREACH,  EADDRNOTAVAIL};
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
    assert_string_equal(dr_strerror(-codes[i]), strerror(codes[i]));
    assert_string_not_equal(dr_err_name(-codes[i]), "UNKNOWN");
  }
  assert_string_equal(dr_err_name(-ENOENT), "ENOENT");
  assert_string_equal(dr_err_name(-ETIMEDOUT), "ETIMEDOUT");
  assert_string_equal(dr_err_name(-ECONNREFUSED), "ECONNREFUSED");
}

static void test_zero_and_out_of_range(void **state) {
  assert_string_equal(dr_strerror(0), "success");
  assert_string_equal(dr_err_name(0), "OK");
  assert_string_equal(dr_strerror(1), "unknown error");
  assert_string_equal(dr_strerror(INT_MAX), "unknown error");
  assert_string_equal(dr_strerror(INT_MIN), "unknown error");
  assert_string_equal(dr_strerror(-5000), "unknown error");
  assert_string_equal(dr_err_name(1), "UNKNOWN");
  assert_string_equal(dr_err_name(INT_MIN), "UNKNOWN");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_complete),
      cmocka_unit_test(test_known_names),
      cmocka_unit_test(test_sentinels_are_not_codes),
      cmocka_unit_test(test_errno_codes),
      cmocka_unit_test(test_zero_and_out_of_range),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
