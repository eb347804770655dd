/* Bad input: each is one line on stderr, a non-zero exit within a second
 * (2 for a configuration error), and no worker started. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "launch_harness.h"

#define ERROR_MS 10000 /* from start to exit, for a refused command line:
                          at once, but a sanitized build on a loaded
                          machine may take seconds; a wait for a default
                          timeout (minutes) is what this catches */
#define HANG_MS 20000 /* only a hang takes this long */

/* Runs ddprun with args followed by a probe carrying the test's marker,
 * and checks how it refuses them: exit code, within limit_ms, exactly one
 * line on stderr that starts with "ddprun: " and holds needle (NULL: any),
 * nothing on stdout, no worker. */
static dr_l_proc_t *expect_refusal(dr_l_fixture_t *fx, const char *const *args,
                                   int code, int limit_ms, const char *needle) {
  static int serial;
  char name[32];
  snprintf(name, sizeof(name), "ddprun%d", serial++);
  const char *argv[32];
  size_t n = 0;
  for (size_t i = 0; args[i] != NULL && n < 28; i++)
    argv[n++] = args[i];
  argv[n++] = dr_l_probe_path();
  argv[n++] = "--marker";
  argv[n++] = fx->marker;
  argv[n] = NULL;
  dr_l_proc_t *p = dr_l_ddprun(fx, name, argv, NULL);
  dr_l_expect_exit(p, code, limit_ms + 5000);
  double ms = dr_l_elapsed_ms(p);
  const char *err = dr_l_err(p);
  size_t lines = dr_l_count_lines(err);
  if (lines != 1)
    fail_msg("%zu lines on stderr, expected one error line:\n%s", lines, err);
  if (strncmp(err, "ddprun: ", 8) != 0)
    fail_msg("the error does not start with 'ddprun: ': %s", err);
  if (needle != NULL && strstr(err, needle) == NULL)
    fail_msg("the error does not mention '%s': %s", needle, err);
  if (ms > limit_ms)
    fail_msg("refused after %.0f ms, expected within %d ms", ms, limit_ms);
  if (dr_l_out(p)[0] != '\0')
    fail_msg("output on stdout: %s", dr_l_out(p));
  pid_t pid;
  if (dr_l_marker_pids(fx->marker, &pid, 1) > 0)
    fail_msg("a worker (pid %d) runs although the input was refused", (int)pid);
  return p;
}

DR_L_TEST(unknown_flag) {
  expect_refusal(fx, DR_H_ARGS("--standalone", "--bogus-flag", "1"), 2,
                 ERROR_MS, "--bogus-flag");
}

DR_L_TEST(nnodes_zero) {
  expect_refusal(fx, DR_H_ARGS("--nnodes", "0"), 2, ERROR_MS, "--nnodes");
}

DR_L_TEST(nnodes_min_above_max) {
  expect_refusal(fx, DR_H_ARGS("--nnodes", "3:2"), 2, ERROR_MS, "--nnodes");
}

DR_L_TEST(nproc_negative) {
  expect_refusal(fx, DR_H_ARGS("--standalone", "--nproc-per-node", "-1"), 2,
                 ERROR_MS, "--nproc-per-node");
}

DR_L_TEST(node_rank_out_of_range) {
  expect_refusal(fx,
                 DR_H_ARGS("--rdzv-backend", "static", "--nnodes", "2",
                           "--node-rank", "2", "--master-addr", "127.0.0.1"),
                 2, ERROR_MS, "--node-rank");
}

DR_L_TEST(endpoint_malformed) {
  static const char *const bad[] = {
      "127.0.0.1:99999", /* port out of range */
      "127.0.0.1:0x10",  /* not a number */
      "127.0.0.1:",      /* no port after ':' */
      "[::1",            /* unclosed bracket */
      "::1",             /* IPv6 without brackets */
      ":29400",          /* no host */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    expect_refusal(fx,
                   DR_H_ARGS("--nnodes", "2", "--rdzv-id", "job-bad",
                             "--rdzv-endpoint", bad[i]),
                   2, ERROR_MS, "--rdzv-endpoint");
  }
}

