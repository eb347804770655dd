/* How jobs fail: a worker that exits non-zero or crashes, a program that
 * cannot run, SIGTERM to ddprun (forwarded; SIGKILL after --stop-grace),
 * and SIGKILL to ddprun itself. In every case no worker may remain. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_harness.h"
#include "launch_probe.h"

#define START_MS 15000 /* for the workers of a job to start */
#define END_MS 30000   /* for a failed job to end */
/* The stop grace of the SIGTERM tests: long enough that a worker whose
 * handler takes the signal gets the CPU to run it on a loaded machine
 * (under the thread sanitizer and a busy loop, one did not within 1 s). */
#define STOP_GRACE_MS 4000
/* How late after the grace the SIGKILL may come: a hang's bound. */
#define KILL_LATE_MS 10000

/* Waits until p's stdout shows n PROBE lines: n workers have started (and
 * installed their signal handlers, which a probe does first). */
static void wait_started(dr_l_proc_t *p, size_t n) {
  int rc = dr_l_wait_output(p, 1, "]:PROBE ", n, START_MS);
  if (rc != 0)
    fail_msg("%s: %zu workers not started within %d ms (%s)", p->name, n,
             START_MS, rc == -ECHILD ? "ddprun exited" : "timeout");
}

/* Fails unless no process carries the test's marker right now: a ddprun
 * that has exited must have stopped and reaped all of its workers. */
static void assert_no_workers(dr_l_fixture_t *fx, const char *when) {
  pid_t pids[64];
  size_t n = dr_l_marker_pids(fx->marker, pids, 64);
  if (n > 0)
    fail_msg("%zu workers still running %s (first pid %d)", n, when,
             (int)pids[0]);
}

/* The root cause of a failure summary on stderr: from the first "root
 * cause" to the end of the line after it. Fails when there is none. */
static void root_cause(const char *err, char *out, size_t cap) {
  const char *p = strstr(err, "root cause");
  if (p == NULL)
    fail_msg("no root cause in the failure summary");
  const char *end = strchr(p, '\n');
  if (end != NULL && end[1] != '\0') {
    const char *next = strchr(end + 1, '\n');
    end = next != NULL ? next : end + 1 + strlen(end + 1);
  } else if (end == NULL) {
    end = p + strlen(p);
  }
  snprintf(out, cap, "%.*s", (int)(end - p), p);
}

/* 1 when text names "rank N" (not "rank N0", not "local rank N"). */
static int names_rank(const char *text, long rank) {
  char needle[32];
  snprintf(needle, sizeof(needle), "rank %ld", rank);
  size_t len = strlen(needle);
  for (const char *p = strstr(text, needle); p != NULL;
       p = strstr(p + 1, needle)) {
    int digit_after = p[len] >= '0' && p[len] <= '9';
    int local = p - text >= 6 && strncmp(p - 6, "local ", 6) == 0;
    if (!digit_after && !local)
      return 1;
  }
  return 0;
}

static void expect_root_cause(dr_l_proc_t *p, long rank, const char *what) {
  char rc[2048];
  root_cause(dr_l_err(p), rc, sizeof(rc));
  if (!names_rank(rc, rank) || strstr(rc, what) == NULL)
    fail_msg("%s: the root cause does not name rank %ld and '%s':\n%s", p->name,
             rank, what, rc);
}

DR_L_TEST(worker_exit_2x2) {
  const char *id = "job-exit";
  uint16_t port = dr_l_rdzv(fx, DR_H_ARGS("--nnodes", "2", "--rdzv-id", id));
  char endpoint[64];
  snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", port);
  dr_l_proc_t *nodes[2];
  for (int i = 0; i < 2; i++)
    nodes[i] = dr_l_ddprun(
        fx, i == 0 ? "node0" : "node1",
        DR_H_ARGS("--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint",
                  endpoint, "--rdzv-id", id, "--rdzv-conf", "is_host=0",
                  dr_l_probe_path(), "--exit-rank", "3", "--exit-code", "1",
                  "--exit-on-usr1", "--sleep-ms", "60000", "--marker",
                  fx->marker),
        NULL);
  /* Rank 3 fails only once all four workers run. */
  for (int i = 0; i < 2; i++)
    wait_started(nodes[i], 2);
  dr_lp_t probes[DR_LP_MAX];
  size_t n = 0;
  for (int i = 0; i < 2; i++)
    n = dr_lp_parse(dr_l_out(nodes[i]), (size_t)i, probes, n, DR_LP_MAX);
  assert_int_equal(n, 4);
  long victim = -1;
  for (size_t i = 0; i < n; i++)
    if (probes[i].rank == 3)
      victim = probes[i].pid;
  if (victim <= 0)
    fail_msg("no worker has rank 3");
  assert_int_equal(kill((pid_t)victim, SIGUSR1), 0);
  if (dr_l_wait_all(nodes, 2, END_MS) != 0)
    fail_msg("the job did not end within %d ms of a worker's failure", END_MS);
  assert_no_workers(fx, "after both ddprun exited");
  for (int i = 0; i < 2; i++)
    dr_l_expect_exit(nodes[i], 1, 0);
  for (int i = 0; i < 2; i++)
    expect_root_cause(nodes[i], 3, "exited with code 1");
}

