/* The server's measure of a node's clock, driven over a raw connection
 * whose clock stamps the test makes: the offset its ASSIGN carries, the
 * warning past 100 ms, said once and again only when the offset moves by
 * another 100 ms, and the note when the clock is back. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock_offset.h"
#include "harness.h"

#define HOST "clk-a"
/* Server heartbeats every 100 ms: the samples come quickly. */
#define HB_TIMEOUT "0.3"

/* A node whose clock reads the real one plus skew_us. */
typedef struct {
  dr_h_raw_t *r;
  dr_buf_t *b;
  int64_t skew_us;
} node_t;

static uint64_t node_now(const node_t *n) {
  return (uint64_t)((int64_t)dr_clock_now_us() + n->skew_us);
}

/* The server's next HEARTBEAT, answered at once with its stamp echoed. */
static void answer_heartbeat(node_t *n) {
  dr_msg_t m;
  for (;;) {
    assert_int_equal(dr_h_raw_recv(n->r, 3000, &m), 0);
    if (m.type == DR_MSG_HEARTBEAT)
      break;
  }
  uint64_t rx = node_now(n);
  dr_heartbeat_t h;
  assert_int_equal(dr_msg_heartbeat(&m, &h), 0);
  assert_true(h.clock.tx_us != 0);
  assert_int_equal(h.clock.echo_us, 0);
  dr_clock_stamp_t st = {h.clock.tx_us, rx, node_now(n)};
  assert_int_equal(dr_enc_heartbeat(n->b, 0, h.gen, &st), 0);
  assert_int_equal(dr_h_raw_send_buf(n->r, n->b), 0);
}

/* Lines of the server's log so far that match the extended regular
 * expression re. */
static int log_count(const dr_h_fixture_t *fx, const char *re) {
  regex_t rx;
  assert_int_equal(regcomp(&rx, re, REG_EXTENDED | REG_NOSUB), 0);
  FILE *f = fopen(dr_h_server_log_path(fx->srv), "r");
  assert_non_null(f);
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    n += regexec(&rx, line, 0, NULL, 0) == 0;
  }
  fclose(f);
  regfree(&rx);
  return n;
}

/* Runs enough exchanges at the node's skew for every sample of the
 * server's window to be one of them. */
static void settle(node_t *n) {
  for (uint32_t i = 0; i < DR_CLOCK_WINDOW + 2; i++)
    answer_heartbeat(n);
}

/* Goes on answering heartbeats (the node stays alive, the log grows)
 * until the log has want lines matching re: at most 30 exchanges. */
static void await_log(const dr_h_fixture_t *fx, node_t *n, const char *re,
                      int want) {
  for (int i = 0; log_count(fx, re) < want; i++) {
    if (i == 30)
      fail_msg("the server's log has %d lines matching '%s', not %d",
               log_count(fx, re), re, want);
    answer_heartbeat(n);
  }
}

/* Every warning about a clock, and its note when the clock is back. */
#define WARNED "clock is [0-9.]+ ms (behind|ahead of) the server's \\("
#define BACK "clock is back within 50 ms of the server's"

