/* How a job ends: failures spend the global restart budget, a
 * configuration error stops at once, success everywhere ends the job. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

#define JOIN_WAIT_MS 10000
#define ORDER_WAIT_MS 5000
#define HB_OFF "30"

typedef struct {
  dr_client_t *c[2];
  dr_join_t j[2];
  uint64_t gen;
} job_t;

static void assert_joined(const dr_h_join_t *jt) {
  if (jt->rc != 0)
    fail_msg("JOIN of %.*s failed: %s (%s)", (int)jt->j.host.len,
             (const char *)jt->j.host.p, dr_err_name(jt->rc), jt->errmsg);
}

/* Opens n nodes (node-a, node-b, nproc 2) and runs them through round 1. */
static void job_open(dr_h_fixture_t *fx, job_t *job, size_t n) {
  static const char *const hosts[2] = {"node-a", "node-b"};
  memset(job, 0, sizeof(*job));
  for (size_t i = 0; i < n; i++) {
    job->c[i] = dr_h_open(fx, hosts[i]);
    dr_h_join_fill(&job->j[i], DR_H_RUN_ID, hosts[i], "", 2, DR_NONE, 0, "");
  }
}

/* Every node joins; returns the records (fixture-owned). */
static void job_join(dr_h_fixture_t *fx, job_t *job, size_t n,
                     dr_h_join_t **jt) {
  for (size_t i = 0; i < n; i++)
    jt[i] = dr_h_join_async(fx, job->c[i], &job->j[i], JOIN_WAIT_MS);
  dr_h_join_threads(fx);
  for (size_t i = 0; i < n; i++)
    assert_joined(jt[i]);
  job->gen = jt[0]->a.gen;
}

/* Waits until every node got an order; fails with what each got. */
static void job_orders(job_t *job, size_t n, dr_h_agent_t *ag) {
  memset(ag, 0, n * sizeof(*ag));
  for (size_t i = 0; i < n; i++) {
    ag[i].c = job->c[i];
    ag[i].gen = job->gen;
  }
  int rc = dr_h_agents_run(ag, n, 0, ORDER_WAIT_MS);
  for (size_t i = 0; i < n; i++) {
    const dr_h_order_t *o = &ag[i].order;
    if (o->type == DR_MSG_RESTART)
      fprintf(stderr, "  node %zu: RESTART gen %d count %u (%s)\n", i,
              (int)o->gen, o->restart_count, o->reason);
    else if (o->type == DR_MSG_STOP)
      fprintf(stderr, "  node %zu: STOP %d (%s)\n", i, o->exit_code, o->reason);
    else
      fprintf(stderr, "  node %zu: no order\n", i);
  }
  if (rc != 0)
    fail_msg("waiting for orders: %s", dr_err_name(rc));
}

static void report_kind(dr_client_t *c, uint64_t gen, uint32_t rank,
                        int exit_code, dr_fail_kind_t kind, const char *what) {
  dr_failure_t f;
  memset(&f, 0, sizeof(f));
  f.gen = gen;
  f.rank = rank;
  f.exit_code = exit_code;
  f.kind = kind;
  f.message = dr_str(what);
  assert_int_equal(dr_client_report_failure(c, &f), 0);
}

static void report_failure(dr_client_t *c, uint64_t gen, uint32_t rank,
                           int exit_code, int sig, const char *what) {
  dr_failure_t f;
  memset(&f, 0, sizeof(f));
  f.gen = gen;
  f.rank = rank;
  f.local_rank = rank % 2;
  f.pid = 4000 + rank;
  f.exit_code = exit_code;
  f.signal = sig;
  f.kind = sig != 0 ? DR_FAIL_SIGNAL : DR_FAIL_EXIT;
  f.message = dr_str(what);
  assert_int_equal(dr_client_report_failure(c, &f), 0);
}

static int contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay != '\0'; hay++) {
    size_t i = 0;
    while (i < n && hay[i] != '\0' &&
           tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      i++;
    if (i == n)
      return 1;
  }
  return 0;
}

static void assert_server_exits(dr_h_fixture_t *fx, int code) {
  int status = 0;
  assert_int_equal(dr_h_server_wait(fx->srv, 5000, &status), 0);
  char why[64];
  fprintf(stderr, "  server %s\n", dr_h_status_str(status, why, sizeof(why)));
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), code);
}

