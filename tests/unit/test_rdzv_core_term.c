/* The rendezvous outlives its host (rdzv_core_term.c), rule by rule and
 * without a socket: the successors an ASSIGN names; a standby serves no
 * one; a higher term makes a server step down; a server acts on a
 * generation of 3 or more nodes only once a majority is heard since the
 * cause, and steps down without one (a partition leaves the old server
 * with a minority); a takeover keeps the budget, loses the old server's
 * place once the others have resumed and says where the rendezvous moved;
 * of two successors that take over at once, only the one a majority
 * resumes with acts; jobs of one or two nodes behave as before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "errors.h"
#include "exit_codes.h"
#include "log.h"
#include "rdzv_fixture.h"

static const uint8_t token[DR_RESUME_TOKEN_LEN] = "token-of-gen-05";

/* The heartbeat timeout of fx_config(). */
#define HB 3000u

static dr_rdzv_config_t failover_config(uint32_t min_nodes) {
  dr_rdzv_config_t c = fx_config();
  c.failover = 1;
  c.min_nodes = min_nodes;
  c.max_nodes = 3;
  return c;
}

static int setup_failover(void **state) {
  dr_rdzv_config_t c = failover_config(2);
  return fx_setup_with(state, &c);
}

static int setup_failover_min1(void **state) {
  dr_rdzv_config_t c = failover_config(1);
  return fx_setup_with(state, &c);
}

static int setup_standby5(void **state) {
  dr_rdzv_config_t c = failover_config(2);
  c.max_nodes = 5;
  c.standby = 1;
  return fx_setup_with(state, &c);
}

static int setup_standby(void **state) {
  dr_rdzv_config_t c = failover_config(2);
  c.standby = 1;
  return fx_setup_with(state, &c);
}

/* Peers 0..n-1 join (peer 0's ddprun hosts the server, the others hold
 * standby servers on 41000 + i) and the round runs: node rank i is peer i. */
static void run_hosted(fx_t *f, int n) {
  for (int i = 0; i < n; i++) {
    dr_join_t j = fx_join_msg(f, i, 2, DR_NONE);
    j.hosts_server = i == 0;
    j.standby_port = i == 0 ? 0 : 41000u + (uint32_t)i;
    fx_join_with(f, i, &j);
  }
  if (f->r.state != DR_JOB_RUNNING)
    fx_at(f, f->now + 1001); /* the last call */
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  for (int i = 0; i < n; i++)
    assert_int_equal(f->peer[i].node->node_rank, (uint32_t)i);
}

/* ---- successors ------------------------------------------------------------ */

static void test_successors_of_three_nodes(void **state) {
  fx_t *f = *state;
  run_hosted(f, 3);
  assert_int_equal(f->r.asg.term, 1);
  assert_int_equal(f->r.asg.server_node, 0);
  dr_peer_rec_t s[DR_SUCCESSORS_MAX];
  size_t n = dr_rdzv_successors(&f->r, s, DR_SUCCESSORS_MAX);
  assert_int_equal(n, 2); /* the server's own node is not one */
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(s[i].node_rank, i + 1);
    assert_int_equal(s[i].port, 41001 + i);
    assert_int_equal(s[i].roles, DR_PEER_SUCCESSOR);
    char want[16];
    snprintf(want, sizeof(want), "10.0.0.%zu", i + 2);
    assert_int_equal(s[i].addr.len, strlen(want));
    assert_memory_equal(s[i].addr.p, want, strlen(want));
  }
  assert_int_equal(dr_rdzv_successors(&f->r, s, 1), 1);
}

/* Two nodes: no majority without the server's node, so no successors;
 * and a server that is not in a node's ddprun (failover off) gives none. */
static void test_no_successors_where_no_move(void **state) {
  fx_t *f = *state;
  run_hosted(f, 2);
  dr_peer_rec_t s[DR_SUCCESSORS_MAX];
  assert_int_equal(dr_rdzv_successors(&f->r, s, DR_SUCCESSORS_MAX), 0);
  /* A node lost acts at once, as before. */
  fx_close(f, 1, "connection reset");
  assert_non_null(fx_find(f, DR_RDZV_STOP, 0));
  assert_null(fx_event(f, "step_down"));
}

static void test_no_successors_without_failover(void **state) {
  fx_t *f = *state; /* fx_config(): failover off */
  run_hosted(f, 3);
  dr_peer_rec_t s[DR_SUCCESSORS_MAX];
  assert_int_equal(dr_rdzv_successors(&f->r, s, DR_SUCCESSORS_MAX), 0);
  fx_close(f, 2, "connection reset"); /* acted on at once */
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 2);
}

/* ---- terms ----------------------------------------------------------------- */

