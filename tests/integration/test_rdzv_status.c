/* What the server says about the job: ROUND_STATUS to the nodes waiting in
 * a forming round (who is in, how many more, which static ranks are
 * missing), RANKS kept per node and answered to STATUS, and STATUS with
 * stacks collected from the agents with a deadline. Nodes are raw
 * connections, so that every frame they get is seen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#define HB_OFF "30"
/* A heartbeat timeout of 0.6 s: a heartbeat interval of 200 ms. */
#define HB_SHORT "0.6"
#define HB_INTERVAL_MS 200


static void join(dr_h_fixture_t *fx, dr_h_raw_t *r, const char *host,
                 uint32_t nproc, uint64_t node_rank) {
  dr_join_t j;
  dr_h_join_fill(&j, DR_H_RUN_ID, host, "", nproc, node_rank, 0, "");
  dr_enc_join(&fx->buf, 2, &j);
  assert_int_equal(dr_h_raw_send_buf(r, &fx->buf), 0);
}


/* The first ROUND_STATUS that says `joined` nodes are in. */
static int recv_round(dr_h_raw_t *r, uint32_t joined, int timeout_ms,
                      dr_msg_t *m, dr_round_status_t *st) {
  double deadline = dr_h_now_ms() + timeout_ms;
  for (;;) {
    double left = deadline - dr_h_now_ms();
    int rc = dr_h_recv_type(r, DR_MSG_ROUND_STATUS, left > 0 ? (int)left : 0, m);
    if (rc != 0)
      return rc;
    assert_int_equal(dr_msg_round_status(m, st), 0);
    if (st->joined == joined)
      return 0;
  }
}

DR_H_TEST(test_round_status_says_who_is_missing) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "3", "--heartbeat-timeout", HB_SHORT),
             NULL);
  static const char *const hosts[2] = {"host-a", "host-b"};
  dr_h_raw_t *r[2];
  for (int i = 0; i < 2; i++)
    r[i] = dr_h_hello(fx, hosts[i]);
  double t0 = dr_h_now_ms();
  for (int i = 0; i < 2; i++)
    join(fx, r[i], hosts[i], 2, DR_NONE);
  for (int i = 0; i < 2; i++) {
    dr_msg_t m;
    dr_round_status_t st;
    assert_int_equal(recv_round(r[i], 2, 10 * HB_INTERVAL_MS, &m, &st), 0);
    double took = dr_h_now_ms() - t0;
    fprintf(stderr, "  %s told 2 of 3 after %.0f ms\n", hosts[i], took);
    /* The first push waits an interval; a change is told within one more
     * (and the sweep's tick). */
    assert_true(took <= 2 * HB_INTERVAL_MS + 150);
    assert_int_equal(st.gen, 1);
    assert_int_equal(st.min_nodes, 3);
    assert_int_equal(st.max_nodes, 3);
    assert_int_equal(st.needed, 1);
    assert_int_equal(st.n_missing, 0);
    assert_int_equal(st.last_call_ms, DR_NONE);
    assert_true(st.waited_ms >= HB_INTERVAL_MS - 20);
    /* Both, in the order the server read their joins. */
    uint32_t pos = 0, seen = 0;
    dr_node_rec_t x;
    while (dr_node_rec_next(&st.nodes, &pos, &x)) {
      assert_int_equal(x.node_rank, DR_NO_RANK);
      assert_int_equal(x.nproc, 2);
      assert_int_equal(x.state, DR_NS_FORMING);
      assert_int_equal(x.host.len, strlen(hosts[0]));
      int k = x.host.p[5] == 'a' ? 0 : 1;
      assert_memory_equal(x.host.p, hosts[k], x.host.len);
      seen |= 1u << k;
    }
    assert_int_equal(seen, 3);
  }
  /* Nothing changes: told again within two intervals. */
  for (int i = 0; i < 2; i++) {
    dr_msg_t m;
    dr_round_status_t st;
    double t = dr_h_now_ms();
    assert_int_equal(recv_round(r[i], 2, 4 * HB_INTERVAL_MS, &m, &st), 0);
    assert_true(dr_h_now_ms() - t <= 2 * HB_INTERVAL_MS + 150);
  }
  /* The third completes the round: ASSIGN, and no more ROUND_STATUS. */
  dr_h_raw_t *c = dr_h_hello(fx, "host-c");
  join(fx, c, "host-c", 2, DR_NONE);
  dr_msg_t m;
  for (int i = 0; i < 2; i++)
    assert_int_equal(dr_h_recv_type(r[i], DR_MSG_ASSIGN, 5000, &m), 0);
  assert_int_equal(dr_h_recv_type(c, DR_MSG_ASSIGN, 5000, &m), 0);
  int rc = dr_h_raw_recv(r[0], 3 * HB_INTERVAL_MS, &m);
  while (rc == 0 && m.type == DR_MSG_HEARTBEAT)
    rc = dr_h_raw_recv(r[0], 3 * HB_INTERVAL_MS, &m);
  if (rc == 0)
    fail_msg("a running node got %s", dr_msg_name(m.type));
}

