/* Membership while a round runs: nodes that fall silent or disconnect, and
 * nodes that join late. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

#define JOIN_WAIT_MS 10000
/* Heartbeat timeout of the tests that measure detection, and the bound
 * they assert: a silent node is declared dead within twice the timeout. */
#define HB_TIMEOUT_MS 500
#define HB_TIMEOUT "0.5"
/* Agents beat well inside the timeout/3 the protocol asks for. */
#define HB_EVERY_MS 50

static void assert_joined(const dr_h_join_t *jt) {
  if (jt->rc != 0)
    fail_msg("JOIN of %.*s failed: %s (%s)", (int)jt->j.host.len,
             (const char *)jt->j.host.p, dr_err_name(jt->rc), jt->errmsg);
}

static void join_all(dr_h_fixture_t *fx, dr_client_t *const *c,
                     const dr_join_t *j, size_t n, dr_h_join_t **jt) {
  for (size_t i = 0; i < n; i++)
    jt[i] = dr_h_join_async(fx, c[i], &j[i], JOIN_WAIT_MS);
  dr_h_join_threads(fx);
  for (size_t i = 0; i < n; i++)
    assert_joined(jt[i]);
}

static void assert_order(const dr_h_agent_t *a, uint8_t type) {
  if (a->order.type != type)
    fail_msg("expected %s, got %s", dr_msg_name(type),
             a->order.type != 0 ? dr_msg_name(a->order.type) : "nothing");
}

/* A reason names a node by its host name or its node rank. */
static int names_node(const char *reason, const char *host, unsigned rank) {
  char by_rank[32];
  snprintf(by_rank, sizeof(by_rank), "node %u", rank);
  return strstr(reason, host) != NULL || strstr(reason, by_rank) != NULL;
}

DR_H_TEST(test_silent_node_declared_dead_and_others_restart) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2:3", "--heartbeat-timeout", HB_TIMEOUT,
                       "--last-call-timeout", "0.3"),
             NULL);
  static const char *const hosts[3] = {"live-a", "live-b", "quiet-c"};
  dr_client_t *c[3];
  dr_join_t j[3];
  dr_h_join_t *jt[3];
  for (int i = 0; i < 3; i++) {
    c[i] = dr_h_open(fx, hosts[i]);
    dr_h_join_fill(&j[i], DR_H_RUN_ID, hosts[i], "", 1, DR_NONE, 0, "");
  }
  join_all(fx, c, j, 3, jt);
  for (int i = 0; i < 3; i++)
    assert_int_equal(jt[i]->a.nnodes, 3);

  /* quiet-c beats once, then falls silent. */
  assert_int_equal(dr_client_heartbeat(c[2], 1), 0);
  double t_silent = dr_h_now_ms();
  dr_h_agent_t ag[3];
  memset(ag, 0, sizeof(ag));
  for (int i = 0; i < 3; i++) {
    ag[i].c = c[i];
    ag[i].gen = 1;
  }
  ag[2].silent = 1;
  int rc = dr_h_agents_run(ag, 3, HB_EVERY_MS, 4 * HB_TIMEOUT_MS);
  for (int i = 0; i < 2; i++) {
    double after = ag[i].order.t_ms - t_silent;
    fprintf(stderr,
            "  %s: %s after %.0f ms of silence (%s); %d server heartbeats\n",
            hosts[i],
            ag[i].order.type != 0 ? dr_msg_name(ag[i].order.type) : "-", after,
            ag[i].order.reason, ag[i].server_hbs);
  }
  assert_int_equal(rc, 0);
  for (int i = 0; i < 2; i++) {
    assert_order(&ag[i], DR_MSG_RESTART);
    assert_int_equal(ag[i].order.gen, 2);
    assert_int_equal(ag[i].order.restart_count, 0);
    double after = ag[i].order.t_ms - t_silent;
    assert_true(after >= HB_TIMEOUT_MS - 50);
    assert_true(after <= 2 * HB_TIMEOUT_MS);
    /* Heartbeats go both ways. */
    assert_true(ag[i].server_hbs >= 1);
  }

  /* The survivors form generation 2 without quiet-c. */
  dr_h_join_t *jt2[2];
  join_all(fx, c, j, 2, jt2);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(jt2[i]->a.gen, 2);
    assert_int_equal(jt2[i]->a.nnodes, 2);
    assert_int_equal(jt2[i]->a.world_size, 2);
    assert_int_equal(jt2[i]->a.restart_count, 0);
  }
}

