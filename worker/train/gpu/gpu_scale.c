/* The loss scaler on the GPU, host side: its device state and pinned
 * mirrors, the checks around each bucket's all-reduce, the ranks'
 * agreement, and the verdicts read back in step order. See gpu_scale.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_inject.h"
#include "gpu_check.h"
#include "gpu_scale_internal.h"

static void to_device_form(const dr_loss_scale_t *ls, dr_gpu_scaler_t *d) {
  memset(d, 0, sizeof(*d));
  d->scale = (float)ls->scale;
  d->mode = (int32_t)ls->mode;
  d->good = ls->good;
  d->skipped = ls->skipped;
  d->last_rank = ls->last_rank;
  d->last_step = ls->last_step;
}

static void to_host_form(const dr_gpu_scaler_t *d, dr_loss_scale_t *ls) {
  ls->scale = d->scale;
  ls->good = d->good;
  ls->skipped = d->skipped;
  ls->last_rank = d->last_rank;
  ls->last_step = d->last_step;
}

int dr__gpu_scale_open(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  if (r->ls.mode == DR_LS_NONE)
    return 0;
  CUDA_CHECK(cudaMalloc((void **)&g->scaler, sizeof(dr_gpu_scaler_t)));
  CUDA_CHECK(cudaMallocHost((void **)&g->scaler_pin,
                            DR_GPU_RING * sizeof(dr_gpu_scaler_t)));
  memset(g->scaler_pin, 0, DR_GPU_RING * sizeof(dr_gpu_scaler_t));
  return dr__gpu_scale_upload(r);
}

void dr__gpu_scale_free(dr_gpu_t *g) {
  cudaFree(g->scaler);
  if (g->scaler_pin != NULL)
    cudaFreeHost(g->scaler_pin);
  g->scaler = NULL;
  g->scaler_pin = NULL;
}

int dr__gpu_scale_upload(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  if (g->scaler == NULL)
    return 0;
  to_device_form(&r->ls, &g->seen);
  CUDA_CHECK(cudaMemcpyAsync(g->scaler, &g->seen, sizeof(g->seen),
                             cudaMemcpyHostToDevice, g->compute));
  /* &g->seen is pageable: the copy is staged before the call returns. */
  return 0;
}

static int kind_of(int half_kind) {
  return half_kind == DR_CMP_BF16   ? DR_SCALE_BF16
         : half_kind == DR_CMP_FP16 ? DR_SCALE_F16
                                    : DR_SCALE_F32;
}

void dr__gpu_scale_step(dr_run_t *r, uint64_t step) {
  dr_gpu_t *g = r->gpu;
  g->poison = g->scaler != NULL
                  ? dr_fault_overflow_value(r->rank, r->world, step)
                  : 0.0f;
}

/* world - rank: the MAX names the lowest rank that overflowed. */
static float own_flag(const dr_run_t *r) {
  return (float)(r->world - r->rank);
}

int dr__gpu_scale_own(dr_run_t *r, float *data, size_t n) {
  dr_gpu_t *g = r->gpu;
  if (g->scaler == NULL)
    return 0;
  if (g->poison != 0.0f && n > 0) {
    KERNEL_CHECK(dr_k_set_first(data, g->poison, g->comm));
    g->poison = 0.0f;
  }
  KERNEL_CHECK(dr_k_flag_nonfinite(data, DR_SCALE_F32, n, own_flag(r),
                                   &g->scaler->flags[0], g->comm));
  return 0;
}

int dr__gpu_scale_own_half(dr_run_t *r, const void *half, size_t n) {
  dr_gpu_t *g = r->gpu;
  if (g->scaler == NULL)
    return 0;
  KERNEL_CHECK(dr_k_flag_nonfinite(half, kind_of(g->half_kind), n,
                                   own_flag(r), &g->scaler->flags[0],
                                   g->comm));
  return 0;
}

int dr__gpu_scale_sum(dr_run_t *r, float *data, size_t n) {
  dr_gpu_t *g = r->gpu;
  if (g->scaler == NULL)
    return 0;
  KERNEL_CHECK(dr_k_unscale_check(data, n, g->scaler, g->comm));
  return 0;
}

int dr__gpu_scale_check_sum(dr_run_t *r, const float *data, size_t n) {
  dr_gpu_t *g = r->gpu;
  if (g->scaler == NULL)
    return 0;
  KERNEL_CHECK(dr_k_flag_nonfinite(data, DR_SCALE_F32, n, 1.0f,
                                   &g->scaler->flags[1], g->comm));
  return 0;
}

int dr__gpu_scale_agree(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  if (g->scaler == NULL)
    return 0;
  return dr_nccl_allreduce_max(g->nccl, g->scaler->flags, 2, g->comm);
}

const float *dr__gpu_scale_flags(const dr_gpu_t *g) {
  return g->scaler != NULL ? g->scaler->flags : NULL;
}

const float *dr__gpu_scale_value(const dr_gpu_t *g) {
  return g->scaler != NULL ? &g->scaler->scale : NULL;
}

int dr__gpu_scale_update(dr_run_t *r, size_t slot, uint64_t step) {
  dr_gpu_t *g = r->gpu;
  if (g->scaler == NULL)
    return 0;
  KERNEL_CHECK(dr_k_scaler_update(g->scaler, r->world, step, g->compute));
  CUDA_CHECK(cudaMemcpyAsync(&g->scaler_pin[slot], g->scaler,
                             sizeof(dr_gpu_scaler_t), cudaMemcpyDeviceToHost,
                             g->compute));
  return 0;
}

int dr__gpu_scale_harvest(dr_run_t *r, size_t slot, uint64_t step) {
  dr_gpu_t *g = r->gpu;
  if (g->scaler == NULL)
    return 0;
  dr_gpu_scaler_t d = g->scaler_pin[slot];
  double before = g->seen.scale;
  int overflow = d.skipped > g->seen.skipped;
  int floor_hit = d.floor_hit && !g->seen.floor_hit;
  g->seen = d;
  to_host_form(&d, &r->ls);
  if (floor_hit)
    return dr_train_overflow_said(r, step, before, DR_LS_EFLOOR);
  if (overflow)
    return dr_train_overflow_said(r, step, before, DR_LS_SKIP);
  return 0;
}
