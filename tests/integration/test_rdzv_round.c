/* Rounds: when they complete, what every node is assigned, and which joins
 * are refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Upper bounds on elapsed time only catch a hang: a loaded machine (ctest
 * -j2, sanitizers) may take seconds longer than the deadline under test. */
#define HANG_SLACK_MS 10000

/* Heartbeat timeout for tests that are not about liveness: long enough
 * that no node is declared dead while a test runs. */
#define HB_OFF "30"
#define JOIN_WAIT_MS 10000

static void assert_joined(const dr_h_join_t *jt) {
  if (jt->rc != 0)
    fail_msg("JOIN of %.*s failed: %s (%s)", (int)jt->j.host.len,
             (const char *)jt->j.host.p, dr_err_name(jt->rc), jt->errmsg);
}

static void assert_bytes(const uint8_t *p, size_t n, const char *want) {
  assert_int_equal(n, strlen(want));
  assert_memory_equal(p, want, n);
}

/* Starts one asynchronous JOIN per host, waits for all, and checks each
 * got an assignment for gen. */
static void join_all(dr_h_fixture_t *fx, dr_client_t *const *c,
                     const dr_join_t *j, size_t n, dr_h_join_t **jt) {
  for (size_t i = 0; i < n; i++)
    jt[i] = dr_h_join_async(fx, c[i], &j[i], JOIN_WAIT_MS);
  dr_h_join_threads(fx);
  for (size_t i = 0; i < n; i++)
    assert_joined(jt[i]);
}

DR_H_TEST(test_round_completes_at_max) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2:3", "--last-call-timeout", "30",
                       "--heartbeat-timeout", HB_OFF, "--max-restarts", "4"),
             NULL);
  static const char *const hosts[3] = {"node-c", "node-a", "node-b"};
  static const char *const addrs[3] = {"10.0.0.3", "10.0.0.1", "10.0.0.2"};
  static const char *const boots[3] = {"boot-c", "boot-a", "boot-b"};
  static const uint32_t want_rank[3] = {2, 0, 1}; /* by host name */
  dr_client_t *c[3];
  dr_join_t j[3];
  dr_h_join_t *jt[3];
  for (int i = 0; i < 3; i++) {
    c[i] = dr_h_open(fx, hosts[i]);
    dr_h_join_fill(&j[i], DR_H_RUN_ID, hosts[i], addrs[i], 2, DR_NONE,
                   29500u + (uint32_t)i, boots[i]);
  }
  double t0 = dr_h_now_ms();
  join_all(fx, c, j, 3, jt);
  for (int i = 0; i < 3; i++) {
    const dr_assignment_t *a = &jt[i]->a;
    assert_int_equal(a->gen, 1);
    assert_int_equal(a->node_rank, want_rank[i]);
    assert_int_equal(a->nnodes, 3);
    assert_int_equal(a->world_size, 6);
    assert_int_equal(a->first_rank, 2 * want_rank[i]);
    assert_string_equal(a->master_addr, "10.0.0.1");
    assert_int_equal(a->master_port, 29501);
    assert_bytes(a->bootstrap, a->bootstrap_len, "boot-a");
    assert_int_equal(a->restart_count, 0);
    assert_int_equal(a->max_restarts, 4);
    /* The last call (30 s) is not waited for once max nodes joined. */
    double took = jt[i]->t_done - t0;
    fprintf(stderr, "  %s assigned after %.0f ms\n", hosts[i], took);
    assert_true(took < 5000);
  }
}