DR_H_TEST(test_round_status_static_ranks) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2:4", "--heartbeat-timeout",
                           HB_SHORT, "--last-call-timeout", "0.2"),
             NULL);
  /* Ranks 0 and 3 of a job of at least 2: rank 3 holds the round until
   * ranks 1 and 2 are in. */
  dr_h_raw_t *a = dr_h_hello(fx, "static-a"), *b = dr_h_hello(fx, "static-b");
  join(fx, a, "static-a", 1, 0);
  join(fx, b, "static-b", 1, 3);
  dr_msg_t m;
  dr_round_status_t st;
  assert_int_equal(recv_round(a, 2, 10 * HB_INTERVAL_MS, &m, &st), 0);
  assert_int_equal(st.needed, 2);
  assert_int_equal(st.n_missing, 2);
  uint32_t pos = 0, k, want[2] = {1, 2}, i = 0;
  while (dr_rank_u32_next(&st.missing, &pos, &k))
    assert_int_equal(k, want[i++]);
  assert_int_equal(i, 2);
  /* In the order the server read the joins. */
  pos = 0;
  uint32_t ranks_in = 0;
  dr_node_rec_t x;
  while (dr_node_rec_next(&st.nodes, &pos, &x)) {
    assert_true(x.node_rank == 0 || x.node_rank == 3);
    ranks_in |= 1u << x.node_rank;
  }
  assert_int_equal(ranks_in, 0x9);
  /* A node without a rank: the round needs one more, and static ranks no
   * longer apply. */
  dr_h_raw_t *c = dr_h_hello(fx, "any-c");
  join(fx, c, "any-c", 1, DR_NONE);
  assert_int_equal(recv_round(a, 3, 10 * HB_INTERVAL_MS, &m, &st), 0);
  assert_int_equal(st.needed, 1);
  assert_int_equal(st.n_missing, 0);
  assert_int_equal(st.missing.count, 0);
}

/* Two nodes of one worker each, assigned. */
static void run_two(dr_h_fixture_t *fx, dr_h_raw_t **r) {
  static const char *const hosts[2] = {"run-a", "run-b"};
  for (int i = 0; i < 2; i++) {
    r[i] = dr_h_hello(fx, hosts[i]);
    join(fx, r[i], hosts[i], 2, (uint64_t)i);
  }
  dr_msg_t m;
  for (int i = 0; i < 2; i++)
    assert_int_equal(dr_h_recv_type(r[i], DR_MSG_ASSIGN, 5000, &m), 0);
}

static void send_ranks(dr_h_fixture_t *fx, dr_h_raw_t *r, uint64_t gen,
                       uint32_t first, uint64_t step, size_t n) {
  dr_rank_rec_t x[2];
  memset(x, 0, sizeof(x));
  for (uint32_t i = 0; i < 2; i++) {
    x[i].rank = first + i;
    x[i].local_rank = i;
    x[i].node_rank = 77; /* the server's knowledge wins */
    x[i].pid = 1000 + first + i;
    x[i].state = i == 0 ? DR_RS_RUNNING : DR_RS_STOPPED;
    x[i].step = step + i;
    x[i].step_age_ms = 100;
    x[i].rate_milli = 12500;
  }
  dr_enc_ranks(&fx->buf, 0, gen, x, n);
  assert_int_equal(dr_h_raw_send_buf(r, &fx->buf), 0);
}

/* STATUS until it holds want rank records, the first at step first_step
 * (the RANKS reports come on other connections, which the server may read
 * after the STATUS), for at most 5 s. */
