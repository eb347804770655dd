/* Checked calls into CUDA, cuBLAS and NCCL.
 *
 *   CUDA_CHECK(cudaMalloc(&p, n));   -> returns DR_GPU_ECUDA on failure
 *
 * On failure each macro prints one line to stderr naming the call, the
 * library's own message, file:line, host, rank and pid:
 *   train: rank 3 (host gpu7, pid 4242): gpu_model.c:120: cudaMalloc(...)
 *   failed: out of memory (cudaErrorMemoryAllocation)
 * and returns a typed negative code from the enclosing function (which
 * must return int). Library code never exits: only main turns a code into
 * an exit status.
 */
#ifndef DR_GPU_CHECK_H
#define DR_GPU_CHECK_H

#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "errors.h"

/* Failure codes of the GPU path, beside -errno and pg.h's
 * (proto/errors.h's table, which dr_strerror() reads):
 *   DR_GPU_ECUDA     a CUDA runtime call failed
 *   DR_GPU_ECUBLAS   a cuBLAS call failed
 *   DR_GPU_ENCCL     an NCCL call failed, or the communicator reported an
 *                    asynchronous error
 *   DR_GPU_ETIMEOUT  the device or a peer did not finish in time
 *   DR_GPU_ENODEV    no usable GPU */

/* Names the process in every message: set once at start (host may be
 * NULL: gethostname). */
void dr_gpu_check_identity(uint32_t rank, const char *host);

/* Prints the one-line report; returns code. */
int dr__gpu_fail(int code, const char *file, int line, const char *call,
                 const char *what);

#define CUDA_CHECK(call)                                                    \
  do {                                                                      \
    cudaError_t dr__e = (call);                                             \
    if (dr__e != cudaSuccess)                                               \
      return dr__gpu_fail(DR_GPU_ECUDA, __FILE__, __LINE__, #call,          \
                          cudaGetErrorString(dr__e));                       \
  } while (0)

#define CUBLAS_CHECK(call)                                                  \
  do {                                                                      \
    cublasStatus_t dr__s = (call);                                          \
    if (dr__s != CUBLAS_STATUS_SUCCESS)                                     \
      return dr__gpu_fail(DR_GPU_ECUBLAS, __FILE__, __LINE__, #call,        \
                          cublasGetStatusString(dr__s));                          \
  } while (0)

/* ncclInProgress is not a failure for a non-blocking communicator: the
 * caller polls ncclCommGetAsyncError for the outcome. */
#define NCCL_CHECK(call)                                                    \
  do {                                                                      \
    ncclResult_t dr__n = (call);                                            \
    if (dr__n != ncclSuccess && dr__n != ncclInProgress)                    \
      return dr__gpu_fail(DR_GPU_ENCCL, __FILE__, __LINE__, #call,          \
                          ncclGetErrorString(dr__n));                       \
  } while (0)

/* A kernel launcher of gpu_kernels.h (returns a cudaError_t as int). */
#define KERNEL_CHECK(call)                                                  \
  do {                                                                      \
    int dr__k = (call);                                                     \
    if (dr__k != 0)                                                         \
      return dr__gpu_fail(DR_GPU_ECUDA, __FILE__, __LINE__, #call,          \
                          cudaGetErrorString((cudaError_t)dr__k));          \
  } while (0)

#endif /* DR_GPU_CHECK_H */
