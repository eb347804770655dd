/* The rendezvous settings ddprun derives from a scheduler's environment:
 * Slurm (--rdzv-backend slurm, or detected from SLURM_JOB_ID) and a
 * Kubernetes Indexed Job (--rdzv-backend k8s); flags winning over derived
 * values; and the one-line errors for an environment that does not fit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "options.h"
#include "options_fixture.h"

#define SLURM_ENV(nodeid)                                                      \
  "SLURM_JOB_ID=4242", "SLURM_NNODES=3", "SLURM_NODEID=" nodeid,               \
      "SLURM_JOB_NODELIST=gpu-a[01-02],gpu-b5"

static void test_slurm_backend(void **state) {
  fx_t *f = *state;
  fx_set_env(f, SLURM_ENV("1"), NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "slurm", "--nproc-per-node", "2",
                     "train", NULL));
  assert_int_equal(f->o.rdzv_backend, DR_RDZV_C10D);
  assert_int_equal(f->o.min_nodes, 3);
  assert_int_equal(f->o.max_nodes, 3);
  assert_int_equal(f->o.node_rank, 1);
  assert_true(f->o.have_endpoint);
  assert_string_equal(f->o.rdzv_host, "gpu-a01");
  assert_int_equal(f->o.rdzv_port, 29400);
  assert_string_equal(f->o.rdzv_id, "4242");
  assert_int_equal(f->o.is_host, 0);
  assert_int_equal(f->o.nproc_per_node, 2);
  assert_string_equal(f->o.signals_to_handle,
                      "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1");
  assert_non_null(f->o.notice);
  assert_non_null(strstr(f->o.notice, "Slurm: nnodes 3, node rank 1, "
                                      "rendezvous gpu-a01:29400, run id 4242"));
  assert_null(strstr(f->o.notice, "SLURM_JOB_ID is set"));
}

static void test_slurm_node0_hosts(void **state) {
  fx_t *f = *state;
  fx_set_env(f, SLURM_ENV("0"), NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL));
  assert_int_equal(f->o.node_rank, 0);
  assert_int_equal(f->o.is_host, 1);
  assert_non_null(strstr(f->o.notice, "(hosted here)"));
  /* is_host given in --rdzv-conf is kept. */
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "slurm", "--rdzv-conf", "is_host=0",
                     "train", NULL));
  assert_int_equal(f->o.is_host, 0);
}

static void test_slurm_detected(void **state) {
  fx_t *f = *state;
  fx_set_env(f, SLURM_ENV("2"), NULL);
  fx_assert_ok(f, fx_parse(f, "--nproc-per-node", "4", "--max-restarts", "3",
                     "train", NULL));
  assert_int_equal(f->o.rdzv_backend, DR_RDZV_C10D);
  assert_int_equal(f->o.max_nodes, 3);
  assert_int_equal(f->o.node_rank, 2);
  assert_string_equal(f->o.rdzv_host, "gpu-a01");
  assert_string_equal(f->o.rdzv_id, "4242");
  assert_int_equal(f->o.max_restarts, 3);
  assert_non_null(f->o.notice);
  assert_null(strchr(f->o.notice, '\n'));
  assert_non_null(strstr(f->o.notice, "SLURM_JOB_ID is set"));
  assert_non_null(strstr(f->o.notice, "--rdzv-backend slurm"));
}

/* Any node flag, in any layer, means the user set the job up. */
static void test_slurm_not_detected(void **state) {
  fx_t *f = *state;
  fx_set_env(f, SLURM_ENV("1"), NULL);
  fx_assert_ok(f, fx_parse(f, "--standalone", "train", NULL));
  assert_string_not_equal(f->o.rdzv_id, "4242");
  assert_null(f->o.notice);
  fx_assert_ok(f, fx_parse(f, "--nnodes", "1", "train", NULL));
  assert_int_equal(f->o.max_nodes, 1);
  assert_null(f->o.notice);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "c10d", "train", NULL));
  assert_false(f->o.have_endpoint);
  assert_null(f->o.notice);
  fx_set_env(f, SLURM_ENV("1"), "PET_RDZV_ENDPOINT=h0:1234", NULL);
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  assert_int_equal(f->o.max_nodes, 1);
  assert_string_equal(f->o.rdzv_host, "h0");
  assert_null(f->o.notice);
  /* A config file counts too. */
  char path[] = "/tmp/test_sched_env.XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  static const char ini[] = "[ddprun]\nrdzv-endpoint = h1:2000\n";
  assert_int_equal(write(fd, ini, sizeof(ini) - 1), (ssize_t)sizeof(ini) - 1);
  close(fd);
  fx_set_env(f, SLURM_ENV("1"), NULL);
  int rc = fx_parse(f, "--config", path, "train", NULL);
  unlink(path);
  fx_assert_ok(f, rc);
  assert_string_equal(f->o.rdzv_host, "h1");
  assert_int_equal(f->o.max_nodes, 1);
  assert_null(f->o.notice);
  /* Without SLURM_JOB_ID nothing is derived. */
  fx_set_env(f, "SLURM_NNODES=3", "SLURM_NODEID=1",
          "SLURM_JOB_NODELIST=gpu-a[01-02],gpu-b5", NULL);
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  assert_int_equal(f->o.max_nodes, 1);
  assert_false(f->o.have_endpoint);
  assert_null(f->o.notice);
}

