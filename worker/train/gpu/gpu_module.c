/* The one exported symbol of libddprun_gpu.so (gpu_module.h): the table of
 * gpu_train.c's functions, and what the module loaded. */
#include "gpu_module.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <limits.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddprun_version.h"
#include "gpu_train.h"

/* The file a function of a shared library came from, as the dynamic
 * linker found it (through the module's RUNPATH, $ORIGIN/../nvidia/...),
 * its directory made canonical and its name kept (the soname's link,
 * not the versioned file behind it). */
static const char *origin(void *fn, char *buf, size_t len) {
  Dl_info info;
  if (dladdr(fn, &info) == 0 || info.dli_fname == NULL)
    return "(unknown)";
  char dir[PATH_MAX], canon[PATH_MAX];
  const char *slash = strrchr(info.dli_fname, '/');
  size_t n = slash != NULL ? (size_t)(slash - info.dli_fname) : 0;
  if (slash == NULL || n >= sizeof(dir))
    return info.dli_fname;
  memcpy(dir, info.dli_fname, n);
  dir[n] = '\0';
  if (realpath(dir, canon) == NULL)
    return info.dli_fname;
  int w = snprintf(buf, len, "%s%s", canon, slash);
  return w > 0 && (size_t)w < len ? buf : info.dli_fname;
}

static void describe(char *buf, size_t len) {
  int rt = 0, nccl = 0, maj = 0, min = 0, pat = 0;
  char nccl_at[PATH_MAX + 64], cublas_at[PATH_MAX + 64];
  (void)cudaRuntimeGetVersion(&rt);
  (void)ncclGetVersion(&nccl);
  (void)cublasGetProperty(MAJOR_VERSION, &maj);
  (void)cublasGetProperty(MINOR_VERSION, &min);
  (void)cublasGetProperty(PATCH_LEVEL, &pat);
  /* NCCL since 2.9: major * 10000 + minor * 100 + patch. */
  snprintf(buf, len,
           "CUDA runtime %d.%d, NCCL %d.%d.%d from %s, cuBLAS %d.%d.%d from %s",
           rt / 1000, (rt % 1000) / 10, nccl / 10000, (nccl / 100) % 100,
           nccl % 100, origin((void *)ncclGetVersion, nccl_at, sizeof(nccl_at)),
           maj, min, pat,
           origin((void *)cublasGetProperty, cublas_at, sizeof(cublas_at)));
}

__attribute__((visibility("default"))) const dr_gpu_module_t dr_gpu_module_v1 = {
    .abi = DR_GPU_MODULE_ABI,
    .run_bytes = sizeof(dr_run_t),
    .rcfg_bytes = sizeof(dr_reducer_config_t),
    .version = DDPRUN_VERSION_LINE,
    .describe = describe,
    .resolve = dr_gpu_train_resolve,
    .open = dr_gpu_train_open,
    .close = dr_gpu_train_close,
    .peak_bytes = dr_gpu_train_peak_bytes,
    .summary = dr_gpu_train_summary,
    .to_host = dr_gpu_train_to_host,
    .from_host = dr_gpu_train_from_host,
};
