/* The stall rule of --hang-timeout: CPU samples (made up, from a fake /proc
 * tree, and from real spinning, sleeping and stopped children), the choice
 * of the culprit, and NVML loaded from a stand-in library. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nvml.h"
#include "pgstat.h"
#include "stall.h"

static const dr_stall_cfg_t S5 = {5000, 100};

/* Feeds samples every step_ms from t0 to t1, the CPU growing by per_s
 * ticks a second (fractions carried), to s; returns the last time. */
static uint64_t feed(dr_stall_t *s, const dr_stall_cfg_t *c, dr_pgstat_t *g,
                     uint64_t t0, uint64_t t1, uint64_t step_ms,
                     double per_s) {
  static double carry;
  uint64_t t = t0;
  for (; t <= t1; t += step_ms) {
    carry += per_s * (double)step_ms / 1000.0;
    while (carry >= 1.0) {
      g->cpu_ticks++;
      carry -= 1.0;
    }
    dr_stall_sample(s, c, t, g, 0);
  }
  return t - step_ms;
}

static void test_allowance(void **state) {
  (void)state;
  assert_int_equal(dr_stall_allowance(&S5), 5);
  dr_stall_cfg_t one = {1000, 100};
  assert_int_equal(dr_stall_allowance(&one), 2);
  dr_stall_cfg_t big = {300000, 100};
  assert_int_equal(dr_stall_allowance(&big), 300);
}

static void test_busy_and_idle(void **state) {
  (void)state;
  dr_stall_t s;
  dr_pgstat_t g = {.n_members = 1, .members_id = 7};
  dr_stall_start(&s, 1000);
  uint64_t t = feed(&s, &S5, &g, 1000, 11000, 500, 100); /* one CPU */
  assert_true(dr_stall_quiet_ms(&s, &S5) <= 500);
  assert_true(dr_stall_cpu_pct(&s, &S5, 2000) >= 95);
  /* Then a waiting rank's wake-ups: 1 tick every 2 s. */
  t = feed(&s, &S5, &g, t + 500, t + 6000, 500, 0.5);
  assert_true(dr_stall_quiet_ms(&s, &S5) >= 5000);
  assert_true(dr_stall_cpu_pct(&s, &S5, 2000) < 5);
  /* And busy again: not quiet any more. */
  feed(&s, &S5, &g, t + 500, t + 1000, 500, 100);
  assert_true(dr_stall_quiet_ms(&s, &S5) <= 500);
}

/* A rank that never used its allowance is quiet since it started. */
static void test_quiet_from_start(void **state) {
  (void)state;
  dr_stall_t s;
  dr_pgstat_t g = {.n_members = 1, .members_id = 7, .cpu_ticks = 300};
  dr_stall_start(&s, 1000);
  feed(&s, &S5, &g, 1000, 3000, 500, 0);
  assert_int_equal(dr_stall_quiet_ms(&s, &S5), 2000);
  /* Long after the ring has wrapped: at least what it reaches back. */
  feed(&s, &S5, &g, 3500, 100000, 500, 0);
  assert_true(dr_stall_quiet_ms(&s, &S5) >= 5000);
}

/* Members starting or ending are activity, even when the sum falls. */
static void test_members_change(void **state) {
  (void)state;
  dr_stall_t s;
  dr_pgstat_t g = {.n_members = 2, .members_id = 7, .cpu_ticks = 500};
  dr_stall_start(&s, 0);
  uint64_t t = feed(&s, &S5, &g, 0, 6000, 500, 0);
  assert_true(dr_stall_quiet_ms(&s, &S5) >= 5000);
  g.n_members = 1;
  g.members_id = 3;
  g.cpu_ticks = 200; /* a child with 300 ticks ended */
  dr_stall_sample(&s, &S5, t + 500, &g, 0);
  assert_true(dr_stall_quiet_ms(&s, &S5) <= 500);
  g.members_id = 4; /* same count, another pid */
  feed(&s, &S5, &g, t + 1000, t + 7000, 500, 0);
  assert_true(dr_stall_quiet_ms(&s, &S5) >= 5000);
}

static void test_gpu_busy(void **state) {
  (void)state;
  dr_stall_t s;
  dr_pgstat_t g = {.n_members = 1, .members_id = 7};
  dr_stall_start(&s, 0);
  for (uint64_t t = 0; t <= 8000; t += 500)
    dr_stall_sample(&s, &S5, t, &g, t <= 6000); /* a kernel runs until 6 s */
  assert_int_equal(dr_stall_quiet_ms(&s, &S5), 2000);
}