static void status_with_ranks(dr_client_t *c, uint32_t want,
                              uint64_t first_step, dr_msg_t *m,
                              dr_job_status_t *js) {
  for (int i = 0; i < 500; i++) {
    assert_int_equal(dr_client_status(c, 0, 0, m), 0);
    assert_int_equal(dr_msg_job_status(m, js), 0);
    uint32_t pos = 0;
    dr_rank_rec_t k;
    if (js->ranks.count >= want && dr_rank_rec_next(&js->ranks, &pos, &k) &&
        k.step == first_step)
      return;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  fail_msg("STATUS held %u rank records after 5 s, not %u", js->ranks.count,
           want);
}

DR_H_TEST(test_status_from_ranks) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB_OFF,
                           "--max-restarts", "2"),
             NULL);
  dr_h_raw_t *r[2];
  run_two(fx, r);
  send_ranks(fx, r[0], 1, 0, 40, 2);
  send_ranks(fx, r[1], 2, 2, 99, 2); /* another generation: dropped */
  send_ranks(fx, r[1], 1, 2, 50, 1); /* another shape: dropped */
  dr_client_t *c = dr_h_open(fx, "status-tool");
  dr_msg_t m;
  dr_job_status_t js;
  status_with_ranks(c, 2, 40, &m, &js);
  assert_int_equal(js.gen, 1);
  assert_int_equal(js.state, DR_JS_RUNNING);
  assert_int_equal(js.min_nodes, 2);
  assert_int_equal(js.max_restarts, 2);
  assert_int_equal(js.exit_code, DR_NONE);
  assert_int_equal(js.nodes.count, 2);
  uint32_t pos = 0;
  dr_node_rec_t x;
  for (uint32_t i = 0; dr_node_rec_next(&js.nodes, &pos, &x); i++) {
    assert_int_equal(x.node_rank, i);
    assert_int_equal(x.first_rank, 2 * i);
    assert_int_equal(x.state, DR_NS_RUNNING);
    assert_true(x.hb_age_ms < 5000);
    if (i == 0)
      assert_true(x.report_age_ms < 5000);
    else
      assert_int_equal(x.report_age_ms, DR_NONE);
  }
  /* Only node 0's report holds. */
  assert_int_equal(js.ranks.count, 2);
  pos = 0;
  dr_rank_rec_t k;
  for (uint32_t i = 0; dr_rank_rec_next(&js.ranks, &pos, &k); i++) {
    assert_int_equal(k.rank, i);
    assert_int_equal(k.node_rank, 0);
    assert_int_equal(k.pid, 1000 + i);
    assert_int_equal(k.state, i == 0 ? DR_RS_RUNNING : DR_RS_STOPPED);
    assert_int_equal(k.step, 40 + i);
    assert_true(k.step_age_ms >= 100);
    assert_int_equal(k.rate_milli, 12500);
  }
  assert_int_equal(js.stacks.count, 0);
  /* A later report replaces the earlier. */
  send_ranks(fx, r[0], 1, 0, 60, 2);
  send_ranks(fx, r[1], 1, 2, 70, 2);
  status_with_ranks(c, 4, 60, &m, &js);
  assert_int_equal(js.ranks.count, 4);
  pos = 0;
  for (uint32_t i = 0; dr_rank_rec_next(&js.ranks, &pos, &k); i++)
    assert_int_equal(k.step, (i < 2 ? 60 : 68) + i);
}

/* A STATUS sent from a thread of its own, while the test plays the nodes. */
typedef struct {
  dr_client_t *c;
  uint32_t flags;
  uint64_t wait_ms;
  int rc;
  dr_msg_t m;
  double t_ms; /* how long it took */
} status_req_t;

static void *status_thread(void *arg) {
  status_req_t *q = arg;
  double t0 = dr_h_now_ms();
  q->rc = dr_client_status(q->c, q->flags, q->wait_ms, &q->m);
  q->t_ms = dr_h_now_ms() - t0;
  return NULL;
}

