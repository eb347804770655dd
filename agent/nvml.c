/* NVML through dlopen: device and per-process utilisation. See nvml.h.
 * The few declarations needed are copied from nvml.h (the ABI is stable:
 * the _v2 entry points exist since driver 325). */
#include "nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvml_ret_t;
typedef struct nvml_device *nvml_device_t;
typedef struct {
  unsigned int gpu, memory;
} nvml_util_t;
typedef struct {
  unsigned int pid;
  unsigned long long time_stamp;
  unsigned int sm_util, mem_util, enc_util, dec_util;
} nvml_proc_sample_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define DEV_MAX 64
#define PIDS_MAX 1024

typedef struct {
  nvml_device_t handle;
  char uuid[96];
  int util;          /* the last refresh's percent, -1 unknown */
  int per_process;   /* process samples are supported */
  unsigned long long last_seen;
} gpu_t;

struct dr_nvml {
  void *lib;
  nvml_ret_t (*init)(void);
  nvml_ret_t (*shutdown)(void);
  nvml_ret_t (*count)(unsigned int *);
  nvml_ret_t (*by_index)(unsigned int, nvml_device_t *);
  nvml_ret_t (*uuid)(nvml_device_t, char *, unsigned int);
  nvml_ret_t (*util)(nvml_device_t, nvml_util_t *);
  nvml_ret_t (*proc_util)(nvml_device_t, nvml_proc_sample_t *, unsigned int *,
                          unsigned long long);
  const char *(*error_string)(nvml_ret_t);
  gpu_t dev[DEV_MAX];
  unsigned int n_dev;
  pid_t pids[PIDS_MAX];
  size_t n_pids;
  nvml_proc_sample_t *samples;
  unsigned int samples_cap;
};

static void *sym(struct dr_nvml *g, const char *name, int *missing) {
  void *p = dlsym(g->lib, name);
  if (p == NULL)
    *missing = 1;
  return p;
}

int dr_nvml_open(const char *lib, dr_nvml_t **out, char *why, size_t n) {
  *out = NULL;
  struct dr_nvml *g = calloc(1, sizeof(*g));
  if (g == NULL) {
    snprintf(why, n, "out of memory");
    return -ENOMEM;
  }
  g->lib = dlopen(lib != NULL ? lib : "libnvidia-ml.so.1",
                  RTLD_NOW | RTLD_LOCAL);
  if (g->lib == NULL) {
    const char *e = dlerror();
    snprintf(why, n, "%s", e != NULL ? e : "dlopen failed");
    free(g);
    return -ENOENT;
  }
  int missing = 0;
  *(void **)&g->init = sym(g, "nvmlInit_v2", &missing);
  *(void **)&g->shutdown = sym(g, "nvmlShutdown", &missing);
  *(void **)&g->count = sym(g, "nvmlDeviceGetCount_v2", &missing);
  *(void **)&g->by_index = sym(g, "nvmlDeviceGetHandleByIndex_v2", &missing);
  *(void **)&g->uuid = sym(g, "nvmlDeviceGetUUID", &missing);
  *(void **)&g->util = sym(g, "nvmlDeviceGetUtilizationRates", &missing);
  *(void **)&g->error_string = sym(g, "nvmlErrorString", &missing);
  int none = 0;
  *(void **)&g->proc_util = sym(g, "nvmlDeviceGetProcessUtilization", &none);
  nvml_ret_t rc = NVML_SUCCESS;
  if (missing)
    snprintf(why, n, "%s lacks the NVML functions needed",
             lib != NULL ? lib : "libnvidia-ml.so.1");
  else if ((rc = g->init()) != NVML_SUCCESS)
    snprintf(why, n, "nvmlInit failed: %s", g->error_string(rc));
  else if ((rc = g->count(&g->n_dev)) != NVML_SUCCESS)
    snprintf(why, n, "nvmlDeviceGetCount failed: %s", g->error_string(rc));
  if (missing || rc != NVML_SUCCESS) {
    if (!missing && rc != NVML_SUCCESS && g->shutdown != NULL)
      g->shutdown();
    dlclose(g->lib);
    free(g);
    return -ENODEV;
  }
  if (g->n_dev > DEV_MAX)
    g->n_dev = DEV_MAX;
  for (unsigned int i = 0; i < g->n_dev; i++) {
    gpu_t *d = &g->dev[i];
    d->util = -1;
    d->per_process = g->proc_util != NULL;
    if (g->by_index(i, &d->handle) != NVML_SUCCESS)
      d->handle = NULL;
    else if (g->uuid(d->handle, d->uuid, sizeof(d->uuid)) != NVML_SUCCESS)
      d->uuid[0] = '\0';
  }
  *out = g;
  return 0;
}