/* ---- the verdict --------------------------------------------------------- */

static dr_rank_view_t rank(uint64_t quiet, dr_place_t place) {
  dr_rank_view_t v = {1, 0, quiet, 0, 0, 0, place};
  return v;
}

static void test_nothing_stalled(void **state) {
  (void)state;
  dr_rank_view_t v[2] = {rank(400, DR_PLACE_UNKNOWN), rank(4999, 0)};
  dr_verdict_t d = dr_stall_judge(v, 2, 5000, 9000, 0);
  assert_int_equal(d.stalled, 0);
  assert_int_equal(d.named, -1);
  /* A dead rank, however quiet, is not judged. */
  v[0].alive = 0;
  v[0].quiet_ms = 60000;
  assert_int_equal(dr_stall_judge(v, 2, 5000, 9000, 0).stalled, 0);
}

/* The PyTorch job: rank 1 sleeps, rank 0 waits in backward; both quiet. */
static void test_sleeper_named(void **state) {
  (void)state;
  dr_rank_view_t v[2] = {rank(5100, DR_PLACE_COLLECTIVE),
                         rank(5100, DR_PLACE_SLEEP)};
  dr_verdict_t d = dr_stall_judge(v, 2, 5000, 9000, 0);
  assert_int_equal(d.stalled, 2);
  assert_int_equal(d.named, 1);
  assert_int_equal(d.why, DR_WHY_SLEEPING);
  /* Known only by the kernel (py-spy absent): waiting on a futex versus
   * sleeping: the same. */
  v[0].place = DR_PLACE_WAIT;
  d = dr_stall_judge(v, 2, 5000, 9000, 0);
  assert_int_equal(d.named, 1);
}

/* train: rank 3 stopped in its all-reduce, its peer waiting. */
static void test_stopped_named(void **state) {
  (void)state;
  dr_rank_view_t v[2] = {rank(3200, DR_PLACE_COLLECTIVE),
                         rank(3100, DR_PLACE_COLLECTIVE)};
  v[0].reports = v[1].reports = 1;
  v[1].stopped = 1;
  dr_verdict_t d = dr_stall_judge(v, 2, 3000, 5250, 0);
  assert_int_equal(d.named, 1);
  assert_int_equal(d.why, DR_WHY_STOPPED);
}

/* A rank that reports, stops reporting and burns the CPU. */
static void test_busy_named(void **state) {
  (void)state;
  dr_rank_view_t v[3] = {rank(5300, DR_PLACE_WAIT), rank(5200, 0),
                         rank(5300, DR_PLACE_WAIT)};
  for (int i = 0; i < 3; i++)
    v[i].reports = 1;
  v[1].busy = 1;
  dr_verdict_t d = dr_stall_judge(v, 3, 5000, 9000, 0);
  assert_int_equal(d.named, 1);
  assert_int_equal(d.why, DR_WHY_BUSY);
  /* Busy in a collective is a rank that spins while it waits (NCCL):
   * then the one outside the collective is named. */
  v[1].place = DR_PLACE_COLLECTIVE;
  v[0].place = DR_PLACE_COLLECTIVE;
  d = dr_stall_judge(v, 3, 5000, 9000, 0);
  assert_int_equal(d.named, 2);
  assert_int_equal(d.why, DR_WHY_OFF_COLLECTIVE);
  /* A stopped rank outranks a busy one. */
  v[0].stopped = 1;
  v[1].place = DR_PLACE_UNKNOWN;
  d = dr_stall_judge(v, 3, 5000, 9000, 0);
  assert_int_equal(d.named, 0);
  assert_int_equal(d.why, DR_WHY_STOPPED);
}

/* A program that does not report: one rank spins, its peers wait idle. */
static void test_busy_peer_named(void **state) {
  (void)state;
  dr_rank_view_t v[2] = {rank(5500, DR_PLACE_WAIT), rank(300, 0)};
  v[1].busy = 1;
  dr_verdict_t d = dr_stall_judge(v, 2, 5000, 9000, 0);
  assert_int_equal(d.stalled, 1);
  assert_int_equal(d.named, 1);
  assert_int_equal(d.why, DR_WHY_BUSY_PEERS_WAIT);
  /* Not when the busy rank reports (and so progresses), nor when it is in
   * a collective itself. */
  v[1].reports = 1;
  assert_int_equal(dr_stall_judge(v, 2, 5000, 9000, 0).named, -1);
  v[1].reports = 0;
  v[1].place = DR_PLACE_COLLECTIVE;
  d = dr_stall_judge(v, 2, 5000, 9000, 0);
  assert_int_equal(d.named, 0); /* then the waiter is off the collective */
  assert_int_equal(d.why, DR_WHY_OFF_COLLECTIVE);
}

