/* NVML through dlopen: device and per-process utilisation, device memory
 * and the processes that hold a context. See nvml.h. The few declarations
 * needed are copied from nvml.h (the ABI is stable: the _v2 entry points
 * exist since driver 325; the process lists' _v2 and _v3 since 470 and
 * 510 take the same 24-byte record, the first one a 16-byte record). */
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

typedef struct {
  unsigned long long total, free, used;
} nvml_memory_t;
typedef struct {
  unsigned int pid;
  unsigned long long used_gpu_memory;
} nvml_proc_v1_t;
typedef struct {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
} nvml_proc_v2_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define DEV_MAX 64
#define PIDS_MAX 1024
#define PROCS_MAX 4096 /* context-holding processes kept per refresh */

typedef struct {
  nvml_device_t handle;
  char uuid[96];
  int util;          /* the last refresh's percent, -1 unknown */
  int per_process;   /* process samples are supported */
  unsigned long long last_seen;
  uint64_t mem_used, mem_total; /* DR_NVML_UNKNOWN: unknown */
} gpu_t;

/* The process list entry points, newest first: v3 and v2 take
 * nvml_proc_v2_t, v1 nvml_proc_v1_t. */
enum { PROCS_V3, PROCS_V2, PROCS_V1, PROCS_N };

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
  nvml_ret_t (*mem_info)(nvml_device_t, nvml_memory_t *);
  nvml_ret_t (*procs_fn[PROCS_N])(nvml_device_t, unsigned int *, void *);
  gpu_t dev[DEV_MAX];
  unsigned int n_dev;
  pid_t pids[PIDS_MAX];
  size_t n_pids;
  nvml_proc_sample_t *samples;
  unsigned int samples_cap;
  dr_nvml_proc_t *procs; /* the last refresh's, n_procs of procs_cap */
  size_t n_procs, procs_cap;
  void *raw;             /* a process list as NVML writes it */
  size_t raw_cap;        /* its size in bytes */
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
  *(void **)&g->mem_info = sym(g, "nvmlDeviceGetMemoryInfo", &none);
  static const char *const procs_names[PROCS_N] = {
      "nvmlDeviceGetComputeRunningProcesses_v3",
      "nvmlDeviceGetComputeRunningProcesses_v2",
      "nvmlDeviceGetComputeRunningProcesses"};
  for (int k = 0; k < PROCS_N; k++)
    *(void **)&g->procs_fn[k] = sym(g, procs_names[k], &none);
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
    d->mem_used = d->mem_total = DR_NVML_UNKNOWN;
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

/* Room for n records of rec bytes in g->raw: 0, or -1. */
static int raw_room(struct dr_nvml *g, size_t n, size_t rec) {
  if (n * rec <= g->raw_cap)
    return 0;
  void *p = realloc(g->raw, n * rec);
  if (p == NULL)
    return -1;
  g->raw = p;
  g->raw_cap = n * rec;
  return 0;
}

/* One entry point's list of device d into g->raw: its count, or -1 when
 * this entry point does not serve (then the next older one is tried). */
static long procs_call(struct dr_nvml *g, int k, gpu_t *d) {
  size_t rec = k == PROCS_V1 ? sizeof(nvml_proc_v1_t) : sizeof(nvml_proc_v2_t);
  /* A process may start between the two calls: a little room more, and
   * one more try with the count the second call gives. */
  unsigned int count = 0;
  nvml_ret_t rc = g->procs_fn[k](d->handle, &count, NULL);
  for (int attempt = 0; attempt < 2 && rc == NVML_ERROR_INSUFFICIENT_SIZE;
       attempt++) {
    count += 4;
    if (count > PROCS_MAX || raw_room(g, count, rec) != 0)
      return 0;
    rc = g->procs_fn[k](d->handle, &count, g->raw);
  }
  if (rc == NVML_SUCCESS)
    return (long)count;
  return rc == NVML_ERROR_FUNCTION_NOT_FOUND ? -1 : 0;
}