static void test_standby_serves_no_one(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  assert_int_equal(fx_must(f, DR_RDZV_ERROR, 0)->code, DR_ESTANDBY);
  dr_resume_t q = fx_resume_msg(f, 1, 5, 1, 3, 6, 2, 0, token);
  fx_resume_with(f, 1, &q);
  assert_int_equal(fx_must(f, DR_RDZV_ERROR, 1)->code, DR_ESTANDBY);
  assert_int_equal(f->r.n_round, 0);
  assert_int_equal(f->r.state, DR_JOB_FORMING);
}

static void test_higher_term_steps_down(void **state) {
  fx_t *f = *state;
  run_hosted(f, 3);
  /* A node that has seen term 2 reaches this server of term 1. */
  dr_resume_t q = fx_resume_msg(f, 3, 7, 1, 2, 4, 2, 0, token);
  q.term = 2;
  fx_resume_with(f, 3, &q);
  assert_int_equal(fx_must(f, DR_RDZV_ERROR, 3)->code, DR_ESUPERSEDED);
  assert_int_equal(f->r.state, DR_JOB_DONE);
  assert_int_equal(f->r.exit_code, DR_EXIT_COMM);
  assert_non_null(fx_event(f, "step_down"));
  for (int i = 0; i < 3; i++)
    fx_assert_has(fx_must(f, DR_RDZV_STOP, i)->text, "steps down");
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  /* The same term, or a lower one, is no news. */
  fx_t *g = NULL;
  dr_rdzv_config_t c = failover_config(2);
  c.term = 2;
  assert_int_equal(fx_setup_with((void **)&g, &c), 0);
  dr_join_t j = fx_join_msg(g, 0, 2, DR_NONE);
  j.term = 2;
  fx_join_with(g, 0, &j);
  assert_null(fx_find(g, DR_RDZV_ERROR, 0));
  assert_int_equal(g->r.n_round, 1);
  fx_teardown((void **)&g);
}

/* ---- the majority rule ------------------------------------------------------ */

static void test_acts_once_majority_heard(void **state) {
  fx_t *f = *state;
  run_hosted(f, 3);
  f->now += 500;
  fx_close(f, 2, "connection reset"); /* no one else heard since: wait */
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  f->now += 300;
  fx_heard(f, 0);
  fx_at(f, f->now); /* one of three heard: still waiting */
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  /* A failure report meanwhile spends nothing and orders nothing. */
  fx_fail(f, 1, 2, 1, 0);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(f->r.restarts_used, 0);
  f->now += 300;
  fx_heard(f, 1);
  fx_at(f, f->now); /* two of three: the loss is acted on, once */
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 2);
  fx_assert_has(fx_must(f, DR_RDZV_RESTART, 0)->text, "node 2");
  assert_int_equal(f->r.restarts_used, 0);
  assert_int_equal(f->r.state, DR_JOB_FORMING);
}

/* The old server cut off with a minority (a partition): it never orders a
 * restart, and steps down once the heartbeat timeout has passed. */
static void test_minority_steps_down(void **state) {
  fx_t *f = *state; /* 1:3, so one node alone could form a round */
  run_hosted(f, 3);
  f->now += 100;
  fx_heard_all(f);
  uint64_t cut = f->now;
  f->now = cut + HB + 1; /* nodes 1 and 2 went silent at the cut */
  fx_heard(f, 0);        /* its own node still talks */
  f->peer[0].last_seen_ms = cut + HB; /* heard just before the tick */
  fx_at(f, f->now);
  fx_at(f, f->now + 1);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  for (uint64_t t = f->now; t <= cut + 3 * HB; t += 500) {
    f->now = t;
    fx_heard(f, 0);
    fx_at(f, t);
    assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
    if (f->r.state == DR_JOB_DONE)
      break;
  }
  assert_int_equal(f->r.state, DR_JOB_DONE);
  assert_int_equal(f->r.exit_code, DR_EXIT_COMM);
  assert_true(f->r.stepped_down);
  const fx_order_t *s = fx_must(f, DR_RDZV_STOP, 0);
  fx_assert_has(s->text, "heard only 1 of generation 1's 3 nodes");
  fx_assert_has(s->text, "steps down");
}

/* ---- a takeover ------------------------------------------------------------- */

/* A standby takes generation 5 over (nnodes nodes of 2 workers, node 0
 * hosted the lost server, one restart used). */
static void take_over_n(fx_t *f, uint32_t nnodes) {
  dr_rdzv_takeover_t t;
  memset(&t, 0, sizeof(t));
  t.term = 2;
  t.gen = 5;
  t.restarts_used = 1;
  t.nnodes = nnodes;
  t.world = 2 * nnodes;
  memcpy(t.token, token, sizeof(t.token));
  t.lost_node = 0;
  t.lost_host = "host0";
  t.self_host = "host1";
  assert_int_equal(dr_rdzv_takeover(&f->r, &t, f->now), 0);
  fx_take(f);
  const fx_order_t *e = fx_event(f, "moved");
  assert_non_null(e);
  fx_assert_has(e->text, "\"restarts_used\":1");
  assert_false(f->r.cfg.standby);
}

