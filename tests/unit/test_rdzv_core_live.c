/* The rendezvous core's rules for a running generation (DESIGN.md,
 * "Rendezvous semantics"), without a socket: heartbeats and silent nodes,
 * nodes that close or leave, failures and the echo hold, the job's restart
 * budget, and success. Rounds and refusals are in test_rdzv_core.c, RESUME
 * in test_rdzv_core_resume.c.
 *
 * The time is passed in, so every deadline is asserted to the millisecond:
 * one tick before it nothing happens, at it the rule acts. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "log.h"
#include "rdzv_fixture.h"

static int setup_budget1(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.max_restarts = 1;
  return fx_setup_with(state, &c);
}

/* ---- heartbeats --------------------------------------------------------- */

static void test_silent_node_restarts_others(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 3);
  f->now = 2000;
  fx_heard(f, 0);
  fx_heard(f, 1);
  fx_at(f, 4000); /* node 2 silent for exactly the timeout: not yet */
  assert_int_equal(fx_count(f, DR_RDZV_CLOSE, FX_ANY), 0);
  fx_at(f, 4001);
  fx_assert_has(fx_must(f, DR_RDZV_CLOSE, 2)->text, "no heartbeat for 3001 ms");
  for (int i = 0; i < 2; i++) {
    const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, i);
    assert_int_equal(o->gen, 2);
    assert_int_equal(o->restart_count, 0);
    fx_assert_has(o->text, "node 2 ('node-2') lost");
  }
  assert_null(fx_find(f, DR_RDZV_RESTART, 2));
  assert_int_equal(fx_must(f, DR_RDZV_NEW_GEN, FX_NOPEER)->gen, 2);
  assert_non_null(fx_find(f, DR_RDZV_SAVE, FX_NOPEER));
  assert_int_equal(f->r.restarts_used, 0);
  assert_int_equal(f->r.nodes_lost, 1);
  assert_int_equal(f->r.state, DR_JOB_FORMING);
}

static void test_silent_node_below_min_stops(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 2); /* running from 2000, at the last call */
  f->now = 4500;
  fx_heard(f, 0);
  fx_at(f, 5000);
  assert_int_equal(fx_count(f, DR_RDZV_CLOSE, FX_ANY), 0);
  fx_at(f, 5001);
  assert_non_null(fx_find(f, DR_RDZV_CLOSE, 1));
  const fx_order_t *s = fx_must(f, DR_RDZV_STOP, 0);
  assert_int_equal(s->code, 3);
  fx_assert_has(s->text, "lost (no heartbeat for 3001 ms)");
  fx_assert_has(s->text, "needs at least 2");
  assert_null(fx_find(f, DR_RDZV_STOP, 1));
  assert_int_equal(fx_must(f, DR_RDZV_DONE, FX_NOPEER)->code, 3);
  assert_non_null(fx_find(f, DR_RDZV_REMOVE, FX_NOPEER));
  assert_int_equal(f->r.exit_code, 3);
}

/* After a stall of the server's loop, heartbeats that waited unread are
 * not silence: it counts from the wake-up. */
static void test_silence_counts_from_wakeup(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 2);
  f->r.woke_ms = 10000;
  fx_at(f, 10000);
  assert_int_equal(fx_count(f, DR_RDZV_CLOSE, FX_ANY), 0);
  f->now = 12000;
  fx_heard(f, 0);
  fx_at(f, 13000);
  assert_int_equal(fx_count(f, DR_RDZV_CLOSE, FX_ANY), 0);
  fx_at(f, 13001);
  assert_non_null(fx_find(f, DR_RDZV_CLOSE, 1));
  assert_null(fx_find(f, DR_RDZV_CLOSE, 0));
}

static void test_heartbeats_every_third_of_timeout(void **state) {
  fx_t *f = *state;
  fx_join(f, 0, 2, DR_NONE);
  fx_join(f, 1, 2, DR_NONE);
  fx_at(f, 1000); /* forming: nothing to push */
  assert_int_equal(fx_count(f, DR_RDZV_HEARTBEAT, FX_ANY), 0);
  fx_at(f, 1100); /* the last call: running, and pushed at once */
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 2);
  assert_int_equal(fx_count(f, DR_RDZV_HEARTBEAT, FX_ANY), 2);
  assert_int_equal(fx_must(f, DR_RDZV_HEARTBEAT, 0)->gen, 1);
  fx_at(f, 2099);
  assert_int_equal(fx_count(f, DR_RDZV_HEARTBEAT, FX_ANY), 0);
  fx_at(f, 2100);
  assert_int_equal(fx_count(f, DR_RDZV_HEARTBEAT, FX_ANY), 2);
  assert_non_null(fx_find(f, DR_RDZV_HEARTBEAT, 1));
}