DR_H_TEST(test_round_completes_at_min_after_last_call) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2:3", "--last-call-timeout", "1.0",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  dr_client_t *c[2] = {dr_h_open(fx, "min-a"), dr_h_open(fx, "min-b")};
  dr_join_t j[2];
  dr_h_join_t *jt[2];
  dr_h_join_fill(&j[0], DR_H_RUN_ID, "min-a", "", 4, DR_NONE, 0, "");
  dr_h_join_fill(&j[1], DR_H_RUN_ID, "min-b", "", 4, DR_NONE, 0, "");
  join_all(fx, c, j, 2, jt);
  /* The server saw min nodes no earlier than the later JOIN was sent. */
  double t_min = jt[0]->t_sent > jt[1]->t_sent ? jt[0]->t_sent : jt[1]->t_sent;
  for (int i = 0; i < 2; i++) {
    const dr_assignment_t *a = &jt[i]->a;
    assert_int_equal(a->gen, 1);
    assert_int_equal(a->node_rank, (uint32_t)i);
    assert_int_equal(a->nnodes, 2);
    assert_int_equal(a->world_size, 8);
    assert_int_equal(a->first_rank, 4 * (uint32_t)i);
    double waited = jt[i]->t_done - t_min;
    fprintf(stderr, "  min-%c assigned %.0f ms after min nodes joined\n",
            'a' + i, waited);
    /* Not before the 1 s last call (50 ms for timer granularity), and not
     * much after it. */
    assert_true(waited >= 950);
    assert_true(waited <= 3000);
  }
}

/* Receives the next frame that is not a server heartbeat. */
static int raw_recv_order(dr_h_raw_t *r, int timeout_ms, dr_msg_t *m) {
  double deadline = dr_h_now_ms() + timeout_ms;
  for (;;) {
    double left = deadline - dr_h_now_ms();
    int rc = dr_h_raw_recv(r, left > 0 ? (int)left : 0, m);
    if (rc != 0 || m->type != DR_MSG_HEARTBEAT)
      return rc;
  }
}

DR_H_TEST(test_round_waits_below_min) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "3:4", "--last-call-timeout", "0.2",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  /* Raw connections: a JOIN is sent without blocking on its answer. */
  static const char *const hosts[3] = {"few-a", "few-b", "few-c"};
  dr_h_raw_t *r[3];
  dr_buf_t *b = &fx->buf;
  dr_msg_t m;
  for (int i = 0; i < 3; i++) {
    r[i] = dr_h_raw(fx);
    dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str(hosts[i]));
    assert_int_equal(dr_h_raw_send_buf(r[i], b), 0);
    assert_int_equal(dr_h_raw_recv(r[i], 2000, &m), 0);
    assert_int_equal(m.type, DR_MSG_WELCOME);
  }
  dr_join_t j[3];
  for (int i = 0; i < 2; i++) {
    dr_h_join_fill(&j[i], DR_H_RUN_ID, hosts[i], "", 1, DR_NONE, 0, "");
    dr_enc_join(b, 2, &j[i]);
    assert_int_equal(dr_h_raw_send_buf(r[i], b), 0);
  }
  /* Two of three: no round, however long past the last call. */
  for (int i = 0; i < 2; i++) {
    int rc = raw_recv_order(r[i], i == 0 ? 1000 : 0, &m);
    if (rc == 0)
      fail_msg("%s got %s with 2 of min 3 nodes", hosts[i],
               dr_msg_name(m.type));
    assert_int_equal(rc, -ETIMEDOUT);
  }
  /* The third completes the round after its last call. */
  double t_min = dr_h_now_ms();
  dr_h_join_fill(&j[2], DR_H_RUN_ID, hosts[2], "", 1, DR_NONE, 0, "");
  dr_enc_join(b, 2, &j[2]);
  assert_int_equal(dr_h_raw_send_buf(r[2], b), 0);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(raw_recv_order(r[i], 5000, &m), 0);
    assert_int_equal(m.type, DR_MSG_ASSIGN);
    dr_assign_t a;
    assert_int_equal(dr_msg_assign(&m, &a), 0);
    assert_int_equal(a.nnodes, 3);
    assert_int_equal(a.node_rank, (uint32_t)i);
    double waited = dr_h_now_ms() - t_min;
    fprintf(stderr, "  %s assigned %.0f ms after min nodes joined\n", hosts[i],
            waited);
    assert_true(waited >= 150);
  }
}

