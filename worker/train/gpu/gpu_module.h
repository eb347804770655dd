/* The GPU code as a loadable module: libddprun_gpu.so holds gpu_train.c,
 * gpu_step.c and the GPU library (kernels, cuBLAS model, optimizer, NCCL
 * backend) with the CUDA runtime linked statically, and needs cuBLAS and
 * NCCL as shared libraries. train links none of them: gpu_loader.c
 * dlopen()s the module on first use, and a train whose module or libraries
 * cannot be loaded runs on the CPU alone.
 *
 * The module exports one symbol, DR_GPU_MODULE_SYMBOL, a table of the
 * functions of gpu_train.h. Everything else in it is hidden; what it calls
 * of train (the host model, the compressor, the store client, the trace)
 * it takes from train's own exported symbols, so there is one copy of
 * each. A module is used only with the train of the same build: the
 * loader checks abi, the sizes of the structures they share and the
 * version line.
 */
#ifndef DR_GPU_MODULE_H
#define DR_GPU_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "reducer.h"
#include "train.h"

/* Bump when the table or the meaning of a member changes. */
#define DR_GPU_MODULE_ABI 1
#define DR_GPU_MODULE_SYMBOL "dr_gpu_module_v1"
#define DR_GPU_MODULE_FILE "libddprun_gpu.so"

typedef struct dr_gpu_module {
  uint32_t abi;           /* DR_GPU_MODULE_ABI */
  uint32_t run_bytes;     /* sizeof(dr_run_t) */
  uint32_t rcfg_bytes;    /* sizeof(dr_reducer_config_t) */
  const char *version;    /* DDPRUN_VERSION_LINE of the module's build */
  /* "CUDA runtime 13.0, NCCL 2.28.9 from /path/libnccl.so.2, cuBLAS
   * 13.1.0 from /path/libcublas.so.13": what the module loaded, without
   * touching a GPU. */
  void (*describe)(char *buf, size_t len);
  /* gpu_train.h, one for one. */
  int (*resolve)(dr_run_t *r);
  int (*open)(dr_run_t *r, dr_reducer_config_t *rc);
  void (*close)(dr_run_t *r);
  uint64_t (*peak_bytes)(dr_run_t *r);
  void (*summary)(dr_run_t *r);
  int (*to_host)(dr_run_t *r, int optimizer_too);
  int (*from_host)(dr_run_t *r);
} dr_gpu_module_t;

#endif /* DR_GPU_MODULE_H */