DR_L_TEST(worker_segv) {
  dr_l_proc_t *p =
      dr_l_ddprun(fx, "node0",
                  DR_H_ARGS("--standalone", "--nproc-per-node", "2",
                            dr_l_probe_path(), "--segv-rank", "1", "--sleep-ms",
                            "60000", "--marker", fx->marker),
                  NULL);
  dr_l_expect_exit(p, 128 + SIGSEGV, END_MS);
  assert_no_workers(fx, "after ddprun exited");
  expect_root_cause(p, 1, "SIGSEGV");
}

DR_L_TEST(missing_program) {
  /* A restart budget must not matter: the program will never run. */
  dr_l_proc_t *p = dr_l_ddprun(fx, "node0",
                               DR_H_ARGS("--standalone", "--nproc-per-node",
                                         "2", "--max-restarts", "3", "trian",
                                         "--marker", fx->marker),
                               NULL);
  dr_l_expect_exit(p, 2, 10000); /* at once; the bound catches a hang */
  if (strstr(dr_l_err(p),
             "ddprun: cannot execute 'trian': No such file or directory\n") ==
      NULL)
    fail_msg("no \"ddprun: cannot execute 'trian': No such file or "
             "directory\" on stderr");
  if (dr_l_out(p)[0] != '\0')
    fail_msg("a worker printed something");
}

DR_L_TEST(exec_failure_at_spawn) {
  /* Found and executable, but execve() refuses it (ENOEXEC): the failure
   * comes back from the spawned child through the close-on-exec pipe. It
   * is a configuration error: exit 2, no restart, this node's failure. */
  const char *prog =
      dr_l_write_file(fx, "not-a-program", "\x01\x02garbage\n", 0755);
  char path[600];
  snprintf(path, sizeof(path), "%s", prog);
  dr_l_proc_t *p = dr_l_ddprun(fx, "node0",
                               DR_H_ARGS("--standalone", "--nproc-per-node",
                                         "2", "--max-restarts", "3", path,
                                         "--marker", fx->marker),
                               NULL);
  dr_l_expect_exit(p, 2, 10000); /* at once; the bound catches a hang */
  assert_no_workers(fx, "after ddprun exited");
  const char *err = dr_l_err(p);
  char want[700];
  snprintf(want, sizeof(want), "cannot execute '%s'", path);
  if (strstr(err, want) == NULL)
    fail_msg("no \"%s\" on stderr", want);
  if (strstr(err, "restarting") != NULL)
    fail_msg("ddprun restarted a program that cannot be executed");
  if (strstr(err, "on another node") != NULL)
    fail_msg("a one-node job blames another node for its own exec failure");
}

/* Starts a 1x2 job of probes that report SIGTERM to a file, waits until
 * they run, sends SIGTERM to ddprun and returns when it was sent. */
static double term_job(dr_l_fixture_t *fx, dr_l_proc_t **out, int ignore,
                       const char *report) {
  char grace[16];
  snprintf(grace, sizeof(grace), "%g", STOP_GRACE_MS / 1000.0);
  const char *args[16] = {"--standalone",
                          "--nproc-per-node",
                          "2",
                          "--stop-grace",
                          grace,
                          dr_l_probe_path(),
                          "--report-signal",
                          report,
                          "--marker",
                          fx->marker};
  if (ignore)
    args[10] = "--ignore-term";
  dr_l_proc_t *p = dr_l_ddprun(fx, "node0", args, NULL);
  wait_started(p, 2);
  double t0 = dr_h_now_ms();
  assert_int_equal(kill(p->pid, SIGTERM), 0);
  *out = p;
  return t0;
}

