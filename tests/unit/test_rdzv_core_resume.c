/* RESUME after a restart of the rendezvous server (DESIGN.md, "The server
 * is the control plane"): a server restored from its state file takes
 * each place back at once on the generation's token and host; a server
 * started afresh holds every claim until its resume window ends and takes
 * back only a generation that exactly one token claims whole; claims out
 * of any job's bounds change nothing; a restored forming state continues
 * the generation count and the restarts used. Also dr_rdzv_next_due over
 * the three timers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "errors.h"
#include "log.h"
#include "rdzv_fixture.h"

static const uint8_t token_a[DR_RESUME_TOKEN_LEN] = "token-of-gen-aa";
static const uint8_t token_b[DR_RESUME_TOKEN_LEN] = "token-of-gen-bb";

/* The resume window of the default job: two heartbeat timeouts and a
 * second. */
#define WINDOW 7000u

static int setup_budget3(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.max_restarts = 3;
  return fx_setup_with(state, &c);
}

/* The state file said: generation gen runs on nnodes places held by
 * node-0.. with 2 workers each, restarts_used spent; restored at f->now. */
static void restore_running(fx_t *f, uint64_t gen, uint32_t nnodes,
                            uint32_t restarts_used) {
  const char *hosts[FX_PEERS];
  uint32_t nprocs[FX_PEERS];
  for (uint32_t i = 0; i < nnodes; i++) {
    hosts[i] = f->peer[i].host;
    nprocs[i] = 2;
  }
  dr_rdzv_saved_t st;
  memset(&st, 0, sizeof(st));
  st.gen = gen;
  st.restarts_used = restarts_used;
  st.running = 1;
  st.nnodes = nnodes;
  st.world = 2 * nnodes;
  memcpy(st.token, token_a, sizeof(st.token));
  st.hosts = hosts;
  st.nprocs = nprocs;
  assert_int_equal(dr_rdzv_restore(&f->r, &st, f->now), 0);
}

/* Peer i claims place rank of a generation of nnodes nodes of 2 workers. */
static void claim(fx_t *f, int i, uint64_t gen, uint32_t rank,
                  uint32_t nnodes, uint32_t restarts, const uint8_t *token) {
  dr_resume_t q =
      fx_resume_msg(f, i, gen, rank, nnodes, 2 * nnodes, 2, restarts, token);
  fx_resume_with(f, i, &q);
}

/* The answer to peer i's RESUME is ERROR code. */
static const fx_order_t *refused(fx_t *f, int i, int code) {
  const fx_order_t *e = fx_must(f, DR_RDZV_ERROR, i);
  assert_int_equal(e->req, f->req[i]);
  assert_int_equal(e->code, code);
  assert_null(fx_find(f, DR_RDZV_RESUMED, i));
  return e;
}

/* ---- a server restored from its state file ------------------------------- */

static void test_restored_claims_answered_at_once(void **state) {
  fx_t *f = *state;
  restore_running(f, 5, 2, 1);
  f->now = 600;
  claim(f, 0, 5, 0, 2, 1, token_a);
  assert_int_equal(fx_must(f, DR_RDZV_RESUMED, 0)->req, f->req[0]);
  assert_null(fx_find(f, DR_RDZV_SAVE, FX_NOPEER)); /* not all back yet */
  assert_true(f->r.resuming);
  f->now = 700;
  claim(f, 1, 5, 1, 2, 1, token_a);
  assert_int_equal(fx_must(f, DR_RDZV_RESUMED, 1)->req, f->req[1]);
  /* All back: the generation runs on, no restart. */
  assert_non_null(fx_find(f, DR_RDZV_SAVE, FX_NOPEER));
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(fx_count(f, DR_RDZV_NEW_GEN, FX_ANY), 0);
  assert_false(f->r.resuming);
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  assert_int_equal(f->r.gen, 5);
  assert_int_equal(f->r.restarts_used, 1);
  assert_int_equal(dr_rdzv_next_due(&f->r), 0);
  /* Nothing waits for the window's end. */
  f->now = 100 + WINDOW + 1;
  fx_heard_all(f);
  fx_at(f, f->now);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(fx_count(f, DR_RDZV_CLOSE, FX_ANY), 0);
}