DR_L_TEST(endpoint_unreachable) {
  /* Nothing listens there: the kernel just handed the port out and it was
   * closed again. The error comes once join_timeout (1 s) has passed. It
   * is a communication failure (3), not a configuration error. */
  uint16_t port = dr_l_free_port();
  assert_true(port != 0);
  char endpoint[64];
  snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", port);
  dr_l_proc_t *p =
      expect_refusal(fx,
                     DR_H_ARGS("--nnodes", "2", "--rdzv-id", "job-unreachable",
                               "--rdzv-endpoint", endpoint, "--rdzv-conf",
                               "is_host=0,join_timeout=1"),
                     3, 1000 + ERROR_MS, endpoint);
  /* The line says that the server could not be reached, not only that
   * the rendezvous did not complete. */
  const char *err = dr_l_err(p);
  if (strcasestr(err, "connect") == NULL && strstr(err, "refused") == NULL &&
      strstr(err, "unreachable") == NULL)
    fail_msg("the error does not say that %s could not be reached: %s",
             endpoint, err);
}

DR_L_TEST(config_missing) {
  const char *path = dr_l_path(fx, "no-such.ini");
  char copy[600];
  snprintf(copy, sizeof(copy), "%s", path);
  expect_refusal(fx, DR_H_ARGS("--standalone", "--config", copy), 2, ERROR_MS,
                 copy);
}

DR_L_TEST(config_unknown_key) {
  const char *path = dr_l_write_file(
      fx, "job.ini", "[ddprun]\nnproc_per_node = 2\nnot_a_flag = 3\n", 0644);
  char copy[600];
  snprintf(copy, sizeof(copy), "%s", path);
  expect_refusal(fx, DR_H_ARGS("--standalone", "--config", copy), 2, ERROR_MS,
                 "not_a_flag");
}

DR_L_TEST(config_fifo) {
  /* A FIFO that no one writes: refused at once, never waited on (the
   * bound only catches a hang). */
  const char *path = dr_l_path(fx, "job.ini");
  char copy[600];
  snprintf(copy, sizeof(copy), "%s", path);
  if (mkfifo(copy, 0600) != 0)
    fail_msg("mkfifo %s: %s", copy, strerror(errno));
  dr_l_proc_t *p = expect_refusal(fx, DR_H_ARGS("--standalone", "--config",
                                                copy),
                                  2, HANG_MS, copy);
  if (strstr(dr_l_err(p), "not a regular file") == NULL)
    fail_msg("the error does not say why: %s", dr_l_err(p));
}

DR_L_TEST(master_port_taken) {
  /* Static node 0 must find MASTER_PORT taken before anything starts. */
  uint16_t port = dr_l_hold_listening_port(fx);
  char mport[16];
  snprintf(mport, sizeof(mport), "%u", port);
  expect_refusal(fx,
                 DR_H_ARGS("--rdzv-backend", "static", "--nnodes", "1",
                           "--master-addr", "127.0.0.1", "--master-port",
                           mport),
                 2, ERROR_MS, mport);
}

DR_L_TEST(master_port_taken_c10d) {
  /* The same with a rendezvous endpoint: refused before joining, so the
   * endpoint need not exist. */
  uint16_t port = dr_l_hold_listening_port(fx);
  uint16_t rdzv = dr_l_free_port();
  char mport[16], endpoint[64];
  snprintf(mport, sizeof(mport), "%u", port);
  snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", rdzv);
  expect_refusal(fx,
                 DR_H_ARGS("--nnodes", "2", "--rdzv-id", "job-port",
                           "--rdzv-endpoint", endpoint, "--rdzv-conf",
                           "is_host=0,join_timeout=5", "--master-port", mport),
                 2, ERROR_MS, mport);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(unknown_flag, dr_l_setup, dr_l_teardown),
      cmocka_unit_test_setup_teardown(nnodes_zero, dr_l_setup, dr_l_teardown),
      cmocka_unit_test_setup_teardown(nnodes_min_above_max, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(nproc_negative, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(node_rank_out_of_range, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(endpoint_malformed, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(endpoint_unreachable, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(config_missing, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(config_unknown_key, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(config_fifo, dr_l_setup, dr_l_teardown),
      cmocka_unit_test_setup_teardown(master_port_taken, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(master_port_taken_c10d, dr_l_setup,
                                      dr_l_teardown),
  };
  return DR_L_MAIN("launch_input", tests, argc, argv);
}
