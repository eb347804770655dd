/* train without GPU support (the build found no CUDA toolkit or NCCL):
 * --device auto is the CPU, --device cuda and --precision bf16|fp16 are
 * configuration errors. The other functions of gpu_train.h are never
 * reached (r->use_gpu and r->gpu stay 0 and NULL, r->dev the CPU's): each
 * fails if it is, with a line that names it; dr_gpu_train_close, which
 * teardown calls on every run, has nothing to free, and
 * dr_gpu_train_peak_bytes, which the final report calls, answers 0. */
#include "gpu_train.h"

#include <stdio.h>
#include <string.h>

/* Exit 2, as for --device cuda: this binary cannot run the GPU path. */
static int unreachable(const char *fn) {
  fprintf(stderr, "train: %s called in a train built without GPU "
          "support\n", fn);
  return DR_TRAIN_ECONFIG;
}

int dr_gpu_train_resolve(dr_run_t *r) {
  const dr_train_config_t *c = &r->c;
  r->use_gpu = 0;
  if (strcmp(c->device, "cuda") == 0) {
    fprintf(stderr, "train: --device cuda: this train was built without GPU "
            "support (no CUDA toolkit or NCCL when it was configured; see "
            "docs/gpu.md); use --device cpu\n");
    return DR_TRAIN_ECONFIG;
  }
  if (strcmp(c->precision, "fp32") != 0) {
    fprintf(stderr, "train: --precision %s needs --device cuda and a usable "
            "GPU (the CPU model computes in fp32 only); use --precision fp32 "
            "on the CPU\n", c->precision);
    return DR_TRAIN_ECONFIG;
  }
  return 0;
}

int dr_gpu_train_open(dr_run_t *r, dr_reducer_config_t *rc) {
  (void)r, (void)rc;
  return unreachable(__func__);
}

void dr_gpu_train_close(dr_run_t *r) { (void)r; }

/* The version line's "(no GPU code)" says it all. */
void dr_gpu_train_describe(char *buf, size_t len) {
  if (len > 0)
    buf[0] = '\0';
}

uint64_t dr_gpu_train_peak_bytes(dr_run_t *r) {
  (void)r;
  return 0;
}

void dr_gpu_train_summary(dr_run_t *r) {
  (void)r;
  unreachable(__func__);
}

int dr_gpu_train_to_host(dr_run_t *r, int optimizer_too) {
  (void)r, (void)optimizer_too;
  return unreachable(__func__);
}

int dr_gpu_train_from_host(dr_run_t *r) {
  (void)r;
  return unreachable(__func__);
}
