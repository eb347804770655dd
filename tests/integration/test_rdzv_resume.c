/* RESUME after a restart of the server, against strangers: the run id alone
 * (every local user sees it in `ps`) never takes a place. A server that
 * kept the job's state checks the generation's resume token and the host
 * of each place; a server that started afresh holds every claim until its
 * window ends and takes back only the generation one token claims whole.
 * Every field of a RESUME is bounded as a JOIN's is. Nodes are raw
 * connections, so that each answer is seen as it comes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* A heartbeat timeout of 0.6 s: a resume window of 2.2 s. */
#define HB "0.6"
#define WINDOW_MS 2200
/* What an answer held until the window ends may take, hang-bound. */
#define ANSWER_MS (WINDOW_MS + 8000)

typedef struct {
  uint64_t gen;
  uint32_t node_rank, nnodes, world, nproc, restarts;
  uint8_t token[DR_RESUME_TOKEN_LEN];
} claim_t;

static void send_resume(dr_h_fixture_t *fx, dr_h_raw_t *r, const char *host,
                        const claim_t *c) {
  dr_resume_t q;
  memset(&q, 0, sizeof(q));
  q.run_id = dr_str(DR_H_RUN_ID);
  q.host = dr_str(host);
  q.gen = c->gen;
  q.node_rank = c->node_rank;
  q.nnodes = c->nnodes;
  q.world_size = c->world;
  q.nproc = c->nproc;
  q.restart_count = c->restarts;
  memcpy(q.resume_token, c->token, sizeof(q.resume_token));
  assert_int_equal(dr_enc_resume(&fx->buf, 7, &q), 0);
  assert_int_equal(dr_h_raw_send_buf(r, &fx->buf), 0);
}

/* The answer to a RESUME: 0 for OK, else the refusal's code, its message
 * into why. */
static int answer(dr_h_raw_t *r, int timeout_ms, char *why, size_t n) {
  dr_msg_t m;
  double deadline = dr_h_now_ms() + timeout_ms;
  why[0] = '\0';
  for (;;) {
    double left = deadline - dr_h_now_ms();
    int rc = dr_h_raw_recv(r, left > 0 ? (int)left : 0, &m);
    if (rc != 0)
      return rc;
    if (m.type == DR_MSG_OK && m.req_id == 7)
      return 0;
    if (m.type == DR_MSG_ERROR) {
      dr_error_t e;
      assert_int_equal(dr_msg_error(&m, &e), 0);
      snprintf(why, n, "%.*s", (int)e.message.len,
               (const char *)e.message.p);
      fprintf(stderr, "  refused: %s\n", why);
      return e.code;
    }
    assert_int_equal(m.type, DR_MSG_HEARTBEAT); /* nothing else comes */
  }
}

/* A round of n nodes "n0".."n<n-1>" of 2 workers each: their assignment
 * (gen, token) into *c, with their connections in r. */
static void form(dr_h_fixture_t *fx, dr_h_raw_t **r, uint32_t n, claim_t *c) {
  char host[16];
  memset(c, 0, sizeof(*c));
  for (uint32_t i = 0; i < n; i++) {
    snprintf(host, sizeof(host), "n%u", i);
    r[i] = dr_h_hello(fx, host);
    dr_join_t j;
    dr_h_join_fill(&j, DR_H_RUN_ID, host, "", 2, i, 0, "");
    assert_int_equal(dr_enc_join(&fx->buf, 2, &j), 0);
    assert_int_equal(dr_h_raw_send_buf(r[i], &fx->buf), 0);
  }
  for (uint32_t i = 0; i < n; i++) {
    dr_msg_t m;
    dr_assign_t a;
    assert_int_equal(dr_h_recv_type(r[i], DR_MSG_ASSIGN, 5000, &m), 0);
    assert_int_equal(dr_msg_assign(&m, &a), 0);
    assert_int_equal(a.node_rank, i);
    c->gen = a.gen;
    c->nnodes = a.nnodes;
    c->world = a.world_size;
    c->nproc = 2;
    c->restarts = a.restart_count;
    if (i > 0) /* one token for the generation */
      assert_memory_equal(c->token, a.resume_token, DR_RESUME_TOKEN_LEN);
    memcpy(c->token, a.resume_token, DR_RESUME_TOKEN_LEN);
  }
}

/* The server crashes and another starts with args (on a new port: every
 * node connects again anyway). */
static void crash_and_restart(dr_h_fixture_t *fx, const char *const *args) {
  assert_int_equal(kill(dr_h_server_pid(fx->srv), SIGKILL), 0);
  int status;
  assert_int_equal(dr_h_server_wait(fx->srv, 10000, &status), 0);
  dr_h_server_stop(&fx->srv, 0);
  for (size_t i = 0; i < fx->n_raws; i++)
    dr_h_raw_close(fx->raws[i]);
  dr_h_start(fx, args, NULL);
}

