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

/* Every code of every module, from the lists themselves (not from the
 * sentinels), so that a value given by hand would show. */
typedef struct {
  int code;
  const char *name;
} code_t;

#define CODE(name, msg) {name, #name},
static const code_t all[] = {DR_ERR_ALL(CODE)};
#define N_ALL (sizeof(all) / sizeof(all[0]))

typedef struct {
  const char *module;
  int base, first, last;
  const code_t *codes;
  size_t n;
} module_t;

#define MODULE_CODES(mod, list, base, first, last)                           \
  static const code_t mod##_codes[] = {list(CODE)};
DR_ERR_MODULES(MODULE_CODES)
#define MODULE(mod, list, base, first, last)                                 \
  {#mod, base, first, last, mod##_codes,                                     \
   sizeof(mod##_codes) / sizeof(mod##_codes[0])},
static const module_t modules[] = {DR_ERR_MODULES(MODULE)};
#define N_MODULES (sizeof(modules) / sizeof(modules[0]))

/* No value, name or message is used twice across all modules; each code
 * has a non-empty message and a DR_ name, its own, and none of them can be
 * mistaken for a -errno. */
static void test_table_complete(void **state) {
  (void)state;
  assert_true(N_ALL > 0);
  for (size_t a = 0; a < N_ALL; a++) {
    int code = all[a].code;
    const char *msg = dr_strerror(code);
    const char *name = dr_err_name(code);
    assert_true(dr_is_own_error(code));
    assert_true(code < -4096);
    assert_non_null(msg);
    assert_true(strlen(msg) > 0);
    assert_string_not_equal(msg, "unknown error");
    assert_non_null(name);
    assert_string_equal(name, all[a].name);
    assert_int_equal(strncmp(name, "DR_", 3), 0);
    assert_non_null(strstr(name, "_E"));
    for (size_t b = 0; b < a; b++) {
      if (code == all[b].code)
        fail_msg("%s and %s are both %d", all[a].name, all[b].name, code);
      assert_string_not_equal(msg, dr_strerror(all[b].code));
      assert_string_not_equal(name, all[b].name);
    }
  }
}

/* Each module's codes lie in its reserved range, count up from its base
 * without a gap, and the ranges are apart. */
static void test_module_ranges(void **state) {
  (void)state;
  size_t total = 0;
  for (size_t m = 0; m < N_MODULES; m++) {
    const module_t *mod = &modules[m];
    assert_int_equal(mod->first, mod->base);
    assert_true(mod->n > 0);
    assert_int_equal(mod->last - mod->first - 1, (int)mod->n);
    assert_true(mod->last <= mod->base + DR_ERR_RANGE);
    assert_true(mod->base + DR_ERR_RANGE <= -4096);
    for (size_t i = 0; i < mod->n; i++) {
      int code = mod->codes[i].code;
      if (code <= mod->base || code >= mod->base + DR_ERR_RANGE)
        fail_msg("%s: %s = %d lies outside (%d, %d)", mod->module,
                 mod->codes[i].name, code, mod->base,
                 mod->base + DR_ERR_RANGE);
      assert_int_equal(code, mod->base + 1 + (int)i);
    }
    for (size_t o = 0; o < m; o++) {
      int lo = modules[o].base, hi = modules[o].base + DR_ERR_RANGE;
      assert_true(mod->base + DR_ERR_RANGE <= lo || mod->base >= hi);
    }
    total += mod->n;
  }
  /* DR_ERR_ALL holds every module's list, and nothing else. */
  assert_int_equal(total, N_ALL);
}

static void test_known_names(void **state) {
  assert_string_equal(dr_err_name(DR_ETOOBIG), "DR_ETOOBIG");
  assert_string_equal(dr_err_name(DR_EUNEXPECTED), "DR_EUNEXPECTED");
  assert_string_equal(dr_err_name(DR_EMAGIC), "DR_EMAGIC");
  /* Codes count up from the base sentinel; ERROR frames carry their
   * absolute values (9999 for DR_EMAGIC), so none may move. */
  assert_int_equal(DR_EMAGIC, DR__ERR_BASE + 1);
  assert_int_equal(DR_EMAGIC, -9999);
  assert_int_equal(DR_EUNEXPECTED, -9978);
  assert_string_equal(dr_err_name(DR_PG_ETIMEOUT), "DR_PG_ETIMEOUT");
  assert_string_equal(dr_err_name(DR_CKPT_ECRC), "DR_CKPT_ECRC");
  assert_string_equal(dr_err_name(DR_GPU_ECUDA), "DR_GPU_ECUDA");
  /* The messages that tests and users read stay as they were. */
  assert_string_equal(dr_strerror(DR_PG_EPEER), "a peer went away");
  assert_string_equal(dr_strerror(DR_PG_ETIMEOUT),
                      "a peer did not arrive within the timeout");
  assert_string_equal(dr_strerror(DR_GPU_ECUDA),
                      "a CUDA runtime call failed");
}

static void test_sentinels_are_not_codes(void **state) {
  for (size_t m = 0; m < N_MODULES; m++) {
    assert_false(dr_is_own_error(modules[m].first));
    assert_false(dr_is_own_error(modules[m].last));
    assert_string_equal(dr_strerror(modules[m].first), "unknown error");
    assert_string_equal(dr_err_name(modules[m].last), "UNKNOWN");
  }
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
      cmocka_unit_test(test_module_ranges),
      cmocka_unit_test(test_known_names),
      cmocka_unit_test(test_sentinels_are_not_codes),
      cmocka_unit_test(test_errno_codes),
      cmocka_unit_test(test_zero_and_out_of_range),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