DR_H_TEST(test_static_ranks_honoured) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "3", "--last-call-timeout", "30",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  /* Requested ranks run against the host-name order on purpose. */
  static const char *const hosts[3] = {"host-a", "host-b", "host-c"};
  static const uint64_t ranks[3] = {2, 0, 1};
  static const char *const addrs[3] = {"192.168.7.1", "192.168.7.2",
                                       "192.168.7.3"};
  static const char *const boots[3] = {"nccl-id-a", "nccl-id-b", "nccl-id-c"};
  dr_client_t *c[3];
  dr_join_t j[3];
  dr_h_join_t *jt[3];
  for (int i = 0; i < 3; i++) {
    c[i] = dr_h_open(fx, hosts[i]);
    dr_h_join_fill(&j[i], DR_H_RUN_ID, hosts[i], addrs[i], 3, ranks[i],
                   40000u + (uint32_t)i, boots[i]);
  }
  join_all(fx, c, j, 3, jt);
  for (int i = 0; i < 3; i++) {
    const dr_assignment_t *a = &jt[i]->a;
    assert_int_equal(a->node_rank, ranks[i]);
    assert_int_equal(a->nnodes, 3);
    assert_int_equal(a->world_size, 9);
    assert_int_equal(a->first_rank, 3 * ranks[i]);
    assert_string_equal(a->master_addr, "192.168.7.2");
    assert_int_equal(a->master_port, 40001);
    assert_bytes(a->bootstrap, a->bootstrap_len, "nccl-id-b");
  }
}

DR_H_TEST(test_unranked_ordered_by_host_and_defaults) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "3", "--last-call-timeout", "30",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  /* zeta asks for rank 0; the others are ordered by host name. Node 0
   * gives no address and no bootstrap: the server uses its peer address
   * and generates 128 random bytes. */
  static const char *const hosts[3] = {"beta", "zeta", "alpha"};
  static const uint64_t ranks[3] = {DR_NONE, 0, DR_NONE};
  static const uint32_t want[3] = {2, 0, 1};
  dr_client_t *c[3];
  dr_join_t j[3];
  dr_h_join_t *jt[3];
  for (int i = 0; i < 3; i++) {
    c[i] = dr_h_open(fx, hosts[i]);
    dr_h_join_fill(&j[i], DR_H_RUN_ID, hosts[i], i == 1 ? "" : "10.9.9.9", 1,
                   ranks[i], 31000u + (uint32_t)i, i == 1 ? "" : "unused");
  }
  join_all(fx, c, j, 3, jt);
  for (int i = 0; i < 3; i++) {
    const dr_assignment_t *a = &jt[i]->a;
    assert_int_equal(a->node_rank, want[i]);
    assert_int_equal(a->first_rank, want[i]);
    assert_int_equal(a->world_size, 3);
    assert_string_equal(a->master_addr, DR_H_ADDR);
    assert_int_equal(a->master_port, 31001);
    assert_int_equal(a->bootstrap_len, 128);
    assert_memory_equal(a->bootstrap, jt[0]->a.bootstrap, 128);
  }
}

DR_H_TEST(test_duplicate_rank_refused) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "4", "--last-call-timeout", "30",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  static const char *const hosts[5] = {"dup-1", "dup-2", "r0", "r1", "r2"};
  static const uint64_t ranks[5] = {3, 3, 0, 1, 2};
  dr_client_t *c[5];
  dr_join_t j[5];
  dr_h_join_t *jt[5];
  for (int i = 0; i < 5; i++) {
    c[i] = dr_h_open(fx, hosts[i]);
    dr_h_join_fill(&j[i], DR_H_RUN_ID, hosts[i], "", 1, ranks[i], 0, "");
  }
  /* Whichever of the two asking for rank 3 comes second is refused. */
  jt[0] = dr_h_join_async(fx, c[0], &j[0], JOIN_WAIT_MS);
  jt[1] = dr_h_join_async(fx, c[1], &j[1], JOIN_WAIT_MS);
  dr_h_join_t *refused = dr_h_join_wait_any(fx, jt, 2, JOIN_WAIT_MS);
  assert_non_null(refused);
  dr_h_join_t *kept = refused == jt[0] ? jt[1] : jt[0];
  for (int i = 2; i < 5; i++)
    jt[i] = dr_h_join_async(fx, c[i], &j[i], JOIN_WAIT_MS);
  dr_h_join_threads(fx);

  fprintf(stderr, "  refused: %s (%s)\n", dr_err_name(refused->rc),
          refused->errmsg);
  assert_int_equal(refused->rc, DR_EDUPRANK);
  assert_non_null(strstr(refused->errmsg, "3"));
  assert_joined(kept);
  assert_int_equal(kept->a.node_rank, 3);
  for (int i = 2; i < 5; i++) {
    assert_joined(jt[i]);
    assert_int_equal(jt[i]->a.node_rank, ranks[i]);
    assert_int_equal(jt[i]->a.nnodes, 4);
  }
}