static void test_restored_wrong_token_or_host_refused(void **state) {
  fx_t *f = *state;
  restore_running(f, 5, 2, 0);
  uint8_t wrong[DR_RESUME_TOKEN_LEN];
  memcpy(wrong, token_a, sizeof(wrong));
  wrong[0] ^= 1;
  claim(f, 0, 5, 0, 2, 0, wrong);
  fx_assert_has(refused(f, 0, DR_ESTALE)->text, "resume token");
  /* The right token from another host. */
  strcpy(f->peer[2].host, "intruder");
  claim(f, 2, 5, 0, 2, 0, token_a);
  fx_assert_has(refused(f, 2, DR_ESTALE)->text,
                "was held by 'node-0', not 'intruder'");
  /* The place stayed free for its node. */
  assert_true(f->r.round[0]->detached);
  assert_null(f->peer[0].node);
  dr_rdzv_peer_t *p3 = &f->peer[3];
  strcpy(p3->host, "node-0"); /* its agent, on a new connection */
  claim(f, 3, 5, 0, 2, 0, token_a);
  assert_non_null(fx_find(f, DR_RDZV_RESUMED, 3));
  assert_ptr_equal(p3->node, f->r.round[0]);
}

static void test_restored_unclaimed_place_lost_after_window(void **state) {
  fx_t *f = *state;
  restore_running(f, 5, 3, 1);
  assert_int_equal(dr_rdzv_next_due(&f->r), 100 + WINDOW + 1);
  claim(f, 0, 5, 0, 3, 1, token_a);
  claim(f, 1, 5, 1, 3, 1, token_a);
  f->now = 100 + WINDOW;
  fx_heard_all(f);
  fx_at(f, f->now);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  fx_at(f, 100 + WINDOW + 1);
  for (int i = 0; i < 2; i++) {
    const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, i);
    assert_int_equal(o->gen, 6);
    assert_int_equal(o->restart_count, 1); /* a loss spends nothing */
    fx_assert_has(o->text, "node 2 ('node-2') lost: did not resume within "
                           "7000 ms");
  }
  assert_int_equal(f->r.restarts_used, 1);
  assert_int_equal(f->r.gen, 6);
}

static void test_restored_too_few_resume_stops(void **state) {
  fx_t *f = *state;
  restore_running(f, 5, 3, 0);
  claim(f, 0, 5, 0, 3, 0, token_a);
  f->now = 100 + WINDOW;
  fx_heard(f, 0);
  fx_at(f, 100 + WINDOW + 1);
  const fx_order_t *s = fx_must(f, DR_RDZV_STOP, 0);
  assert_int_equal(s->code, 3);
  fx_assert_has(s->text, "did not resume");
  assert_int_equal(fx_must(f, DR_RDZV_DONE, FX_NOPEER)->code, 3);
}

/* ---- a server started afresh: claims held until the window ends ---------- */

static void test_fresh_one_whole_token_taken_back(void **state) {
  fx_t *f = *state;
  claim(f, 0, 9, 0, 2, 0, token_a);
  f->now = 200;
  claim(f, 2, 9, 0, 2, 2, token_b); /* a stranger's token, not whole */
  f->now = 300;
  claim(f, 1, 9, 1, 2, 1, token_a);
  assert_int_equal(f->n_got, 0); /* every claim is held */
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  assert_true(f->r.claiming);
  assert_int_equal(dr_rdzv_next_due(&f->r), 100 + WINDOW + 1);
  /* The held claimants hear from the server meanwhile. */
  fx_at(f, 1000);
  for (int i = 0; i < 3; i++)
    assert_int_equal(fx_must(f, DR_RDZV_HEARTBEAT, i)->gen, 9);
  assert_int_equal(fx_count(f, DR_RDZV_RESUMED, FX_ANY), 0);
  fx_at(f, 100 + WINDOW);
  assert_int_equal(fx_count(f, DR_RDZV_RESUMED, FX_ANY), 0);
  assert_int_equal(fx_count(f, DR_RDZV_ERROR, FX_ANY), 0);
  fx_at(f, 100 + WINDOW + 1);
  assert_int_equal(fx_must(f, DR_RDZV_RESUMED, 0)->req, f->req[0]);
  assert_int_equal(fx_must(f, DR_RDZV_RESUMED, 1)->req, f->req[1]);
  fx_assert_has(refused(f, 2, DR_ESTALE)->text, "taken back by the nodes");
  assert_non_null(fx_find(f, DR_RDZV_SAVE, FX_NOPEER));
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  assert_int_equal(f->r.gen, 9);
  /* The most its own claims reported: a stranger's claim spends nothing. */
  assert_int_equal(f->r.restarts_used, 1);
  assert_false(f->r.claiming);
  assert_false(f->peer[2].claiming);
  assert_int_equal(dr_rdzv_next_due(&f->r), 0);
  /* The token is known now: a crash restarts from the budget left. */
  fx_fail(f, 1, 2, 1, 0);
  assert_int_equal(fx_must(f, DR_RDZV_RESTART, 0)->restart_count, 2);
}

