/* Worker placement: cpulists, CPU shares, GPU isolation, NUMA-near shares
 * from a fake /proc and /sys tree, nproc resolution, applying a binding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bind.h"
#include "bind_internal.h"
#include "errors.h"

/* ---- fixture: a temporary root for /proc and /sys -------------------- */

typedef struct {
  char root[64];
} fx_t;

static int setup(void **state) {
  fx_t *fx = calloc(1, sizeof(*fx));
  if (fx == NULL) return -1;
  strcpy(fx->root, "/tmp/dr_bind_XXXXXX");
  if (mkdtemp(fx->root) == NULL) return -1;
  if (dr__bind_set_root(fx->root) != 0) return -1;
  dr__bind_set_cpus(NULL);
  unsetenv("CUDA_VISIBLE_DEVICES");
  *state = fx;
  return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw) {
  return remove(path);
}

static int teardown(void **state) {
  fx_t *fx = *state;
  dr__bind_set_root(NULL);
  dr__bind_set_cpus(NULL);
  unsetenv("CUDA_VISIBLE_DEVICES");
  int r = nftw(fx->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(fx);
  return r;
}

/* Writes text to root/rel, creating the directories on the way. */
static void put_file(const fx_t *fx, const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", fx->root, rel);
  for (char *p = path + strlen(fx->root) + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* A fake driver tree: GPU i has bus id busid[i], UUID GPU-<uuid[i]>,
 * and local_cpulist list[i] (NULL: none). */
static void fake_gpus(const fx_t *fx, int n, const char *const *busid,
                      const char *const *uuid, const char *const *list) {
  char rel[256], text[256];
  for (int i = 0; i < n; i++) {
    snprintf(rel, sizeof(rel), "proc/driver/nvidia/gpus/%s/information",
             busid[i]);
    snprintf(text, sizeof(text),
             "Model: \t\t NVIDIA H100\nIRQ:   \t\t 42\nGPU UUID: \t GPU-%s\n"
             "Bus Location: \t %s\n",
             uuid[i], busid[i]);
    put_file(fx, rel, text);
    if (list[i] != NULL) {
      snprintf(rel, sizeof(rel), "sys/bus/pci/devices/%s/local_cpulist",
               busid[i]);
      snprintf(text, sizeof(text), "%s\n", list[i]);
      put_file(fx, rel, text);
    }
  }
}

static void set_cpus(const char *list) {
  cpu_set_t s;
  assert_int_equal(dr_cpuset_parse(list, &s), 0);
  dr__bind_set_cpus(&s);
}

static dr_bind_opts_t opts(dr_cpu_bind_t cpu, const char *list,
                         dr_gpu_bind_t gpu) {
  dr_bind_opts_t o;
  memset(&o, 0, sizeof(o));
  o.cpu_bind = cpu;
  o.cpu_list = list;
  o.gpu_bind = gpu;
  o.nproc_kind = DR_NPROC_NUMBER;
  o.nproc_per_node = 1;
  return o;
}

/* Asserts the plan's CPU shares, one cpulist per rank ("-" for none). */
static void assert_cpus(const dr_binding_t *b, uint32_t n,
                        const char *const *want) {
  char got[256];
  for (uint32_t i = 0; i < n; i++) {
    if (strcmp(want[i], "-") == 0) {
      assert_false(b[i].have_cpus);
      continue;
    }
    assert_true(b[i].have_cpus);
    assert_string_equal(dr_cpuset_format(&b[i].cpus, got, sizeof(got)),
                        want[i]);
  }
}

/* ---- cpulists --------------------------------------------------------- */

static void test_cpulist_round_trip(void **state) {
  const char *canon[] = {"0", "7", "0-3", "0-3,8,10-11", "1,3,5",
                         "0-1023", "1023", "0,1023", NULL};
  cpu_set_t s;
  char out[64];
  for (int i = 0; canon[i] != NULL; i++) {
    assert_int_equal(dr_cpuset_parse(canon[i], &s), 0);
    assert_string_equal(dr_cpuset_format(&s, out, sizeof(out)), canon[i]);
  }
  /* Other spellings of the same sets. */
  const char *in[] = {"3,0-2", "0-0", "007", "0-3,2-5", "1,1,1", "4-5,0-1",
                      NULL};
  const char *want[] = {"0-3", "0", "7", "0-5", "1", "0-1,4-5"};
  for (int i = 0; in[i] != NULL; i++) {
    assert_int_equal(dr_cpuset_parse(in[i], &s), 0);
    assert_string_equal(dr_cpuset_format(&s, out, sizeof(out)), want[i]);
  }
  assert_int_equal(dr_cpuset_parse("0-3,8", &s), 0);
  assert_int_equal(CPU_COUNT(&s), 5);
  assert_true(CPU_ISSET(8, &s));
  assert_false(CPU_ISSET(4, &s));
}

static void test_cpulist_errors(void **state) {
  const char *bad[] = {"", "a", "1-", "-1", "3-1", "1,,2", ",1", "1,",
                       " 1", "1 ", "1\n", "1024", "0-1024", "99999999999",
                       "1:2", "0x1", "1-2-3", "+1", "1.5", NULL};
  cpu_set_t s;
  for (int i = 0; bad[i] != NULL; i++) {
    CPU_ZERO(&s);
    CPU_SET(0, &s);
    assert_int_equal(dr_cpuset_parse(bad[i], &s), DR_EBADARG);
    assert_int_equal(CPU_COUNT(&s), 0);
  }
  assert_int_equal(dr_cpuset_parse(NULL, &s), DR_EBADARG);
}

static void test_cpulist_format_small(void **state) {
  cpu_set_t s;
  CPU_ZERO(&s);
  char out[64];
  assert_string_equal(dr_cpuset_format(&s, out, sizeof(out)), "");
  for (int c = 0; c <= 20; c += 2) CPU_SET(c, &s);
  assert_string_equal(dr_cpuset_format(&s, out, sizeof(out)),
                      "0,2,4,6,8,10,12,14,16,18,20");
  assert_string_equal(dr_cpuset_format(&s, out, 12), "0,2,4,6,...");
  assert_string_equal(dr_cpuset_format(&s, out, 6), "0,...");
  assert_string_equal(dr_cpuset_format(&s, out, 4), "...");
  assert_string_equal(dr_cpuset_format(&s, out, 3), "");
  assert_non_null(dr_cpuset_format(&s, out, 0));
}

/* ---- CPU shares ------------------------------------------------------ */

static void test_auto_split(void **state) {
  set_cpus("0-15");
  assert_int_equal(dr_bind_count_cpus(), 16);
  dr_bind_opts_t o = opts(DR_CPU_BIND_AUTO, NULL, DR_GPU_BIND_NONE);
  dr_binding_t b[16];
  char err[256];
  assert_int_equal(dr_bind_plan(&o, 3, b, err, sizeof(err)), 0);
  assert_cpus(b, 3, (const char *[]){"0-5", "6-10", "11-15"});
  /* Disjoint and covering. */
  cpu_set_t all, both;
  CPU_ZERO(&all);
  for (int i = 0; i < 3; i++) {
    CPU_AND(&both, &all, &b[i].cpus);
    assert_int_equal(CPU_COUNT(&both), 0);
    CPU_OR(&all, &all, &b[i].cpus);
    assert_false(b[i].have_gpu);
  }
  assert_int_equal(CPU_COUNT(&all), 16);

  /* Shares are contiguous in the allowed set, holes skipped. */
  set_cpus("0-3,8-11");
  assert_int_equal(dr_bind_plan(&o, 3, b, err, sizeof(err)), 0);
  assert_cpus(b, 3, (const char *[]){"0-2", "3,8-9", "10-11"});
  assert_int_equal(dr_bind_plan(&o, 8, b, err, sizeof(err)), 0);
  assert_cpus(b, 8,
              (const char *[]){"0", "1", "2", "3", "8", "9", "10", "11"});
  assert_int_equal(dr_bind_plan(&o, 1, b, err, sizeof(err)), 0);
  assert_cpus(b, 1, (const char *[]){"0-3,8-11"});

  /* none: nothing bound. */
  o.cpu_bind = DR_CPU_BIND_NONE;
  assert_int_equal(dr_bind_plan(&o, 3, b, err, sizeof(err)), 0);
  assert_cpus(b, 3, (const char *[]){"-", "-", "-"});
  assert_int_equal(dr_bind_plan(&o, 0, b, err, sizeof(err)), 0);
}

/* More ranks than CPUs: one CPU each, round-robin. */
static void test_more_ranks_than_cpus(void **state) {
  set_cpus("2,5");
  dr_bind_opts_t o = opts(DR_CPU_BIND_AUTO, NULL, DR_GPU_BIND_NONE);
  dr_binding_t b[5];
  char err[256];
  assert_int_equal(dr_bind_plan(&o, 5, b, err, sizeof(err)), 0);
  assert_cpus(b, 5, (const char *[]){"2", "5", "2", "5", "2"});
}

static void test_cpu_list(void **state) {
  set_cpus("0-7");
  dr_binding_t b[4];
  char err[256];
  dr_bind_opts_t o = opts(DR_CPU_BIND_LIST, "0-3:4-7", DR_GPU_BIND_NONE);
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-3", "4-7"});
  /* Overlapping shares are the user's choice. */
  o.cpu_list = "0-5:4-7:1";
  assert_int_equal(dr_bind_plan(&o, 3, b, err, sizeof(err)), 0);
  assert_cpus(b, 3, (const char *[]){"0-5", "4-7", "1"});

  o.cpu_list = "0-3";
  err[0] = '\0';
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "'0-3'"));
  assert_non_null(strstr(err, "1 CPU list for 2 local ranks"));
  assert_false(b[0].have_cpus);
  o.cpu_list = "0:1:2";
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "3 CPU lists for 2 local ranks"));

  o.cpu_list = "0-3:6-9";
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "local rank 1"));
  assert_non_null(strstr(err, "CPUs 8-9"));
  assert_non_null(strstr(err, "allowed set 0-7"));
  assert_null(strchr(err, '\n'));

  o.cpu_list = "0-3:x";
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "'x'"));
  assert_non_null(strstr(err, "local rank 1"));
  o.cpu_list = "0-3:";
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), DR_EBADARG);
  o.cpu_list = "";
  assert_int_equal(dr_bind_plan(&o, 1, b, err, sizeof(err)), DR_EBADARG);
  o.cpu_list = NULL;
  assert_int_equal(dr_bind_plan(&o, 1, b, err, sizeof(err)), DR_EBADARG);
  /* err may be absent. */
  o.cpu_list = "9";
  assert_int_equal(dr_bind_plan(&o, 1, b, NULL, 0), DR_EBADARG);
}

