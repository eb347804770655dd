/* A stand-in for libnvidia-ml.so.1 with two GPUs, for test_stall: device
 * utilisations from FAKE_NVML_UTIL ("0,37"), one busy process FAKE_NVML_PID
 * sampled on device 0 (device 1 samples no processes), and nvmlInit
 * failing when FAKE_NVML_INIT_FAILS is set. Only what agent/nvml.c uses. */
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