/* ---- lost nodes ----------------------------------------------------------- */

static void test_closed_node_restarts_others(void **state) {
  fx_t *f = *state;
  fx_run(f, 3);
  fx_close(f, 1, "connection reset by peer");
  assert_null(fx_find(f, DR_RDZV_RESTART, 1));
  for (int i = 0; i < 3; i += 2) {
    const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, i);
    assert_int_equal(o->gen, 2);
    assert_int_equal(o->restart_count, 0);
    fx_assert_has(o->text, "node 1 ('node-1') lost: connection reset by peer");
  }
  assert_int_equal(f->r.restarts_used, 0);
  fx_assert_has(fx_event(f, "node_lost")->text, "\"node_rank\":1");
}

static void test_closed_node_below_min_stops(void **state) {
  fx_t *f = *state;
  fx_run(f, 2);
  fx_close(f, 0, "connection reset by peer");
  const fx_order_t *s = fx_must(f, DR_RDZV_STOP, 1);
  assert_int_equal(s->code, 3);
  fx_assert_has(s->text, "1 nodes remain and the job needs at least 2");
  assert_int_equal(fx_must(f, DR_RDZV_DONE, FX_NOPEER)->code, 3);
}

/* A node that said LEAVE (its ddprun got SIGTERM) ends the job with
 * 128 + signal when the others cannot go on: the operator's stop. */
static void test_leave_below_min_exits_with_signal(void **state) {
  fx_t *f = *state;
  fx_run(f, 2);
  fx_leave(f, 1, SIGTERM, "ddprun received SIGTERM");
  assert_int_equal(f->n_got, 0);
  fx_close(f, 1, "connection closed");
  const fx_order_t *s = fx_must(f, DR_RDZV_STOP, 0);
  assert_int_equal(s->code, 128 + SIGTERM);
  fx_assert_has(s->text, "node 1 ('node-1') left (ddprun received SIGTERM)");
  assert_int_equal(fx_must(f, DR_RDZV_DONE, FX_NOPEER)->code, 128 + SIGTERM);
}

static void test_leave_with_min_left_restarts(void **state) {
  fx_t *f = *state;
  fx_run(f, 3);
  fx_leave(f, 2, SIGINT, "ddprun received SIGINT");
  fx_close(f, 2, "connection closed");
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 0);
  fx_assert_has(o->text, "node 2 ('node-2') left: ddprun received SIGINT");
  assert_int_equal(o->restart_count, 0);
  assert_int_equal(f->r.restarts_used, 0);
}

/* ---- failures ----------------------------------------------------------- */

static void test_crash_spends_one_restart(void **state) {
  fx_t *f = *state;
  fx_run(f, 3);
  fx_fail(f, 1, 3, 1, 0);
  for (int i = 0; i < 3; i++) { /* the failed node restarts too */
    const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, i);
    assert_int_equal(o->gen, 2);
    assert_int_equal(o->restart_count, 1);
    fx_assert_has(o->text, "restart 1 of 2");
    fx_assert_has(o->text, "rank 3 (local rank 0, pid 4001) on node 1 "
                           "(node-1) exited with code 1");
  }
  assert_int_equal(fx_must(f, DR_RDZV_NEW_GEN, FX_NOPEER)->gen, 2);
  assert_non_null(fx_find(f, DR_RDZV_SAVE, FX_NOPEER));
  assert_non_null(fx_event(f, "failure"));
  assert_int_equal(f->r.restarts_used, 1);
  for (int i = 0; i < 3; i++)
    fx_join(f, i, 2, DR_NONE);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 3);
  assert_int_equal(f->r.asg.gen, 2);
  assert_int_equal(f->r.asg.restart_count, 1);
}

