/* The exit-code table (proto/exit_codes.h): codes unique and in range,
 * the policies that the server and the agent rely on, and the README's
 * table row for row against it. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exit_codes.h"

static const char *readme_path;

static void test_codes_unique_and_in_range(void **state) {
  (void)state;
  int n;
  const dr_exit_info_t *t = dr_exit_table(&n);
  assert_true(n >= 2);
  for (int i = 0; i < n; i++) {
    /* 126 and up belong to the shell (cannot run, not found) and signals */
    assert_in_range(t[i].code, 0, 125);
    assert_non_null(t[i].brief);
    assert_true(strlen(t[i].meaning) > 0);
    assert_ptr_equal(dr_exit_info(t[i].code), &t[i]);
    for (int j = i + 1; j < n; j++) {
      assert_int_not_equal(t[i].code, t[j].code);
      assert_string_not_equal(t[i].name, t[j].name);
    }
  }
  assert_null(dr_exit_info(1));
  assert_null(dr_exit_info(126));
}

static void test_policies(void **state) {
  (void)state;
  assert_int_equal(dr_exit_policy(0, 0), DR_EXIT_DONE);
  assert_int_equal(dr_exit_policy(DR_EXIT_CONFIG, 0), DR_EXIT_STOP);
  assert_int_equal(dr_exit_policy(DR_EXIT_STORAGE, 0), DR_EXIT_STOP);
  assert_int_equal(dr_exit_policy(DR_EXIT_PREEMPTED, 0), DR_EXIT_STOP);
  assert_int_equal(dr_exit_policy(DR_EXIT_NOMEM, 0), DR_EXIT_RESTART);
  assert_int_equal(dr_exit_policy(1, 0), DR_EXIT_RESTART); /* a crash */
  assert_int_equal(dr_exit_policy(-1, SIGSEGV), DR_EXIT_RESTART);
  assert_int_equal(dr_exit_policy(-1, SIGUSR1), DR_EXIT_STOP);
  assert_true(dr_exit_is_echo(DR_EXIT_COMM, 0));
  assert_true(dr_exit_is_echo(DR_EXIT_TIMEOUT, 0));
  assert_true(dr_exit_is_echo(DR_EXIT_PEER, 0));
  assert_false(dr_exit_is_echo(DR_EXIT_STORAGE, 0));
  assert_false(dr_exit_is_echo(1, 0));
  assert_false(dr_exit_is_echo(-1, SIGKILL)); /* a signal is its own cause */
  /* A program whose every error exits 1 (PyTorch): the message tells. */
  static const char gloo[] =
      "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547]"
      " Connection closed by peer [127.0.0.1]:48839";
  static const char own[] = "RuntimeError: injected failure before step 5";
  assert_true(dr_failure_is_echo(1, 0, gloo, strlen(gloo)));
  assert_false(dr_failure_is_echo(1, 0, own, strlen(own)));
  assert_false(dr_failure_is_echo(1, 0, gloo, 20)); /* within len only */
  assert_false(dr_failure_is_echo(-1, SIGSEGV, gloo, strlen(gloo)));
  assert_false(dr_failure_is_echo(0, 0, gloo, strlen(gloo)));
  assert_true(dr_failure_is_echo(DR_EXIT_COMM, 0, own, strlen(own)));
  assert_true(dr_failure_is_echo(1, 0, "torch.distributed.DistNetworkError: x",
                                 37));
  assert_false(dr_failure_is_echo(1, 0, NULL, 0));
}

static const char *policy_text(const dr_exit_info_t *e) {
  switch (e->policy) {
  case DR_EXIT_DONE:
    return "ends: every ddprun exits 0";
  case DR_EXIT_STOP:
    return "stops at once, not restarted";
  default:
    return e->echo ? "restarts from the budget; often an echo (held for the "
                     "root cause)"
                   : "restarts from the budget";
  }
}

/* README.md has the row "| code | brief: meaning | policy |" for every code
 * of the table, and no numbered row that the table does not have. */
static void test_readme_table(void **state) {
  (void)state;
  FILE *f = fopen(readme_path, "r");
  assert_non_null(f);
  int n;
  const dr_exit_info_t *t = dr_exit_table(&n);
  int found[64] = {0};
  assert_true(n <= 64);
  char line[2048];
  int in_section = 0, rows = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "### ", 4) == 0 || strncmp(line, "## ", 3) == 0)
      in_section = strcmp(line, "### Exit codes and the failure summary\n") == 0;
    int code;
    if (!in_section || sscanf(line, "| %d |", &code) != 1)
      continue;
    rows++;
    const dr_exit_info_t *e = dr_exit_info(code);
    if (e == NULL)
      fail_msg("README.md has a row for exit code %d, which the table in "
               "proto/exit_codes.h does not have: %s", code, line);
    char want[2048];
    snprintf(want, sizeof(want), "| %d | %s: %s | %s |\n", e->code, e->brief,
             e->meaning, policy_text(e));
    if (strcmp(line, want) != 0)
      fail_msg("README.md's row for exit code %d differs from the table:\n"
               "  README: %s  table:  %s", code, line, want);
    found[e - t]++;
  }
  fclose(f);
  for (int i = 0; i < n; i++)
    if (found[i] != 1)
      fail_msg("README.md has %d rows for exit code %d (%s), not 1", found[i],
               t[i].code, t[i].name);
  assert_int_equal(rows, n);
}

int main(int argc, char **argv) {
  readme_path = argc > 1 ? argv[1] : "README.md";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_codes_unique_and_in_range),
      cmocka_unit_test(test_policies),
      cmocka_unit_test(test_readme_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
