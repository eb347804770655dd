/* The rendezvous core's rounds (DESIGN.md, "Rendezvous semantics")
 * without a socket: when a round completes, node ranks and their order,
 * the assignment, the refusals of a JOIN, a node that joins a running job,
 * and the promise that no order names a closed peer. The running
 * generation's rules are in test_rdzv_core_live.c, RESUME in
 * test_rdzv_core_resume.c.
 *
 * The time is passed in, so every deadline is asserted to the millisecond:
 * one tick before it nothing happens, at it the rule acts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "errors.h"
#include "log.h"
#include "rdzv_fixture.h"

static int setup_fixed3(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.min_nodes = c.max_nodes = 3;
  return fx_setup_with(state, &c);
}

static int setup_2_4(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.max_nodes = 4;
  return fx_setup_with(state, &c);
}

static int setup_mixed(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.allow_mixed_nproc = 1;
  return fx_setup_with(state, &c);
}

/* ---- rounds ------------------------------------------------------------- */

static void test_round_completes_at_max_at_once(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  f->now = 200;
  fx_join(f, 1, 2, DR_NONE);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 0);
  assert_int_equal(dr_rdzv_next_due(&f->r), 1200); /* MIN: last call armed */
  f->now = 300;
  fx_join(f, 2, 2, DR_NONE);
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  for (int i = 0; i < 3; i++) {
    const fx_order_t *a = fx_must(f, DR_RDZV_ASSIGN, i);
    assert_int_equal(a->req, f->req[i]);
    assert_int_equal(a->node_rank, (uint32_t)i); /* by host: node-0, ... */
    assert_int_equal(a->first_rank, 2u * (uint32_t)i);
  }
  const dr_assign_t *g = &f->r.asg;
  assert_int_equal(g->gen, 1);
  assert_int_equal(g->nnodes, 3);
  assert_int_equal(g->world_size, 6);
  assert_int_equal(g->restart_count, 0);
  assert_int_equal(g->max_restarts, 2);
  /* Node 0 gave no address: its connection's IP is the master's. */
  assert_int_equal(g->master_addr.len, strlen("10.0.0.1"));
  assert_memory_equal(g->master_addr.p, "10.0.0.1", g->master_addr.len);
  assert_int_equal(g->master_port, 29500);
  assert_int_equal(g->bootstrap.len, sizeof(f->r.boot));
  assert_non_null(fx_find(f, DR_RDZV_SAVE, FX_NOPEER));
  fx_assert_has(fx_event(f, "round_complete")->text, "\"nnodes\":3");
  assert_int_equal(dr_rdzv_next_due(&f->r), 0);
}

static void test_round_completes_at_min_after_last_call(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  f->now = 200;
  fx_join(f, 1, 2, DR_NONE);
  assert_int_equal(dr_rdzv_next_due(&f->r), 1200);
  fx_at(f, 1199);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 0);
  assert_int_equal(f->r.state, DR_JOB_FORMING);
  fx_at(f, 1200);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 2);
  assert_int_equal(f->r.asg.nnodes, 2);
  assert_int_equal(f->r.asg.world_size, 4);
}

/* A round that has not reached MIN has no last call to wait for. */
static void test_round_below_min_never_completes(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  assert_int_equal(dr_rdzv_next_due(&f->r), 0);
  fx_at(f, 1000000);
  assert_int_equal(f->r.state, DR_JOB_FORMING);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 0);
}

static void test_static_ranks_honoured(void **state) {
  fx_t *f = *state; /* 3:3 */
  fx_join(f, 0, 2, 2);
  fx_join(f, 1, 2, 0);
  fx_join(f, 2, 2, 1);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 0)->node_rank, 2);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 1)->node_rank, 0);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 2)->node_rank, 1);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 1)->first_rank, 0);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 2)->first_rank, 2);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 0)->first_rank, 4);
  /* The master is the node that asked for rank 0. */
  assert_memory_equal(f->r.asg.master_addr.p, "10.0.0.2", 8);
  assert_int_equal(f->r.asg.master_port, 29501);
}

/* Node rank 2 in a round of 2 waits, after the last call too, until a
 * third node fills the ranks below it. */