static void test_budget_spent_stops_with_root_cause(void **state) {
  fx_t *f = *state; /* budget of 1 */
  fx_run(f, 2);
  fx_fail(f, 0, 0, 1, 0);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 2);
  fx_run(f, 2);
  fx_fail(f, 1, 2, -1, SIGSEGV);
  for (int i = 0; i < 2; i++) {
    const fx_order_t *s = fx_must(f, DR_RDZV_STOP, i);
    assert_int_equal(s->code, 128 + SIGSEGV);
    fx_assert_has(s->text, "restart budget of 1 spent");
    fx_assert_has(s->text, "killed by signal SIGSEGV");
  }
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(fx_must(f, DR_RDZV_DONE, FX_NOPEER)->code, 128 + SIGSEGV);
  assert_non_null(fx_find(f, DR_RDZV_REMOVE, FX_NOPEER));
  assert_int_equal(f->r.state, DR_JOB_DONE);
  assert_int_equal(f->r.restarts_used, 1);
}

/* Failures a restart cannot cure stop the job without spending. */
static void stops_at_once(fx_t *f, int exit_code, int signal, int code,
                          const char *phrase) {
  fx_run(f, 2);
  fx_fail(f, 0, 1, exit_code, signal);
  for (int i = 0; i < 2; i++) {
    const fx_order_t *s = fx_must(f, DR_RDZV_STOP, i);
    assert_int_equal(s->code, code);
    fx_assert_has(s->text, phrase);
  }
  assert_int_equal(fx_must(f, DR_RDZV_DONE, FX_NOPEER)->code, code);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(f->r.restarts_used, 0);
}

static void test_config_error_stops_at_once(void **state) {
  stops_at_once(*state, 2, 0, 2, "configuration error, not restarted");
}

static void test_preempted_stops_at_once(void **state) {
  stops_at_once(*state, 75, 0, 75, "preempted");
}

static void test_sigusr1_stops_as_preempted(void **state) {
  stops_at_once(*state, -1, SIGUSR1, 75, "preempted (SIGUSR1");
}

/* An exit 3 is held; a second echo changes nothing; the crash that comes
 * within the hold is the root cause acted on and reported. */
static void test_echo_held_for_root_cause(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 3);
  f->now = 1100;
  fx_fail(f, 0, 0, 3, 0);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(fx_count(f, DR_RDZV_STOP, FX_ANY), 0);
  assert_int_equal(dr_rdzv_next_due(&f->r), 4101);
  f->now = 1150;
  fx_fail(f, 2, 4, 4, 0);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(dr_rdzv_next_due(&f->r), 4101);
  f->now = 1200;
  fx_fail(f, 1, 2, 1, 0);
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 0);
  fx_assert_has(o->text, "rank 2 (local rank 0, pid 4001) on node 1 (node-1) "
                         "exited with code 1");
  assert_null(strstr(o->text, "code 3"));
  assert_int_equal(o->restart_count, 1);
  assert_int_equal(f->r.restarts_used, 1);
  assert_int_equal(dr_rdzv_next_due(&f->r), 0);
}

/* A program whose every error exits 1 (PyTorch): a rank whose message
 * says its peer went away is held as an echo like exit 3, and the rank
 * whose exception closed the connection is the root cause. */
static void test_peer_gone_message_is_an_echo(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 2);
  f->now = 2100;
  dr_failure_t x = fx_failure_msg(f, 0, 0, 1, 0);
  x.message = dr_str("RuntimeError: [../gloo/transport/tcp/pair.cc:547] "
                     "Connection closed by peer [127.0.0.1]:48839");
  fx_fail_with(f, 0, &x);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_int_equal(fx_count(f, DR_RDZV_STOP, FX_ANY), 0);
  f->now = 2300;
  x = fx_failure_msg(f, 0, 1, 1, 0);
  x.message = dr_str("RuntimeError: injected failure before step 5");
  fx_fail_with(f, 0, &x);
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 0);
  fx_assert_has(o->text, "injected failure before step 5");
  assert_null(strstr(o->text, "Connection closed"));
}

/* With no other failure the held echo is the root cause when the hold
 * ends. */
