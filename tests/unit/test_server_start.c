/* dr_server_start keeps libuv's promise: when it fails, none of the
 * callbacks it was given is ever called, also once the loop has run and
 * closed what the failed start had opened. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include <cmocka.h>

#include "server.h"

static int closed_calls, done_calls;
static void on_closed(void *arg) { (void)arg; closed_calls++; }
static void on_done(void *arg, int code) {
  (void)arg;
  (void)code;
  done_calls++;
}

static void start_fails(dr_server_config_t *cfg) {
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  closed_calls = done_calls = 0;
  cfg->on_closed = on_closed;
  cfg->on_done = on_done;
  dr_server_t *s = NULL;
  char err[256] = "";
  assert_int_not_equal(dr_server_start(&loop, cfg, &s, err, sizeof(err)), 0);
  assert_true(strlen(err) > 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(closed_calls, 0);
  assert_int_equal(done_calls, 0);
  assert_int_equal(uv_loop_close(&loop), 0); /* nothing left open */
}

/* Fails after its handles are open: the state file cannot be written. */
static void test_late_failure(void **state) {
  (void)state;
  dr_server_config_t cfg;
  dr_server_config_default(&cfg);
  cfg.run_id = "start-test";
  cfg.state_file = "/nonexistent-dir/ddprun-state";
  start_fails(&cfg);
}

/* Fails before: the address cannot be bound. */
static void test_early_failure(void **state) {
  (void)state;
  dr_server_config_t cfg;
  dr_server_config_default(&cfg);
  cfg.run_id = "start-test";
  cfg.host = "192.0.2.1"; /* TEST-NET-1: not this host's */
  start_fails(&cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_late_failure),
      cmocka_unit_test(test_early_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