DR_H_TEST(test_failures_spend_global_budget) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2", "--max-restarts", "2",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  job_t job;
  dr_h_join_t *jt[2];
  dr_h_agent_t ag[2];
  job_open(fx, &job, 2);
  job_join(fx, &job, 2, jt);
  assert_int_equal(job.gen, 1);
  assert_int_equal(jt[0]->a.restart_count, 0);
  assert_int_equal(jt[0]->a.max_restarts, 2);

  /* Two failures, reported by different nodes: the budget is the job's. */
  for (uint32_t k = 1; k <= 2; k++) {
    report_failure(job.c[k % 2], job.gen, k, 10 + (int)k, 0, "crashed");
    job_orders(&job, 2, ag);
    for (int i = 0; i < 2; i++) {
      assert_int_equal(ag[i].order.type, DR_MSG_RESTART);
      assert_int_equal(ag[i].order.gen, job.gen + 1);
      assert_int_equal(ag[i].order.restart_count, k);
    }
    job_join(fx, &job, 2, jt);
    for (int i = 0; i < 2; i++) {
      assert_int_equal(jt[i]->a.gen, 1 + k);
      assert_int_equal(jt[i]->a.restart_count, k);
      assert_int_equal(jt[i]->a.max_restarts, 2);
    }
  }

  /* A report about an older generation changes nothing. */
  report_failure(job.c[0], job.gen - 1, 0, 99, 0, "stale");
  for (int i = 0; i < 2; i++) {
    dr_h_order_t o;
    int rc = dr_h_no_order(job.c[i], &o);
    if (rc == 1)
      fail_msg("a stale FAILURE caused %s (%s)", dr_msg_name(o.type), o.reason);
    assert_int_equal(rc, 0);
  }

  /* The third failure finds the budget spent: the job stops with the
   * root cause's code. */
  report_failure(job.c[1], job.gen, 2, 13, 0, "crashed again");
  job_orders(&job, 2, ag);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ag[i].order.type, DR_MSG_STOP);
    assert_int_equal(ag[i].order.exit_code, 13);
    assert_true(contains_nocase(ag[i].order.reason, "restart"));
    assert_true(contains_nocase(ag[i].order.reason, "rank 2"));
  }
  assert_server_exits(fx, 13);
}

DR_H_TEST(test_exit_code_2_stops_at_once) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2", "--max-restarts", "3",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  job_t job;
  dr_h_join_t *jt[2];
  dr_h_agent_t ag[2];
  job_open(fx, &job, 2);
  job_join(fx, &job, 2, jt);
  report_failure(job.c[1], job.gen, 3, 2, 0, "bad configuration");
  job_orders(&job, 2, ag);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ag[i].order.type, DR_MSG_STOP);
    assert_int_equal(ag[i].order.exit_code, 2);
  }
  assert_server_exits(fx, 2);
}

/* A timeout a worker reports itself (exit 4) may echo another rank's
 * failure and is held; the agent's verdict that a worker hung (kind HANG,
 * also exit 4) is a root cause and acted on at once. */
DR_H_TEST(test_hang_verdict_is_not_held) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2", "--max-restarts", "3",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  job_t job;
  dr_h_join_t *jt[2];
  dr_h_agent_t ag[2];
  job_open(fx, &job, 2);
  job_join(fx, &job, 2, jt);
  report_kind(job.c[0], job.gen, 1, 4, DR_FAIL_EXIT, "allreduce timed out");
  for (int i = 0; i < 2; i++) {
    dr_h_order_t o;
    int rc = dr_h_no_order(job.c[i], &o);
    if (rc == 1)
      fail_msg("an echo was not held: %s (%s)", dr_msg_name(o.type), o.reason);
    assert_int_equal(rc, 0);
  }
  report_kind(job.c[1], job.gen, 3, 4, DR_FAIL_HANG,
              "no progress for 3.0 s after step 7");
  job_orders(&job, 2, ag);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ag[i].order.type, DR_MSG_RESTART);
    assert_true(strstr(ag[i].order.reason, "rank 3") != NULL);
  }
}

/* A verdict on a rank that only waited (kind HANG_WAIT) is held like an
 * echo: a verdict naming the culprit on another node (kind HANG) that
 * follows is the root cause. */
