/* What a JOIN says of its node, through a real server: the environment
 * summary kept per node and answered to STATUS with DR_STATUS_ENV (one env
 * record per node record, forming or running, and none without the flag,
 * also when the answer waits for stacks); a summary over its bound
 * refused; and the warning when the nodes' NCCL_SOCKET_IFNAME differ.
 * Nodes are raw connections: a STATUS sent on a node's own connection is
 * read after its JOIN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "errors.h"
#include "harness.h"

#define ENV_A "env: GPUs: none\nbinding: local rank 0: cpus 0-3\n"
#define ENV_B "env: GPUs: none\nbinding: local rank 0: cpus 4-7\n"

static void join_env(dr_h_fixture_t *fx, dr_h_raw_t *r, uint32_t req,
                     const char *host, dr_bytes_t env, const char *ifname) {
  dr_join_t j;
  dr_h_join_fill(&j, DR_H_RUN_ID, host, "", 2, DR_NONE, 0, "");
  j.env = env;
  j.socket_ifname = dr_str(ifname);
  assert_int_equal(dr_enc_join(&fx->buf, req, &j), 0);
  assert_int_equal(dr_h_raw_send_buf(r, &fx->buf), 0);
}

/* STATUS with flags on r, its JOB_STATUS into *js (borrowed from r). */
static void status(dr_h_fixture_t *fx, dr_h_raw_t *r, uint32_t req,
                   uint32_t flags, uint64_t wait_ms, dr_msg_t *m,
                   dr_job_status_t *js) {
  assert_int_equal(dr_enc_status(&fx->buf, req, flags, wait_ms), 0);
  assert_int_equal(dr_h_raw_send_buf(r, &fx->buf), 0);
  assert_int_equal(dr_h_recv_type(r, DR_MSG_JOB_STATUS, 10000, m), 0);
  assert_int_equal(m->req_id, req);
  assert_int_equal(dr_msg_job_status(m, js), 0);
}

/* The env records of js are the nodes' texts want[0..n), in node order,
 * each with its node record's node rank. */
static void assert_envs(const dr_job_status_t *js, const char *const *want,
                        uint32_t n) {
  assert_int_equal(js->nodes.count, n);
  assert_int_equal(js->envs.count, n);
  uint32_t pe = 0, pn = 0, i = 0;
  dr_env_rec_t e;
  dr_node_rec_t x;
  while (dr_env_rec_next(&js->envs, &pe, &e) &&
         dr_node_rec_next(&js->nodes, &pn, &x)) {
    assert_int_equal(e.node_rank, x.node_rank);
    assert_int_equal(e.text.len, strlen(want[i]));
    assert_memory_equal(e.text.p, want[i], e.text.len);
    i++;
  }
  assert_int_equal(i, n);
}

DR_H_TEST(test_status_env) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", "30"),
             NULL);
  dr_h_raw_t *a = dr_h_hello(fx, "host-a");
  join_env(fx, a, 2, "host-a", dr_str(ENV_A), "lo");
  /* Forming: its record, without a node rank yet. */
  dr_msg_t m;
  dr_job_status_t js;
  static const char *const forming[1] = {ENV_A};
  status(fx, a, 5, DR_STATUS_ENV, 0, &m, &js);
  assert_int_equal(js.state, DR_JS_FORMING);
  assert_envs(&js, forming, 1);
  uint32_t pos = 0;
  dr_env_rec_t e;
  assert_int_equal(dr_env_rec_next(&js.envs, &pos, &e), 1);
  assert_int_equal(e.node_rank, DR_NO_RANK);
  status(fx, a, 6, 0, 0, &m, &js);
  assert_int_equal(js.nodes.count, 1);
  assert_int_equal(js.envs.count, 0);

  /* A summary a byte over its bound: refused, and the node may join
   * again with a good one. */
  static char big[DR_ENV_SUMMARY_MAX + 1];
  memset(big, 'x', sizeof(big));
  dr_h_raw_t *b = dr_h_hello(fx, "host-b");
  join_env(fx, b, 2, "host-b", (dr_bytes_t){(const uint8_t *)big, sizeof(big)},
           "eth0");
  assert_int_equal(dr_h_recv_type(b, DR_MSG_ERROR, 5000, &m), 0);
  assert_int_equal(m.req_id, 2);
  dr_error_t err;
  assert_int_equal(dr_msg_error(&m, &err), 0);
  assert_int_equal(err.code, DR_EBADARG);
  join_env(fx, b, 3, "host-b", dr_str(ENV_B), "eth0");
  assert_int_equal(dr_h_recv_type(a, DR_MSG_ASSIGN, 5000, &m), 0);
  assert_int_equal(dr_h_recv_type(b, DR_MSG_ASSIGN, 5000, &m), 0);

  /* Running: both, node 0 (host-a) first. */
  static const char *const running[2] = {ENV_A, ENV_B};
  status(fx, b, 7, DR_STATUS_ENV, 0, &m, &js);
  assert_int_equal(js.state, DR_JS_RUNNING);
  assert_envs(&js, running, 2);
  assert_true(dr_h_log_contains(
      fx->srv,
      "NCCL_SOCKET_IFNAME differs between the nodes of round 1: 'lo' on "
      "host-a, 'eth0' on host-b; NCCL on each node binds that interface",
      5000));

  /* With stacks too: the answer waits for them (no node answers here:
   * 200 ms) and still carries the summaries. */
  dr_h_raw_t *t = dr_h_hello(fx, "tool");
  status(fx, t, 8, DR_STATUS_STACKS | DR_STATUS_ENV, 200, &m, &js);
  assert_int_equal(js.stacks.count, 4);
  assert_envs(&js, running, 2);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
  const struct CMUnitTest tests[] = {
      T(test_status_env),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