/* ---- GPUs ------------------------------------------------------------ */

static void test_gpu_isolate(void **state) {
  setenv("CUDA_VISIBLE_DEVICES", "3,5", 1);
  assert_int_equal(dr_bind_count_gpus(), 2);
  dr_bind_opts_t o = opts(DR_CPU_BIND_NONE, NULL, DR_GPU_BIND_ISOLATE);
  dr_binding_t b[3];
  char err[256];
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_true(b[0].have_gpu);
  assert_string_equal(b[0].gpu, "3");
  assert_string_equal(b[1].gpu, "5");
  assert_false(b[0].have_cpus);
  assert_int_equal(dr_bind_plan(&o, 1, b, err, sizeof(err)), 0);
  assert_string_equal(b[0].gpu, "3");
  assert_int_equal(dr_bind_plan(&o, 3, b, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "3 local ranks but 2 GPUs visible"));
  assert_non_null(strstr(err, "CUDA_VISIBLE_DEVICES='3,5'"));
  assert_false(b[0].have_gpu);

  /* UUIDs, blanks, and CUDA's end of list. */
  setenv("CUDA_VISIBLE_DEVICES", " GPU-1a2b , GPU-3c4d", 1);
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_string_equal(b[0].gpu, "GPU-1a2b");
  assert_string_equal(b[1].gpu, "GPU-3c4d");
  setenv("CUDA_VISIBLE_DEVICES", "0,-1,2", 1);
  assert_int_equal(dr_bind_count_gpus(), 1);
  setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  assert_int_equal(dr_bind_count_gpus(), 0);
  setenv("CUDA_VISIBLE_DEVICES", "1,,2", 1);
  assert_int_equal(dr_bind_count_gpus(), 1);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  assert_int_equal(dr_bind_count_gpus(), 0);
  assert_int_equal(dr_bind_plan(&o, 1, b, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "1 local rank but 0 GPUs"));

  /* An entry too long for dr_binding_t.gpu. */
  char longv[100];
  memset(longv, 'x', sizeof(longv) - 1);
  longv[sizeof(longv) - 1] = '\0';
  setenv("CUDA_VISIBLE_DEVICES", longv, 1);
  assert_int_equal(dr_bind_plan(&o, 1, b, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "CUDA_VISIBLE_DEVICES"));

  /* No CUDA_VISIBLE_DEVICES and no driver: no GPUs. */
  unsetenv("CUDA_VISIBLE_DEVICES");
  assert_int_equal(dr_bind_count_gpus(), 0);
  assert_int_equal(dr_bind_plan(&o, 1, b, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "/proc/driver/nvidia/gpus"));
}