/* The process samples of device d since its last refresh into g->pids. */
static void proc_samples(struct dr_nvml *g, gpu_t *d) {
  unsigned int count = 0;
  nvml_ret_t rc = g->proc_util(d->handle, NULL, &count, d->last_seen);
  if (rc == NVML_ERROR_NOT_FOUND)
    return; /* nothing ran since */
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) {
    d->per_process = 0; /* not supported here: the device's figure */
    return;
  }
  if (count == 0)
    return;
  if (count > g->samples_cap) {
    nvml_proc_sample_t *s = realloc(g->samples, count * sizeof(*s));
    if (s == NULL)
      return;
    g->samples = s;
    g->samples_cap = count;
  }
  rc = g->proc_util(d->handle, g->samples, &count, d->last_seen);
  if (rc != NVML_SUCCESS)
    return;
  for (unsigned int i = 0; i < count; i++) {
    const nvml_proc_sample_t *s = &g->samples[i];
    if (s->time_stamp > d->last_seen)
      d->last_seen = s->time_stamp;
    if (s->sm_util > 0 && g->n_pids < PIDS_MAX)
      g->pids[g->n_pids++] = (pid_t)s->pid;
  }
}

void dr_nvml_refresh(dr_nvml_t *g) {
  if (g == NULL)
    return;
  g->n_pids = 0;
  for (unsigned int i = 0; i < g->n_dev; i++) {
    gpu_t *d = &g->dev[i];
    if (d->handle == NULL)
      continue;
    nvml_util_t u;
    d->util = g->util(d->handle, &u) == NVML_SUCCESS ? (int)u.gpu : -1;
    if (d->per_process)
      proc_samples(g, d);
  }
}

static gpu_t *find(dr_nvml_t *g, const char *dev) {
  if (g == NULL || dev == NULL || dev[0] == '\0')
    return NULL;
  if (strncmp(dev, "GPU-", 4) == 0 || strncmp(dev, "MIG-", 4) == 0) {
    for (unsigned int i = 0; i < g->n_dev; i++)
      if (g->dev[i].uuid[0] != '\0' &&
          strncmp(g->dev[i].uuid, dev, strlen(dev)) == 0)
        return &g->dev[i];
    return NULL;
  }
  char *end;
  unsigned long i = strtoul(dev, &end, 10);
  return *end == '\0' && i < g->n_dev && g->dev[i].handle != NULL ? &g->dev[i]
                                                                  : NULL;
}

int dr_nvml_device_busy(dr_nvml_t *g, const char *dev) {
  gpu_t *d = find(g, dev);
  if (d == NULL || d->util < 0)
    return -1;
  return d->util > 0;
}

int dr_nvml_per_process(dr_nvml_t *g, const char *dev) {
  gpu_t *d = find(g, dev);
  return d != NULL && d->per_process;
}

size_t dr_nvml_busy_pids(dr_nvml_t *g, const pid_t **pids) {
  if (g == NULL) {
    *pids = NULL;
    return 0;
  }
  *pids = g->pids;
  return g->n_pids;
}

void dr_nvml_close(dr_nvml_t **gp) {
  dr_nvml_t *g = *gp;
  if (g == NULL)
    return;
  g->shutdown();
  dlclose(g->lib);
  free(g->samples);
  free(g);
  *gp = NULL;
}