DR_H_TEST(test_status_stacks_with_deadline) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB_OFF),
             NULL);
  dr_h_raw_t *r[2];
  run_two(fx, r);
  send_ranks(fx, r[1], 1, 2, 5, 2);
  static status_req_t q;
  memset(&q, 0, sizeof(q));
  q.c = dr_h_open(fx, "status-tool");
  q.flags = DR_STATUS_STACKS;
  q.wait_ms = 800;
  assert_int_equal(dr_h_thread(fx, status_thread, &q), 0);
  /* Both nodes are asked; node 0 answers, node 1 never does. */
  dr_msg_t m;
  dr_stacks_req_t sq[2];
  for (int i = 0; i < 2; i++) {
    assert_int_equal(dr_h_recv_type(r[i], DR_MSG_STACKS, 5000, &m), 0);
    assert_int_equal(dr_msg_stacks(&m, &sq[i]), 0);
    assert_int_equal(sq[i].gen, 1);
  }
  assert_int_equal(sq[0].id, sq[1].id);
  dr_stack_rec_t st[2] = {
      {0, 9, 1000, 0, dr_str("#0 main () at x.c:1\n")},
      {1, 9, 1001, 38, dr_str("stacks not available in this build")}};
  dr_enc_stack_dump(&fx->buf, 0, sq[0].id + 1, st, 2); /* not asked: dropped */
  assert_int_equal(dr_h_raw_send_buf(r[0], &fx->buf), 0);
  dr_enc_stack_dump(&fx->buf, 0, sq[0].id, st, 2);
  assert_int_equal(dr_h_raw_send_buf(r[0], &fx->buf), 0);
  dr_h_join_threads(fx);
  assert_int_equal(q.rc, 0);
  fprintf(stderr, "  STATUS with stacks answered after %.0f ms\n", q.t_ms);
  assert_true(q.t_ms >= 700);
  dr_job_status_t js;
  assert_int_equal(dr_msg_job_status(&q.m, &js), 0);
  assert_int_equal(js.stacks.count, 4);
  uint32_t pos = 0;
  dr_stack_rec_t x;
  for (uint32_t i = 0; dr_stack_rec_next(&js.stacks, &pos, &x); i++) {
    assert_int_equal(x.rank, i);
    assert_int_equal(x.node_rank, i / 2); /* the server's knowledge */
    if (i < 2) {
      assert_int_equal(x.code, st[i].code);
      assert_int_equal(x.text.len, st[i].text.len);
      assert_memory_equal(x.text.p, st[i].text.p, x.text.len);
    } else {
      /* From node 1's last report: its pids; why there is no stack. */
      assert_int_equal(x.pid, 1000 + i);
      assert_int_equal(x.code, ETIMEDOUT);
      assert_non_null(memmem(x.text.p, x.text.len, "did not answer", 14));
    }
  }
  /* When every node answers, at once. */
  memset(&q.m, 0, sizeof(q.m));
  q.wait_ms = 20000;
  assert_int_equal(dr_h_thread(fx, status_thread, &q), 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(dr_h_recv_type(r[i], DR_MSG_STACKS, 5000, &m), 0);
    assert_int_equal(dr_msg_stacks(&m, &sq[i]), 0);
    st[0].rank = st[1].rank = 0;
    st[0].rank = 2 * (uint32_t)i;
    st[1].rank = 2 * (uint32_t)i + 1;
    dr_enc_stack_dump(&fx->buf, 0, sq[i].id, st, 2);
    assert_int_equal(dr_h_raw_send_buf(r[i], &fx->buf), 0);
  }
  dr_h_join_threads(fx);
  assert_int_equal(q.rc, 0);
  assert_true(q.t_ms < 5000);
  assert_int_equal(dr_msg_job_status(&q.m, &js), 0);
  assert_int_equal(js.stacks.count, 4);
}

/* Collecting stacks stops every worker for a moment: STATUS requests that
 * ask while a collection runs share it (each node is asked once), a
 * connection has one such STATUS at a time (100 pipelined: one answer, 99
 * refusals), and a whole answer serves askers that come right after. */