DR_H_TEST(test_closed_connection_declared_dead_at_once) {
  /* A long heartbeat timeout: only the closed connection can explain a
   * prompt restart. */
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2:3", "--heartbeat-timeout", "20",
                       "--last-call-timeout", "0.3"),
             NULL);
  static const char *const hosts[3] = {"stay-a", "stay-b", "gone-c"};
  dr_client_t *c[3];
  dr_join_t j[3];
  dr_h_join_t *jt[3];
  for (int i = 0; i < 3; i++) {
    c[i] = dr_h_open(fx, hosts[i]);
    dr_h_join_fill(&j[i], DR_H_RUN_ID, hosts[i], "", 2, DR_NONE, 0, "");
  }
  join_all(fx, c, j, 3, jt);

  dr_h_close(fx, &c[2]);
  double t_closed = dr_h_now_ms();
  dr_h_agent_t ag[2];
  memset(ag, 0, sizeof(ag));
  for (int i = 0; i < 2; i++) {
    ag[i].c = c[i];
    ag[i].gen = 1;
  }
  int rc = dr_h_agents_run(ag, 2, 1000, 5000);
  for (int i = 0; i < 2; i++)
    fprintf(stderr, "  %s: %s %.0f ms after the close (%s)\n", hosts[i],
            ag[i].order.type != 0 ? dr_msg_name(ag[i].order.type) : "-",
            ag[i].order.t_ms - t_closed, ag[i].order.reason);
  assert_int_equal(rc, 0);
  for (int i = 0; i < 2; i++) {
    assert_order(&ag[i], DR_MSG_RESTART);
    assert_int_equal(ag[i].order.gen, 2);
    assert_int_equal(ag[i].order.restart_count, 0);
    assert_true(ag[i].order.t_ms - t_closed < 1000);
  }
}

DR_H_TEST(test_lost_node_below_min_stops_job) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", HB_TIMEOUT,
                       "--max-restarts", "3"),
             NULL);
  dr_client_t *c[2] = {dr_h_open(fx, "alive-host"), dr_h_open(fx, "lost-host")};
  dr_join_t j[2];
  dr_h_join_t *jt[2];
  dr_h_join_fill(&j[0], DR_H_RUN_ID, "alive-host", "", 1, DR_NONE, 0, "");
  dr_h_join_fill(&j[1], DR_H_RUN_ID, "lost-host", "", 1, DR_NONE, 0, "");
  join_all(fx, c, j, 2, jt);
  unsigned lost_rank = jt[1]->a.node_rank;

  assert_int_equal(dr_client_heartbeat(c[1], 1), 0);
  double t_silent = dr_h_now_ms();
  dr_h_agent_t ag[2];
  memset(ag, 0, sizeof(ag));
  ag[0].c = c[0];
  ag[0].gen = 1;
  ag[1].c = c[1];
  ag[1].silent = 1;
  int rc = dr_h_agents_run(ag, 2, HB_EVERY_MS, 4 * HB_TIMEOUT_MS);
  double after = ag[0].order.t_ms - t_silent;
  fprintf(stderr, "  alive-host: %s(%d) after %.0f ms (%s)\n",
          ag[0].order.type != 0 ? dr_msg_name(ag[0].order.type) : "-",
          ag[0].order.exit_code, after, ag[0].order.reason);
  assert_int_equal(rc, 0);
  assert_order(&ag[0], DR_MSG_STOP);
  assert_int_equal(ag[0].order.exit_code, 3);
  assert_true(names_node(ag[0].order.reason, "lost-host", lost_rank));
  assert_true(after >= HB_TIMEOUT_MS - 50);
  assert_true(after <= 2 * HB_TIMEOUT_MS);

  int status = 0;
  assert_int_equal(dr_h_server_wait(fx->srv, 5000, &status), 0);
  char why[64];
  fprintf(stderr, "  server %s\n", dr_h_status_str(status, why, sizeof(why)));
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 3);
}

