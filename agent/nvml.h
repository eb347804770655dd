/* The GPUs through NVML, loaded at run time with dlopen (never linked):
 * whether a GPU is busy (the hang watch counts a rank whose GPU runs
 * kernels as making progress), and what each process group uses of the
 * GPUs (`ddprun status`). Hosts without the NVIDIA driver simply have no
 * NVML. */
#ifndef DR_NVML_H
#define DR_NVML_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct dr_nvml dr_nvml_t;

/* Loads lib (NULL: "libnvidia-ml.so.1") and initialises NVML: 0, or a
 * negative code with a one-line reason in why ("libnvidia-ml.so.1: cannot
 * open shared object file: No such file or directory"). */
int dr_nvml_open(const char *lib, dr_nvml_t **out, char *why, size_t n);

/* Reads every device's utilisation, its memory, the processes that hold a
 * context on it and those that ran on it since the last refresh. Call
 * once per poll. */
void dr_nvml_refresh(dr_nvml_t *g);

/* Whether device dev, a CUDA_VISIBLE_DEVICES entry ("3", "GPU-<uuid>",
 * "MIG-<uuid>"), was busy at the last refresh: 1, 0, or -1 unknown (no
 * such device). A number is taken as NVML's index, which is CUDA's
 * ordinal unless CUDA_DEVICE_ORDER reorders them. */
int dr_nvml_device_busy(dr_nvml_t *g, const char *dev);

/* The processes seen running kernels at the last refresh (host pids, as
 * NVML reports them): how many; *pids is borrowed until the next refresh.
 * 0 where the GPUs do not sample per process. */
size_t dr_nvml_busy_pids(dr_nvml_t *g, const pid_t **pids);

/* Whether per-process samples are available on the device of dev: then
 * dr_nvml_busy_pids is exact and the device's utilisation is not needed. */
int dr_nvml_per_process(dr_nvml_t *g, const char *dev);

/* A process that holds a compute context on a GPU, at the last refresh:
 * its host pid (as NVML reports it: in a container without the host's
 * pid namespace it is not the container's), the device's index, and the
 * GPU memory it uses (DR_NVML_UNKNOWN: not known, as under MIG without
 * the privilege to see it). A process on two devices is listed twice. */
#define DR_NVML_UNKNOWN UINT64_MAX
typedef struct {
  pid_t pid;
  unsigned int dev;
  uint64_t mem_bytes;
} dr_nvml_proc_t;

/* Those processes: how many; *procs is borrowed until the next refresh
 * (NULL and 0 without NVML). */
size_t dr_nvml_procs(dr_nvml_t *g, const dr_nvml_proc_t **procs);

/* What one process group uses of the GPUs. Unknown figures are
 * DR_NVML_UNKNOWN (u64) or UINT32_MAX (util). */
typedef struct {
  uint64_t mem_bytes;       /* GPU memory of its processes, summed over
                               them and the devices; unknown when none of
                               them holds a context */
  uint32_t util;            /* percent: the utilisation of the busiest
                               device its processes run on (one rank per
                               GPU: the rank's own) */
  uint64_t dev_used_bytes;  /* the fullest of those devices: its memory in */
  uint64_t dev_total_bytes; /* use by every process, and its total */
} dr_nvml_use_t;

/* The use of the groups pgids[0..n) into out[0..n): procs_pgrp[k] is the
 * process group of process k of dr_nvml_procs() (-1: unknown), which the
 * caller reads from /proc (dr_pgstat_pgrp). Without NVML every figure is
 * unknown. */
void dr_nvml_group_use(dr_nvml_t *g, const pid_t *procs_pgrp,
                       const pid_t *pgids, size_t n, dr_nvml_use_t *out);

/* Device i's memory (NVML's index: PCI bus order unless
 * CUDA_DEVICE_ORDER reorders CUDA's): 0, or -1 when unknown. */
int dr_nvml_device_memory(dr_nvml_t *g, unsigned int i, uint64_t *used,
                          uint64_t *total);

void dr_nvml_close(dr_nvml_t **g);

#endif /* DR_NVML_H */