/* Out of any job's bounds: refused outright, and the server forms no
 * generation from it (a JOIN round afterwards is generation 1). */
DR_H_TEST(test_resume_bounds) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB,
                           "--max-restarts", "3"),
             NULL);
  const claim_t ok = {4, 0, 2, 4, 2, 1, {1}};
  claim_t bad[9];
  for (int i = 0; i < 9; i++)
    bad[i] = ok;
  bad[0].gen = UINT64_MAX; /* gen + 1 would wrap */
  bad[1].gen = 0;
  bad[2].restarts = 4; /* over the budget of 3 */
  bad[3].restarts = UINT32_MAX;
  bad[4].nnodes = 3; /* over the job's 2 */
  bad[5].world = 1;  /* fewer workers than nodes */
  bad[6].nproc = 70000;
  bad[7].node_rank = 2;
  bad[8].world = (1u << 24) + 1;
  char why[512];
  for (int i = 0; i < 9; i++) {
    dr_h_raw_t *r = dr_h_hello(fx, "stranger");
    send_resume(fx, r, "stranger", &bad[i]);
    assert_int_equal(answer(r, 5000, why, sizeof(why)), DR_EBADARG);
    assert_non_null(strstr(why, "RESUME refused: "));
    dr_h_raw_close(r);
  }
  dr_h_raw_t *r[2];
  claim_t c;
  form(fx, r, 2, &c);
  assert_int_equal(c.gen, 1);
  assert_int_equal(c.restarts, 0);
  assert_false(dr_h_log_contains(fx->srv, "into a server with no record", 0));
}

/* With its state file, the server knows the token and the hosts: a
 * stranger's claim is refused at once and leaves the place to its node. */
DR_H_TEST(test_resume_stranger_with_state) {
  char path[300];
  snprintf(path, sizeof(path), "%s/rdzv.state", fx->dir);
  const char *const *args =
      DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB, "--state-file",
                path, "--max-restarts", "2");
  dr_h_start(fx, args, NULL);
  dr_h_raw_t *r[2];
  claim_t c;
  form(fx, r, 2, &c);
  crash_and_restart(fx, args);
  assert_true(dr_h_log_contains(fx->srv, "generation 1 was running on 2 "
                                         "nodes", 5000));
  char why[512];
  claim_t fake = c;
  memset(fake.token, 0x5a, sizeof(fake.token));
  dr_h_raw_t *s = dr_h_hello(fx, "n0");
  send_resume(fx, s, "n0", &fake); /* the run id and the host are known */
  assert_int_equal(answer(s, 5000, why, sizeof(why)), DR_ESTALE);
  assert_non_null(strstr(why, "resume token"));
  /* The token without the host that held the place: refused too. */
  c.node_rank = 1;
  dr_h_raw_t *h = dr_h_hello(fx, "elsewhere");
  send_resume(fx, h, "elsewhere", &c);
  assert_int_equal(answer(h, 5000, why, sizeof(why)), DR_ESTALE);
  assert_non_null(strstr(why, "was held by 'n1', not 'elsewhere'"));
  for (uint32_t i = 0; i < 2; i++) {
    char host[8];
    snprintf(host, sizeof(host), "n%u", i);
    r[i] = dr_h_hello(fx, host);
    c.node_rank = i;
    send_resume(fx, r[i], host, &c);
    assert_int_equal(answer(r[i], 5000, why, sizeof(why)), 0);
  }
  assert_true(dr_h_log_contains(fx->srv, "generation 1 taken back: all 2 "
                                         "nodes still run it", 5000));
}

/* Without a record, the first RESUME defines nothing: a stranger who
 * claims node 0 first is refused once the window ends, and the nodes that
 * hold the generation's token whole get it back. */
DR_H_TEST(test_resume_fresh_stranger_first) {
  const char *const *args =
      DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB);
  dr_h_start(fx, args, NULL);
  dr_h_raw_t *r[2];
  claim_t c;
  form(fx, r, 2, &c);
  crash_and_restart(fx, args);
  claim_t fake = c;
  memset(fake.token, 0x5a, sizeof(fake.token));
  dr_h_raw_t *s = dr_h_hello(fx, "n0");
  send_resume(fx, s, "n0", &fake);
  assert_true(dr_h_log_contains(fx->srv, "into a server with no record",
                                5000));
  for (uint32_t i = 0; i < 2; i++) {
    char host[8];
    snprintf(host, sizeof(host), "n%u", i);
    r[i] = dr_h_hello(fx, host);
    c.node_rank = i;
    send_resume(fx, r[i], host, &c);
  }
  char why[512];
  for (uint32_t i = 0; i < 2; i++)
    assert_int_equal(answer(r[i], ANSWER_MS, why, sizeof(why)), 0);
  assert_int_equal(answer(s, ANSWER_MS, why, sizeof(why)), DR_ESTALE);
  assert_non_null(strstr(why, "not with this claim"));
  assert_true(dr_h_log_contains(fx->srv, "generation 1 taken back: all 2 "
                                         "nodes still run it", 5000));
  /* The places are the nodes': the stranger holds none. */
  dr_client_t *t = dr_h_open(fx, "status-tool");
  dr_msg_t m;
  dr_job_status_t js;
  assert_int_equal(dr_client_status(t, 0, 0, &m), 0);
  assert_int_equal(dr_msg_job_status(&m, &js), 0);
  assert_int_equal(js.state, DR_JS_RUNNING);
  assert_int_equal(js.gen, 1);
  assert_int_equal(js.nodes.count, 2);
  uint32_t pos = 0;
  dr_node_rec_t x;
  for (uint32_t i = 0; dr_node_rec_next(&js.nodes, &pos, &x); i++) {
    assert_int_equal(x.state, DR_NS_RUNNING);
    assert_memory_equal(x.host.p, i == 0 ? "n0" : "n1", x.host.len);
  }
}

