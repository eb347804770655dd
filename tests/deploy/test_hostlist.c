/* Slurm hostlist expansion: plain names, ranges, zero padding, several
 * groups in one name, several names, and malformed lists refused with a
 * message that says what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "hostlist.h"

/* Expands list and checks the names against want, a space-separated
 * string. */
static void expect(const char *list, const char *want) {
  char **hosts = NULL, err[512];
  size_t n = 0;
  int rc = dr_hostlist_expand(list, 1000000, &hosts, &n, err, sizeof(err));
  if (rc != 0)
    fail_msg("'%s': rc %d: %s", list, rc, err);
  char got[4096] = "";
  for (size_t i = 0; i < n; i++) {
    if (i > 0)
      strcat(got, " ");
    strcat(got, hosts[i]);
  }
  if (strcmp(got, want) != 0)
    fail_msg("'%s' expanded to '%s', wanted '%s'", list, got, want);
  dr_hostlist_free(&hosts, n);
  assert_null(hosts);
}

/* Expands list with a cap and expects a refusal whose message holds
 * every one of the NULL-terminated fragments. */
static void expect_error(const char *list, size_t cap, ...) {
  char **hosts = (char **)1, err[512];
  size_t n = 99;
  int rc = dr_hostlist_expand(list, cap, &hosts, &n, err, sizeof(err));
  if (rc != DR_EBADARG)
    fail_msg("'%s': rc %d, wanted DR_EBADARG", list, rc);
  assert_null(hosts);
  assert_int_equal(n, 0);
  assert_null(strchr(err, '\n'));
  assert_non_null(strstr(err, "hostlist '"));
  va_list ap;
  va_start(ap, cap);
  for (const char *frag; (frag = va_arg(ap, const char *)) != NULL;)
    if (strstr(err, frag) == NULL)
      fail_msg("'%s': message '%s' lacks '%s'", list, err, frag);
  va_end(ap);
}

static void test_plain(void **state) {
  (void)state;
  expect("n1", "n1");
  expect("gpu-b5", "gpu-b5");
  expect("a,b,c", "a b c");
  expect("node.example.org", "node.example.org");
}

static void test_ranges(void **state) {
  (void)state;
  expect("n[1-3]", "n1 n2 n3");
  expect("n[1-3,7]", "n1 n2 n3 n7");
  expect("n[5]", "n5");
  expect("n[3,1,2]", "n3 n1 n2"); /* Slurm's order is kept */
  expect("n[8-11]", "n8 n9 n10 n11");
  expect("[1-2]x", "1x 2x");
  expect("n[1-2]-ib", "n1-ib n2-ib");
}

static void test_zero_padding(void **state) {
  (void)state;
  expect("gpu-a[01-03,07],gpu-b5", "gpu-a01 gpu-a02 gpu-a03 gpu-a07 gpu-b5");
  expect("n[08-11]", "n08 n09 n10 n11");
  expect("n[098-101]", "n098 n099 n100 n101");
  expect("n[001-002,9-10]", "n001 n002 n9 n10");
  expect("n[0-1]", "n0 n1");
}

static void test_several_groups(void **state) {
  (void)state;
  expect("r[1-2]n[01-02]", "r1n01 r1n02 r2n01 r2n02");
  expect("r[1-2]n[1,3],x[9-10]", "r1n1 r1n3 r2n1 r2n3 x9 x10");
  expect("a[1-2],b,c[3]", "a1 a2 b c3");
}

static void test_large(void **state) {
  (void)state;
  char **hosts = NULL;
  size_t n = 0;
  char err[256];
  assert_int_equal(
      dr_hostlist_expand("n[00001-12500]", 100000, &hosts, &n, err, sizeof(err)),
      0);
  assert_int_equal(n, 12500);
  assert_string_equal(hosts[0], "n00001");
  assert_string_equal(hosts[12499], "n12500");
  dr_hostlist_free(&hosts, n);
}

static void test_malformed(void **state) {
  (void)state;
  expect_error("", 100, "empty", NULL);
  expect_error("a,,b", 100, "empty host name", NULL);
  expect_error("a,", 100, "empty host name", NULL);
  expect_error("n[1-3", 100, "'[' without ']'", NULL);
  expect_error("n1-3]", 100, "']' without '['", NULL);
  expect_error("n[1-[2]]", 100, "do not nest", NULL);
  expect_error("n[]", 100, "empty item", NULL);
  expect_error("n[1,,2]", 100, "empty item", NULL);
  expect_error("n[3-1]", 100, "3-1 runs backwards", NULL);
  expect_error("n[a-b]", 100, "'a' in a bracket group is not a number", NULL);
  expect_error("n[1-]", 100, "empty number", NULL);
  expect_error("n[-2]", 100, "empty number", NULL);
  expect_error("n[1-2-3]", 100, "'2-3'", NULL);
  expect_error("n 1", 100, "0x20 is not allowed", NULL);
  expect_error("n[1234567890123456789]", 100, "more than 18 digits", NULL);
}

static void test_caps(void **state) {
  (void)state;
  /* Refused by counting, before anything is allocated. */
  expect_error("n[1-999999999999]", 1000000, "more than 1000000 hosts", NULL);
  expect_error("a[1-1000]b[1-1000]c[1-1000]", 1000000, "more than", NULL);
  expect_error("n[1-3],m[1-3]", 5, "more than 5 hosts", NULL);
  char name[300];
  memset(name, 'x', 256);
  name[256] = '\0';
  expect_error(name, 10, "longer than 255", NULL);
  memset(name, 'x', 254);
  snprintf(name + 254, sizeof(name) - 254, "[1-10]");
  expect_error(name, 100, "longer than 255", NULL);
}

static void test_long_message_is_cut(void **state) {
  (void)state;
  char list[400];
  memset(list, 'a', 300);
  snprintf(list + 300, sizeof(list) - 300, "[1");
  char **hosts = NULL, err[512];
  size_t n = 0;
  assert_int_equal(dr_hostlist_expand(list, 10, &hosts, &n, err, sizeof(err)),
                   DR_EBADARG);
  assert_non_null(strstr(err, "...'"));
  assert_true(strlen(err) < 300);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain),         cmocka_unit_test(test_ranges),
      cmocka_unit_test(test_zero_padding),  cmocka_unit_test(test_several_groups),
      cmocka_unit_test(test_large),         cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_caps),          cmocka_unit_test(test_long_message_is_cut),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
