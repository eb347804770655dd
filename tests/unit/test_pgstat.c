/* Process groups' memory and CPU use (agent/pgstat.h): the stat line's
 * fields, a fake /proc tree, real children that hold a known amount of
 * memory, a group's use over made-up samples, and the OOM killer's count
 * from a fake /proc/vmstat and memory.events. */
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
#include <unistd.h>

#include <cmocka.h>

#include "pgstat.h"

/* A temporary directory per test, removed after it. */
typedef struct {
  char root[64];
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  snprintf(f->root, sizeof(f->root), "/tmp/test_pgstat_XXXXXX");
  if (mkdtemp(f->root) == NULL) {
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
  int rc = system(cmd);
  free(f);
  return rc == 0 ? 0 : -1;
}

static void put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void put_stat(const char *root, int pid, const char *stat) {
  char path[256];
  snprintf(path, sizeof(path), "%s/%d", root, pid);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/%d/stat", root, pid);
  put_file(path, stat);
}

/* ---- the stat line ------------------------------------------------------ */

static void test_parse(void **state) {
  (void)state;
  dr_pgstat_proc_t x;
  /* A whole line of a real kernel: rss (field 24) is 5120 pages; the
   * priority and nice of a real-time thread are negative. */
  assert_int_equal(
      dr_pgstat_parse_proc("4242 (pt (data) worker) S 1 4200 4200 0 -1 "
                           "4194560 100 0 0 0 250 50 3 4 -21 -20 9 0 "
                           "1234567 987654321 5120 18446744073709551615 "
                           "1 1 0 0 0 0 0 0 0\n",
                           &x),
      0);
  assert_int_equal(x.state, 'S');
  assert_int_equal(x.pgrp, 4200);
  assert_int_equal(x.ticks, 300);
  assert_int_equal(x.rss_pages, 5120);
  /* A line that stops after stime (an old fake): no memory, still valid. */
  assert_int_equal(
      dr_pgstat_parse_proc("7 (x) R 1 7 1 0 -1 0 0 0 0 0 7 3\n", &x), 0);
  assert_int_equal(x.ticks, 10);
  assert_int_equal(x.rss_pages, 0);
  /* One that stops before stime, or has no comm, is malformed. */
  assert_int_equal(dr_pgstat_parse_proc("7 (x) R 1 7 1 0 -1 0 0 0 0 0 7\n", &x),
                   -EINVAL);
  assert_int_equal(dr_pgstat_parse_proc("garbage\n", &x), -EINVAL);
  assert_int_equal(dr_pgstat_parse_proc("7 (x)", &x), -EINVAL);
  /* The stall rule's parser reads the same line. */
  char st;
  pid_t pg;
  uint64_t ticks;
  assert_int_equal(dr_pgstat_parse("9 (y) D 1 8 1 0 -1 0 0 0 0 0 2 2 0 0 20 "
                                   "0 1 0 5 6 77\n",
                                   &st, &pg, &ticks),
                   0);
  assert_int_equal(st, 'D');
  assert_int_equal(pg, 8);
  assert_int_equal(ticks, 4);
}

/* A fake tree: a group's RSS is its live members' pages summed (a zombie
 * and another group's process excluded). */
static void test_fake_tree_rss(void **state) {
  fx_t *f = *state;
  const char *tail = " 0 0 20 0 1 0 100 4096 ";
  char line[256];
  snprintf(line, sizeof(line), "100 (python3) S 1 100 1 0 -1 0 0 0 0 0 250 "
           "50%s1000 0\n", tail);
  put_stat(f->root, 100, line);
  snprintf(line, sizeof(line), "101 (pt_data_worker) S 100 100 1 0 -1 0 0 0 "
           "0 0 7 3%s300 0\n", tail);
  put_stat(f->root, 101, line);
  snprintf(line, sizeof(line), "102 (zombie) Z 100 100 1 0 -1 0 0 0 0 0 9 9"
           "%s999 0\n", tail);
  put_stat(f->root, 102, line);
  snprintf(line, sizeof(line), "200 (other) S 1 200 1 0 -1 0 0 0 0 0 1 1"
           "%s42 0\n", tail);
  put_stat(f->root, 200, line);
  pid_t pg[3] = {100, 200, 300};
  dr_pgstat_t out[3];
  assert_int_equal(dr_pgstat_scan(f->root, pg, 3, out), 0);
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  assert_int_equal(out[0].n_members, 2);
  assert_int_equal(out[0].cpu_ticks, 310);
  assert_int_equal(out[0].rss_bytes, 1300 * page);
  assert_int_equal(out[1].rss_bytes, 42 * page);
  assert_int_equal(out[2].n_members, 0);
  assert_int_equal(out[2].rss_bytes, 0);
}

/* ---- real children ------------------------------------------------------- */

/* Touches every page of n_bytes of new memory (through a volatile
 * pointer: a compiler may drop a memset of memory that is never read). */
static void touch(size_t n_bytes) {
  volatile char *m = malloc(n_bytes);
  if (m == NULL)
    _exit(1);
  for (size_t i = 0; i < n_bytes; i += 4096)
    m[i] = 1;
}

/* A child in a group of its own that touches mib MiB, and whose own child
 * (same group) touches child_mib; tells the parent through a pipe once
 * both hold it, then waits to be killed. */
static pid_t holder(size_t mib, size_t child_mib) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    close(p[0]);
    if (child_mib > 0 && fork() == 0) {
      touch(child_mib << 20);
      if (write(p[1], "c", 1) != 1)
        _exit(1);
      pause();
      _exit(0);
    }
    touch(mib << 20);
    if (write(p[1], "p", 1) != 1)
      _exit(1);
    pause();
    _exit(0);
  }
  setpgid(pid, pid);
  close(p[1]);
  char c;
  for (int want = child_mib > 0 ? 2 : 1; want > 0; want--)
    assert_int_equal(read(p[0], &c, 1), 1); /* a pipe that reports: no sleep */
  close(p[0]);
  return pid;
}