/* Every rank waits: the culprit is elsewhere, named first by its node;
 * here the one quiet longest, at the waiting time. */
static void test_all_wait(void **state) {
  (void)state;
  dr_rank_view_t v[3] = {rank(6000, DR_PLACE_COLLECTIVE),
                         rank(6100, DR_PLACE_COLLECTIVE),
                         rank(6000, DR_PLACE_UNKNOWN)};
  dr_verdict_t d = dr_stall_judge(v, 3, 5000, 9000, 0);
  assert_int_equal(d.stalled, 3);
  assert_int_equal(d.named, -1);
  v[1].quiet_ms = 9000;
  d = dr_stall_judge(v, 3, 5000, 9000, 0);
  assert_int_equal(d.named, 1);
  assert_int_equal(d.why, DR_WHY_WAITED);
  /* Without any stack: the same. */
  for (int i = 0; i < 3; i++)
    v[i].place = DR_PLACE_UNKNOWN;
  assert_int_equal(dr_stall_judge(v, 3, 5000, 9000, 0).why, DR_WHY_WAITED);
  v[1].quiet_ms = 8999;
  assert_int_equal(dr_stall_judge(v, 3, 5000, 9000, 0).named, -1);
  /* A disk wait outside a collective is its own doing. */
  v[2].disk_wait = 1;
  d = dr_stall_judge(v, 3, 5000, 9000, 0);
  assert_int_equal(d.named, 2);
  assert_int_equal(d.why, DR_WHY_DISK);
  assert_non_null(strstr(dr_stall_why_text(d.why), "disk"));
}

/* --hang-timeout auto: a long evaluation on one rank (busy, not reporting)
 * while its peers wait idle is not a hang; a rank busy outside a
 * collective is no culprit; the waiting ranks are named only once every
 * rank is stalled; the other rules stand. */
static void test_lenient(void **state) {
  (void)state;
  dr_rank_view_t v[3] = {rank(9500, DR_PLACE_COLLECTIVE), rank(0, 0),
                         rank(9500, DR_PLACE_COLLECTIVE)};
  v[1].busy = 1; /* evaluating */
  dr_verdict_t d = dr_stall_judge(v, 3, 5000, 9000, 1);
  assert_int_equal(d.stalled, 2);
  assert_int_equal(d.named, -1);
  /* strict: the same ranks make a verdict */
  d = dr_stall_judge(v, 3, 5000, 9000, 0);
  assert_int_equal(d.named, 1);
  assert_int_equal(d.why, DR_WHY_BUSY_PEERS_WAIT);
  /* Stalled by its reports but busy: no culprit in auto. */
  v[1].quiet_ms = 9400;
  v[1].reports = 1;
  d = dr_stall_judge(v, 3, 5000, 9000, 1);
  assert_int_equal(d.named, -1);
  assert_int_equal(dr_stall_judge(v, 3, 5000, 9000, 0).why, DR_WHY_BUSY);
  /* Every rank stalled and waiting: named, as strict. */
  v[1].busy = 0;
  v[1].place = DR_PLACE_COLLECTIVE;
  d = dr_stall_judge(v, 3, 5000, 9000, 1);
  assert_int_equal(d.named, 0);
  assert_int_equal(d.why, DR_WHY_WAITED);
  /* One rank stalled asleep outside the collective: named. */
  v[2].place = DR_PLACE_SLEEP;
  v[0].quiet_ms = 0;
  d = dr_stall_judge(v, 3, 5000, 9000, 1);
  assert_int_equal(d.named, 2);
  assert_int_equal(d.why, DR_WHY_SLEEPING);
}

/* ---- /proc ------------------------------------------------------------- */

static void put(const char *root, int pid, const char *stat) {
  char path[256];
  snprintf(path, sizeof(path), "%s/%d", root, pid);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/%d/stat", root, pid);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(stat, f);
  fclose(f);
}