static void test_fresh_two_whole_tokens_restart(void **state) {
  fx_t *f = *state;
  claim(f, 0, 9, 0, 2, 1, token_a);
  claim(f, 1, 9, 1, 2, 1, token_a);
  claim(f, 2, 11, 0, 2, 2, token_b);
  claim(f, 3, 11, 1, 2, 2, token_b);
  assert_int_equal(f->n_got, 0);
  fx_at(f, 100 + WINDOW + 1);
  for (int i = 0; i < 4; i++)
    fx_assert_has(refused(f, i, DR_ESTALE)->text,
                  "more than one resume token claimed every node rank");
  assert_int_equal(fx_count(f, DR_RDZV_RESUMED, FX_ANY), 0);
  assert_int_equal(f->r.state, DR_JOB_FORMING);
  assert_int_equal(f->r.gen, 12);
  assert_int_equal(fx_must(f, DR_RDZV_NEW_GEN, FX_NOPEER)->gen, 12);
  assert_int_equal(f->r.restarts_used, 2);
  for (int i = 0; i < 4; i++)
    assert_false(f->peer[i].claiming);
  /* They join the new round as after a failure. */
  fx_join(f, 0, 2, DR_NONE);
  fx_join(f, 1, 2, DR_NONE);
  fx_at(f, dr_rdzv_next_due(&f->r));
  assert_int_equal(f->r.asg.gen, 12);
  assert_int_equal(f->r.asg.restart_count, 2);
}

static void test_fresh_no_whole_token_restart(void **state) {
  fx_t *f = *state;
  claim(f, 0, 4, 0, 2, 1, token_a);
  fx_at(f, 100 + WINDOW + 1);
  fx_assert_has(refused(f, 0, DR_ESTALE)->text,
                "no resume token claimed every node rank");
  assert_int_equal(f->r.state, DR_JOB_FORMING);
  assert_int_equal(f->r.gen, 5);
  assert_int_equal(f->r.restarts_used, 1);
}

/* A claimant that closes is forgotten: the rest of its generation is no
 * longer whole, and no order names it. */
static void test_fresh_closed_claimant_forgotten(void **state) {
  fx_t *f = *state;
  claim(f, 0, 9, 0, 2, 0, token_a);
  claim(f, 1, 9, 1, 2, 0, token_a);
  f->now = 500;
  fx_close(f, 1, "connection reset");
  assert_false(f->peer[1].claiming);
  fx_at(f, 1000);
  assert_non_null(fx_find(f, DR_RDZV_HEARTBEAT, 0));
  assert_null(fx_find(f, DR_RDZV_HEARTBEAT, 1));
  fx_at(f, 100 + WINDOW + 1);
  refused(f, 0, DR_ESTALE);
  for (size_t i = 0; i < f->n_got; i++)
    assert_int_not_equal(f->got[i].peer, 1);
  assert_int_equal(f->r.gen, 10);
}

/* A node that JOINs while claims are held waits; the generation taken
 * back is then restarted to take it in, without spending. */
static void test_fresh_join_during_claims_taken_in(void **state) {
  fx_t *f = *state;
  claim(f, 0, 9, 0, 2, 1, token_a);
  claim(f, 1, 9, 1, 2, 1, token_a);
  fx_join(f, 2, 2, DR_NONE);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 0);
  assert_int_equal(fx_count(f, DR_RDZV_ERROR, FX_ANY), 0);
  fx_at(f, 100 + WINDOW + 1);
  assert_non_null(fx_find(f, DR_RDZV_RESUMED, 0));
  assert_non_null(fx_find(f, DR_RDZV_RESUMED, 1));
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 0);
  assert_int_equal(o->gen, 10);
  assert_int_equal(o->restart_count, 1);
  fx_assert_has(o->text, "node 'node-2'");
  fx_assert_has(o->text, "restarting to take it in");
  fx_join(f, 0, 2, DR_NONE);
  fx_join(f, 1, 2, DR_NONE);
  assert_int_equal(f->r.asg.gen, 10);
  assert_int_equal(f->r.asg.nnodes, 3);
  assert_int_equal(fx_must(f, DR_RDZV_ASSIGN, 2)->req, f->req[2]);
}

/* ---- bounds -------------------------------------------------------------- */

