/* `ddprun status` on the ranks' health (launcher/status): a JOB_STATUS
 * encoded as a server sends it, decoded, and its table read back: the
 * RSS, peak and CPU columns, the median and the ranks named above it, the
 * GPU columns only where some rank has a GPU figure, a nearly full GPU,
 * and --json's fields; and --env's summaries of the nodes. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "status_internal.h"
#include "wire.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

typedef struct {
  dr_buf_t buf;
  dr_msg_t msg;
  dr_status_report_t rep;
  char *out; /* what the last print wrote on stdout */
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  dr_buf_init(&f->buf);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  dr__status_report_free(&f->rep);
  dr_buf_free(&f->buf);
  free(f->out);
  free(f);
  return 0;
}

/* A running rank with no GPU figure. */
static dr_rank_rec_t rank(uint32_t r, uint64_t rss, uint64_t peak,
                          uint32_t cpu_milli) {
  dr_rank_rec_t x;
  memset(&x, 0, sizeof(x));
  x.rank = r;
  x.local_rank = r % 2;
  x.node_rank = r / 2;
  x.pid = 1000 + r;
  x.state = DR_RS_RUNNING;
  x.step = x.step_age_ms = x.rate_milli = DR_NONE;
  x.rss_bytes = rss;
  x.rss_peak_bytes = peak;
  x.cpu_milli = cpu_milli;
  x.gpu_mem_bytes = x.gpu_used_bytes = x.gpu_total_bytes = DR_NONE;
  x.gpu_util = DR_NO_U32;
  return x;
}

/* The JOB_STATUS of a running job of n ranks on n/2 nodes, with n_envs
 * env records (0, or one per node), decoded into f->rep. */
static void decode_envs(fx_t *f, const dr_rank_rec_t *ranks, size_t n,
                        const dr_env_rec_t *envs, size_t n_envs) {
  dr_node_rec_t nodes[4];
  for (uint32_t i = 0; i < n / 2; i++) {
    memset(&nodes[i], 0, sizeof(nodes[i]));
    nodes[i].node_rank = i;
    nodes[i].nproc = 2;
    nodes[i].first_rank = 2 * i;
    nodes[i].state = DR_NS_RUNNING;
    nodes[i].host = dr_str(i == 0 ? "host0" : "host1");
  }
  dr_job_status_t js;
  memset(&js, 0, sizeof(js));
  js.gen = 1;
  js.state = DR_JS_RUNNING;
  js.min_nodes = js.max_nodes = (uint32_t)(n / 2);
  js.exit_code = DR_NONE;
  js.elapsed_ms = 4200;
  dr_buf_reset(&f->buf);
  assert_int_equal(dr_enc_job_status(&f->buf, 1, &js, nodes, n / 2, ranks, n,
                                     NULL, 0, envs, n_envs),
                   0);
  dr_decoder_t d;
  dr_limits_t lim = dr_limits_default();
  dr_decoder_init(&d, &lim);
  d.authed = 1;
  size_t used, need;
  int err;
  assert_int_equal(dr_decode(&d, f->buf.data, f->buf.len, &f->msg, &used,
                             &need, &err),
                   DR_DECODE_OK);
  dr__status_report_free(&f->rep);
  assert_int_equal(dr__status_decode(&f->msg, &f->rep), 0);
}

static void decode(fx_t *f, const dr_rank_rec_t *ranks, size_t n) {
  decode_envs(f, ranks, n, NULL, 0);
}

/* Runs print with stdout in a temporary file (with --env when env); its
 * text into f->out. */
static void capture_env(fx_t *f, int json, int env) {
  dr_status_args_t a;
  memset(&a, 0, sizeof(a));
  a.env = env;
  snprintf(a.host, sizeof(a.host), "127.0.0.1");
  a.port = 29400;
  a.run_id = "job7";
  char path[] = "/tmp/test_status_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  assert_true(saved >= 0);
  assert_true(dup2(fd, STDOUT_FILENO) >= 0);
  if (json)
    dr__status_print_json(&a, &f->rep);
  else
    dr__status_print_table(&a, &f->rep);
  fflush(stdout);
  assert_true(dup2(saved, STDOUT_FILENO) >= 0);
  close(saved);
  off_t n = lseek(fd, 0, SEEK_END);
  assert_true(n >= 0);
  free(f->out);
  f->out = calloc(1, (size_t)n + 1);
  assert_non_null(f->out);
  assert_int_equal(pread(fd, f->out, (size_t)n, 0), n);
  close(fd);
  unlink(path);
}