static const char *const k_bus[] = {"0000:86:00.0", "0000:3b:00.0"};
static const char *const k_uuid[] = {"bbbb-2222", "aaaa-1111"};

/* Two GPUs near 0-7 and 8-15 (listed out of bus order: the one at 3b is
 * GPU 0). */
static void test_numa_shares(void **state) {
  fx_t *fx = *state;
  fake_gpus(fx, 2, k_bus, k_uuid, (const char *const[]){"8-15", "0-7"});
  set_cpus("0-15");
  assert_int_equal(dr_bind_count_gpus(), 2);
  dr_bind_opts_t o = opts(DR_CPU_BIND_AUTO, NULL, DR_GPU_BIND_NONE);
  dr_binding_t b[8];
  char err[256];
  /* Four ranks on two GPUs: 0,1 near GPU 0, 2,3 near GPU 1. */
  assert_int_equal(dr_bind_plan(&o, 4, b, err, sizeof(err)), 0);
  assert_cpus(b, 4, (const char *[]){"0-3", "4-7", "8-11", "12-15"});
  /* Three ranks: 0,1 on GPU 0 (0-7), 2 on GPU 1 (8-15). */
  assert_int_equal(dr_bind_plan(&o, 3, b, err, sizeof(err)), 0);
  assert_cpus(b, 3, (const char *[]){"0-3", "4-7", "8-15"});
  /* One rank uses GPU 0 only: the CPUs near GPU 1 stay unused. */
  assert_int_equal(dr_bind_plan(&o, 1, b, err, sizeof(err)), 0);
  assert_cpus(b, 1, (const char *[]){"0-7"});

  /* With isolation, each rank's share is near its own GPU. */
  o.gpu_bind = DR_GPU_BIND_ISOLATE;
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-7", "8-15"});
  assert_string_equal(b[0].gpu, "0");
  assert_string_equal(b[1].gpu, "1");
  char d[64];
  assert_string_equal(dr_bind_describe(&b[1], d, sizeof(d)),
                      "cpus 8-15, gpu 1");

  /* CUDA_VISIBLE_DEVICES reorders: by index, and by UUID prefix. */
  setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"8-15", "0-7"});
  assert_string_equal(b[0].gpu, "1");
  setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb,GPU-aaaa-1111", 1);
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"8-15", "0-7"});
  assert_string_equal(b[0].gpu, "GPU-bbbb");
  /* One GPU visible: every rank near it. */
  setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  o.gpu_bind = DR_GPU_BIND_NONE;
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"8-11", "12-15"});
  /* An unknown UUID or a MIG instance: plain equal shares. */
  setenv("CUDA_VISIBLE_DEVICES", "GPU-cccc,0", 1);
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-7", "8-15"});
  setenv("CUDA_VISIBLE_DEVICES", "MIG-0", 1);
  assert_int_equal(dr_bind_plan(&o, 4, b, err, sizeof(err)), 0);
  assert_cpus(b, 4, (const char *[]){"0-3", "4-7", "8-11", "12-15"});
  setenv("CUDA_VISIBLE_DEVICES", "7", 1);
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-7", "8-15"});
  unsetenv("CUDA_VISIBLE_DEVICES");

  /* The allowed set limits the near CPUs. */
  set_cpus("0-3,8-11");
  assert_int_equal(dr_bind_plan(&o, 4, b, err, sizeof(err)), 0);
  assert_cpus(b, 4, (const char *[]){"0-1", "2-3", "8-9", "10-11"});
  /* Near CPUs all outside the allowed set: plain shares. */
  set_cpus("0-7");
  assert_int_equal(dr_bind_plan(&o, 4, b, err, sizeof(err)), 0);
  assert_cpus(b, 4, (const char *[]){"0-1", "2-3", "4-5", "6-7"});
  /* More ranks than near CPUs: round-robin within the group. */
  set_cpus("0-1,8-15");
  assert_int_equal(dr_bind_plan(&o, 6, b, err, sizeof(err)), 0);
  assert_cpus(b, 6,
              (const char *[]){"0", "1", "0", "8-10", "11-13", "14-15"});
}