static void test_resume_out_of_bounds_changes_nothing(void **state) {
  fx_t *f = *state;
  dr_resume_t bad[5];
  bad[0] = fx_resume_msg(f, 0, 0, 0, 2, 4, 2, 0, token_a);
  bad[1] = fx_resume_msg(f, 0, UINT64_MAX, 0, 2, 4, 2, 0, token_a);
  bad[2] = fx_resume_msg(f, 0, 9, 0, 2, 4, 2, 3, token_a); /* budget 2 */
  bad[3] = fx_resume_msg(f, 0, 9, 0, 4, 8, 2, 0, token_a); /* max 3 */
  bad[4] = fx_resume_msg(f, 0, 9, 0, 2, 1, 1, 0, token_a); /* world < nnodes */
  for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
    fx_resume_with(f, 0, &bad[k]);
    assert_int_equal(f->n_got, 1);
    fx_assert_has(refused(f, 0, DR_EBADARG)->text, "RESUME refused");
    assert_int_equal(f->r.state, DR_JOB_FORMING);
    assert_int_equal(f->r.gen, 1);
    assert_int_equal(f->r.restarts_used, 0);
    assert_false(f->r.claiming);
    assert_int_equal(f->r.n_claims, 0);
    assert_false(f->peer[0].claiming);
    assert_null(f->peer[0].node);
    assert_int_equal(dr_rdzv_next_due(&f->r), 0);
  }
  /* The job is still free to form. */
  fx_run(f, 2);
  assert_int_equal(f->r.asg.gen, 1);
}

/* ---- a restored forming state ---------------------------------------------- */

static void test_restored_forming_continues_counts(void **state) {
  fx_t *f = *state; /* budget of 3 */
  dr_rdzv_saved_t st;
  memset(&st, 0, sizeof(st));
  st.gen = 7;
  st.restarts_used = 2;
  assert_int_equal(dr_rdzv_restore(&f->r, &st, f->now), 0);
  assert_int_equal(f->r.state, DR_JOB_FORMING);
  fx_run(f, 2);
  assert_int_equal(f->r.asg.gen, 8);
  assert_int_equal(f->r.asg.restart_count, 2);
  fx_fail(f, 0, 0, 1, 0);
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 0);
  assert_int_equal(o->gen, 9);
  assert_int_equal(o->restart_count, 3);
  fx_assert_has(o->text, "restart 3 of 3");
  fx_run(f, 2);
  fx_fail(f, 1, 2, 1, 0);
  fx_assert_has(fx_must(f, DR_RDZV_STOP, 0)->text,
                "restart budget of 3 spent");
}

/* ---- next due ------------------------------------------------------------ */

/* The earliest of the last call, the hold and the resume window; a hold
 * that ends inside the window waits for the window, where a node that has
 * not resumed is lost first (and is then the root cause). */
static void test_next_due_is_earliest_timer(void **state) {
  fx_t *f = *state;
  restore_running(f, 5, 3, 0);
  claim(f, 0, 5, 0, 3, 0, token_a);
  claim(f, 1, 5, 1, 3, 0, token_a);
  assert_int_equal(dr_rdzv_next_due(&f->r), 100 + WINDOW + 1);
  f->now = 1000;
  fx_fail(f, 0, 0, 3, 0);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(dr_rdzv_next_due(&f->r), 1000 + 3000 + 1);
  f->now = 3900;
  fx_heard_all(f);
  fx_at(f, 4001);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(dr_rdzv_next_due(&f->r), 100 + WINDOW + 1);
  f->now = 6900;
  fx_heard_all(f);
  fx_at(f, 100 + WINDOW + 1);
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 0);
  fx_assert_has(o->text, "did not resume");
  assert_int_equal(o->restart_count, 0);
  assert_false(f->r.holding);
  /* Forming: the last call is the one timer. */
  f->now = 8000;
  fx_join(f, 0, 2, DR_NONE);
  fx_join(f, 1, 2, DR_NONE);
  assert_int_equal(dr_rdzv_next_due(&f->r), 9000);
}

int main(void) {
  dr_log_level = -1; /* the core's log is for operators; tests read orders */
#define T(name) cmocka_unit_test_setup_teardown(name, fx_setup, fx_teardown)
  const struct CMUnitTest tests[] = {
      T(test_restored_claims_answered_at_once),
      T(test_restored_wrong_token_or_host_refused),
      T(test_restored_unclaimed_place_lost_after_window),
      T(test_restored_too_few_resume_stops),
      T(test_fresh_one_whole_token_taken_back),
      T(test_fresh_two_whole_tokens_restart),
      T(test_fresh_no_whole_token_restart),
      T(test_fresh_closed_claimant_forgotten),
      T(test_fresh_join_during_claims_taken_in),
      T(test_resume_out_of_bounds_changes_nothing),
      cmocka_unit_test_setup_teardown(test_restored_forming_continues_counts,
                                      setup_budget3, fx_teardown),
      T(test_next_due_is_earliest_timer),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