static void test_static_rank_beyond_round_waits(void **state) {
  fx_t *f = *state; /* 2:4 */
  fx_join(f, 0, 2, 2);
  f->now = 200;
  fx_join(f, 1, 2, DR_NONE);
  fx_at(f, 1200);
  assert_int_equal(f->r.state, DR_JOB_FORMING);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 0);
  dr_round_fig_t fig;
  dr_rdzv_round_figures(&f->r, f->now, &fig);
  assert_int_equal(fig.joined, 2);
  assert_int_equal(fig.need_to, 3);
  assert_int_equal(fig.needed, 1);
  f->now = 1300;
  fx_join(f, 2, 2, DR_NONE);
  assert_int_equal(f->r.asg.nnodes, 3);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 0)->node_rank, 2);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 1)->node_rank, 0);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 2)->node_rank, 1);
}

/* Without node ranks: host name, then arrival; after a restart the ranks
 * of the last generation come first, whatever the hosts are called now. */
static void test_order_by_prev_rank_host_arrival(void **state) {
  fx_t *f = *state; /* 3:3 */
  strcpy(f->peer[0].host, "zeta");
  strcpy(f->peer[1].host, "alpha");
  strcpy(f->peer[2].host, "alpha");
  fx_join(f, 0, 2, DR_NONE);
  fx_join(f, 2, 2, DR_NONE);
  fx_join(f, 1, 2, DR_NONE);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 2)->node_rank, 0);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 1)->node_rank, 1);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 0)->node_rank, 2);
  fx_fail(f, 0, 4, 1, 0);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 3);
  strcpy(f->peer[0].host, "aaa");
  for (int i = 0; i < 3; i++)
    fx_join(f, i, 2, DR_NONE);
  assert_int_equal(f->r.asg.gen, 2);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 2)->node_rank, 0);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 1)->node_rank, 1);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 0)->node_rank, 2);
}

/* The checkpoints' peers: the round's newest step in every ASSIGN; each
 * node's next nodes by rank that have a checkpoint port, as replicas; and
 * for a node that lacks the newest step, the holders of it, the next ones
 * after it first. */
static int setup4(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.min_nodes = c.max_nodes = 4;
  return fx_setup_with(state, &c);
}

static void test_checkpoint_peers(void **state) {
  fx_t *f = *state;
  static const uint64_t steps[4] = {20, 20, 10, DR_NONE};
  for (int i = 0; i < 4; i++) {
    dr_join_t j = fx_join_msg(f, i, 2, (uint64_t)i);
    j.ckpt_port = 41000u + (uint32_t)i;
    j.ckpt_step = steps[i];
    fx_join_with(f, i, &j);
  }
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  assert_int_equal(f->r.asg.ckpt_step, 20);
  dr_peer_rec_t p[DR_PEERS_MAX];
  /* Node 3 (a replacement: nothing): replicas 0, 1, 2; holders 0, 1. */
  size_t n = dr_rdzv_peers(&f->r, 3, p, DR_PEERS_MAX);
  assert_int_equal(n, 3);
  static const uint32_t roles3[3] = {DR_PEER_REPLICA | DR_PEER_HOLDER,
                                     DR_PEER_REPLICA | DR_PEER_HOLDER,
                                     DR_PEER_REPLICA};
  for (uint32_t k = 0; k < 3; k++) {
    assert_int_equal(p[k].node_rank, k);
    assert_int_equal(p[k].port, 41000 + k);
    assert_int_equal(p[k].roles, roles3[k]);
    assert_int_equal(p[k].ckpt_step, steps[k]);
    assert_memory_equal(p[k].addr.p, f->peer[k].ip, p[k].addr.len);
  }
  /* Node 2 (an older step): replicas 3, 0, 1, of which 0 and 1 hold; the
   * holders after it come first. */
  n = dr_rdzv_peers(&f->r, 2, p, DR_PEERS_MAX);
  assert_int_equal(n, 3);
  assert_int_equal(p[0].node_rank, 3);
  assert_int_equal(p[0].roles, DR_PEER_REPLICA);
  assert_int_equal(p[1].node_rank, 0);
  assert_int_equal(p[1].roles, DR_PEER_REPLICA | DR_PEER_HOLDER);
  /* Node 0 holds the newest: replicas only. */
  n = dr_rdzv_peers(&f->r, 0, p, DR_PEERS_MAX);
  assert_int_equal(n, 3);
  for (size_t k = 0; k < n; k++)
    assert_int_equal(p[k].roles, DR_PEER_REPLICA);
  /* A cap is a cap. */
  assert_int_equal(dr_rdzv_peers(&f->r, 3, p, 2), 2);
  /* Without checkpoint ports there is no one to copy to. */
  assert_int_equal(dr_rdzv_peers(&f->r, 9, p, DR_PEERS_MAX), 0);
  /* The round's index answers as the walk over the round does. */
  assert_true(f->r.ck_indexed);
  for (uint32_t node = 0; node < 4; node++)
    for (size_t max = 1; max <= DR_PEERS_MAX; max++) {
      dr_peer_rec_t q[DR_PEERS_MAX];
      size_t a = dr_rdzv_peers(&f->r, node, p, max);
      f->r.ck_indexed = 0;
      size_t b = dr_rdzv_peers(&f->r, node, q, max);
      f->r.ck_indexed = 1;
      assert_int_equal(a, b);
      for (size_t k = 0; k < a; k++) {
        assert_int_equal(p[k].node_rank, q[k].node_rank);
        assert_int_equal(p[k].roles, q[k].roles);
      }
    }
}