/* The processes that hold a context on device i, appended to g->procs. */
static void running_procs(struct dr_nvml *g, unsigned int i) {
  gpu_t *d = &g->dev[i];
  for (int k = 0; k < PROCS_N; k++) {
    if (g->procs_fn[k] == NULL)
      continue;
    long count = procs_call(g, k, d);
    if (count < 0)
      continue;
    for (long j = 0; j < count && g->n_procs < PROCS_MAX; j++) {
      if (g->n_procs == g->procs_cap) {
        size_t cap = g->procs_cap > 0 ? 2 * g->procs_cap : 16;
        dr_nvml_proc_t *p = realloc(g->procs, cap * sizeof(*p));
        if (p == NULL)
          return;
        g->procs = p;
        g->procs_cap = cap;
      }
      dr_nvml_proc_t *p = &g->procs[g->n_procs++];
      if (k == PROCS_V1) {
        const nvml_proc_v1_t *r = (const nvml_proc_v1_t *)g->raw + j;
        p->pid = (pid_t)r->pid;
        p->mem_bytes = r->used_gpu_memory; /* NVML's "not available" is
                                              all ones, as DR_NVML_UNKNOWN */
      } else {
        const nvml_proc_v2_t *r = (const nvml_proc_v2_t *)g->raw + j;
        p->pid = (pid_t)r->pid;
        p->mem_bytes = r->used_gpu_memory;
      }
      p->dev = i;
    }
    return;
  }
}

void dr_nvml_refresh(dr_nvml_t *g) {
  if (g == NULL)
    return;
  g->n_pids = 0;
  g->n_procs = 0;
  for (unsigned int i = 0; i < g->n_dev; i++) {
    gpu_t *d = &g->dev[i];
    if (d->handle == NULL)
      continue;
    nvml_util_t u;
    d->util = g->util(d->handle, &u) == NVML_SUCCESS ? (int)u.gpu : -1;
    nvml_memory_t m;
    if (g->mem_info != NULL && g->mem_info(d->handle, &m) == NVML_SUCCESS) {
      d->mem_used = m.used;
      d->mem_total = m.total;
    } else {
      d->mem_used = d->mem_total = DR_NVML_UNKNOWN;
    }
    running_procs(g, i);
    if (d->per_process)
      proc_samples(g, d);
  }
}

size_t dr_nvml_procs(dr_nvml_t *g, const dr_nvml_proc_t **procs) {
  if (g == NULL) {
    *procs = NULL;
    return 0;
  }
  *procs = g->procs;
  return g->n_procs;
}

void dr_nvml_group_use(dr_nvml_t *g, const pid_t *procs_pgrp,
                       const pid_t *pgids, size_t n, dr_nvml_use_t *out) {
  for (size_t i = 0; i < n; i++) {
    dr_nvml_use_t *u = &out[i];
    u->mem_bytes = u->dev_used_bytes = u->dev_total_bytes = DR_NVML_UNKNOWN;
    u->util = UINT32_MAX;
    if (g == NULL || pgids[i] <= 0)
      continue;
    uint64_t sum = 0;
    int any = 0, known = 1;
    double fullest = -1;
    for (size_t k = 0; k < g->n_procs; k++) {
      const dr_nvml_proc_t *p = &g->procs[k];
      if (procs_pgrp[k] != pgids[i] || p->dev >= g->n_dev)
        continue;
      any = 1;
      if (p->mem_bytes == DR_NVML_UNKNOWN)
        known = 0;
      else
        sum += p->mem_bytes;
      const gpu_t *d = &g->dev[p->dev];
      if (d->util >= 0 &&
          (u->util == UINT32_MAX || (uint32_t)d->util > u->util))
        u->util = (uint32_t)d->util;
      if (d->mem_total != DR_NVML_UNKNOWN && d->mem_total > 0 &&
          d->mem_used != DR_NVML_UNKNOWN) {
        double f = (double)d->mem_used / (double)d->mem_total;
        if (f > fullest) {
          fullest = f;
          u->dev_used_bytes = d->mem_used;
          u->dev_total_bytes = d->mem_total;
        }
      }
    }
    if (any && known)
      u->mem_bytes = sum;
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

int dr_nvml_device_memory(dr_nvml_t *g, unsigned int i, uint64_t *used,
                          uint64_t *total) {
  nvml_memory_t m;
  if (g == NULL || i >= g->n_dev || g->mem_info == NULL ||
      g->dev[i].handle == NULL ||
      g->mem_info(g->dev[i].handle, &m) != NVML_SUCCESS)
    return -1;
  *used = m.used;
  *total = m.total;
  return 0;
}

void dr_nvml_close(dr_nvml_t **gp) {
  dr_nvml_t *g = *gp;
  if (g == NULL)
    return;
  g->shutdown();
  dlclose(g->lib);
  free(g->samples);
  free(g->procs);
  free(g->raw);
  free(g);
  *gp = NULL;
}