static void test_slurm_flags_win(void **state) {
  fx_t *f = *state;
  fx_set_env(f, SLURM_ENV("1"), "PET_RDZV_ID=from-env", NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "slurm", "--rdzv-endpoint",
                     "127.0.0.1:5000", "--nnodes", "2:3", "train", NULL));
  assert_string_equal(f->o.rdzv_host, "127.0.0.1");
  assert_int_equal(f->o.rdzv_port, 5000);
  assert_int_equal(f->o.is_host, -1); /* decided by the address, as c10d */
  assert_int_equal(f->o.min_nodes, 2);
  assert_int_equal(f->o.max_nodes, 3);
  assert_string_equal(f->o.rdzv_id, "from-env");
  /* Under MIN:MAX the rendezvous orders the nodes (so that the job can go
   * on without one); Slurm's node 0 still hosts the server. */
  assert_int_equal(f->o.node_rank, -1);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "slurm", "--nnodes", "2:3",
                           "train", NULL));
  assert_int_equal(f->o.node_rank, -1);
  assert_int_equal(f->o.is_host, 0); /* SLURM_NODEID 1 */
  fx_set_env(f, SLURM_ENV("0"), NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "slurm", "--nnodes", "2:3",
                           "train", NULL));
  assert_int_equal(f->o.node_rank, -1);
  assert_int_equal(f->o.is_host, 1);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "slurm", "--node-rank", "0",
                     "--signals-to-handle", "TERM,USR1", "train", NULL));
  assert_int_equal(f->o.node_rank, 0);
  assert_string_equal(f->o.signals_to_handle, "SIGTERM,SIGUSR1");
}

static void test_slurm_nnodes_from_list(void **state) {
  fx_t *f = *state;
  fx_set_env(f, "SLURM_JOB_ID=7", "SLURM_NODEID=4",
          "SLURM_NODELIST=r[1-2]n[01-03]", NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL));
  assert_int_equal(f->o.max_nodes, 6);
  assert_string_equal(f->o.rdzv_host, "r1n01");
}

static void test_slurm_errors(void **state) {
  fx_t *f = *state;
  fx_set_env(f, "SLURM_NNODES=2", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL),
             "SLURM_JOB_ID is not set");
  fx_set_env(f, "SLURM_JOB_ID=1", "SLURM_NNODES=2", "SLURM_NODEID=0", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL),
             "SLURM_JOB_NODELIST is not set");
  fx_set_env(f, "SLURM_JOB_ID=1", "SLURM_NNODES=2", "SLURM_NODEID=0",
          "SLURM_JOB_NODELIST=n[1-", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL),
             "SLURM_JOB_NODELIST: hostlist 'n[1-': '[' without ']'");
  fx_set_env(f, "SLURM_JOB_ID=1", "SLURM_NNODES=3", "SLURM_NODEID=0",
          "SLURM_JOB_NODELIST=n[1-2]", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL),
             "SLURM_NNODES 3 does not match the 2 hosts");
  fx_set_env(f, "SLURM_JOB_ID=1", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-2]",
          NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL),
             "SLURM_NODEID is not set; start one ddprun per node with srun");
  fx_set_env(f, "SLURM_JOB_ID=1", "SLURM_NNODES=2", "SLURM_NODEID=x1",
          "SLURM_JOB_NODELIST=n[1-2]", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL),
             "SLURM_NODEID 'x1' is not a number");
  fx_set_env(f, "SLURM_JOB_ID=1", "SLURM_NNODES=2", "SLURM_NODEID=2",
          "SLURM_JOB_NODELIST=n[1-2]", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL),
             "--node-rank 2 is out of range for --nnodes 2");
  fx_set_env(f, "SLURM_JOB_ID=1/2", "SLURM_NNODES=2", "SLURM_NODEID=0",
          "SLURM_JOB_NODELIST=n[1-2]", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "slurm", "train", NULL),
             "SLURM_JOB_ID '1/2': may hold only");
  fx_set_env(f, SLURM_ENV("0"), NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "slurm", "--standalone", "train",
                      NULL),
             "drop --rdzv-backend slurm");
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "pbs", "train", NULL),
             "must be c10d, static, slurm or k8s");
}

#define K8S_ENV(index, host)                                                   \
  "JOB_COMPLETION_INDEX=" index, "HOSTNAME=" host,                             \
      "DDPRUN_K8S_SERVICE=ddp-svc"