/* Node 0's address, port and bootstrap offer; a resume token shared by the
 * generation's nodes and new with every generation. */
static void test_assign_contents(void **state) {
  fx_t *f = *state;
  static const uint8_t offer[] = "nccl-unique-id";
  dr_join_t j = fx_join_msg(f, 0, 2, DR_NONE);
  j.addr = dr_str("master.example");
  j.bootstrap_offer.p = offer;
  j.bootstrap_offer.len = sizeof(offer);
  fx_join_with(f, 0, &j);
  fx_join(f, 1, 2, DR_NONE);
  fx_at(f, dr_rdzv_next_due(&f->r));
  const dr_assign_t *g = &f->r.asg;
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 2);
  assert_int_equal(g->master_addr.len, strlen("master.example"));
  assert_memory_equal(g->master_addr.p, "master.example", g->master_addr.len);
  assert_int_equal(g->bootstrap.len, sizeof(offer));
  assert_memory_equal(g->bootstrap.p, offer, sizeof(offer));
  uint8_t token1[DR_RESUME_TOKEN_LEN];
  memcpy(token1, g->resume_token, sizeof(token1));
  assert_memory_equal(token1, f->r.token, sizeof(token1));

  fx_fail(f, 1, 2, 1, 0);
  fx_join(f, 0, 2, DR_NONE);
  fx_join(f, 1, 2, DR_NONE);
  fx_at(f, dr_rdzv_next_due(&f->r));
  assert_int_equal(g->gen, 2);
  assert_int_equal(g->restart_count, 1);
  assert_memory_not_equal(g->resume_token, token1, sizeof(token1));
}

static void test_mixed_nproc_allowed(void **state) {
  fx_t *f = *state; /* allow_mixed_nproc */
  fx_join(f, 0, 1, DR_NONE);
  fx_join(f, 1, 2, DR_NONE);
  fx_join(f, 2, 4, DR_NONE);
  assert_int_equal(f->r.asg.world_size, 7);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 0)->first_rank, 0);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 1)->first_rank, 1);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 2)->first_rank, 3);
}

static void test_leaving_forming_round_disarms_last_call(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  f->now = 200;
  fx_join(f, 1, 2, DR_NONE);
  assert_int_equal(dr_rdzv_next_due(&f->r), 1200);
  f->now = 300;
  fx_close(f, 1, "connection reset");
  assert_int_equal(dr_rdzv_next_due(&f->r), 0);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  fx_at(f, 1200);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 0);
  /* MIN again: a full last call from then. */
  f->now = 2000;
  fx_join(f, 2, 2, DR_NONE);
  assert_int_equal(dr_rdzv_next_due(&f->r), 3000);
  fx_at(f, 2999);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 0);
  fx_at(f, 3000);
  assert_non_null(fx_find(f, DR_RDZV_ASSIGN, 0));
  assert_non_null(fx_find(f, DR_RDZV_ASSIGN, 2));
}

/* ---- refusals ----------------------------------------------------------- */