/* Two tokens each claim the whole of a 1-node job: the server cannot tell
 * the node from the stranger, so neither gets the generation; both restart
 * into the next one without spending the budget. */
DR_H_TEST(test_resume_fresh_tie) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", HB,
                           "--max-restarts", "3"),
             NULL);
  claim_t real = {5, 0, 1, 2, 2, 2, {0}}, fake = real;
  memset(real.token, 0x11, sizeof(real.token));
  memset(fake.token, 0x22, sizeof(fake.token));
  fake.restarts = 3; /* within the budget, which it may not exceed */
  dr_h_raw_t *s = dr_h_hello(fx, "n0");
  send_resume(fx, s, "n0", &fake);
  dr_h_raw_t *n = dr_h_hello(fx, "n0");
  send_resume(fx, n, "n0", &real);
  char why[512];
  assert_int_equal(answer(s, ANSWER_MS, why, sizeof(why)), DR_ESTALE);
  assert_int_equal(answer(n, ANSWER_MS, why, sizeof(why)), DR_ESTALE);
  assert_non_null(strstr(why, "more than one resume token"));
  /* The node joins the next generation; the budget used is never less
   * than a claim said, and never more than the budget. */
  dr_join_t j;
  dr_h_join_fill(&j, DR_H_RUN_ID, "n0", "", 2, DR_NONE, 0, "");
  assert_int_equal(dr_enc_join(&fx->buf, 2, &j), 0);
  assert_int_equal(dr_h_raw_send_buf(n, &fx->buf), 0);
  dr_msg_t m;
  dr_assign_t a;
  assert_int_equal(dr_h_recv_type(n, DR_MSG_ASSIGN, 5000, &m), 0);
  assert_int_equal(dr_msg_assign(&m, &a), 0);
  assert_int_equal(a.gen, 6);
  assert_int_equal(a.restart_count, 3);
}

/* A node that does not come back: no token claims the generation whole,
 * every claimant restarts, and a node that joined meanwhile (its workers
 * were lost) is in the next round with them. */
DR_H_TEST(test_resume_fresh_incomplete) {
  const char *const *args =
      DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB);
  dr_h_start(fx, args, NULL);
  dr_h_raw_t *r[2];
  claim_t c;
  form(fx, r, 2, &c);
  crash_and_restart(fx, args);
  r[0] = dr_h_hello(fx, "n0");
  c.node_rank = 0;
  send_resume(fx, r[0], "n0", &c);
  assert_true(dr_h_log_contains(fx->srv, "into a server with no record",
                                5000));
  r[1] = dr_h_hello(fx, "n1");
  dr_join_t j;
  dr_h_join_fill(&j, DR_H_RUN_ID, "n1", "", 2, DR_NONE, 0, "");
  assert_int_equal(dr_enc_join(&fx->buf, 2, &j), 0);
  assert_int_equal(dr_h_raw_send_buf(r[1], &fx->buf), 0);
  char why[512];
  assert_int_equal(answer(r[0], ANSWER_MS, why, sizeof(why)), DR_ESTALE);
  assert_non_null(strstr(why, "no resume token claimed every node rank"));
  j.host = dr_str("n0");
  assert_int_equal(dr_enc_join(&fx->buf, 3, &j), 0);
  assert_int_equal(dr_h_raw_send_buf(r[0], &fx->buf), 0);
  for (int i = 0; i < 2; i++) {
    dr_msg_t m;
    dr_assign_t a;
    assert_int_equal(dr_h_recv_type(r[i], DR_MSG_ASSIGN, 5000, &m), 0);
    assert_int_equal(dr_msg_assign(&m, &a), 0);
    assert_int_equal(a.gen, 2);
    assert_int_equal(a.nnodes, 2);
    assert_int_equal(a.restart_count, 0);
  }
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
  const struct CMUnitTest tests[] = {
      T(test_resume_bounds),
      T(test_resume_stranger_with_state),
      T(test_resume_fresh_stranger_first),
      T(test_resume_fresh_tie),
      T(test_resume_fresh_incomplete),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