static void test_real_rss(void **state) {
  (void)state;
  pid_t a = holder(48, 24), b = holder(8, 0);
  pid_t pg[2] = {a, b};
  dr_pgstat_t g[2];
  assert_int_equal(dr_pgstat_scan(NULL, pg, 2, g), 0);
  kill(-a, SIGKILL);
  kill(-b, SIGKILL);
  waitpid(a, NULL, 0);
  waitpid(b, NULL, 0);
  /* The group holds what both processes touched (and their code); the
   * other only its own. The thread sanitizer's shadow memory adds a
   * multiple of what a process touches to its RSS: no upper bound there. */
  assert_int_equal(g[0].n_members, 2);
  assert_true(g[0].rss_bytes >= (72ull << 20));
#ifndef __SANITIZE_THREAD__
  assert_true(g[0].rss_bytes < (72ull << 20) + (64ull << 20));
#endif
  assert_int_equal(g[1].n_members, 1);
  assert_true(g[1].rss_bytes >= (8ull << 20));
  assert_true(g[1].rss_bytes < g[0].rss_bytes);
}

/* ---- use over time ------------------------------------------------------ */

static dr_pgstat_t grp(uint64_t ticks, uint64_t rss) {
  dr_pgstat_t g;
  memset(&g, 0, sizeof(g));
  g.n_members = 1;
  g.cpu_ticks = ticks;
  g.rss_bytes = rss;
  g.leader_state = 'R';
  return g;
}