DR_H_TEST(test_rank_out_of_range_refused) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB_OFF),
             NULL);
  static const uint64_t bad[2] = {2, 9};
  for (int i = 0; i < 2; i++) {
    dr_client_t *c = dr_h_open(fx, "ranky");
    dr_join_t j;
    dr_assignment_t a;
    dr_h_join_fill(&j, DR_H_RUN_ID, "ranky", "", 1, bad[i], 0, "");
    int rc = dr_client_join(c, &j, 3000, &a);
    fprintf(stderr, "  rank %d: %s (%s)\n", (int)bad[i], dr_err_name(rc),
            dr_client_errmsg(c));
    if (rc == 0)
      dr_assignment_free(&a);
    assert_int_equal(rc, DR_EBADRANK);
  }
}

/* dr_client_join's wait_ms is its whole deadline: a round that cannot
 * complete gives -ETIMEDOUT after about wait_ms, not after the I/O
 * timeout on top of it. */
DR_H_TEST(test_join_wait_is_bounded) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB_OFF),
             NULL);
  dr_client_t *c = dr_h_open(fx, "alone");
  dr_join_t j;
  dr_assignment_t a;
  dr_h_join_fill(&j, DR_H_RUN_ID, "alone", "", 1, DR_NONE, 0, "");
  double t0 = dr_h_now_ms();
  int rc = dr_client_join(c, &j, 400, &a);
  double took = dr_h_now_ms() - t0;
  fprintf(stderr, "  lone join: %s after %.0f ms\n", dr_err_name(rc), took);
  if (rc == 0)
    dr_assignment_free(&a);
  assert_int_equal(rc, -ETIMEDOUT);
  assert_true(took >= 390.0);
  assert_true(took < 400 + HANG_SLACK_MS);
}

DR_H_TEST(test_full_round_refused) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB_OFF),
             NULL);
  dr_client_t *c[2] = {dr_h_open(fx, "full-a"), dr_h_open(fx, "full-b")};
  dr_join_t j[2];
  dr_h_join_t *jt[2];
  dr_h_join_fill(&j[0], DR_H_RUN_ID, "full-a", "", 1, DR_NONE, 0, "");
  dr_h_join_fill(&j[1], DR_H_RUN_ID, "full-b", "", 1, DR_NONE, 0, "");
  join_all(fx, c, j, 2, jt);

  dr_client_t *extra = dr_h_open(fx, "full-c");
  dr_join_t jx;
  dr_assignment_t a;
  dr_h_join_fill(&jx, DR_H_RUN_ID, "full-c", "", 1, DR_NONE, 0, "");
  int rc = dr_client_join(extra, &jx, 3000, &a);
  fprintf(stderr, "  third node: %s (%s)\n", dr_err_name(rc),
          dr_client_errmsg(extra));
  if (rc == 0)
    dr_assignment_free(&a);
  assert_int_equal(rc, DR_EFULL);
}

