/* Whether a GPU is busy, from NVML, loaded at run time with dlopen (never
 * linked): the hang watch counts a rank whose GPU runs kernels as making
 * progress. Hosts without the NVIDIA driver simply have no NVML. */
#ifndef DR_NVML_H
#define DR_NVML_H

#include <stddef.h>
#include <sys/types.h>

typedef struct dr_nvml dr_nvml_t;

/* Loads lib (NULL: "libnvidia-ml.so.1") and initialises NVML: 0, or a
 * negative code with a one-line reason in why ("libnvidia-ml.so.1: cannot
 * open shared object file: No such file or directory"). */
int dr_nvml_open(const char *lib, dr_nvml_t **out, char *why, size_t n);

/* Reads every device's utilisation and the processes that ran on it since
 * the last refresh. Call once per poll. */
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

void dr_nvml_close(dr_nvml_t **g);

#endif /* DR_NVML_H */