static void test_numa_same_node(void **state) {
  fx_t *fx = *state;
  /* Both GPUs near 0-3 (given in two spellings): they share it. */
  fake_gpus(fx, 2, k_bus, k_uuid, (const char *const[]){"0-1,2-3", "0-3"});
  set_cpus("0-15");
  dr_bind_opts_t o = opts(DR_CPU_BIND_AUTO, NULL, DR_GPU_BIND_NONE);
  dr_binding_t b[4];
  char err[256];
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-1", "2-3"});
  assert_int_equal(dr_bind_plan(&o, 4, b, err, sizeof(err)), 0);
  assert_cpus(b, 4, (const char *[]){"0", "1", "2", "3"});
}

static void test_numa_overlap(void **state) {
  fx_t *fx = *state;
  /* Odd hints that overlap: made disjoint in GPU order. */
  fake_gpus(fx, 2, k_bus, k_uuid, (const char *const[]){"4-11", "0-7"});
  set_cpus("0-15");
  dr_bind_opts_t o = opts(DR_CPU_BIND_AUTO, NULL, DR_GPU_BIND_NONE);
  dr_binding_t b[2];
  char err[256];
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-7", "8-11"});
}

static void test_numa_unknown(void **state) {
  fx_t *fx = *state;
  /* GPU 1 has no local_cpulist: plain equal shares for everyone. */
  fake_gpus(fx, 2, k_bus, k_uuid, (const char *const[]){NULL, "0-3"});
  set_cpus("0-15");
  dr_bind_opts_t o = opts(DR_CPU_BIND_AUTO, NULL, DR_GPU_BIND_NONE);
  dr_binding_t b[2];
  char err[256];
  assert_int_equal(dr_bind_plan(&o, 1, b, err, sizeof(err)), 0);
  assert_cpus(b, 1, (const char *[]){"0-3"});
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-7", "8-15"});
  /* An empty or garbled local_cpulist is no hint either. */
  put_file(fx, "sys/bus/pci/devices/0000:86:00.0/local_cpulist", "\n");
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-7", "8-15"});
  put_file(fx, "sys/bus/pci/devices/0000:86:00.0/local_cpulist", "ff00\n");
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-7", "8-15"});
  put_file(fx, "sys/bus/pci/devices/0000:86:00.0/local_cpulist", "8-15\n");
  assert_int_equal(dr_bind_plan(&o, 2, b, err, sizeof(err)), 0);
  assert_cpus(b, 2, (const char *[]){"0-3", "8-15"});
}