static void capture(fx_t *f, int json) { capture_env(f, json, 0); }

static void assert_has(const fx_t *f, const char *s) {
  if (strstr(f->out, s) == NULL)
    fail_msg("'%s' not in:\n%s", s, f->out);
}

static void assert_lacks(const fx_t *f, const char *s) {
  if (strstr(f->out, s) != NULL)
    fail_msg("'%s' in:\n%s", s, f->out);
}

static void test_median_and_above(void **state) {
  fx_t *f = *state;
  /* 1.7, 1.7, 2.1 and 1.6 GiB: the median 1.7 GiB, rank 2 24% above. */
  uint64_t g17 = 17 * GIB / 10;
  dr_rank_rec_t x[4] = {rank(0, g17, g17, 980), rank(1, g17, 2 * GIB, 1020),
                        rank(2, 21 * GIB / 10, 22 * GIB / 10, 12),
                        rank(3, 16 * GIB / 10, 16 * GIB / 10, 0)};
  decode(f, x, 4);
  assert_int_equal(f->rep.rss_median, g17);
  assert_false(f->rep.have_gpu);
  assert_true(dr__status_rss_above(&f->rep, &f->rep.ranks[2]) > 0.23);
  assert_true(dr__status_rss_above(&f->rep, &f->rep.ranks[2]) < 0.25);
  assert_true(dr__status_rss_above(&f->rep, &f->rep.ranks[1]) == 0);
  capture(f, 0);
  assert_has(f, "rss  peak rss   cpu\n");
  assert_has(f, "   1.7 GiB   2.0 GiB  102%\n");
  assert_has(f, "   2.1 GiB   2.2 GiB    1%\n");
  assert_has(f, "memory: rank 2: RSS 2.1 GiB, 24% above the median 1.7 "
                "GiB\n");
  assert_lacks(f, "memory: rank 0");
  assert_lacks(f, "memory: rank 1");
  assert_lacks(f, "memory: rank 3");
  /* Without NVML figures, no GPU column and no GPU line. */
  assert_lacks(f, "gpu");
  capture(f, 1);
  assert_has(f, "\"rss_bytes\": 2254857830, \"rss_peak_bytes\": 2362232012, "
                "\"cpu\": 0.012, \"gpu_memory_bytes\": null, "
                "\"gpu_util_percent\": null");
  assert_has(f, "\"rss_above_median\": 0.235");
  assert_has(f, "\"rss_median_bytes\": 1825361100");
}

/* 10% above is not named; an even count's median is the middle two's
 * mean; unknown RSS (a rank not running) counts for nothing. */
static void test_edges(void **state) {
  fx_t *f = *state;
  dr_rank_rec_t x[4] = {rank(0, 100 * MIB, 100 * MIB, DR_NO_U32),
                        rank(1, 110 * MIB, 110 * MIB, DR_NO_U32),
                        rank(2, DR_NONE, 900 * MIB, DR_NO_U32),
                        rank(3, 90 * MIB, 95 * MIB, DR_NO_U32)};
  x[2].state = DR_RS_EXITED;
  decode(f, x, 4);
  assert_int_equal(f->rep.rss_median, 100 * MIB);
  capture(f, 0);
  assert_lacks(f, "memory:");
  /* Its peak stays shown; its RSS and CPU do not. */
  assert_has(f, "exited 0              -          -         -         -   "
                "900 MiB     -\n");
  /* Two ranks: the one 84% above the mean of both is named. */
  dr_rank_rec_t y[2] = {rank(0, 13 * MIB, 13 * MIB, 0),
                        rank(1, 213 * MIB, 213 * MIB, 0)};
  decode(f, y, 2);
  assert_int_equal(f->rep.rss_median, 113 * MIB);
  capture(f, 0);
  assert_has(f, "memory: rank 1: RSS 213 MiB, 88% above the median 113 "
                "MiB\n");
  /* One rank alone has no median. */
  decode(f, y, 1);
  assert_int_equal(f->rep.rss_median, DR_NONE);
}