static void test_fake_proc(void **state) {
  (void)state;
  char root[] = "/tmp/test_stall_XXXXXX";
  assert_non_null(mkdtemp(root));
  /* pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
   * majflt cmajflt utime stime ... */
  put(root, 100, "100 (python3) S 1 100 1 0 -1 0 0 0 0 0 250 50 0 0 20 0\n");
  put(root, 101, "101 (pt worker (x)) R 100 100 1 0 -1 0 0 0 0 0 7 3 0 0\n");
  put(root, 102, "102 (zombie) Z 100 100 1 0 -1 0 0 0 0 0 99 99 0 0\n");
  put(root, 200, "200 (train) T 1 200 1 0 -1 0 0 0 0 0 1 1 0 0\n");
  put(root, 201, "201 (cp) D 200 200 1 0 -1 0 0 0 0 0 0 0 0 0\n");
  put(root, 300, "300 (other) S 1 300 1 0 -1 0 0 0 0 0 5 5 0 0\n");
  put(root, 301, "garbage\n");
  pid_t pg[3] = {100, 200, 400};
  dr_pgstat_t out[3];
  assert_int_equal(dr_pgstat_scan(root, pg, 3, out), 0);
  assert_int_equal(out[0].cpu_ticks, 310);
  assert_int_equal(out[0].n_members, 2);
  assert_false(out[0].stopped);
  assert_false(out[0].job_stopped);
  assert_int_equal(out[0].leader_state, 'S');
  assert_int_equal(out[1].n_members, 2);
  assert_true(out[1].stopped);
  assert_true(out[1].job_stopped);
  assert_true(out[1].disk_wait);
  assert_int_equal(out[2].n_members, 0);
  assert_int_equal(out[2].leader_state, '\0');
  assert_int_equal(dr_pgstat_pgrp(root, 101), 100);
  assert_int_equal(dr_pgstat_pgrp(root, 301), -1);
  assert_int_equal(dr_pgstat_pgrp(root, 999), -1);
  assert_int_equal(dr_pgstat_scan("/nonexistent", pg, 3, out), -ENOENT);
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
  assert_int_equal(system(cmd), 0);
}

static pid_t child(int spin) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    time_t end = time(NULL) + 20;
    if (spin)
      while (time(NULL) < end)
        ;
    else
      sleep(20);
    _exit(0);
  }
  setpgid(pid, pid);
  return pid;
}

/* The rule on real processes: a spinner is busy, a sleeper quiet, a
 * stopped one stopped. */
static void test_real_children(void **state) {
  (void)state;
  pid_t pg[2] = {child(1), child(0)};
  dr_stall_cfg_t c = {1000, sysconf(_SC_CLK_TCK)};
  dr_stall_t s[2];
  dr_pgstat_t g[2];
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < 2; i++)
    dr_stall_start(&s[i], 0);
  /* Samples at the real times they are taken (on a loaded host a 100 ms
   * sleep takes longer); the spinner's real share of a CPU over the last
   * second, from its ticks, is what cpu_pct must report. */
  uint64_t t_ms[13], ticks[13];
  for (int k = 0; k <= 12; k++) {
    struct timespec ts = {0, 100000000}, t;
    if (k > 0)
      nanosleep(&ts, NULL);
    assert_int_equal(dr_pgstat_scan(NULL, pg, 2, g), 0);
    clock_gettime(CLOCK_MONOTONIC, &t);
    t_ms[k] = (uint64_t)((t.tv_sec - t0.tv_sec) * 1000 +
                         (t.tv_nsec - t0.tv_nsec) / 1000000);
    ticks[k] = g[0].cpu_ticks;
    for (int i = 0; i < 2; i++)
      dr_stall_sample(&s[i], &c, t_ms[k], &g[i], 0);
  }
  int j = 12;
  while (j > 0 && t_ms[12] - t_ms[j] < 1000)
    j--;
  double share = 100.0 * (double)(ticks[12] - ticks[j]) * 1000.0 /
                 (double)c.hz / (double)(t_ms[12] - t_ms[j]);
  print_message("spinner %u%% (its real share %.0f%%) quiet %llu ms; sleeper "
                "%u%% quiet %llu ms\n", dr_stall_cpu_pct(&s[0], &c, 1000),
                share, (unsigned long long)dr_stall_quiet_ms(&s[0], &c),
                dr_stall_cpu_pct(&s[1], &c, 1000),
                (unsigned long long)dr_stall_quiet_ms(&s[1], &c));
  double pct = dr_stall_cpu_pct(&s[0], &c, 1000);
  assert_true(pct >= share - 15 && pct <= share + 15);
  assert_true(share < DR_STALL_BUSY_PCT || pct >= DR_STALL_BUSY_PCT - 5);
  assert_true(dr_stall_quiet_ms(&s[0], &c) < 1000);
  assert_true(dr_stall_cpu_pct(&s[1], &c, 1000) < 5);
  assert_true(dr_stall_quiet_ms(&s[1], &c) >= 1000);
  assert_int_equal(g[1].n_members, 1);
  assert_int_equal(g[1].leader_state, 'S');
  kill(pg[1], SIGSTOP);
  for (int k = 0; k < 200; k++) {
    dr_pgstat_scan(NULL, pg, 2, g);
    if (g[1].stopped)
      break;
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  assert_true(g[1].stopped);
  assert_false(g[0].stopped);
  for (int i = 0; i < 2; i++) {
    kill(pg[i], SIGKILL);
    waitpid(pg[i], NULL, 0);
  }
}

