/* gpu_bench: the GPU's own GEMM rate, measured the way the model calls
 * cuBLAS (cublasGemmEx, the forward pass's transposes), for the benchmark
 * to set the training step's TFLOP/s against.
 *
 *   gpu_bench [--m 8192] [--n 8192] [--k 8192] [--iters 20]
 *
 * One line per precision: bf16 (bf16 inputs and output, fp32
 * accumulation), tf32 (fp32 data on TF32 tensor cores) and fp32:
 *   gemm bf16 m=8192 n=8192 k=8192: 1.234 ms, 891.0 TFLOP/s (median of 20)
 * Exit 77 when no GPU is visible.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "gpu_check.h"
#include "gpu_device.h"
#include "gpu_kernels.h"
#include "gpu_sync.h"

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  const char *name;
  cudaDataType_t ab, c;
  cublasComputeType_t comp;
} kind_t;

static int probe(cublasHandle_t h, cudaStream_t s, const kind_t *k, int m,
                 int n, int kk, int iters, const dr_gpu_waiter_t *w) {
  size_t es = k->ab == CUDA_R_16BF ? 2 : 4, cs = k->c == CUDA_R_16BF ? 2 : 4;
  void *a = NULL, *b = NULL, *c = NULL;
  CUDA_CHECK(cudaMalloc(&a, (size_t)m * kk * es));
  CUDA_CHECK(cudaMalloc(&b, (size_t)kk * n * es));
  CUDA_CHECK(cudaMalloc(&c, (size_t)m * n * cs));
  /* Small values: no overflow, and not zeros (which some GPUs run
   * faster). */
  size_t na = (size_t)m * kk, nb = (size_t)kk * n;
  float *init = NULL;
  CUDA_CHECK(cudaMalloc((void **)&init, (na > nb ? na : nb) * 4));
  float *host = malloc((na > nb ? na : nb) * 4);
  for (size_t i = 0; i < (na > nb ? na : nb); i++)
    host[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  CUDA_CHECK(cudaMemcpyAsync(init, host, (na > nb ? na : nb) * 4,
                             cudaMemcpyHostToDevice, s));
  if (es == 2) {
    KERNEL_CHECK(dr_k_cast_f32_bf16(init, a, na, s));
    KERNEL_CHECK(dr_k_cast_f32_bf16(init, b, nb, s));
  } else {
    CUDA_CHECK(cudaMemcpyAsync(a, init, na * 4, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(b, init, nb * 4, cudaMemcpyDeviceToDevice, s));
  }
  cudaEvent_t *ev = calloc((size_t)iters + 1, sizeof(cudaEvent_t));
  for (int i = 0; i <= iters; i++)
    CUDA_CHECK(cudaEventCreate(&ev[i]));
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = 0; i < 3; i++) /* warm-up: heuristics, clocks */
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kk, &alpha,
                              a, k->ab, kk, b, k->ab, kk, &beta, c, k->c, m,
                              k->comp, CUBLAS_GEMM_DEFAULT));
  CUDA_CHECK(cudaEventRecord(ev[0], s));
  for (int i = 0; i < iters; i++) {
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kk, &alpha,
                              a, k->ab, kk, b, k->ab, kk, &beta, c, k->c, m,
                              k->comp, CUBLAS_GEMM_DEFAULT));
    CUDA_CHECK(cudaEventRecord(ev[i + 1], s));
  }
  int rc = dr_gpu_wait_event(w, ev[iters], "the GEMM probe");
  if (rc != 0)
    return rc;
  float *ms = malloc((size_t)iters * sizeof(float));
  for (int i = 0; i < iters; i++)
    CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
  qsort(ms, (size_t)iters, sizeof(float), cmp_float);
  double med = ms[iters / 2];
  double tflops = 2.0 * m * n * (double)kk / (med * 1e-3) / 1e12;
  printf("gemm %s m=%d n=%d k=%d: %.3f ms, %.1f TFLOP/s (median of %d)\n",
         k->name, m, n, kk, med, tflops, iters);
  for (int i = 0; i <= iters; i++)
    cudaEventDestroy(ev[i]);
  free(ev);
  free(ms);
  free(host);
  cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(init);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int dims[3] = {8192, 8192, 8192}, iters = 20;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int *dst = strcmp(a, "--m") == 0       ? &dims[0]
               : strcmp(a, "--n") == 0     ? &dims[1]
               : strcmp(a, "--k") == 0     ? &dims[2]
               : strcmp(a, "--iters") == 0 ? &iters
                                           : NULL;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      printf("usage: gpu_bench [--m M] [--n N] [--k K] [--iters I]\n"
             "The GPU's cuBLAS GEMM rate in bf16, tf32 and fp32 "
             "(defaults 8192^3, 20 iterations).\n");
      return 0;
    }
    if (dst == NULL || i + 1 >= argc || (*dst = atoi(argv[++i])) <= 0 ||
        *dst > (1 << 20)) {
      fprintf(stderr, "gpu_bench: bad argument '%s'; see --help\n", a);
      return 2;
    }
  }
  char why[256] = "";
  if (dr_gpu_count(why, sizeof(why)) <= 0) {
    printf("SKIP: no GPU visible (%s)\n", why);
    return 77;
  }
  dr_gpu_check_identity(0, NULL);
  char name[256];
  dr_gpu_name(0, name, sizeof(name));
  printf("gpu_bench on %s\n", name);
  cudaStream_t s;
  cublasHandle_t h;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "gpu_bench: cannot set up CUDA and cuBLAS\n");
    return 1;
  }
  dr_gpu_waiter_t w = {120000, NULL, NULL};
  const kind_t kinds[] = {
      {"bf16", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F},
      {"tf32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
      {"fp32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F},
  };
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    if (probe(h, s, &kinds[i], dims[0], dims[1], dims[2], iters, &w) != 0)
      return 1;
  cublasDestroy(h);
  cudaStreamDestroy(s);
  return 0;
}