/* The one order of the last batch is an ERROR to peer i's last request. */
static const fx_order_t *refused(fx_t *f, int i, int code) {
  assert_int_equal(f->n_got, 1);
  const fx_order_t *e = fx_must(f, DR_RDZV_ERROR, i);
  assert_int_equal(e->req, f->req[i]);
  assert_int_equal(e->code, code);
  assert_null(f->peer[i].node);
  return e;
}

static void test_refuse_other_run_id(void **state) {
  fx_t *f = *state;
  dr_join_t j = fx_join_msg(f, 0, 2, DR_NONE);
  j.run_id = dr_str("job8");
  fx_join_with(f, 0, &j);
  const fx_order_t *e = refused(f, 0, DR_ERUNID);
  fx_assert_has(e->text, "'node-0' joined with run id 'job8'");
  fx_assert_has(e->text, "'job7'");
  assert_int_equal(f->r.n_round, 0);
  assert_int_equal(f->r.joins_refused, 1);
}

static void test_refuse_duplicate_rank(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, 0);
  fx_join(f, 1, 2, 0);
  const fx_order_t *e = refused(f, 1, DR_EDUPRANK);
  fx_assert_has(e->text, "node rank 0 requested by 'node-1' is already held "
                         "by 'node-0'");
  /* Also while the job runs, against the running nodes' ranks. */
  fx_join(f, 2, 2, DR_NONE);
  fx_at(f, dr_rdzv_next_due(&f->r));
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  fx_join(f, 3, 2, 0);
  refused(f, 3, DR_EDUPRANK);
  assert_int_equal(f->r.n_waiting, 0);
}

static void test_refuse_rank_out_of_range(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, 3);
  fx_assert_has(refused(f, 0, DR_EBADRANK)->text, "ranks 0..2");
  fx_join(f, 0, 2, DR_NONE - 1);
  refused(f, 0, DR_EBADRANK);
}

static void test_refuse_beyond_max(void **state) {
  fx_t *f = *state;
  fx_run(f, 3);
  fx_join(f, 3, 2, DR_NONE);
  fx_assert_has(refused(f, 3, DR_EFULL)->text, "maximum of 3 nodes");
  assert_int_equal(f->r.gen, 1); /* no restart to take it in */
}

static void test_refuse_mixed_nproc(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  fx_join(f, 1, 4, DR_NONE);
  const fx_order_t *e = refused(f, 1, DR_ENPROC);
  fx_assert_has(e->text, "'node-1' has nproc-per-node 4");
  fx_assert_has(e->text, "other nodes have 2");
}

/* The workers per node the job expects are those of the nodes in it: a
 * node that leaves a forming round alone takes its count with it. */
static void test_nproc_of_a_node_gone(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  fx_close(f, 0, "went away");
  fx_join(f, 1, 4, DR_NONE);
  assert_int_equal(fx_count(f, DR_RDZV_ERROR, 1), 0);
  assert_non_null(f->peer[1].node);
  fx_join(f, 2, 2, DR_NONE);
  fx_assert_has(refused(f, 2, DR_ENPROC)->text, "other nodes have 4");
}

static void test_refuse_bad_nproc(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 0, DR_NONE);
  refused(f, 0, DR_EBADARG);
  fx_join(f, 0, DR_MAX_NPROC + 1, DR_NONE);
  fx_assert_has(refused(f, 0, DR_EBADARG)->text, "at most 65536");
  fx_join(f, 0, DR_MAX_NPROC, DR_NONE);
  assert_int_equal(f->n_got, fx_count(f, DR_RDZV_EVENT, FX_ANY));
  assert_non_null(f->peer[0].node);
}

static void test_refuse_second_join(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  dr_node_t *n = f->peer[0].node;
  fx_join(f, 0, 2, DR_NONE);
  assert_int_equal(f->n_got, 1);
  assert_int_equal(fx_must(f, DR_RDZV_ERROR, 0)->code, DR_ESEQUENCE);
  assert_ptr_equal(f->peer[0].node, n); /* its first JOIN stands */
  assert_int_equal(f->r.n_round, 1);
}

static void test_refuse_after_end(void **state) {
  fx_t *f = *state;
  fx_run(f, 2);
  fx_fail(f, 0, 0, 2, 0);
  assert_int_equal(f->r.state, DR_JOB_DONE);
  fx_join(f, 2, 2, DR_NONE);
  fx_assert_has(refused(f, 2, DR_ESTOPPED)->text, "has ended (exit code 2)");
}