DR_H_TEST(test_late_joiner_restarts_round_and_grows_world) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2:3", "--heartbeat-timeout", "5",
                       "--last-call-timeout", "0.3", "--max-restarts", "1"),
             NULL);
  static const char *const hosts[3] = {"node-a", "node-b", "node-c"};
  dr_client_t *c[3];
  dr_join_t j[3];
  dr_h_join_t *jt[2];
  for (int i = 0; i < 3; i++) {
    c[i] = dr_h_open(fx, hosts[i]);
    dr_h_join_fill(&j[i], DR_H_RUN_ID, hosts[i], "", 2, DR_NONE, 0, "");
  }
  join_all(fx, c, j, 2, jt);
  uint8_t boot1[128];
  for (int i = 0; i < 2; i++) {
    assert_int_equal(jt[i]->a.gen, 1);
    assert_int_equal(jt[i]->a.nnodes, 2);
    assert_int_equal(jt[i]->a.world_size, 4);
    assert_int_equal(jt[i]->a.bootstrap_len, 128);
  }
  memcpy(boot1, jt[0]->a.bootstrap, sizeof(boot1));

  dr_h_join_t *late = dr_h_join_async(fx, c[2], &j[2], JOIN_WAIT_MS);
  dr_h_agent_t ag[2];
  memset(ag, 0, sizeof(ag));
  for (int i = 0; i < 2; i++) {
    ag[i].c = c[i];
    ag[i].gen = 1;
  }
  int rc = dr_h_agents_run(ag, 2, 500, 5000);
  for (int i = 0; i < 2; i++)
    fprintf(stderr, "  %s: %s gen %d count %u (%s)\n", hosts[i],
            ag[i].order.type != 0 ? dr_msg_name(ag[i].order.type) : "-",
            (int)ag[i].order.gen, ag[i].order.restart_count,
            ag[i].order.reason);
  assert_int_equal(rc, 0);
  for (int i = 0; i < 2; i++) {
    assert_order(&ag[i], DR_MSG_RESTART);
    assert_int_equal(ag[i].order.gen, 2);
    /* Taking a node in is not a failure. */
    assert_int_equal(ag[i].order.restart_count, 0);
    assert_non_null(strstr(ag[i].order.reason, "joined"));
  }

  dr_h_join_t *jt2[3];
  for (int i = 0; i < 2; i++)
    jt2[i] = dr_h_join_async(fx, c[i], &j[i], JOIN_WAIT_MS);
  jt2[2] = late;
  dr_h_join_threads(fx);
  for (int i = 0; i < 3; i++) {
    assert_joined(jt2[i]);
    const dr_assignment_t *a = &jt2[i]->a;
    assert_int_equal(a->gen, 2);
    assert_int_equal(a->node_rank, (uint32_t)i);
    assert_int_equal(a->nnodes, 3);
    assert_int_equal(a->world_size, 6);
    assert_int_equal(a->first_rank, 2 * (uint32_t)i);
    assert_int_equal(a->restart_count, 0);
    assert_int_equal(a->bootstrap_len, 128);
    assert_memory_equal(a->bootstrap, jt2[0]->a.bootstrap, 128);
  }
  /* A new generation gets a new bootstrap. */
  assert_memory_not_equal(jt2[0]->a.bootstrap, boot1, 128);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
      T(test_silent_node_declared_dead_and_others_restart),
      T(test_closed_connection_declared_dead_at_once),
      T(test_lost_node_below_min_stops_job),
      T(test_late_joiner_restarts_round_and_grows_world),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
