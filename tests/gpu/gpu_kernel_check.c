/* gpu_kernel_check: every GPU kernel, the GPU optimizers and the whole GPU
 * model against the CPU on random inputs, outputs poisoned with NaN before
 * each run. Relative error (max |gpu - cpu| / max |cpu|) under 1e-5 in
 * fp32 and 1e-2 in bf16; the optimizers must match the CPU's bits.
 *
 * Exit 0 when all pass, 1 when one fails, 77 (ctest's skip) with a
 * printed reason when no GPU is visible.
 *
 *   gpu_kernel_check [--seed N]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "gpu_check_util.h"
#include "gpu_device.h"
#include "half.h"

cudaStream_t g_stream;
dr_gpu_waiter_t g_waiter = {60000, NULL, NULL};
int g_failures;

#define FAIL_CUDA(call)                                                     \
  do {                                                                      \
    cudaError_t e_ = (call);                                                \
    if (e_ != cudaSuccess) {                                                \
      fprintf(stderr, "gpu_kernel_check: %s:%d: %s: %s\n", __FILE__,        \
              __LINE__, #call, cudaGetErrorString(e_));                     \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

void *dev_alloc(size_t n_bytes) {
  void *p = NULL;
  FAIL_CUDA(cudaMalloc(&p, n_bytes > 0 ? n_bytes : 1));
  return p;
}

void sync_stream(void) {
  if (dr_gpu_wait_stream(&g_waiter, g_stream, "a check's kernels") != 0)
    exit(1);
}

void to_dev(void *dev, const void *host, size_t n_bytes) {
  FAIL_CUDA(cudaMemcpyAsync(dev, host, n_bytes, cudaMemcpyHostToDevice,
                            g_stream));
  sync_stream();
}

void to_host(void *host, const void *dev, size_t n_bytes) {
  sync_stream();
  FAIL_CUDA(cudaMemcpyAsync(host, dev, n_bytes, cudaMemcpyDeviceToHost,
                            g_stream));
  sync_stream();
}

void *dev_copy(const void *host, size_t n_bytes) {
  void *p = dev_alloc(n_bytes);
  to_dev(p, host, n_bytes);
  return p;
}

void poison(void *dev, dr_dtype_t t, size_t n) {
  if (dr_k_fill_nan(dev, t, n, g_stream) != 0) {
    fprintf(stderr, "gpu_kernel_check: cannot poison a buffer\n");
    exit(1);
  }
}

uint16_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fc0; /* NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

float bf16_value(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

float bf16_round(float x) { return bf16_value(bf16_bits(x)); }

void fill_uniform(dr_rng_t *r, float *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(2.0 * dr_rng_uniform(r) - 1.0);
}

float f16_round(float x) { return dr_f16_to_f32(dr_f32_to_f16(x)); }

void *dev_values(const float *v, size_t n, dr_dtype_t t) {
  if (t == DR_F32)
    return dev_copy(v, n * sizeof(float));
  uint16_t *b = malloc(n * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++)
    b[i] = t == DR_F16 ? dr_f32_to_f16(v[i]) : bf16_bits(v[i]);
  void *p = dev_copy(b, n * sizeof(uint16_t));
  free(b);
  return p;
}

void read_values(float *out, const void *dev, size_t n, dr_dtype_t t) {
  if (t == DR_F32) {
    to_host(out, dev, n * sizeof(float));
    return;
  }
  uint16_t *b = malloc(n * sizeof(uint16_t));
  to_host(b, dev, n * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++)
    out[i] = t == DR_F16 ? dr_f16_to_f32(b[i]) : bf16_value(b[i]);
  free(b);
}

int check(const char *what, const float *gpu, const float *ref, size_t n,
          double tol) {
  double max_err = 0, max_ref = 0;
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(gpu[i]) && isfinite(ref[i])) {
      if (bad++ == 0)
        first_bad = i;
      continue;
    }
    double e = fabs((double)gpu[i] - (double)ref[i]);
    if (e > max_err)
      max_err = e;
    if (fabs(ref[i]) > max_ref)
      max_ref = fabs(ref[i]);
  }
  double rel = max_ref > 0 ? max_err / max_ref : max_err;
  int ok = bad == 0 && rel <= tol;
  if (bad > 0)
    printf("FAIL %-44s %zu of %zu elements not finite (first: %zu, "
           "unwritten or NaN)\n", what, bad, n, first_bad);
  else
    printf("%s %-44s rel err %.3g (limit %.0e, %zu elements)\n",
           ok ? "ok  " : "FAIL", what, rel, tol, n);
  if (!ok)
    g_failures++;
  return ok;
}

int check_l2(const char *what, const float *gpu, const float *ref, size_t n,
             double tol) {
  double e2 = 0, r2 = 0;
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(gpu[i])) {
      bad++;
      continue;
    }
    double e = (double)gpu[i] - (double)ref[i];
    e2 += e * e;
    r2 += (double)ref[i] * ref[i];
  }
  double rel = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
  int ok = bad == 0 && rel <= tol;
  if (bad > 0)
    printf("FAIL %-44s %zu of %zu elements not finite\n", what, bad, n);
  else
    printf("%s %-44s rel L2 err %.3g (limit %.0e, %zu elements)\n",
           ok ? "ok  " : "FAIL", what, rel, tol, n);
  if (!ok)
    g_failures++;
  return ok;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: gpu_kernel_check\n\nChecks every GPU kernel, the GPU "
             "optimizers and the GPU model against the\nCPU code on random "
             "inputs. Exit 0 all pass, 1 a failure, 77 no GPU (skip).\n");
      return 0;
    }
    fprintf(stderr, "gpu_kernel_check: unexpected argument '%s'; see "
            "--help\n", argv[i]);
    return 2;
  }
  char why[256] = "";
  if (dr_gpu_count(why, sizeof(why)) <= 0) {
    printf("SKIP: no GPU visible (%s); the GPU checks run on a machine with "
           "one (tests/gpu/check.sh)\n", why);
    return 77;
  }
  dr_gpu_check_identity(0, NULL);
  FAIL_CUDA(cudaSetDevice(0));
  FAIL_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  char name[256];
  dr_gpu_name(0, name, sizeof(name));
  printf("gpu_kernel_check on %s\n", name);
  check_kernels();
  check_optimizers();
  check_models();
  check_scaler();
  printf("%s: %d check%s failed\n", g_failures ? "FAILED" : "PASSED",
         g_failures, g_failures == 1 ? "" : "s");
  return g_failures ? 1 : 0;
}