/* ---- nproc ------------------------------------------------------------ */

static void test_nproc(void **state) {
  fx_t *fx = *state;
  set_cpus("0-5");
  dr_bind_opts_t o = opts(DR_CPU_BIND_NONE, NULL, DR_GPU_BIND_NONE);
  uint32_t n = 0;
  char err[256];
  o.nproc_kind = DR_NPROC_NUMBER;
  o.nproc_per_node = 3;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), 0);
  assert_int_equal(n, 3);
  o.nproc_per_node = 0;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), DR_EBADARG);

  /* No GPUs anywhere. */
  o.nproc_kind = DR_NPROC_AUTO;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), 0);
  assert_int_equal(n, 6);
  o.nproc_kind = DR_NPROC_CPU;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), 0);
  assert_int_equal(n, 6);
  o.nproc_kind = DR_NPROC_GPU;
  n = 99;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), DR_EBADARG);
  assert_int_equal(n, 99);
  assert_non_null(strstr(err, "--nproc-per-node gpu: no GPU"));
  assert_non_null(strstr(err, "/proc/driver/nvidia/gpus"));
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "CUDA_VISIBLE_DEVICES=''"));
  o.nproc_kind = DR_NPROC_AUTO;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), 0);
  assert_int_equal(n, 6);

  /* GPUs from the environment, then from the driver. */
  setenv("CUDA_VISIBLE_DEVICES", "4,5,6", 1);
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), 0);
  assert_int_equal(n, 3);
  o.nproc_kind = DR_NPROC_GPU;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), 0);
  assert_int_equal(n, 3);
  o.nproc_kind = DR_NPROC_CPU;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), 0);
  assert_int_equal(n, 6);
  unsetenv("CUDA_VISIBLE_DEVICES");
  fake_gpus(fx, 2, k_bus, k_uuid, (const char *const[]){NULL, NULL});
  o.nproc_kind = DR_NPROC_GPU;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), 0);
  assert_int_equal(n, 2);
  o.nproc_kind = DR_NPROC_AUTO;
  assert_int_equal(dr_bind_nproc(&o, &n, err, sizeof(err)), 0);
  assert_int_equal(n, 2);

  /* The real affinity, without the override. */
  dr__bind_set_cpus(NULL);
  cpu_set_t real;
  assert_int_equal(sched_getaffinity(0, sizeof(real), &real), 0);
  assert_int_equal(dr_bind_count_cpus(), CPU_COUNT(&real));
}