static void test_echo_acted_on_when_hold_ends(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 2); /* running from 2000 */
  f->now = 2100;
  fx_fail(f, 1, 2, 4, 0);
  assert_int_equal(dr_rdzv_next_due(&f->r), 5101);
  f->now = 5000;
  fx_heard_all(f);
  fx_at(f, 5100);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  fx_at(f, 5101);
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 1);
  fx_assert_has(o->text, "exited with code 4");
  assert_int_equal(o->restart_count, 1);
  assert_int_equal(f->r.restarts_used, 1);
}

/* The kind, not the code, tells an agent's hang verdicts apart: one on a
 * rank that only waited may echo a culprit elsewhere and is held; one on a
 * stuck rank is a root cause at once. */
static void test_hang_wait_held_hang_not(void **state) {
  fx_t *f = *state;
  fx_run(f, 2);
  dr_failure_t x = fx_failure_msg(f, 0, 0, 4, 0);
  x.kind = DR_FAIL_HANG_WAIT;
  fx_fail_with(f, 0, &x);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  assert_true(f->r.holding);
  x = fx_failure_msg(f, 1, 2, 4, 0);
  x.kind = DR_FAIL_HANG;
  fx_fail_with(f, 1, &x);
  fx_assert_has(fx_must(f, DR_RDZV_RESTART, 0)->text,
                "rank 2 (local rank 0, pid 4001) on node 1");
  assert_false(f->r.holding);
}

/* The hold lasts until a node silent since the echo would be declared
 * lost (silence over the timeout): the loss, not the echo it caused, is
 * then the root cause, and no restart is spent. */
static void test_hold_outlasts_silent_node(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 3);
  f->now = 1100; /* node 2's last frame; at once node 0's echo */
  fx_heard(f, 2);
  fx_fail(f, 0, 0, 3, 0);
  assert_int_equal(dr_rdzv_next_due(&f->r), 4101);
  f->now = 4000;
  fx_heard(f, 0);
  fx_heard(f, 1);
  fx_at(f, 4100);
  assert_int_equal(fx_count(f, DR_RDZV_RESTART, FX_ANY), 0);
  fx_at(f, 4101);
  assert_non_null(fx_find(f, DR_RDZV_CLOSE, 2));
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 0);
  fx_assert_has(o->text, "node 2 ('node-2') lost");
  assert_null(strstr(o->text, "code 3"));
  assert_int_equal(o->restart_count, 0);
  assert_int_equal(f->r.restarts_used, 0);
}

static void test_failure_of_other_generation_ignored(void **state) {
  fx_t *f = *state;
  fx_run(f, 2);
  fx_fail(f, 0, 0, 1, 0);
  fx_run(f, 2);
  assert_int_equal(f->r.gen, 2);
  dr_failure_t x = fx_failure_msg(f, 1, 2, 1, 0);
  x.gen = 1;
  fx_fail_with(f, 1, &x);
  assert_int_equal(f->n_got, 0);
  /* Nor from a connection that is no node. */
  fx_fail(f, 4, 0, 1, 0);
  assert_int_equal(f->n_got, 0);
  assert_int_equal(f->r.restarts_used, 1);
  assert_int_equal(f->r.failures, 1);
}

/* ---- success ------------------------------------------------------------ */

static void test_success_needs_every_node(void **state) {
  fx_t *f = *state;
  fx_run(f, 3);
  fx_success(f, 0, 1);
  fx_success(f, 1, 1);
  assert_int_equal(fx_count(f, DR_RDZV_STOP, FX_ANY), 0);
  fx_success(f, 2, 0); /* another generation's */
  assert_int_equal(fx_count(f, DR_RDZV_STOP, FX_ANY), 0);
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  fx_success(f, 2, 1);
  for (int i = 0; i < 3; i++) {
    const fx_order_t *s = fx_must(f, DR_RDZV_STOP, i);
    assert_int_equal(s->code, 0);
    fx_assert_has(s->text, "all 3 nodes succeeded");
  }
  assert_int_equal(fx_must(f, DR_RDZV_DONE, FX_NOPEER)->code, 0);
  assert_non_null(fx_find(f, DR_RDZV_REMOVE, FX_NOPEER));
  assert_int_equal(f->r.state, DR_JOB_DONE);
  assert_int_equal(f->r.exit_code, 0);
}

/* A job of fixed size (2 of 2) that loses a node waits for a replacement:
 * the survivor restarts into the next round, which a new node completes;
 * without one by the deadline the job stops with the loss's code. */