static void test_k8s(void **state) {
  fx_t *f = *state;
  fx_set_env(f, K8S_ENV("2", "ddp-train-2"), NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "k8s", "--nnodes", "4", "train",
                     NULL));
  assert_int_equal(f->o.rdzv_backend, DR_RDZV_C10D);
  assert_int_equal(f->o.node_rank, 2);
  assert_int_equal(f->o.max_nodes, 4);
  assert_string_equal(f->o.rdzv_host, "ddp-train-0.ddp-svc");
  assert_int_equal(f->o.rdzv_port, 29400);
  assert_string_equal(f->o.rdzv_id, "ddp-train");
  assert_int_equal(f->o.is_host, 0);
  assert_non_null(strstr(f->o.notice, "Kubernetes: nnodes 4, node rank 2"));
  /* PET_ variables, as a pod spec sets them. */
  fx_set_env(f, K8S_ENV("0", "ddp-train-0"), "PET_NNODES=2",
          "PET_RDZV_BACKEND=k8s", NULL);
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  assert_int_equal(f->o.node_rank, 0);
  assert_int_equal(f->o.is_host, 1);
  assert_string_equal(f->o.rdzv_host, "ddp-train-0.ddp-svc");
  /* The Job's name given outright, and a port. */
  fx_set_env(f, "JOB_COMPLETION_INDEX=1", "DDPRUN_K8S_JOB=big-job",
          "DDPRUN_K8S_SERVICE=svc.ns.svc.cluster.local", NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "k8s", "--nnodes", "2:8",
                     "--rdzv-id", "mine", "train", NULL));
  assert_string_equal(f->o.rdzv_host, "big-job-0.svc.ns.svc.cluster.local");
  assert_string_equal(f->o.rdzv_id, "mine");
  assert_int_equal(f->o.min_nodes, 2);
  /* A JobSet's pod <jobset>-<job>-<job index>-<pod index>. */
  fx_set_env(f, "JOB_COMPLETION_INDEX=1", "HOSTNAME=js-workers-0-1",
          "DDPRUN_K8S_SERVICE=js", NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "k8s", "--nnodes", "2:4", "train",
                     NULL));
  assert_string_equal(f->o.rdzv_host, "js-workers-0-0.js");
  assert_string_equal(f->o.rdzv_id, "js-workers-0");
  /* An endpoint given needs no Service. */
  fx_set_env(f, "JOB_COMPLETION_INDEX=1", NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "k8s", "--nnodes", "2",
                     "--rdzv-endpoint", "rdzv.example:29500", "train", NULL));
  assert_string_equal(f->o.rdzv_host, "rdzv.example");
  assert_int_equal(f->o.rdzv_port, 29500);
  assert_int_equal(f->o.node_rank, 1);
}

static void test_k8s_errors(void **state) {
  fx_t *f = *state;
  fx_set_env(f, "HOSTNAME=ddp-train-2", "DDPRUN_K8S_SERVICE=ddp-svc", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "k8s", "--nnodes", "4", "train",
                      NULL),
             "JOB_COMPLETION_INDEX is not set; --rdzv-backend k8s runs in "
             "the pods of an Indexed Job");
  fx_set_env(f, K8S_ENV("2", "ddp-train-2"), NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "k8s", "train", NULL),
             "--rdzv-backend k8s needs --nnodes");
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "k8s", "--nnodes", "2", "train",
                      NULL),
             "--node-rank 2 is out of range for --nnodes 2");
  fx_set_env(f, "JOB_COMPLETION_INDEX=2", "HOSTNAME=ddp-train-2", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "k8s", "--nnodes", "4", "train",
                      NULL),
             "DDPRUN_K8S_SERVICE is not set");
  fx_set_env(f, K8S_ENV("2", "laptop"), NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "k8s", "--nnodes", "4", "train",
                      NULL),
             "HOSTNAME does not end in -2 (JOB_COMPLETION_INDEX); set "
             "DDPRUN_K8S_JOB");
  fx_set_env(f, "JOB_COMPLETION_INDEX=2", "HOSTNAME=j-2",
          "DDPRUN_K8S_SERVICE=bad/name", NULL);
  fx_assert_err(f, fx_parse(f, "--rdzv-backend", "k8s", "--nnodes", "4", "train",
                      NULL),
             "is not a host name or address");
}

static void test_help(void **state) {
  (void)state;
  fflush(stdout);
  int saved = dup(1);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  dup2(fileno(tmp), 1);
  dr_options_usage();
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  char buf[65536];
  rewind(tmp);
  size_t n = fread(buf, 1, sizeof(buf) - 1, tmp);
  buf[n] = '\0';
  fclose(tmp);
  assert_non_null(strstr(buf, "c10d|static|slurm|k8s"));
  assert_non_null(strstr(buf, "SLURM_JOB_NODELIST"));
  assert_non_null(strstr(buf, "JOB_COMPLETION_INDEX"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_slurm_backend, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_slurm_node0_hosts, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_slurm_detected, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_slurm_not_detected, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_slurm_flags_win, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_slurm_nnodes_from_list,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_slurm_errors, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_k8s, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_k8s_errors, fx_setup, fx_teardown),
      cmocka_unit_test(test_help),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
