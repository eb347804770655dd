/* The command-line parsers and the atomic port file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"
#include "errors.h"

static void test_u32(void **state) {
  uint32_t v = 7;
  assert_int_equal(dr_parse_u32("0", 0, 10, &v), 0);
  assert_int_equal(v, 0);
  assert_int_equal(dr_parse_u32("65535", 0, 65535, &v), 0);
  assert_int_equal(v, 65535);
  const char *bad[] = {"", "-1", "+1", " 1", "1 ", "1x", "65536", "0x10",
                       "99999999999999999999", NULL};
  for (int i = 0; bad[i] != NULL; i++)
    assert_int_equal(dr_parse_u32(bad[i], 0, 65535, &v), DR_EBADARG);
  assert_int_equal(dr_parse_u32(NULL, 0, 1, &v), DR_EBADARG);
  assert_int_equal(dr_parse_u32("3", 4, 8, &v), DR_EBADARG);
}

static void test_nnodes(void **state) {
  uint32_t lo = 0, hi = 0;
  assert_int_equal(dr_parse_nnodes("4", &lo, &hi), 0);
  assert_int_equal(lo, 4);
  assert_int_equal(hi, 4);
  assert_int_equal(dr_parse_nnodes("2:3", &lo, &hi), 0);
  assert_int_equal(lo, 2);
  assert_int_equal(hi, 3);
  assert_int_equal(dr_parse_nnodes("1:1", &lo, &hi), 0);
  const char *bad[] = {"0", "3:2", "0:2", ":2", "2:", "2:3:4", "a", "",
                       "1000001", NULL};
  for (int i = 0; bad[i] != NULL; i++)
    assert_int_equal(dr_parse_nnodes(bad[i], &lo, &hi), DR_EBADARG);
}

/* The one parser of unsigned values: not a number apart from too large. */
static void test_uint(void **state) {
  uint64_t v = 7;
  assert_int_equal(dr_parse_uint("1234", 2, 100, &v), 0);
  assert_int_equal(v, 12);
  assert_int_equal(dr_parse_uint("100", 3, 100, &v), 0);
  assert_int_equal(v, 100);
  assert_int_equal(dr_parse_uint("101", 3, 100, &v), -ERANGE);
  assert_int_equal(dr_parse_uint("18446744073709551615", 20, UINT64_MAX, &v),
                   0);
  assert_true(v == UINT64_MAX);
  assert_int_equal(dr_parse_uint("18446744073709551616", 20, UINT64_MAX, &v),
                   -ERANGE);
  assert_int_equal(dr_parse_uint("99999999999999999999999", 23, 5, &v),
                   -ERANGE);
  assert_int_equal(dr_parse_uint("99999999999999999999x", 21, 5, &v),
                   DR_EBADARG);
  const char *bad[] = {"", "-1", "+1", " 1", "1 ", "0x10", NULL};
  for (int i = 0; bad[i] != NULL; i++)
    assert_int_equal(dr_parse_uint(bad[i], strlen(bad[i]), 100, &v),
                     DR_EBADARG);
  assert_true(v == UINT64_MAX); /* untouched by the refusals */
}

/* What is wrong with a node count, for the message that quotes it. */
static void test_nnodes_why(void **state) {
  static const struct {
    const char *s, *why;
  } cases[] = {
      {"two", "must be a node count N or a range MIN:MAX, such as 2 or 1:4"},
      {"1:", "must be a node count N or a range MIN:MAX, such as 2 or 1:4"},
      {"1000001", "must be at most 1000000"},
      {"2:99999999999999999999", "must be at most 1000000"},
      {"0:2", "must be at least 1"},
      {"3:2", "MIN must not exceed MAX"},
  };
  uint32_t lo = 5, hi = 6;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char why[80] = "";
    assert_int_equal(
        dr_parse_nnodes_why(cases[i].s, &lo, &hi, why, sizeof(why)),
        DR_EBADARG);
    assert_string_equal(why, cases[i].why);
  }
  assert_int_equal(lo, 5);
  assert_int_equal(hi, 6);
  assert_int_equal(dr_parse_nnodes_why("1000000", &lo, &hi, NULL, 0), 0);
  assert_int_equal(lo, DR_MAX_NODES);
}

static void test_seconds(void **state) {
  uint32_t ms = 0;
  assert_int_equal(dr_parse_seconds_ms("2", 0, &ms), 0);
  assert_int_equal(ms, 2000);
  assert_int_equal(dr_parse_seconds_ms("0.5", 0, &ms), 0);
  assert_int_equal(ms, 500);
  assert_int_equal(dr_parse_seconds_ms(".25", 0, &ms), 0);
  assert_int_equal(ms, 250);
  assert_int_equal(dr_parse_seconds_ms("0", 0, &ms), 0);
  assert_int_equal(ms, 0);
  assert_int_equal(dr_parse_seconds_ms("0.001", 10, &ms), DR_EBADARG);
  const char *bad[] = {"-1", "nan", "inf", "1e9", "2s", "", NULL};
  for (int i = 0; bad[i] != NULL; i++)
    assert_int_equal(dr_parse_seconds_ms(bad[i], 0, &ms), DR_EBADARG);
}

static void test_port_file(void **state) {
  char dir[] = "/tmp/dr_cli_util_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof(path), "%s/port", dir);
  assert_int_equal(dr_write_port_file(path, 29400), 0);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[32] = {0};
  assert_non_null(fgets(line, sizeof(line), f));
  fclose(f);
  assert_string_equal(line, "29400\n");
  /* Only the file itself remains: the temporary was renamed. */
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) -eq 1", dir);
  assert_int_equal(system(cmd), 0);
  unlink(path);
  snprintf(path, sizeof(path), "%s/missing/port", dir);
  assert_true(dr_write_port_file(path, 1) < 0);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_u32),
      cmocka_unit_test(test_nnodes),
      cmocka_unit_test(test_uint),
      cmocka_unit_test(test_nnodes_why),
      cmocka_unit_test(test_seconds),
      cmocka_unit_test(test_port_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
