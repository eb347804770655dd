/* A stand-in for libnvidia-ml.so.1 with two GPUs, for test_stall and
 * test_nvml: device utilisations from FAKE_NVML_UTIL ("0,37"), one busy
 * process FAKE_NVML_PID sampled on device 0 (device 1 samples no
 * processes), and nvmlInit failing when FAKE_NVML_INIT_FAILS is set.
 * Memory: each device's used and total bytes from FAKE_NVML_MEM
 * ("used0:total0,used1:total1"; unset: not supported); the processes
 * holding a context from FAKE_NVML_PROCS ("dev:pid:bytes,...", bytes -1:
 * not available), or, for a test that learns its pids late, from the
 * file FAKE_NVML_PROCS_FILE names (the same text); FAKE_NVML_OLD=1 makes the _v3 and _v2 process lists
 * answer "function not found", as a driver older than the library does,
 * so that the first list and its 16-byte record serve. Only what
 * agent/nvml.c uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  unsigned int gpu, memory;
} util_t;
typedef struct {
  unsigned int pid;
  unsigned long long time_stamp;
  unsigned int sm_util, mem_util, enc_util, dec_util;
} sample_t;

typedef struct {
  unsigned long long total, free, used;
} memory_t;
typedef struct {
  unsigned int pid;
  unsigned long long used;
} proc_v1_t;
typedef struct {
  unsigned int pid;
  unsigned long long used;
  unsigned int gi, ci;
} proc_v2_t;

static int devices[2];

int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int rc);
int nvmlDeviceGetCount_v2(unsigned int *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev);
int nvmlDeviceGetUUID(void *dev, char *out, unsigned int n);
int nvmlDeviceGetUtilizationRates(void *dev, util_t *u);
int nvmlDeviceGetProcessUtilization(void *dev, sample_t *out, unsigned int *n,
                                    unsigned long long last_seen);
int nvmlDeviceGetMemoryInfo(void *dev, memory_t *m);
int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned int *n,
                                            proc_v2_t *out);
int nvmlDeviceGetComputeRunningProcesses_v2(void *dev, unsigned int *n,
                                            proc_v2_t *out);
int nvmlDeviceGetComputeRunningProcesses(void *dev, unsigned int *n,
                                         proc_v1_t *out);

int nvmlInit_v2(void) { return getenv("FAKE_NVML_INIT_FAILS") ? 999 : 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int rc) {
  return rc == 999 ? "fake: driver not loaded" : "fake: error";
}
int nvmlDeviceGetCount_v2(unsigned int *n) {
  *n = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev) {
  if (i >= 2)
    return 2;
  *dev = &devices[i];
  return 0;
}
int nvmlDeviceGetUUID(void *dev, char *out, unsigned int n) {
  snprintf(out, n, "GPU-fake-%d", (int)((int *)dev - devices));
  return 0;
}
int nvmlDeviceGetUtilizationRates(void *dev, util_t *u) {
  const char *s = getenv("FAKE_NVML_UTIL");
  unsigned int v[2] = {0, 0};
  if (s != NULL)
    sscanf(s, "%u,%u", &v[0], &v[1]);
  u->gpu = v[(int *)dev - devices];
  u->memory = 0;
  return 0;
}
int nvmlDeviceGetProcessUtilization(void *dev, sample_t *out, unsigned int *n,
                                    unsigned long long last_seen) {
  const char *pid = getenv("FAKE_NVML_PID");
  if ((int *)dev != devices)
    return 3; /* NVML_ERROR_NOT_SUPPORTED */
  if (pid == NULL || last_seen >= 100)
    return 6; /* NVML_ERROR_NOT_FOUND: no sample since */
  if (out == NULL || *n < 1) {
    *n = 1;
    return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
  }
  memset(out, 0, sizeof(*out));
  out->pid = (unsigned int)atoi(pid);
  out->time_stamp = 100;
  out->sm_util = 50;
  *n = 1;
  return 0;
}

int nvmlDeviceGetMemoryInfo(void *dev, memory_t *m) {
  const char *s = getenv("FAKE_NVML_MEM");
  unsigned long long v[4] = {0, 0, 0, 0};
  if (s == NULL ||
      sscanf(s, "%llu:%llu,%llu:%llu", &v[0], &v[1], &v[2], &v[3]) != 4)
    return 3; /* NVML_ERROR_NOT_SUPPORTED */
  int i = (int)((int *)dev - devices);
  m->used = v[2 * i];
  m->total = v[2 * i + 1];
  m->free = m->total - m->used;
  return 0;
}

/* The entries of FAKE_NVML_PROCS on device dev, written through put (at
 * most cap of them); returns how many there are. */
static unsigned int procs_of(void *dev, void (*put)(void *, unsigned int,
                                                    unsigned int,
                                                    unsigned long long),
                             void *out, unsigned int cap) {
  const char *s = getenv("FAKE_NVML_PROCS");
  const char *file = getenv("FAKE_NVML_PROCS_FILE");
  char text[4096];
  if (file != NULL) {
    FILE *f = fopen(file, "r");
    size_t n = f != NULL ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f != NULL)
      fclose(f);
    text[n] = '\0';
    s = text;
  }
  int want = (int)((int *)dev - devices);
  unsigned int k = 0;
  while (s != NULL && *s != '\0') {
    int d;
    unsigned int pid;
    long long bytes;
    int used = 0;
    if (sscanf(s, "%d:%u:%lld%n", &d, &pid, &bytes, &used) != 3)
      break;
    if (d == want) {
      if (k < cap)
        put(out, k, pid, (unsigned long long)bytes);
      k++;
    }
    s += used;
    if (*s == ',')
      s++;
  }
  return k;
}

static void put_v1(void *out, unsigned int k, unsigned int pid,
                   unsigned long long bytes) {
  proc_v1_t *p = (proc_v1_t *)out + k;
  p->pid = pid;
  p->used = bytes;
}

static void put_v2(void *out, unsigned int k, unsigned int pid,
                   unsigned long long bytes) {
  proc_v2_t *p = (proc_v2_t *)out + k;
  p->pid = pid;
  p->used = bytes;
  p->gi = p->ci = 0xffffffffu;
}

/* NVML's protocol: *n in, the room; out, how many there are, with
 * NVML_ERROR_INSUFFICIENT_SIZE (7) when they do not fit. */
static int list(void *dev, unsigned int *n, void *out,
                void (*put)(void *, unsigned int, unsigned int,
                            unsigned long long)) {
  unsigned int have = procs_of(dev, put, out, out != NULL ? *n : 0);
  int rc = have > *n ? 7 : 0;
  *n = have;
  return rc;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned int *n,
                                            proc_v2_t *out) {
  if (getenv("FAKE_NVML_OLD") != NULL)
    return 13; /* NVML_ERROR_FUNCTION_NOT_FOUND */
  return list(dev, n, out, put_v2);
}

int nvmlDeviceGetComputeRunningProcesses_v2(void *dev, unsigned int *n,
                                            proc_v2_t *out) {
  if (getenv("FAKE_NVML_OLD") != NULL)
    return 13;
  return list(dev, n, out, put_v2);
}

int nvmlDeviceGetComputeRunningProcesses(void *dev, unsigned int *n,
                                         proc_v1_t *out) {
  return list(dev, n, out, put_v1);
}
