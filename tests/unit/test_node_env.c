/* The node's environment summary and its checks, from a fake /proc, /sys,
 * /etc and a fake Python environment: GPUs and which rank gets which,
 * NUMA, the NCCL library each way it is found, InfiniBand and whether NCCL
 * uses it, the variables; NCCL_SOCKET_IFNAME, GPU collisions,
 * OMP_NUM_THREADS, /dev/shm. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node_env.h"

typedef struct {
  char root[64];
  dr_binding_t bind[4];
  dr_ifc_t ifs[3];
  char *envp[16];
  const char *argv[3];
  dr_node_env_in_t in;
  dr_node_env_t out;
} fx_t;

static int setup(void **state) {
  fx_t *fx = calloc(1, sizeof(*fx));
  if (fx == NULL)
    return -1;
  strcpy(fx->root, "/tmp/dr_node_env_XXXXXX");
  if (mkdtemp(fx->root) == NULL)
    return -1;
  strcpy(fx->ifs[0].name, "lo");
  fx->ifs[0].up = 1;
  strcpy(fx->ifs[1].name, "eth0");
  fx->ifs[1].up = 1;
  strcpy(fx->ifs[2].name, "ib0");
  fx->ifs[2].up = 0;
  fx->argv[0] = "/bin/true";
  fx->in = (dr_node_env_in_t){.root = fx->root, .prog_argv = fx->argv,
                              .envp = fx->envp, .nproc = 2, .bind = fx->bind,
                              .n_cpus = 8, .ifs = fx->ifs, .n_ifs = 3};
  *state = fx;
  return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static int teardown(void **state) {
  fx_t *fx = *state;
  dr_node_env_free(&fx->out);
  int r = nftw(fx->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(fx);
  return r;
}

/* Writes text to root/rel, making the directories on the way. */
static void put(const fx_t *fx, const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", fx->root, rel);
  for (char *s = strchr(path + strlen(fx->root) + 1, '/'); s != NULL;
       s = strchr(s + 1, '/')) {
    *s = '\0';
    mkdir(path, 0755);
    *s = '/';
  }
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void env(fx_t *fx, char *kv) {
  size_t i = 0;
  while (fx->envp[i] != NULL)
    i++;
  fx->envp[i] = kv;
}

static void run(fx_t *fx) {
  dr_node_env_free(&fx->out);
  assert_int_equal(dr_node_env_read(&fx->in, &fx->out), 0);
  assert_non_null(fx->out.summary);
}

/* The finding that contains what, or NULL. */
static const dr_env_finding_t *finding(const fx_t *fx, const char *what) {
  for (size_t i = 0; i < fx->out.n_findings; i++)
    if (strstr(fx->out.findings[i].text, what) != NULL)
      return &fx->out.findings[i];
  return NULL;
}

static void gpus(fx_t *fx) {
  put(fx, "proc/driver/nvidia/version",
      "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 "
      "2024\n");
  put(fx, "proc/driver/nvidia/gpus/0000:3b:00.0/information",
      "Model: \t\t NVIDIA H200\nIRQ:   \t\t 17\n");
  put(fx, "proc/driver/nvidia/gpus/0000:18:00.0/information",
      "Model: \t\t NVIDIA H100 80GB HBM3\n");
  put(fx, "sys/bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
  put(fx, "sys/devices/system/node/node0/cpulist", "0-3\n");
  put(fx, "sys/devices/system/node/node1/cpulist", "4-7\n");
}

/* GPUs in PCI order, the driver, each rank's GPU with its NUMA node and
 * its CPUs' NUMA nodes. */
static void test_gpus_and_binding(void **state) {
  fx_t *fx = *state;
  gpus(fx);
  for (int r = 0; r < 2; r++) {
    fx->bind[r].have_gpu = 1;
    snprintf(fx->bind[r].gpu, sizeof(fx->bind[r].gpu), "%d", r);
    fx->bind[r].have_cpus = 1;
    CPU_ZERO(&fx->bind[r].cpus);
    for (int c = 4 * r; c < 4 * r + 4; c++)
      CPU_SET(c, &fx->bind[r].cpus);
  }
  run(fx);
  const char *s = fx->out.summary;
  assert_non_null(strstr(s, "env: GPUs: 2, driver 550.54.15: 0 NVIDIA H100 "
                            "80GB HBM3 (0000:18:00.0), 1 NVIDIA H200 "
                            "(0000:3b:00.0)\n"));
  /* With NVML: each GPU's memory; 0 stays unsaid. */
  uint64_t mem[2] = {85899345920ull, 0};
  fx->in.gpu_mem = mem;
  fx->in.n_gpu_mem = 2;
  run(fx);
  s = fx->out.summary;
  assert_non_null(strstr(s, "0 NVIDIA H100 80GB HBM3 (0000:18:00.0, 80.0 "
                            "GiB), 1 NVIDIA H200 (0000:3b:00.0)\n"));
  assert_non_null(strstr(s, "binding: local rank 0: cpus 0-3 (NUMA 0), gpu 0 "
                            "(NVIDIA H100 80GB HBM3, 0000:18:00.0)\n"));
  assert_non_null(strstr(s, "binding: local rank 1: cpus 4-7 (NUMA 1), gpu 1 "
                            "(NVIDIA H200, 0000:3b:00.0, NUMA 1)\n"));
  assert_int_equal(fx->out.fatal, 0);
}

static void test_no_gpus(void **state) {
  fx_t *fx = *state;
  run(fx);
  assert_non_null(strstr(fx->out.summary, "env: GPUs: none"));
  assert_non_null(strstr(fx->out.summary,
                         "binding: local rank 1: cpus all, gpu all"));
  assert_non_null(strstr(fx->out.summary, "env: InfiniBand/RoCE: none"));
  assert_non_null(strstr(fx->out.summary,
                         "env: NCCL and torch variables: none set\n"));
}

/* The wheel's NCCL in the program's Python environment comes first, its
 * version from the dist-info; without it LD_LIBRARY_PATH's; then the
 * directories of ld.so.conf under the root, the version in the name. */
static void test_nccl_found_as_the_loader_would(void **state) {
  fx_t *fx = *state;
  char path[512], py[512], ldp[600];
  put(fx, "venv/bin/python3", "");
  snprintf(py, sizeof(py), "%s/venv/bin/python3", fx->root);
  chmod(py, 0755);
  put(fx, "venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
      "x");
  put(fx, "venv/lib/python3.11/site-packages/"
          "nvidia_nccl_cu12-2.21.5.dist-info/METADATA", "x");
  put(fx, "ld/libnccl.so.2", "abc NCCL version 2.19.3+cuda12.2\0 tail");
  put(fx, "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  put(fx, "etc/ld.so.conf.d/cuda.conf", "# cuda\n/opt/cuda/lib64\n");
  put(fx, "opt/cuda/lib64/libnccl.so.2.18.1", "x");
  snprintf(path, sizeof(path), "%s/opt/cuda/lib64/libnccl.so.2", fx->root);
  assert_int_equal(symlink("libnccl.so.2.18.1", path), 0);

  const char *argv[] = {py, "train.py", NULL};
  char ver[64];
  const char *where = NULL;
  char *envp0[] = {NULL};
  assert_int_equal(dr__nccl_find(fx->root, argv, envp0, path, sizeof(path),
                                 ver, sizeof(ver), &where), 0);
  assert_string_equal(where, "the program's Python environment");
  assert_string_equal(ver, "2.21.5");
  assert_non_null(strstr(path, "site-packages/nvidia/nccl/lib/libnccl.so.2"));

  /* A script whose #! names that interpreter through env and PATH. */
  char script[512], pathvar[600];
  snprintf(script, sizeof(script), "%s/train.py", fx->root);
  put(fx, "train.py", "#!/usr/bin/env python3\nprint(1)\n");
  chmod(script, 0755);
  snprintf(pathvar, sizeof(pathvar), "PATH=%s/venv/bin:/usr/bin", fx->root);
  char *envp1[] = {pathvar, NULL};
  const char *argv1[] = {script, NULL};
  assert_int_equal(dr__nccl_find(fx->root, argv1, envp1, path, sizeof(path),
                                 ver, sizeof(ver), &where), 0);
  assert_string_equal(where, "the program's Python environment");

  /* Not Python: LD_LIBRARY_PATH, the version from the library's bytes. */
  snprintf(ldp, sizeof(ldp), "LD_LIBRARY_PATH=/nonexistent:%s/ld", fx->root);
  char *envp2[] = {ldp, NULL};
  const char *argv2[] = {"/bin/true", NULL};
  assert_int_equal(dr__nccl_find(fx->root, argv2, envp2, path, sizeof(path),
                                 ver, sizeof(ver), &where), 0);
  assert_string_equal(where, "LD_LIBRARY_PATH");
  assert_string_equal(ver, "2.19.3+cuda12.2");

  /* The system: ld.so.conf's include, the version from the link's name. */
  assert_int_equal(dr__nccl_find(fx->root, argv2, envp0, path, sizeof(path),
                                 ver, sizeof(ver), &where), 0);
  assert_string_equal(where, "the system");
  assert_string_equal(ver, "2.18.1");

  /* None: where it looked. */
  char empty[600];
  snprintf(empty, sizeof(empty), "%s/nothing", fx->root);
  assert_int_equal(dr__nccl_find(empty, argv2, envp0, path, sizeof(path), ver,
                                 sizeof(ver), &where), -ENOENT);
  assert_non_null(strstr(path, "ld.so.conf"));
}

/* Ports, their state and rate, RoCE; NCCL's choice by the variables. */
static void test_infiniband(void **state) {
  fx_t *fx = *state;
  put(fx, "sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  put(fx, "sys/class/infiniband/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)\n");
  put(fx, "sys/class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
  run(fx);
  assert_non_null(strstr(fx->out.summary,
                         "env: InfiniBand/RoCE: mlx5_0 port 1 ACTIVE, 400 "
                         "Gb/sec (4X NDR), InfiniBand; NCCL will use them\n"));
  env(fx, "NCCL_IB_DISABLE=1");
  run(fx);
  assert_non_null(strstr(fx->out.summary,
                         "NCCL will not use them (NCCL_IB_DISABLE=1)"));
  assert_non_null(strstr(fx->out.summary,
                         "env: NCCL and torch variables: NCCL_IB_DISABLE=1\n"));
  fx->envp[0] = "NCCL_NET=Socket";
  run(fx);
  assert_non_null(strstr(fx->out.summary,
                         "NCCL will not use them (NCCL_NET=Socket)"));
  fx->envp[0] = NULL;
  put(fx, "sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
  put(fx, "sys/class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet\n");
  run(fx);
  assert_non_null(strstr(fx->out.summary, "mlx5_0 port 1 DOWN, 400 Gb/sec "
                                          "(4X NDR), RoCE; none is ACTIVE"));
}

static void test_ifname_match(void **state) {
  (void)state;
  assert_true(dr__ifname_match("eth", "eth0"));
  assert_true(dr__ifname_match("ib,eth", "eth1"));
  assert_false(dr__ifname_match("=eth", "eth0"));
  assert_true(dr__ifname_match("=eth0", "eth0"));
  assert_false(dr__ifname_match("^eth,lo", "eth0"));
  assert_true(dr__ifname_match("^docker,lo", "eth0"));
  assert_false(dr__ifname_match("ens", "eth0"));
}

/* An interface that is not up here: fatal, naming those that are. One
 * that is: nothing. GLOO's names are exact. */
static void test_socket_ifname(void **state) {
  fx_t *fx = *state;
  env(fx, "NCCL_SOCKET_IFNAME=ib");
  run(fx);
  const dr_env_finding_t *f = finding(fx, "NCCL_SOCKET_IFNAME=ib names no "
                                          "interface that is up on this node "
                                          "(up: lo, eth0)");
  assert_non_null(f);
  assert_int_equal(f->level, DR_ENV_FATAL);
  assert_int_equal(fx->out.fatal, 1);
  fx->envp[0] = "NCCL_SOCKET_IFNAME=eth";
  run(fx);
  assert_int_equal(fx->out.fatal, 0);
  assert_null(finding(fx, "SOCKET_IFNAME"));
  fx->envp[0] = "GLOO_SOCKET_IFNAME=eth";
  run(fx);
  assert_non_null(finding(fx, "GLOO_SOCKET_IFNAME=eth names no interface"));
  fx->envp[0] = "GLOO_SOCKET_IFNAME=ib0,eth0";
  run(fx);
  assert_int_equal(fx->out.fatal, 0);
}

/* Two local ranks on one GPU: fatal. More ranks than GPUs, unbound: a
 * warning. */
static void test_gpu_collision(void **state) {
  fx_t *fx = *state;
  gpus(fx);
  for (int r = 0; r < 2; r++) {
    fx->bind[r].have_gpu = 1;
    strcpy(fx->bind[r].gpu, "1");
  }
  run(fx);
  const dr_env_finding_t *f =
      finding(fx, "local ranks 0 and 1 are both given GPU 1");
  assert_non_null(f);
  assert_int_equal(f->level, DR_ENV_FATAL);
  memset(fx->bind, 0, sizeof(fx->bind));
  fx->in.nproc = 3;
  run(fx);
  f = finding(fx, "3 local ranks and 2 GPUs");
  assert_non_null(f);
  assert_int_equal(f->level, DR_ENV_WARN);
  assert_int_equal(fx->out.fatal, 0);
}

static void test_omp(void **state) {
  fx_t *fx = *state;
  env(fx, "OMP_NUM_THREADS=8");
  run(fx);
  const dr_env_finding_t *f = finding(fx, "OMP_NUM_THREADS=8 x 2 local ranks "
                                          "= 16 threads on 8 CPUs");
  assert_non_null(f);
  assert_int_equal(f->level, DR_ENV_WARN);
  assert_non_null(strstr(f->text, "set OMP_NUM_THREADS=4"));
  fx->envp[0] = "OMP_NUM_THREADS=4";
  run(fx);
  assert_null(finding(fx, "OMP_NUM_THREADS"));
  /* Bound: against the rank's own CPUs. */
  fx->bind[0].have_cpus = 1;
  CPU_ZERO(&fx->bind[0].cpus);
  CPU_SET(0, &fx->bind[0].cpus);
  CPU_SET(1, &fx->bind[0].cpus);
  run(fx);
  assert_non_null(finding(fx, "OMP_NUM_THREADS=4 but local rank 0 is bound "
                              "to 2 CPUs"));
}

/* /dev/shm absent (the fake root has none), and present: a real tmpfs or
 * directory here is measured, so only the absent case is asserted. */
static void test_shm(void **state) {
  fx_t *fx = *state;
  run(fx);
  const dr_env_finding_t *f = finding(fx, "no /dev/shm here");
  assert_non_null(f);
  assert_int_equal(f->level, DR_ENV_WARN);
  fx->in.root = "";
  fx->in.nproc = 1;
  run(fx);
  assert_null(finding(fx, "no /dev/shm here"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_gpus_and_binding, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_gpus, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nccl_found_as_the_loader_would,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_infiniband, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ifname_match, setup, teardown),
      cmocka_unit_test_setup_teardown(test_socket_ifname, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gpu_collision, setup, teardown),
      cmocka_unit_test_setup_teardown(test_omp, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shm, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