static void take_over(fx_t *f) { take_over_n(f, 3); }

static void resume_place_n(fx_t *f, int i, uint32_t rank, uint32_t used,
                           uint32_t nnodes) {
  dr_resume_t q =
      fx_resume_msg(f, i, 5, rank, nnodes, 2 * nnodes, 2, used, token);
  q.term = 1;
  fx_resume_with(f, i, &q);
}

static void resume_place(fx_t *f, int i, uint32_t rank, uint32_t used) {
  resume_place_n(f, i, rank, used, 3);
}

static void test_takeover_keeps_budget(void **state) {
  fx_t *f = *state;
  take_over(f);
  f->now += 100;
  resume_place(f, 1, 1, 1);
  assert_non_null(fx_find(f, DR_RDZV_RESUMED, 1));
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  f->now += 100;
  resume_place(f, 2, 2, 1); /* the others are back: node 0 is lost */
  assert_non_null(fx_find(f, DR_RDZV_RESUMED, 2));
  /* Node 1 was heard at its RESUME, node 2 now: two of three. */
  f->now += 1;
  fx_heard(f, 1);
  fx_heard(f, 2);
  fx_at(f, f->now);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 2);
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 1);
  fx_assert_has(o->text, "the rendezvous moved from host0 to host1 "
                         "(host0 lost)");
  assert_int_equal(o->restart_count, 1); /* not reset, not spent */
  assert_int_equal(o->gen, 6);
  assert_int_equal(f->r.restarts_used, 1);
  /* The next round is this server's, of term 2. */
  for (int i = 1; i <= 2; i++)
    fx_join(f, i, 2, DR_NONE);
  fx_at(f, f->now + 1001);
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  assert_int_equal(f->r.asg.term, 2);
  assert_int_equal(f->r.asg.restart_count, 1);
}

/* A claim may raise the budget used (a restart spent after the
 * successor's last ASSIGN), never lower it. */
static void test_takeover_budget_follows_claims(void **state) {
  fx_t *f = *state;
  take_over(f);
  resume_place(f, 1, 1, 0);
  assert_int_equal(f->r.restarts_used, 1);
  resume_place(f, 2, 2, 2);
  assert_int_equal(f->r.restarts_used, 2);
}

/* Two successors took over generation 5 of 5 nodes at once: three nodes
 * resumed with A (a majority), one with B. A acts; B never orders a
 * restart, and steps down. */
static void test_two_successors_one_acts(void **state) {
  fx_t *a = *state, *b = NULL;
  dr_rdzv_config_t c = failover_config(1);
  c.max_nodes = 5;
  c.standby = 1;
  assert_int_equal(fx_setup_with((void **)&b, &c), 0);
  take_over_n(a, 5);
  take_over_n(b, 5);
  for (int i = 1; i <= 3; i++)
    resume_place_n(a, i, (uint32_t)i, 1, 5);
  resume_place_n(b, 4, 4, 1, 5);
  for (uint64_t t = 200; t <= 200 + 3 * 7000; t += 500) {
    a->now = b->now = t;
    for (int i = 1; i <= 3; i++)
      fx_heard(a, i);
    fx_heard(b, 4);
    fx_at(a, t);
    fx_at(b, t);
    assert_int_equal(fx_count(b, DR_RDZV_RESTART, FX_ANY), 0);
    if (a->r.state == DR_JOB_FORMING)
      assert_int_equal(a->r.gen, 6);
  }
  assert_int_equal(a->r.gen, 6); /* A restarted the group, once */
  assert_int_equal(b->r.state, DR_JOB_DONE);
  assert_true(b->r.stepped_down);
  fx_teardown((void **)&b);
}

int main(void) {
  dr_log_init("test", DR_LOG_ERROR);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_successors_of_three_nodes,
                                      setup_failover, fx_teardown),
      cmocka_unit_test_setup_teardown(test_no_successors_where_no_move,
                                      setup_failover, fx_teardown),
      cmocka_unit_test_setup_teardown(test_no_successors_without_failover,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_standby_serves_no_one,
                                      setup_standby, fx_teardown),
      cmocka_unit_test_setup_teardown(test_higher_term_steps_down,
                                      setup_failover, fx_teardown),
      cmocka_unit_test_setup_teardown(test_acts_once_majority_heard,
                                      setup_failover, fx_teardown),
      cmocka_unit_test_setup_teardown(test_minority_steps_down,
                                      setup_failover_min1, fx_teardown),
      cmocka_unit_test_setup_teardown(test_takeover_keeps_budget,
                                      setup_standby, fx_teardown),
      cmocka_unit_test_setup_teardown(test_takeover_budget_follows_claims,
                                      setup_standby, fx_teardown),
      cmocka_unit_test_setup_teardown(test_two_successors_one_acts,
                                      setup_standby5, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