DR_H_TEST(test_offset_assigned_and_warned_once_per_move) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", HB_TIMEOUT),
             NULL);
  node_t n = {dr_h_raw(fx), &fx->buf, -250000};
  dr_msg_t m;
  dr_enc_hello(n.b, 1, dr_str(DR_H_RUN_ID), dr_str(HOST));
  assert_int_equal(dr_h_raw_send_buf(n.r, n.b), 0);
  assert_int_equal(dr_h_raw_recv(n.r, 2000, &m), 0);
  dr_welcome_t w;
  assert_int_equal(dr_msg_welcome(&m, &w), 0);
  uint64_t now = dr_clock_now_us();
  assert_true(w.tx_us != 0 && w.tx_us <= now && now - w.tx_us < 5000000);

  /* The JOIN echoes the WELCOME: the ASSIGN has the node 250 ms behind. */
  dr_join_t j;
  dr_h_join_fill(&j, DR_H_RUN_ID, HOST, "", 1, DR_NONE, 0, "");
  uint64_t rx = node_now(&n);
  j.clock.echo_us = w.tx_us;
  j.clock.echo_rx_us = rx;
  j.clock.tx_us = node_now(&n);
  assert_int_equal(dr_enc_join(n.b, 2, &j), 0);
  assert_int_equal(dr_h_raw_send_buf(n.r, n.b), 0);
  do
    assert_int_equal(dr_h_raw_recv(n.r, 5000, &m), 0);
  while (m.type == DR_MSG_HEARTBEAT);
  assert_int_equal(m.type, DR_MSG_ASSIGN);
  dr_assign_t a;
  assert_int_equal(dr_msg_assign(&m, &a), 0);
  fprintf(stderr, "  ASSIGN: clock offset %lld us +- %llu us\n",
          (long long)a.clock_offset_us,
          (unsigned long long)a.clock_uncertainty_us);
  assert_true(a.clock_uncertainty_us < 20000);
  assert_true(llabs(a.clock_offset_us - 250000) <=
              (long long)a.clock_uncertainty_us + 1);
  await_log(fx, &n,
            "node 0 \\('" HOST "'\\) clock is 2[45][0-9] ms behind the "
            "server's \\(.* ms\\); traces will be aligned by it; check NTP "
            "on that host$",
            1);

  /* Heartbeats at the same offset: no second warning. */
  settle(&n);
  assert_int_equal(log_count(fx, WARNED), 1);

  /* 150 ms more: said again. */
  n.skew_us = -400000;
  await_log(fx, &n, "clock is (39[0-9]|40[0-9]) ms behind", 1);
  /* 50 ms from what was said: not again; then ahead by 300 ms: again. */
  n.skew_us = -450000;
  settle(&n);
  assert_int_equal(log_count(fx, WARNED), 2);
  n.skew_us = 300000;
  await_log(fx, &n, "clock is (29[0-9]|30[0-9]) ms ahead of", 1);
  /* Set right: back within 50 ms, said once. */
  n.skew_us = 0;
  await_log(fx, &n, BACK, 1);
  settle(&n);
  assert_int_equal(log_count(fx, BACK), 1);
  assert_int_equal(log_count(fx, WARNED), 3);
}

/* Stamps no exchange can have made are not samples: the ASSIGN of a node
 * that sent only those says the server has no estimate. */
DR_H_TEST(test_bad_stamps_give_no_estimate) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1"), NULL);
  dr_h_raw_t *r = dr_h_raw(fx);
  dr_msg_t m;
  dr_enc_hello(&fx->buf, 1, dr_str(DR_H_RUN_ID), dr_str(HOST));
  assert_int_equal(dr_h_raw_send_buf(r, &fx->buf), 0);
  assert_int_equal(dr_h_raw_recv(r, 2000, &m), 0);
  dr_welcome_t w;
  assert_int_equal(dr_msg_welcome(&m, &w), 0);
  /* A stamp from the future of the server's clock, and one held an hour:
   * neither counts (the JOIN still does). */
  dr_clock_stamp_t future = {w.tx_us + 3600000000ull, 5, 6};
  assert_int_equal(dr_enc_heartbeat(&fx->buf, 0, 0, &future), 0);
  dr_join_t j;
  dr_h_join_fill(&j, DR_H_RUN_ID, HOST, "", 1, DR_NONE, 0, "");
  j.clock.echo_us = w.tx_us;
  j.clock.echo_rx_us = w.tx_us;
  j.clock.tx_us = w.tx_us + 3600000000ull;
  assert_int_equal(dr_enc_join(&fx->buf, 2, &j), 0);
  assert_int_equal(dr_h_raw_send_buf(r, &fx->buf), 0);
  do
    assert_int_equal(dr_h_raw_recv(r, 5000, &m), 0);
  while (m.type == DR_MSG_HEARTBEAT);
  dr_assign_t a;
  assert_int_equal(dr_msg_assign(&m, &a), 0);
  assert_int_equal(a.clock_uncertainty_us, DR_NONE);
  assert_int_equal(a.clock_offset_us, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
      T(test_offset_assigned_and_warned_once_per_move),
      T(test_bad_stamps_give_no_estimate),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