DR_H_TEST(test_mixed_nproc_refused) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "3", "--last-call-timeout", "30",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  static const char *const hosts[4] = {"np-a", "np-b", "np-c", "np-d"};
  dr_client_t *c[4];
  dr_join_t j[4];
  dr_h_join_t *jt[4];
  for (int i = 0; i < 4; i++)
    c[i] = dr_h_open(fx, hosts[i]);
  dr_h_join_fill(&j[0], DR_H_RUN_ID, hosts[0], "", 2, DR_NONE, 0, "");
  dr_h_join_fill(&j[1], DR_H_RUN_ID, hosts[1], "", 4, DR_NONE, 0, "");
  jt[0] = dr_h_join_async(fx, c[0], &j[0], JOIN_WAIT_MS);
  jt[1] = dr_h_join_async(fx, c[1], &j[1], JOIN_WAIT_MS);
  /* Whichever comes second differs from the first and is refused. */
  dr_h_join_t *refused = dr_h_join_wait_any(fx, jt, 2, JOIN_WAIT_MS);
  assert_non_null(refused);
  dr_h_join_t *kept = refused == jt[0] ? jt[1] : jt[0];
  uint32_t nproc = kept->j.nproc;
  dr_h_join_fill(&j[2], DR_H_RUN_ID, hosts[2], "", nproc, DR_NONE, 0, "");
  dr_h_join_fill(&j[3], DR_H_RUN_ID, hosts[3], "", nproc, DR_NONE, 0, "");
  jt[2] = dr_h_join_async(fx, c[2], &j[2], JOIN_WAIT_MS);
  jt[3] = dr_h_join_async(fx, c[3], &j[3], JOIN_WAIT_MS);
  dr_h_join_threads(fx);

  fprintf(stderr, "  refused: %s (%s)\n", dr_err_name(refused->rc),
          refused->errmsg);
  assert_int_equal(refused->rc, DR_ENPROC);
  dr_h_join_t *ok[3] = {kept, jt[2], jt[3]};
  for (int i = 0; i < 3; i++) {
    assert_joined(ok[i]);
    assert_int_equal(ok[i]->a.nnodes, 3);
    assert_int_equal(ok[i]->a.world_size, 3 * nproc);
  }
}

DR_H_TEST(test_wrong_run_id_refused) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", HB_OFF),
             NULL);
  dr_client_t *c = NULL;
  char err[512];
  int rc = dr_h_client_open(fx->srv, "other-job", "stranger", NULL, 0, &c, err,
                            sizeof(err));
  dr_client_close(&c);
  fprintf(stderr, "  HELLO: %s (%s)\n", dr_err_name(rc), err);
  assert_int_equal(rc, DR_ERUNID);
  assert_non_null(strstr(err, "other-job"));
  /* Not authenticated: told it does not match, not what the job's is. */
  assert_null(strstr(err, DR_H_RUN_ID));

  /* The same refusal for a JOIN naming another job. */
  dr_client_t *j_c = dr_h_open(fx, "stranger");
  dr_join_t j;
  dr_assignment_t a;
  dr_h_join_fill(&j, "other-job", "stranger", "", 1, DR_NONE, 0, "");
  rc = dr_client_join(j_c, &j, 3000, &a);
  fprintf(stderr, "  JOIN: %s (%s)\n", dr_err_name(rc), dr_client_errmsg(j_c));
  if (rc == 0)
    dr_assignment_free(&a);
  assert_int_equal(rc, DR_ERUNID);
}