DR_H_TEST(test_status_stacks_shared) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB_OFF),
             NULL);
  dr_h_raw_t *r[2];
  run_two(fx, r);
  dr_h_raw_t *a = dr_h_hello(fx, "tool-a"), *b = dr_h_hello(fx, "tool-b");
  for (uint32_t req = 1; req <= 100; req++)
    assert_int_equal(dr_enc_status(&fx->buf, req, DR_STATUS_STACKS, 20000),
                     0);
  assert_int_equal(dr_h_raw_send_buf(a, &fx->buf), 0);
  dr_msg_t m;
  for (uint32_t req = 2; req <= 100; req++) {
    assert_int_equal(dr_h_recv_type(a, DR_MSG_ERROR, 5000, &m), 0);
    assert_int_equal(m.req_id, req);
    dr_error_t e;
    assert_int_equal(dr_msg_error(&m, &e), 0);
    assert_int_equal(e.code, DR_ESEQUENCE);
  }
  /* b asks while the collection runs: the answer to a plain STATUS sent
   * after it says the server has read it (a connection's frames are
   * handled in order) before any node answers. */
  dr_enc_status(&fx->buf, 7, DR_STATUS_STACKS, 20000);
  dr_enc_status(&fx->buf, 8, 0, 0);
  assert_int_equal(dr_h_raw_send_buf(b, &fx->buf), 0);
  assert_int_equal(dr_h_recv_type(b, DR_MSG_JOB_STATUS, 5000, &m), 0);
  assert_int_equal(m.req_id, 8);
  dr_stacks_req_t sq[2];
  for (int i = 0; i < 2; i++) {
    assert_int_equal(dr_h_recv_type(r[i], DR_MSG_STACKS, 5000, &m), 0);
    assert_int_equal(dr_msg_stacks(&m, &sq[i]), 0);
  }
  for (int i = 0; i < 2; i++) {
    dr_stack_rec_t st[2] = {{2 * (uint32_t)i, 0, 1, 0, dr_str("#0 f ()\n")},
                            {2 * (uint32_t)i + 1, 0, 2, 0, dr_str("#0 g ()\n")}};
    dr_enc_stack_dump(&fx->buf, 0, sq[i].id, st, 2);
    assert_int_equal(dr_h_raw_send_buf(r[i], &fx->buf), 0);
  }
  dr_job_status_t js;
  dr_h_raw_t *askers[2] = {a, b};
  uint32_t reqs[2] = {1, 7};
  for (int k = 0; k < 2; k++) {
    assert_int_equal(dr_h_recv_type(askers[k], DR_MSG_JOB_STATUS, 5000, &m),
                     0);
    assert_int_equal(m.req_id, reqs[k]);
    assert_int_equal(dr_msg_job_status(&m, &js), 0);
    assert_int_equal(js.stacks.count, 4);
  }
  double t_done = dr_h_now_ms();
  /* Right after, the answer serves again: no node is asked. */
  dr_enc_status(&fx->buf, 10, DR_STATUS_STACKS, 20000);
  assert_int_equal(dr_h_raw_send_buf(a, &fx->buf), 0);
  assert_int_equal(dr_h_recv_type(a, DR_MSG_JOB_STATUS, 5000, &m), 0);
  assert_int_equal(m.req_id, 10);
  assert_int_equal(dr_msg_job_status(&m, &js), 0);
  assert_int_equal(js.stacks.count, 4);
  if (dr_h_now_ms() - t_done < 1500) {
    /* The nodes' next frame is the answer to a plain STATUS of their
     * own, not STACKS: nothing was pushed to them in between. */
    for (int i = 0; i < 2; i++) {
      dr_enc_status(&fx->buf, 11, 0, 0);
      assert_int_equal(dr_h_raw_send_buf(r[i], &fx->buf), 0);
      assert_int_equal(dr_h_recv_type(r[i], DR_MSG_JOB_STATUS, 5000, &m), 0);
    }
  } else {
    fprintf(stderr, "  (the reuse of the answer not checked: this machine "
            "took over 1.5 s)\n");
  }
}

/* A status client that goes away while its stacks are collected: nothing
 * is answered to it, and the server serves on. */
DR_H_TEST(test_status_client_gone) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", HB_OFF),
             NULL);
  dr_h_raw_t *a = dr_h_hello(fx, "solo");
  join(fx, a, "solo", 1, DR_NONE);
  dr_msg_t m;
  assert_int_equal(dr_h_recv_type(a, DR_MSG_ASSIGN, 5000, &m), 0);
  dr_h_raw_t *t = dr_h_hello(fx, "tool");
  dr_enc_status(&fx->buf, 5, DR_STATUS_STACKS, 5000);
  assert_int_equal(dr_h_raw_send_buf(t, &fx->buf), 0);
  assert_int_equal(dr_h_recv_type(a, DR_MSG_STACKS, 5000, &m), 0);
  dr_stacks_req_t sq;
  assert_int_equal(dr_msg_stacks(&m, &sq), 0);
  dr_h_raw_close(t);
  dr_stack_rec_t st = {0, 0, 1, 0, dr_str("late")};
  dr_enc_stack_dump(&fx->buf, 0, sq.id, &st, 1);
  assert_int_equal(dr_h_raw_send_buf(a, &fx->buf), 0);
  dr_client_t *c = dr_h_open(fx, "tool-2");
  assert_int_equal(dr_client_status(c, 0, 0, &m), 0);
  dr_job_status_t js;
  assert_int_equal(dr_msg_job_status(&m, &js), 0);
  assert_int_equal(js.state, DR_JS_RUNNING);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
  const struct CMUnitTest tests[] = {
      T(test_round_status_says_who_is_missing),
      T(test_round_status_static_ranks),
      T(test_status_from_ranks),
      T(test_status_stacks_with_deadline),
      T(test_status_stacks_shared),
      T(test_status_client_gone),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