static int setup_fixed(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.min_nodes = c.max_nodes = 2;
  c.replacement_timeout_ms = 5000;
  return fx_setup_with(state, &c);
}

static void test_fixed_job_waits_for_replacement(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 2);
  fx_close(f, 1, "node went away");
  const fx_order_t *o = fx_must(f, DR_RDZV_RESTART, 0);
  assert_int_equal(o->gen, 2);
  assert_int_equal(o->restart_count, 0); /* a loss spends nothing */
  fx_assert_has(o->text, "needs at least 2");
  fx_assert_has(o->text, "waiting up to 5 s for a replacement");
  assert_null(fx_find(f, DR_RDZV_STOP, FX_ANY));
  assert_int_equal(dr_rdzv_next_due(&f->r), 1000 + 5000);
  f->now = 3000;
  fx_join(f, 0, 2, DR_NONE); /* the survivor, after its restart */
  fx_join(f, 2, 2, DR_NONE); /* the replacement */
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), 2);
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  assert_int_equal(f->r.gen, 2);
  assert_int_equal(f->r.replace_at, 0);
  fx_at(f, 7000); /* past the old deadline: nothing */
  assert_null(fx_find(f, DR_RDZV_STOP, FX_ANY));
}

static void test_fixed_job_stops_without_replacement(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 2);
  fx_close(f, 1, "node went away");
  f->now = 2000;
  fx_join(f, 0, 2, DR_NONE);
  fx_at(f, 5999);
  assert_null(fx_find(f, DR_RDZV_STOP, FX_ANY));
  fx_at(f, 6000);
  const fx_order_t *s = fx_must(f, DR_RDZV_STOP, 0);
  assert_int_equal(s->code, 3);
  fx_assert_has(s->text, "lost (node went away)");
  fx_assert_has(s->text, "no replacement joined within 5 s");
  assert_int_equal(fx_must(f, DR_RDZV_DONE, FX_NOPEER)->code, 3);
}

/* Without the wait (0), and for MIN:MAX, a fixed job stops at once, as
 * test_closed_node_below_min_stops shows for the elastic one. */
static int setup_fixed_nowait(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.min_nodes = c.max_nodes = 2;
  return fx_setup_with(state, &c);
}

static void test_fixed_job_without_wait_stops(void **state) {
  fx_t *f = *state;
  f->now = 1000;
  fx_run(f, 2);
  fx_close(f, 1, "node went away");
  assert_int_equal(fx_must(f, DR_RDZV_STOP, 0)->code, 3);
  assert_null(fx_find(f, DR_RDZV_RESTART, FX_ANY));
}

int main(void) {
  dr_log_level = -1; /* the core's log is for operators; tests read orders */
#define T(name) cmocka_unit_test_setup_teardown(name, fx_setup, fx_teardown)
#define TS(name, setup) cmocka_unit_test_setup_teardown(name, setup, fx_teardown)
  const struct CMUnitTest tests[] = {
      T(test_silent_node_restarts_others),
      T(test_silent_node_below_min_stops),
      T(test_silence_counts_from_wakeup),
      T(test_heartbeats_every_third_of_timeout),
      T(test_closed_node_restarts_others),
      T(test_closed_node_below_min_stops),
      T(test_leave_below_min_exits_with_signal),
      T(test_leave_with_min_left_restarts),
      T(test_crash_spends_one_restart),
      TS(test_budget_spent_stops_with_root_cause, setup_budget1),
      T(test_config_error_stops_at_once),
      T(test_preempted_stops_at_once),
      T(test_sigusr1_stops_as_preempted),
      T(test_echo_held_for_root_cause),
      T(test_peer_gone_message_is_an_echo),
      T(test_echo_acted_on_when_hold_ends),
      T(test_hang_wait_held_hang_not),
      T(test_hold_outlasts_silent_node),
      T(test_failure_of_other_generation_ignored),
      T(test_success_needs_every_node),
      TS(test_fixed_job_waits_for_replacement, setup_fixed),
      TS(test_fixed_job_stops_without_replacement, setup_fixed),
      TS(test_fixed_job_without_wait_stops, setup_fixed_nowait),
  };
#undef T
#undef TS
  return cmocka_run_group_tests(tests, NULL, NULL);
}