/* ---- NVML ------------------------------------------------------------- */

static void test_nvml_missing(void **state) {
  (void)state;
  dr_nvml_t *g = (dr_nvml_t *)1;
  char why[256];
  assert_true(dr_nvml_open("/nonexistent/libnvidia-ml.so.1", &g, why,
                           sizeof(why)) < 0);
  assert_null(g);
  assert_non_null(strstr(why, "/nonexistent/libnvidia-ml.so.1"));
  /* Everything takes a missing NVML. */
  dr_nvml_refresh(NULL);
  const pid_t *pids;
  assert_int_equal(dr_nvml_busy_pids(NULL, &pids), 0);
  assert_int_equal(dr_nvml_device_busy(NULL, "0"), -1);
  dr_nvml_close(&g);
}

static void test_nvml_fake(void **state) {
  (void)state;
  setenv("FAKE_NVML_UTIL", "0,37", 1);
  setenv("FAKE_NVML_PID", "4242", 1);
  dr_nvml_t *g = NULL;
  char why[256] = "";
  assert_int_equal(dr_nvml_open(FAKE_NVML, &g, why, sizeof(why)), 0);
  dr_nvml_refresh(g);
  assert_int_equal(dr_nvml_device_busy(g, "0"), 0);
  assert_int_equal(dr_nvml_device_busy(g, "1"), 1);
  assert_int_equal(dr_nvml_device_busy(g, "GPU-fake-1"), 1);
  assert_int_equal(dr_nvml_device_busy(g, "GPU-none"), -1);
  assert_int_equal(dr_nvml_device_busy(g, "7"), -1);
  assert_int_equal(dr_nvml_device_busy(g, "x"), -1);
  assert_true(dr_nvml_per_process(g, "0"));
  assert_false(dr_nvml_per_process(g, "1")); /* not supported there */
  const pid_t *pids;
  assert_int_equal(dr_nvml_busy_pids(g, &pids), 1);
  assert_int_equal(pids[0], 4242);
  /* Samples already seen are not counted again. */
  dr_nvml_refresh(g);
  assert_int_equal(dr_nvml_busy_pids(g, &pids), 0);
  dr_nvml_close(&g);
  assert_null(g);
  setenv("FAKE_NVML_INIT_FAILS", "1", 1);
  assert_true(dr_nvml_open(FAKE_NVML, &g, why, sizeof(why)) < 0);
  assert_string_equal(why, "nvmlInit failed: fake: driver not loaded");
  unsetenv("FAKE_NVML_INIT_FAILS");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allowance),
      cmocka_unit_test(test_busy_and_idle),
      cmocka_unit_test(test_quiet_from_start),
      cmocka_unit_test(test_members_change),
      cmocka_unit_test(test_gpu_busy),
      cmocka_unit_test(test_nothing_stalled),
      cmocka_unit_test(test_sleeper_named),
      cmocka_unit_test(test_stopped_named),
      cmocka_unit_test(test_busy_named),
      cmocka_unit_test(test_busy_peer_named),
      cmocka_unit_test(test_all_wait),
      cmocka_unit_test(test_lenient),
      cmocka_unit_test(test_fake_proc),
      cmocka_unit_test(test_real_children),
      cmocka_unit_test(test_nvml_missing),
      cmocka_unit_test(test_nvml_fake),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