static void test_use(void **state) {
  (void)state;
  dr_pgstat_use_t u;
  dr_pgstat_use_init(&u);
  assert_int_equal(u.rss_bytes, DR_PGSTAT_UNKNOWN);
  assert_int_equal(u.rss_peak_bytes, DR_PGSTAT_UNKNOWN);
  assert_int_equal(u.cpu_milli, UINT32_MAX);
  /* The first sample: memory known, CPU not (no window yet). */
  dr_pgstat_t g = grp(1000, 300u << 20);
  dr_pgstat_use_sample(&u, &g, 10000, 100);
  assert_true(u.live);
  assert_int_equal(u.rss_bytes, 300u << 20);
  assert_int_equal(u.rss_peak_bytes, 300u << 20);
  assert_int_equal(u.cpu_milli, UINT32_MAX);
  /* Within the window: still no figure; the memory follows. */
  g = grp(1100, 500u << 20);
  dr_pgstat_use_sample(&u, &g, 11000, 100);
  assert_int_equal(u.cpu_milli, UINT32_MAX);
  assert_int_equal(u.rss_peak_bytes, 500u << 20);
  /* 2.5 s, 375 ticks of 1/100 s: 1.5 CPUs. The peak stays. */
  g = grp(1375, 200u << 20);
  dr_pgstat_use_sample(&u, &g, 12500, 100);
  assert_int_equal(u.cpu_milli, 1500);
  assert_int_equal(u.rss_bytes, 200u << 20);
  assert_int_equal(u.rss_peak_bytes, 500u << 20);
  /* A member left with its ticks: the sum fell; 0, not a wrap. */
  g = grp(1000, 200u << 20);
  dr_pgstat_use_sample(&u, &g, 14500, 100);
  assert_int_equal(u.cpu_milli, 0);
  /* Then exact again: 20 ticks in 2 s, a tenth of a CPU. */
  g = grp(1020, 200u << 20);
  dr_pgstat_use_sample(&u, &g, 16500, 100);
  assert_int_equal(u.cpu_milli, 100);
  /* The group is gone: the last figures stay, marked not live. */
  dr_pgstat_t none;
  memset(&none, 0, sizeof(none));
  dr_pgstat_use_sample(&u, &none, 17000, 100);
  assert_false(u.live);
  assert_int_equal(u.rss_bytes, 200u << 20);
  assert_int_equal(u.rss_peak_bytes, 500u << 20);
}

/* ---- the OOM killer's count ------------------------------------------ */

static void test_oom_kills(void **state) {
  fx_t *f = *state;
  char path[256];
  uint64_t n = 99;
  /* No vmstat in the tree. */
  assert_int_equal(dr_pgstat_oom_kills(f->root, &n), -ENOENT);
  /* One that lacks the line (a kernel before 4.13), keys that only begin
   * with it not taken for it. */
  snprintf(path, sizeof(path), "%s/vmstat", f->root);
  put_file(path, "nr_free_pages 1000\noom_kill_extra 5\npgfault 7\n");
  assert_int_equal(dr_pgstat_oom_kills(f->root, &n), -ENOENT);
  assert_int_equal(n, 99);
  put_file(path, "nr_free_pages 1000\npgfault 7\noom_kill 12\nfoo 1\n");
  assert_int_equal(dr_pgstat_oom_kills(f->root, &n), 0);
  assert_int_equal(n, 12);
  /* This host's own counts. */
  uint64_t real;
  int rc = dr_pgstat_oom_kills(NULL, &real);
  assert_true(rc == 0 || rc == -ENOENT);
  /* A cgroup v2 memory.events. */
  snprintf(path, sizeof(path), "%s/memory.events", f->root);
  put_file(path, "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n"
                 "oom_group_kill 0\n");
  assert_int_equal(dr_pgstat_cgroup_oom_kills(path, &n), 0);
  assert_int_equal(n, 2);
  snprintf(path, sizeof(path), "%s/none.events", f->root);
  assert_int_equal(dr_pgstat_cgroup_oom_kills(path, &n), -ENOENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test_setup_teardown(test_fake_tree_rss, setup, teardown),
      cmocka_unit_test(test_real_rss),
      cmocka_unit_test(test_use),
      cmocka_unit_test_setup_teardown(test_oom_kills, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