DR_H_TEST(test_nproc_over_bound_refused) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2", "--last-call-timeout", "30",
                       "--heartbeat-timeout", HB_OFF, "--allow-mixed-nproc"),
             NULL);
  /* nproc 2^32-1 and 2 make a world of 1 once the u32 sum wraps, and a
   * first rank of 4294967295 for the second node. */
  static const char *const hosts[3] = {"node-0-huge", "node-a", "node-b"};
  static const uint32_t nproc[3] = {UINT32_MAX, 2, 2};
  dr_client_t *c[3];
  dr_join_t j[3];
  dr_h_join_t *jt[3];
  for (int i = 0; i < 3; i++) {
    c[i] = dr_h_open(fx, hosts[i]);
    dr_h_join_fill(&j[i], DR_H_RUN_ID, hosts[i], "", nproc[i], DR_NONE, 0,
                   "");
  }
  jt[0] = dr_h_join_async(fx, c[0], &j[0], 3000);
  jt[1] = dr_h_join_async(fx, c[1], &j[1], 3000);
  assert_non_null(dr_h_join_wait_any(fx, jt, 1, 3000));
  if (jt[0]->rc == 0) {
    dr_h_join_threads(fx);
    fail_msg("nproc %u was let in: world size %u, first ranks %u and %u",
             UINT32_MAX, jt[0]->a.world_size, jt[0]->a.first_rank,
             jt[1]->a.first_rank);
  }
  jt[2] = dr_h_join_async(fx, c[2], &j[2], 3000);
  dr_h_join_threads(fx);
  fprintf(stderr, "  nproc %u: %s (%s)\n", UINT32_MAX, dr_err_name(jt[0]->rc),
          jt[0]->errmsg);
  assert_int_equal(jt[0]->rc, DR_EBADARG);
  assert_non_null(strstr(jt[0]->errmsg, "4294967295"));
  assert_non_null(strstr(jt[0]->errmsg, "65536"));
  for (int i = 1; i < 3; i++) {
    assert_joined(jt[i]);
    assert_int_equal(jt[i]->a.world_size, 4);
    assert_int_equal(jt[i]->a.first_rank, 2 * jt[i]->a.node_rank);
    dr_assignment_free(&jt[i]->a);
  }
}

DR_H_TEST(test_world_over_bound_refused) {
  enum { N = 256, NPROC = 65536 }; /* a world of exactly 2^24 */
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1:300", "--last-call-timeout", "30",
                       "--heartbeat-timeout", HB_OFF, "--allow-mixed-nproc"),
             NULL);
  uint16_t port = dr_h_server_port(fx->srv);
  dr_h_raw_t *r = calloc(N + 1, sizeof(*r));
  assert_non_null(r);
  dr_buf_t *b = &fx->buf;
  int rc = 0;
  dr_msg_t m;
  char host[32];
  for (int i = 0; i <= N && rc == 0; i++) {
    r[i].fd = -1;
    snprintf(host, sizeof(host), "node-%03d", i);
    rc = dr_h_raw_connect(&r[i], port);
    dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str(host));
    if (rc == 0)
      rc = dr_h_raw_send_buf(&r[i], b);
    if (rc == 0)
      rc = dr_h_raw_recv(&r[i], 2000, &m);
    dr_join_t j;
    dr_h_join_fill(&j, DR_H_RUN_ID, host, "", i < N ? NPROC : 1, DR_NONE, 0,
                   "");
    dr_enc_join(b, 2, &j);
    if (rc == 0)
      rc = dr_h_raw_send_buf(&r[i], b);
  }
  /* The last JOIN would take the world past 2^24: answered at once. The
   * others wait for their round. */
  int last = rc == 0 ? dr_h_raw_recv(&r[N], 2000, &m) : rc;
  char msg[512] = "";
  if (last == 0 && m.type == DR_MSG_ERROR)
    snprintf(msg, sizeof(msg), "%.*s", (int)m.f[1].b.len,
             (const char *)m.f[1].b.p);
  int early = rc == 0 ? dr_h_raw_recv(&r[N - 1], 0, &m) : rc;
  for (int i = 0; i <= N; i++)
    dr_h_raw_close(&r[i]);
  free(r);
  fprintf(stderr, "  JOIN %d: %s %s\n", N + 1, dr_err_name(last), msg);
  assert_int_equal(rc, 0);
  assert_int_equal(last, 0);
  assert_non_null(strstr(msg, "16777217"));
  assert_non_null(strstr(msg, "16777216"));
  assert_int_equal(early, -ETIMEDOUT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
      T(test_round_completes_at_max),
      T(test_round_completes_at_min_after_last_call),
      T(test_round_waits_below_min),
      T(test_static_ranks_honoured),
      T(test_unranked_ordered_by_host_and_defaults),
      T(test_duplicate_rank_refused),
      T(test_rank_out_of_range_refused),
      T(test_join_wait_is_bounded),
      T(test_full_round_refused),
      T(test_mixed_nproc_refused),
      T(test_wrong_run_id_refused),
      T(test_nproc_over_bound_refused),
      T(test_world_over_bound_refused),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
