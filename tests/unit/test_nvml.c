/* What process groups use of the GPUs (agent/nvml.h), from a stand-in
 * NVML (fake_nvml.c, driven by its environment variables): the processes
 * that hold a context and their memory, through the newest process list
 * and through the first one (16-byte records), each device's memory and
 * utilisation, a group's sum, and everything unknown without NVML. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nvml.h"

#define GIB (1ull << 30)

static int clear_env(void **state) {
  (void)state;
  unsetenv("FAKE_NVML_UTIL");
  unsetenv("FAKE_NVML_PID");
  unsetenv("FAKE_NVML_MEM");
  unsetenv("FAKE_NVML_PROCS");
  unsetenv("FAKE_NVML_PROCS_FILE");
  unsetenv("FAKE_NVML_OLD");
  unsetenv("FAKE_NVML_INIT_FAILS");
  return 0;
}

static dr_nvml_t *open_fake(void) {
  dr_nvml_t *g = NULL;
  char why[256] = "";
  assert_int_equal(dr_nvml_open(FAKE_NVML, &g, why, sizeof(why)), 0);
  assert_non_null(g);
  return g;
}

static void assert_unknown(const dr_nvml_use_t *u) {
  assert_int_equal(u->mem_bytes, DR_NVML_UNKNOWN);
  assert_int_equal(u->util, UINT32_MAX);
  assert_int_equal(u->dev_used_bytes, DR_NVML_UNKNOWN);
  assert_int_equal(u->dev_total_bytes, DR_NVML_UNKNOWN);
}

/* Three processes of group 100 (two on device 0, one on device 1), one of
 * group 200 on device 1, one whose group is unknown. */
static void check_groups(dr_nvml_t *g) {
  const dr_nvml_proc_t *p;
  size_t n = dr_nvml_procs(g, &p);
  assert_int_equal(n, 5);
  /* Device by device, in NVML's order. */
  assert_int_equal(p[0].pid, 4242);
  assert_int_equal(p[0].dev, 0);
  assert_int_equal(p[0].mem_bytes, 3 * GIB);
  assert_int_equal(p[1].pid, 4243);
  assert_int_equal(p[1].mem_bytes, 512ull << 20);
  assert_int_equal(p[2].pid, 4244);
  assert_int_equal(p[2].dev, 1);
  assert_int_equal(p[3].pid, 5000);
  assert_int_equal(p[4].pid, 6000);
  const pid_t grp[5] = {100, 100, 100, 200, -1};
  const pid_t pgids[3] = {100, 200, 300};
  dr_nvml_use_t u[3];
  dr_nvml_group_use(g, grp, pgids, 3, u);
  /* Group 100: every process's memory; the busier device's utilisation
   * (37% on device 1); the fuller device (1: 76 of 80 GiB). */
  assert_int_equal(u[0].mem_bytes, 3 * GIB + (512ull << 20) + GIB);
  assert_int_equal(u[0].util, 37);
  assert_int_equal(u[0].dev_used_bytes, 76 * GIB);
  assert_int_equal(u[0].dev_total_bytes, 80 * GIB);
  assert_int_equal(u[1].mem_bytes, 2 * GIB);
  assert_int_equal(u[1].util, 37);
  /* A group with no process on a GPU: nothing known, not 0. */
  assert_unknown(&u[2]);
}

static void test_procs_and_groups(void **state) {
  (void)state;
  setenv("FAKE_NVML_UTIL", "5,37", 1);
  setenv("FAKE_NVML_MEM", "10737418240:85899345920,81604378624:85899345920",
         1);
  setenv("FAKE_NVML_PROCS",
         "0:4242:3221225472,0:4243:536870912,1:4244:1073741824,"
         "1:5000:2147483648,1:6000:1",
         1);
  dr_nvml_t *g = open_fake();
  /* Nothing before the first refresh. */
  const dr_nvml_proc_t *p;
  assert_int_equal(dr_nvml_procs(g, &p), 0);
  dr_nvml_refresh(g);
  check_groups(g);
  /* A driver older than the library: the first list, 16-byte records,
   * gives the same. */
  setenv("FAKE_NVML_OLD", "1", 1);
  dr_nvml_refresh(g);
  check_groups(g);
  /* The processes change between refreshes. */
  setenv("FAKE_NVML_PROCS", "1:4244:1024", 1);
  dr_nvml_refresh(g);
  assert_int_equal(dr_nvml_procs(g, &p), 1);
  assert_int_equal(p[0].mem_bytes, 1024);
  dr_nvml_close(&g);
  assert_null(g);
}

/* A process whose memory NVML cannot give makes its group's unknown; a
 * device without memory figures leaves them unknown. */
static void test_not_available(void **state) {
  (void)state;
  setenv("FAKE_NVML_UTIL", "50,0", 1);
  setenv("FAKE_NVML_PROCS", "0:4242:-1,0:4243:1000", 1);
  dr_nvml_t *g = open_fake();
  dr_nvml_refresh(g);
  const dr_nvml_proc_t *p;
  assert_int_equal(dr_nvml_procs(g, &p), 2);
  assert_int_equal(p[0].mem_bytes, DR_NVML_UNKNOWN);
  const pid_t grp[2] = {100, 200};
  const pid_t pgids[3] = {100, 200, 0};
  dr_nvml_use_t u[3];
  dr_nvml_group_use(g, grp, pgids, 3, u);
  assert_int_equal(u[0].mem_bytes, DR_NVML_UNKNOWN);
  assert_int_equal(u[0].util, 50);
  assert_int_equal(u[0].dev_used_bytes, DR_NVML_UNKNOWN);
  assert_int_equal(u[0].dev_total_bytes, DR_NVML_UNKNOWN);
  assert_int_equal(u[1].mem_bytes, 1000);
  assert_unknown(&u[2]); /* group 0: no worker */
  dr_nvml_close(&g);
}

/* Many processes on a device: the lists grow to hold them. */
static void test_many(void **state) {
  (void)state;
  char procs[4000];
  size_t k = 0;
  for (int i = 0; i < 150; i++)
    k += (size_t)snprintf(procs + k, sizeof(procs) - k, "%s0:%d:%d",
                          i ? "," : "", 10000 + i, 1000 + i);
  setenv("FAKE_NVML_PROCS", procs, 1);
  dr_nvml_t *g = open_fake();
  dr_nvml_refresh(g);
  const dr_nvml_proc_t *p;
  assert_int_equal(dr_nvml_procs(g, &p), 150);
  assert_int_equal(p[149].pid, 10149);
  assert_int_equal(p[149].mem_bytes, 1149);
  dr_nvml_close(&g);
}

static void test_without_nvml(void **state) {
  (void)state;
  dr_nvml_t *g = (dr_nvml_t *)1;
  char why[256];
  assert_true(dr_nvml_open("/nonexistent/libnvidia-ml.so.1", &g, why,
                           sizeof(why)) < 0);
  assert_null(g);
  dr_nvml_refresh(NULL);
  const dr_nvml_proc_t *p = (const dr_nvml_proc_t *)1;
  assert_int_equal(dr_nvml_procs(NULL, &p), 0);
  assert_null(p);
  const pid_t pgids[2] = {100, 200};
  dr_nvml_use_t u[2];
  dr_nvml_group_use(NULL, NULL, pgids, 2, u);
  assert_unknown(&u[0]);
  assert_unknown(&u[1]);
  dr_nvml_close(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_procs_and_groups, clear_env),
      cmocka_unit_test_setup(test_not_available, clear_env),
      cmocka_unit_test_setup(test_many, clear_env),
      cmocka_unit_test_setup(test_without_nvml, clear_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
