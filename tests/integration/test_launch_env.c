/* The environment contract: what every worker of a job sees, checked by
 * probe workers for one node (1x1, 1x4), two ddprun processes on one host
 * meeting at a ddprun-rdzv (2x3), static rendezvous (2x2), and two
 * standalone jobs started at once on one host. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "launch_harness.h"
#include "launch_probe.h"

#define JOB_MS 20000 /* a job of probes that exit at once */

/* Waits for every node of a job to exit 0 and collects their probes. */
static size_t finish_job(dr_l_proc_t *const *nodes, size_t n_nodes,
                         dr_lp_t *probes) {
  if (dr_l_wait_all(nodes, n_nodes, JOB_MS) != 0)
    fail_msg("the job did not end within %d ms", JOB_MS);
  for (size_t i = 0; i < n_nodes; i++)
    dr_l_expect_exit(nodes[i], 0, 0);
  size_t n = 0;
  for (size_t i = 0; i < n_nodes; i++)
    n = dr_lp_parse(dr_l_out(nodes[i]), i, probes, n, DR_LP_MAX);
  return n;
}

static void standalone(dr_l_fixture_t *fx, const char *nproc,
                       const char *max_restarts, const dr_lp_expect_t *e) {
  dr_l_proc_t *node = dr_l_ddprun(
      fx, "node0",
      DR_H_ARGS("--standalone", "--nproc-per-node", nproc, "--max-restarts",
                max_restarts, dr_l_probe_path(), "--marker", fx->marker),
      NULL);
  dr_lp_t probes[DR_LP_MAX];
  size_t n = finish_job(&node, 1, probes);
  dr_lp_check(probes, n, e);
}

DR_L_TEST(contract_1x1) {
  /* One worker: torchrun leaves OMP_NUM_THREADS alone. */
  dr_lp_expect_t e = {.nnodes = 1,
                      .nproc = 1,
                      .role = "default",
                      .max_restarts = 0,
                      .omp = "UNSET"};
  standalone(fx, "1", "0", &e);
}

DR_L_TEST(contract_1x4) {
  dr_lp_expect_t e = {.nnodes = 1,
                      .nproc = 4,
                      .role = "default",
                      .max_restarts = 2,
                      .omp = "1"};
  standalone(fx, "4", "2", &e);
}

DR_L_TEST(contract_2x3) {
  const char *id = "job-2x3";
  uint16_t port = dr_l_rdzv(fx, DR_H_ARGS("--nnodes", "2", "--rdzv-id", id));
  char endpoint[64];
  snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", port);
  dr_l_proc_t *nodes[2];
  for (int i = 0; i < 2; i++)
    nodes[i] =
        dr_l_ddprun(fx, i == 0 ? "node0" : "node1",
                    DR_H_ARGS("--nnodes", "2", "--nproc-per-node", "3",
                              "--rdzv-endpoint", endpoint, "--rdzv-id", id,
                              "--rdzv-conf", "is_host=0", "--role", "trainer",
                              dr_l_probe_path(), "--marker", fx->marker),
                    /* A value the user set is kept, whatever nproc is. */
                    DR_H_ARGS("OMP_NUM_THREADS=3"));
  dr_lp_t probes[DR_LP_MAX];
  size_t n = finish_job(nodes, 2, probes);
  dr_lp_expect_t e = {.nnodes = 2,
                      .nproc = 3,
                      .run_id = id,
                      .role = "trainer",
                      .max_restarts = 0,
                      .omp = "3"};
  dr_lp_check(probes, n, &e);
}

DR_L_TEST(contract_static_2x2) {
  const char *id = "job-static";
  uint16_t port = dr_l_rdzv(fx, DR_H_ARGS("--nnodes", "2", "--rdzv-id", id));
  uint16_t master_port = dr_l_free_port();
  assert_true(master_port != 0);
  char endpoint[64], mport[16];
  snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", port);
  snprintf(mport, sizeof(mport), "%u", master_port);
  dr_l_proc_t *nodes[2];
  static const long node_ranks[2] = {1, 0};
  /* Node rank 1 starts first: the ranks follow --node-rank, not arrival. */
  for (int i = 0; i < 2; i++)
    nodes[i] = dr_l_ddprun(
        fx, i == 0 ? "node-r1" : "node-r0",
        DR_H_ARGS("--rdzv-backend", "static", "--nnodes", "2", "--node-rank",
                  i == 0 ? "1" : "0", "--nproc-per-node", "2", "--master-addr",
                  "127.0.0.1", "--master-port", mport, "--rdzv-endpoint",
                  endpoint, "--rdzv-id", id, "--rdzv-conf", "is_host=0",
                  dr_l_probe_path(), "--marker", fx->marker),
        NULL);
  dr_lp_t probes[DR_LP_MAX];
  size_t n = finish_job(nodes, 2, probes);
  dr_lp_expect_t e = {.nnodes = 2,
                      .nproc = 2,
                      .run_id = id,
                      .role = "default",
                      .max_restarts = 0,
                      .master_addr = "127.0.0.1",
                      .master_port = master_port,
                      .omp = "1",
                      .node_ranks = node_ranks};
  dr_lp_check(probes, n, &e);
}

#define CONCURRENT_ROUNDS 5

DR_L_TEST(concurrent_standalone) {
  /* Two jobs on one host at once, several times: each gets a MASTER_PORT
   * of its own that rank 0 can bind, and both complete. The probes stay a
   * little so that the two jobs' workers overlap. */
  for (int round = 0; round < CONCURRENT_ROUNDS; round++) {
    dr_l_proc_t *jobs[2];
    for (int j = 0; j < 2; j++) {
      char name[32];
      snprintf(name, sizeof(name), "round%d-job%d", round, j);
      jobs[j] = dr_l_ddprun(fx, name,
                            DR_H_ARGS("--standalone", "--nproc-per-node", "2",
                                      dr_l_probe_path(), "--sleep-ms", "100",
                                      "--marker", fx->marker),
                            NULL);
    }
    long ports[2];
    for (int j = 0; j < 2; j++) {
      dr_lp_t probes[DR_LP_MAX];
      size_t n = finish_job(&jobs[j], 1, probes);
      dr_lp_expect_t e = {.nnodes = 1,
                          .nproc = 2,
                          .role = "default",
                          .max_restarts = 0,
                          .omp = "1"};
      dr_lp_check(probes, n, &e);
      ports[j] = probes[0].master_port;
    }
    if (ports[0] == ports[1])
      fail_msg("round %d: both jobs got MASTER_PORT %ld", round, ports[0]);
  }
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(contract_1x1, dr_l_setup, dr_l_teardown),
      cmocka_unit_test_setup_teardown(contract_1x4, dr_l_setup, dr_l_teardown),
      cmocka_unit_test_setup_teardown(contract_2x3, dr_l_setup, dr_l_teardown),
      cmocka_unit_test_setup_teardown(contract_static_2x2, dr_l_setup,
                                      dr_l_teardown),
      cmocka_unit_test_setup_teardown(concurrent_standalone, dr_l_setup,
                                      dr_l_teardown),
  };
  return DR_L_MAIN("launch_env", tests, argc, argv);
}