/* Checks that each of the job's workers logged one SIGTERM. */
static void expect_reports(dr_l_proc_t *p, const char *report) {
  dr_lp_t probes[DR_LP_MAX];
  size_t n = dr_lp_parse(dr_l_out(p), 0, probes, 0, DR_LP_MAX);
  if (n != 2)
    fail_msg("%zu of 2 workers started", n);
  FILE *f = fopen(report, "r");
  if (f == NULL)
    fail_msg("no worker received SIGTERM (%s missing)", report);
  int got[2] = {0, 0};
  long pid;
  while (fscanf(f, "SIGTERM %ld\n", &pid) == 1)
    for (int i = 0; i < 2; i++)
      got[i] += probes[i].pid == pid;
  fclose(f);
  for (int i = 0; i < 2; i++)
    if (got[i] != 1)
      fail_msg("rank %ld (pid %ld) received SIGTERM %d times, expected once",
               probes[i].rank, probes[i].pid, got[i]);
}

DR_L_TEST(sigterm_forwarded) {
  char report[600];
  snprintf(report, sizeof(report), "%s", dr_l_path(fx, "signals"));
  dr_l_proc_t *p;
  double t0 = term_job(fx, &p, 0, report);
  dr_l_expect_exit(p, 128 + SIGTERM, END_MS);
  double ms = p->t_end - t0;
  assert_no_workers(fx, "after ddprun exited");
  expect_reports(p, report);
  /* The hosted server logs the end for what it is, not as a lost node. */
  const char *err = dr_l_err(p);
  if (strstr(err, "ended with exit code 143: node 0 ('") == NULL ||
      strstr(err, "left (ddprun on '") == NULL ||
      strstr(err, "received SIGTERM)") == NULL || strstr(err, "ERROR") != NULL)
    fail_msg("the server did not log the SIGTERM as the job's end:\n%s", err);
  /* Workers that obey SIGTERM need no grace. */
  if (ms >= STOP_GRACE_MS)
    fail_msg("ddprun took %.0f ms to exit after SIGTERM although its "
             "workers exited at once",
             ms);
}

DR_L_TEST(sigterm_escalates) {
  char report[600];
  snprintf(report, sizeof(report), "%s", dr_l_path(fx, "signals"));
  dr_l_proc_t *p;
  double t0 = term_job(fx, &p, 1, report);
  dr_l_expect_exit(p, 128 + SIGTERM, END_MS);
  double ms = p->t_end - t0;
  assert_no_workers(fx, "after ddprun exited");
  expect_reports(p, report);
  const char *out = dr_l_out(p);
  if (strstr(out, "[rank0]:ignoring SIGTERM\n") == NULL ||
      strstr(out, "[rank1]:ignoring SIGTERM\n") == NULL)
    fail_msg("the workers did not both see (and ignore) SIGTERM");
  /* SIGKILL after the grace: not before, and not much later. */
  if (ms < STOP_GRACE_MS - 50 || ms > STOP_GRACE_MS + KILL_LATE_MS)
    fail_msg("ddprun exited %.0f ms after SIGTERM; with --stop-grace %d ms "
             "expected between %d and %d ms",
             ms, STOP_GRACE_MS, STOP_GRACE_MS - 50,
             STOP_GRACE_MS + KILL_LATE_MS);
}

/* A worker that is a shell running the probe as its child (no exec), as
 * a wrapper script does. */
static void shell_worker(char *cmd, size_t cap, dr_l_fixture_t *fx,
                         const char *probe_args) {
  snprintf(cmd, cap, "%s %s --marker %s; true", dr_l_probe_path(), probe_args,
           fx->marker);
}

DR_L_TEST(sigterm_grace_for_group) {
  /* The stop grace covers the worker's whole process group: the shell
   * dies of SIGTERM at once, but the program it runs still gets its
   * SIGTERM and the grace before SIGKILL. */
  char report[600], probe_args[700], cmd[1400], grace[16];
  snprintf(report, sizeof(report), "%s", dr_l_path(fx, "signals"));
  snprintf(probe_args, sizeof(probe_args), "--report-signal %s --ignore-term",
           report);
  shell_worker(cmd, sizeof(cmd), fx, probe_args);
  snprintf(grace, sizeof(grace), "%g", STOP_GRACE_MS / 1000.0);
  dr_l_proc_t *p =
      dr_l_ddprun(fx, "node0",
                  DR_H_ARGS("--standalone", "--nproc-per-node", "1",
                            "--stop-grace", grace, "/bin/sh", "-c", cmd),
                  NULL);
  wait_started(p, 1);
  double t0 = dr_h_now_ms();
  assert_int_equal(kill(p->pid, SIGTERM), 0);
  dr_l_expect_exit(p, 128 + SIGTERM, END_MS);
  double ms = p->t_end - t0;
  assert_no_workers(fx, "after ddprun exited");
  if (strstr(dr_l_out(p), "[rank0]:ignoring SIGTERM\n") == NULL)
    fail_msg("the program under the worker's shell never saw SIGTERM: it was "
             "killed %.0f ms after ddprun got SIGTERM, --stop-grace is %d ms",
             ms, STOP_GRACE_MS);
  if (ms < STOP_GRACE_MS - 50)
    fail_msg("the worker's process group was killed %.0f ms after SIGTERM, "
             "before the %d ms grace",
             ms, STOP_GRACE_MS);
}