static void test_gpu(void **state) {
  fx_t *f = *state;
  dr_rank_rec_t x[2] = {rank(0, GIB, GIB, 1000), rank(1, GIB, GIB, 1000)};
  x[0].gpu_mem_bytes = 70 * GIB;
  x[0].gpu_util = 97;
  x[0].gpu_used_bytes = 76 * GIB;
  x[0].gpu_total_bytes = 80 * GIB;
  x[1].gpu_mem_bytes = 30 * GIB;
  x[1].gpu_util = 40;
  x[1].gpu_used_bytes = 31 * GIB;
  x[1].gpu_total_bytes = 80 * GIB;
  decode(f, x, 2);
  assert_true(f->rep.have_gpu);
  assert_true(dr__status_gpu_full(&f->rep.ranks[0]) > 0.94);
  assert_true(dr__status_gpu_full(&f->rep.ranks[1]) == 0);
  capture(f, 0);
  assert_has(f, "peak rss   cpu   gpu mem  gpu\n");
  assert_has(f, "  100%  70.0 GiB  97%\n");
  assert_has(f, "  100%  30.0 GiB  40%\n");
  assert_has(f, "gpu memory: rank 0 (node 0 on host0): its GPU has 95% of "
                "its memory in use (76.0 GiB of 80.0 GiB; the rank's "
                "processes 70.0 GiB)\n");
  assert_lacks(f, "gpu memory: rank 1");
  capture(f, 1);
  assert_has(f, "\"gpu_memory_bytes\": 75161927680, \"gpu_util_percent\": "
                "97, \"gpu_device_used_bytes\": 81604378624, "
                "\"gpu_device_total_bytes\": 85899345920");
  assert_has(f, "\"gpu_memory_full\": true}");
}

/* --env: each node's summary under "node N (HOST):", its lines indented
 * (the last one too when the text lacks its newline), a node without one
 * not known; none without --env. */
static void test_env(void **state) {
  fx_t *f = *state;
  dr_rank_rec_t x[4] = {rank(0, GIB, GIB, 1000), rank(1, GIB, GIB, 1000),
                        rank(2, GIB, GIB, 1000), rank(3, GIB, GIB, 1000)};
  const dr_env_rec_t envs[2] = {
      {0, dr_str("env: GPUs: none\nbinding: local rank 0: cpus 0-3\n"
                 "env: NCCL and torch variables: NCCL_SOCKET_IFNAME=lo")},
      {1, dr_str("")}};
  decode_envs(f, x, 4, envs, 2);
  assert_int_equal(f->rep.n_envs, 2);
  capture_env(f, 0, 1);
  assert_has(f, "node 0 (host0):\n"
                "  env: GPUs: none\n"
                "  binding: local rank 0: cpus 0-3\n"
                "  env: NCCL and torch variables: NCCL_SOCKET_IFNAME=lo\n"
                "node 1 (host1):\n"
                "  (not known to this server)\n");
  capture_env(f, 1, 1);
  assert_has(f, "\"env\": [\"env: GPUs: none\", \"binding: local rank 0: "
                "cpus 0-3\", \"env: NCCL and torch variables: "
                "NCCL_SOCKET_IFNAME=lo\"]}");
  assert_has(f, "\"env\": null}");
  capture(f, 0);
  assert_lacks(f, "binding:");
  capture(f, 1);
  assert_lacks(f, "\"env\"");
  /* A server that sent none: every node not known. */
  decode(f, x, 4);
  capture_env(f, 0, 1);
  assert_has(f, "node 1 (host1):\n  (not known to this server)\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_median_and_above, setup, teardown),
      cmocka_unit_test_setup_teardown(test_edges, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gpu, setup, teardown),
      cmocka_unit_test_setup_teardown(test_env, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