DR_H_TEST(test_waiting_verdict_is_held) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2", "--max-restarts", "3",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  job_t job;
  dr_h_join_t *jt[2];
  dr_h_agent_t ag[2];
  job_open(fx, &job, 2);
  job_join(fx, &job, 2, jt);
  report_kind(job.c[0], job.gen, 0, 4, DR_FAIL_HANG_WAIT,
              "no progress for 9.0 s: it waits");
  for (int i = 0; i < 2; i++) {
    dr_h_order_t o;
    int rc = dr_h_no_order(job.c[i], &o);
    if (rc == 1)
      fail_msg("a waiting verdict was not held: %s (%s)", dr_msg_name(o.type),
               o.reason);
    assert_int_equal(rc, 0);
  }
  report_kind(job.c[1], job.gen, 3, 4, DR_FAIL_HANG,
              "no progress for 5.0 s: it sleeps");
  job_orders(&job, 2, ag);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ag[i].order.type, DR_MSG_RESTART);
    assert_true(strstr(ag[i].order.reason, "rank 3") != NULL);
    assert_true(strstr(ag[i].order.reason, "sleeps") != NULL);
  }
}

/* The longest message an agent sends (DR_FAILURE_MSG_MAX bytes) reaches
 * the nodes whole in the server's account of the failure: its last line,
 * the one that matters most, is not cut off by the account's prefix. */
DR_H_TEST(test_longest_message_arrives_whole) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2", "--max-restarts", "3",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  job_t job;
  dr_h_join_t *jt[2];
  dr_h_agent_t ag[2];
  job_open(fx, &job, 2);
  job_join(fx, &job, 2, jt);
  static const char last[] = "\nthe last line";
  char msg[DR_FAILURE_MSG_MAX + 1];
  memset(msg, 'x', DR_FAILURE_MSG_MAX);
  memcpy(msg + DR_FAILURE_MSG_MAX - (sizeof(last) - 1), last,
         sizeof(last) - 1);
  msg[DR_FAILURE_MSG_MAX] = '\0';
  report_failure(job.c[1], job.gen, 3, 11, 0, msg);
  job_orders(&job, 2, ag);
  for (int i = 0; i < 2; i++) {
    const char *r = ag[i].order.reason;
    size_t len = strlen(r);
    assert_int_equal(ag[i].order.type, DR_MSG_RESTART);
    assert_true(strstr(r, "rank 3") != NULL);
    assert_true(len > DR_FAILURE_MSG_MAX);
    assert_string_equal(r + len - (sizeof(last) - 1), last);
  }
}

DR_H_TEST(test_signal_is_reported_as_128_plus_signal) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--max-restarts", "0",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  job_t job;
  dr_h_join_t *jt[1];
  dr_h_agent_t ag[1];
  job_open(fx, &job, 1);
  job_join(fx, &job, 1, jt);
  assert_int_equal(jt[0]->a.max_restarts, 0);
  report_failure(job.c[0], job.gen, 1, -1, 9, "killed");
  job_orders(&job, 1, ag);
  assert_int_equal(ag[0].order.type, DR_MSG_STOP);
  assert_int_equal(ag[0].order.exit_code, 128 + 9);
  assert_server_exits(fx, 128 + 9);
}

DR_H_TEST(test_success_from_all_nodes_ends_job) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2", "--max-restarts", "1",
                       "--heartbeat-timeout", HB_OFF),
             NULL);
  job_t job;
  dr_h_join_t *jt[2];
  dr_h_agent_t ag[2];
  job_open(fx, &job, 2);
  job_join(fx, &job, 2, jt);

  /* One node done is not the job done. */
  assert_int_equal(dr_client_report_success(job.c[0], job.gen), 0);
  for (int i = 0; i < 2; i++) {
    dr_h_order_t o;
    int rc = dr_h_no_order(job.c[i], &o);
    if (rc == 1)
      fail_msg("SUCCESS from one node of two caused %s (%s)",
               dr_msg_name(o.type), o.reason);
    assert_int_equal(rc, 0);
  }

  assert_int_equal(dr_client_report_success(job.c[1], job.gen), 0);
  job_orders(&job, 2, ag);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ag[i].order.type, DR_MSG_STOP);
    assert_int_equal(ag[i].order.exit_code, 0);
    /* The reason leads with "job complete" (details may follow). */
    assert_true(strncmp(ag[i].order.reason, "job complete", 12) == 0);
  }
  assert_server_exits(fx, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
      T(test_failures_spend_global_budget),
      T(test_exit_code_2_stops_at_once),
      T(test_hang_verdict_is_not_held),
      T(test_waiting_verdict_is_held),
      T(test_longest_message_arrives_whole),
      T(test_signal_is_reported_as_128_plus_signal),
      T(test_success_from_all_nodes_ends_job),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