DR_L_TEST(agent_sigkill) {
  dr_l_proc_t *p = dr_l_ddprun(fx, "node0",
                               DR_H_ARGS("--standalone", "--nproc-per-node",
                                         "3", dr_l_probe_path(), "--sleep-ms",
                                         "60000", "--marker", fx->marker),
                               NULL);
  wait_started(p, 3);
  assert_int_equal(kill(p->pid, SIGKILL), 0);
  dr_l_expect_exit(p, 128 + SIGKILL, END_MS);
  size_t left = dr_l_wait_marker_gone(fx->marker, 3000);
  if (left > 0)
    fail_msg("%zu workers outlived their SIGKILLed agent by 3 s", left);
}

DR_L_TEST(agent_sigkill_grandchildren) {
  /* The processes a worker started die with the agent too: nothing of the
   * job may remain, whatever the worker's process tree looks like. */
  char cmd[1400];
  shell_worker(cmd, sizeof(cmd), fx, "--sleep-ms 60000");
  dr_l_proc_t *p = dr_l_ddprun(
      fx, "node0",
      DR_H_ARGS("--standalone", "--nproc-per-node", "2", "/bin/sh", "-c", cmd),
      NULL);
  wait_started(p, 2);
  assert_int_equal(kill(p->pid, SIGKILL), 0);
  dr_l_expect_exit(p, 128 + SIGKILL, END_MS);
  size_t left = dr_l_wait_marker_gone(fx->marker, 3000);
  if (left > 0)
    fail_msg("%zu processes started by the workers outlived their SIGKILLed "
             "agent by 3 s",
             left);
}

DR_L_TEST(agent_sigkill_2x2) {
  /* One node's agent dies: its workers die with it, and the other node
   * stops its own (the restart budget is 0), so nothing of the job is
   * left. */
  const char *id = "job-kill";
  uint16_t port = dr_l_rdzv(fx, DR_H_ARGS("--nnodes", "2", "--rdzv-id", id,
                                          "--heartbeat-timeout", "1",
                                          "--replacement-timeout", "0"));
  char endpoint[64];
  snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", port);
  dr_l_proc_t *nodes[2];
  for (int i = 0; i < 2; i++)
    nodes[i] =
        dr_l_ddprun(fx, i == 0 ? "node0" : "node1",
                    DR_H_ARGS("--nnodes", "2", "--nproc-per-node", "2",
                              "--rdzv-endpoint", endpoint, "--rdzv-id", id,
                              "--rdzv-conf", "is_host=0", dr_l_probe_path(),
                              "--sleep-ms", "60000", "--marker", fx->marker),
                    NULL);
  for (int i = 0; i < 2; i++)
    wait_started(nodes[i], 2);
  assert_int_equal(kill(nodes[1]->pid, SIGKILL), 0);
  dr_l_expect_exit(nodes[1], 128 + SIGKILL, END_MS);
  if (dr_l_wait(nodes[0], END_MS) != 0)
    fail_msg("node0 still running %d ms after the other agent died", END_MS);
  if (dr_l_code(nodes[0]) == 0)
    fail_msg("node0 exited 0 although a node of its job died");
  size_t left = dr_l_wait_marker_gone(fx->marker, 3000);
  if (left > 0)
    fail_msg("%zu workers of the job still running 3 s after both agents "
             "ended",
             left);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(worker_exit_2x2, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(worker_segv, dr_l_setup, dr_l_teardown),
      cmocka_unit_test_setup_teardown(missing_program, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(exec_failure_at_spawn, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(sigterm_forwarded, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(sigterm_escalates, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(sigterm_grace_for_group, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(agent_sigkill, dr_l_setup, dr_l_teardown),
      cmocka_unit_test_setup_teardown(agent_sigkill_grandchildren, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(agent_sigkill_2x2, dr_l_setup,
                                      dr_l_teardown),
  };
  return DR_L_MAIN("launch_fail", tests, argc, argv);
}
