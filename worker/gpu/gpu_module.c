/* The one exported symbol of libddprun_gpu.so (gpu_module.h): the table of
 * gpu_train.c's functions, and what the module loaded. */
#include "gpu_module.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>

#include "ddprun_version.h"
#include "gpu_train.h"

/* The file a function of a shared library came from, as the dynamic
 * linker found it. */
static const char *origin(void *fn) {
  Dl_info info;
  return dladdr(fn, &info) != 0 && info.dli_fname != NULL ? info.dli_fname
                                                          : "(unknown)";
}

static void describe(char *buf, size_t len) {
  int rt = 0, nccl = 0, maj = 0, min = 0, pat = 0;
  (void)cudaRuntimeGetVersion(&rt);
  (void)ncclGetVersion(&nccl);
  (void)cublasGetProperty(MAJOR_VERSION, &maj);
  (void)cublasGetProperty(MINOR_VERSION, &min);
  (void)cublasGetProperty(PATCH_LEVEL, &pat);
  /* NCCL since 2.9: major * 10000 + minor * 100 + patch. */
  snprintf(buf, len,
           "CUDA runtime %d.%d, NCCL %d.%d.%d from %s, cuBLAS %d.%d.%d from %s",
           rt / 1000, (rt % 1000) / 10, nccl / 10000, (nccl / 100) % 100,
           nccl % 100, origin((void *)ncclGetVersion), maj, min, pat,
           origin((void *)cublasGetProperty));
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