static void test_describe(void **state) {
  dr_binding_t b;
  memset(&b, 0, sizeof(b));
  char d[64];
  assert_string_equal(dr_bind_describe(&b, d, sizeof(d)),
                      "cpus all, gpu all");
  b.have_cpus = 1;
  assert_int_equal(dr_cpuset_parse("0-3,8", &b.cpus), 0);
  b.have_gpu = 1;
  strcpy(b.gpu, "0");
  assert_string_equal(dr_bind_describe(&b, d, sizeof(d)),
                      "cpus 0-3,8, gpu 0");
  b.have_gpu = 0;
  assert_string_equal(dr_bind_describe(&b, d, sizeof(d)),
                      "cpus 0-3,8, gpu all");
  assert_string_equal(dr_bind_describe(&b, d, 8), "cpus 0-");
}

/* ---- apply ------------------------------------------------------------ */

static void test_apply_child(void **state) {
  cpu_set_t real;
  assert_int_equal(sched_getaffinity(0, sizeof(real), &real), 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &real)) last = c;
  assert_true(last >= 0);

  dr_binding_t b;
  memset(&b, 0, sizeof(b));
  b.have_cpus = 1;
  CPU_SET(last, &b.cpus);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (dr_bind_apply_child(&b) != 0) _exit(10);
    cpu_set_t now;
    if (sched_getaffinity(0, sizeof(now), &now) != 0) _exit(11);
    _exit(CPU_EQUAL(&now, &b.cpus) && CPU_COUNT(&now) == 1 ? 0 : 12);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);

  /* No binding: the affinity is left alone. */
  b.have_cpus = 0;
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (dr_bind_apply_child(&b) != 0) _exit(10);
    cpu_set_t now;
    if (sched_getaffinity(0, sizeof(now), &now) != 0) _exit(11);
    _exit(CPU_EQUAL(&now, &real) ? 0 : 12);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);

  /* Only CPUs this machine lacks: -EINVAL, as sched_setaffinity says. */
  b.have_cpus = 1;
  CPU_ZERO(&b.cpus);
  CPU_SET(CPU_SETSIZE - 1, &b.cpus);
  if (!CPU_ISSET(CPU_SETSIZE - 1, &real))
    assert_int_equal(dr_bind_apply_child(&b), -EINVAL);
  cpu_set_t after;
  assert_int_equal(sched_getaffinity(0, sizeof(after), &after), 0);
  assert_true(CPU_EQUAL(&after, &real));
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_cpulist_round_trip), T(test_cpulist_errors),
      T(test_cpulist_format_small), T(test_auto_split),
      T(test_more_ranks_than_cpus), T(test_cpu_list),
      T(test_gpu_isolate), T(test_numa_shares),
      T(test_numa_same_node), T(test_numa_overlap),
      T(test_numa_unknown), T(test_nproc),
      T(test_describe), T(test_apply_child),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