/* ---- a node joins a running job ------------------------------------------ */

static void test_join_while_running_restarts_to_take_in(void **state) {
  fx_t *f = *state;
  fx_run(f, 2);
  strcpy(f->peer[2].host, "a-newcomer"); /* sorts first by name */
  fx_join(f, 2, 2, DR_NONE);
  assert_null(fx_find(f, DR_RDZV_ASSIGN, 2));
  assert_null(fx_find(f, DR_RDZV_RESTART, 2));
  for (int i = 0; i < 2; i++) {
    const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, i);
    assert_int_equal(o->gen, 2);
    assert_int_equal(o->restart_count, 0);
    fx_assert_has(o->text, "node 'a-newcomer'");
    fx_assert_has(o->text, "restarting to take it in");
  }
  assert_int_equal(f->r.restarts_used, 0);
  fx_join(f, 0, 2, DR_NONE);
  fx_join(f, 1, 2, DR_NONE);
  assert_int_equal(f->r.asg.gen, 2);
  assert_int_equal(f->r.asg.nnodes, 3);
  assert_int_equal(f->r.asg.restart_count, 0);
  /* The running nodes keep their ranks; the newcomer comes after. */
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 0)->node_rank, 0);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 1)->node_rank, 1);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 2)->node_rank, 2);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 2)->req, f->req[2]);
}

/* ---- closed peers ------------------------------------------------------- */

/* A peer that closes while orders for it wait in the outbox: they become
 * NONE, and what its loss causes names only the others. */
static void test_no_order_names_closed_peer(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  fx_join(f, 1, 2, DR_NONE);
  f->req[2] = ++f->next_req;
  dr_join_t j = fx_join_msg(f, 2, 2, DR_NONE);
  dr_rdzv_join(&f->r, &f->peer[2], f->req[2], &j, f->now);
  dr_rdzv_peer_closed(&f->r, &f->peer[1], "connection reset", f->now);
  size_t n, n_none = 0, n_restart = 0;
  const dr_rdzv_order_t *o = dr_rdzv_orders(&f->r, &n);
  for (size_t i = 0; i < n; i++) {
    assert_ptr_not_equal(o[i].peer, &f->peer[1]);
    n_none += o[i].kind == DR_RDZV_NONE;
    n_restart += o[i].kind == DR_RDZV_RESTART;
  }
  assert_int_equal(n_none, 1);    /* its ASSIGN */
  assert_int_equal(n_restart, 2); /* the two others, into generation 2 */
  fx_take(f);
  fx_at(f, f->now + 100000);
  for (size_t i = 0; i < f->n_got; i++)
    assert_int_not_equal(f->got[i].peer, 1);
}

int main(void) {
  dr_log_level = -1; /* the core's log is for operators; tests read orders */
#define T(name) cmocka_unit_test_setup_teardown(name, fx_setup, fx_teardown)
#define TS(name, setup) cmocka_unit_test_setup_teardown(name, setup, fx_teardown)
  const struct CMUnitTest tests[] = {
      T(test_round_completes_at_max_at_once),
      T(test_round_completes_at_min_after_last_call),
      T(test_round_below_min_never_completes),
      TS(test_static_ranks_honoured, setup_fixed3),
      TS(test_static_rank_beyond_round_waits, setup_2_4),
      TS(test_order_by_prev_rank_host_arrival, setup_fixed3),
      T(test_assign_contents),
      TS(test_mixed_nproc_allowed, setup_mixed),
      T(test_leaving_forming_round_disarms_last_call),
      T(test_refuse_other_run_id),
      T(test_refuse_duplicate_rank),
      T(test_refuse_rank_out_of_range),
      T(test_refuse_beyond_max),
      T(test_refuse_mixed_nproc),
      T(test_nproc_of_a_node_gone),
      cmocka_unit_test_setup_teardown(test_checkpoint_peers, setup4,
                                      fx_teardown),
      T(test_refuse_bad_nproc),
      T(test_refuse_second_join),
      T(test_refuse_after_end),
      T(test_join_while_running_restarts_to_take_in),
      T(test_no_order_names_closed_peer),
  };
#undef T
#undef TS
  return cmocka_run_group_tests(tests, NULL, NULL);
}
