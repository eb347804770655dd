/* train's GPU context: device choice, streams, model, optimizer, NCCL, the
 * reducer's device hooks, checkpoints' copies and the summary. The step
 * itself is in gpu_step.c. See gpu_train.h. */
#include "gpu_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "gpu_device.h"
#include "gpu_scale_internal.h"
#include "gpu_step_internal.h"
#include "train_device.h"
#include "mono.h"

/* LOCAL_RANK and LOCAL_WORLD_SIZE as ddprun sets them (0 and 1 alone). */
static uint32_t env_u32(const char *name, uint32_t dflt) {
  const char *v = getenv(name);
  char *end;
  unsigned long x = v != NULL ? strtoul(v, &end, 10) : 0;
  return v != NULL && v[0] != '\0' && *end == '\0' && x < UINT32_MAX
             ? (uint32_t)x
             : dflt;
}

int dr_gpu_train_resolve(dr_run_t *r) {
  const dr_train_config_t *c = &r->c;
  char why[512] = "";
  int dev = 0;
  int usable = 0;
  if (strcmp(c->device, "cpu") != 0)
    usable = dr_gpu_pick(env_u32("LOCAL_RANK", 0),
                         env_u32("LOCAL_WORLD_SIZE", 1), &dev, why,
                         sizeof(why)) == 0;
  if (strcmp(c->device, "cuda") == 0 && !usable) {
    /* Before anything is built: a configuration error, never restarted. */
    fprintf(stderr, "train: %s\n", why);
    return DR_TRAIN_ECONFIG;
  }
  r->use_gpu = usable;
  if (!r->use_gpu && strcmp(c->precision, "fp32") != 0) {
    fprintf(stderr, "train: --precision %s needs --device cuda and a usable "
            "GPU (the CPU model computes in fp32 only); use --precision fp32 "
            "on the CPU\n", c->precision);
    return DR_TRAIN_ECONFIG;
  }
  if (r->use_gpu && strcmp(c->precision, "fp16") == 0 &&
      strcmp(c->loss_scale, "none") == 0 && r->rank == 0)
    fprintf(stderr, "train: warning: --precision fp16 without --loss-scale: "
            "gradients below 6e-8 flush to zero in fp16; --loss-scale "
            "dynamic keeps them\n");
  if (r->use_gpu && (c->bucket_cap_auto || c->profile_out != NULL)) {
    fprintf(stderr, "train: --bucket-cap-mb auto and --profile-out measure "
            "the CPU step's phases; with --device cuda give a fixed "
            "--bucket-cap-mb (or use --device cpu)\n");
    return DR_TRAIN_ECONFIG;
  }
  return 0;
}

/* The reducer's buckets on the device: stream-ordered allocations on the
 * compute stream, so a rebuild never waits for the device (the old
 * buckets are released after the work already enqueued). */
static void *bucket_alloc(void *arg, size_t n_bytes) {
  dr_gpu_t *g = arg;
  void *p = NULL;
  if (cudaMallocAsync(&p, n_bytes, g->compute) != cudaSuccess) {
    dr__gpu_fail(DR_GPU_ECUDA, __FILE__, __LINE__, "cudaMallocAsync(buckets)",
                 cudaGetErrorString(cudaGetLastError()));
    return NULL;
  }
  if (cudaMemsetAsync(p, 0, n_bytes, g->compute) != cudaSuccess) {
    dr__gpu_fail(DR_GPU_ECUDA, __FILE__, __LINE__, "cudaMemsetAsync(buckets)",
                 cudaGetErrorString(cudaGetLastError()));
    cudaFreeAsync(p, g->compute);
    return NULL;
  }
  return p;
}

static void bucket_free(void *arg, void *p) {
  dr_gpu_t *g = arg;
  cudaFreeAsync(p, g->compute);
}

static int open_device(dr_run_t *r, dr_gpu_t *g) {
  CUDA_CHECK(cudaSetDevice(g->device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&g->compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&g->comm, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&g->blas));
  CUBLAS_CHECK(cublasSetStream(g->blas, g->compute));
  CUDA_CHECK(cudaMalloc((void **)&g->loss_acc, 2 * sizeof(double)));
  CUDA_CHECK(cudaMemsetAsync(g->loss_acc, 0, 2 * sizeof(double), g->compute));
  CUDA_CHECK(cudaMalloc((void **)&g->count, sizeof(uint32_t)));
  CUDA_CHECK(cudaMallocHost((void **)&g->readback, 4 * sizeof(double)));
  CUDA_CHECK(cudaEventCreateWithFlags(&g->readback_done,
                                      cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&g->comm_done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreate(&g->ref));
  (void)r;
  return 0;
}

static int record_origin(dr_gpu_t *g) {
  CUDA_CHECK(cudaEventRecord(g->ref, g->compute));
  return 0;
}

int dr_gpu_train_open(dr_run_t *r, dr_reducer_config_t *rc) {
  char err[512] = "";
  dr_gpu_check_identity(r->rank, r->host);
  dr_gpu_t *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return dr_train_nomem(r, "the GPU state");
  r->gpu = g;
  g->dtype = strcmp(r->c.precision, "bf16") == 0   ? DR_BF16
             : strcmp(r->c.precision, "fp16") == 0 ? DR_F16
                                                   : DR_F32;
  /* fp16/bf16 gradients on the wire: cast around NCCL's sum. */
  g->half_kind = r->cmpc.kind == DR_CMP_FP16 || r->cmpc.kind == DR_CMP_BF16
                     ? (int)r->cmpc.kind
                     : DR_CMP_NONE;
  g->waiter.timeout_ms = r->pgc.timeout_ms;
  if (dr_gpu_pick(r->local_rank, r->pgc.local_world, &g->device, err,
                  sizeof(err)) != 0) {
    fprintf(stderr, "train: rank %u: %s\n", r->rank, err);
    return DR_TRAIN_ECONFIG;
  }
  if (open_device(r, g) != 0 || dr__gpu_scale_open(r) != 0)
    return DR_TRAIN_EDEVICE;
  dr_gpu_model_opts_t mo = {g->dtype, r->c.tf32, g->compute, g->blas,
                            &g->waiter, dr__gpu_scale_value(g)};
  int rc2 = dr_gpu_model_new(r->model, &mo, &g->model);
  if (rc2 != 0) {
    fprintf(stderr, "train: rank %u: cannot put the model on cuda:%d "
            "(%s)\n", r->rank, g->device,
            rc2 == DR_GPU_ECUDA ? "see the CUDA error above"
                                : "see the error above");
    return DR_TRAIN_EDEVICE;
  }
  if (dr_gpu_optim_new(dr_optim_config(r->opt), r->opt,
                       dr_model_n_elems(r->model),
                       g->compute, &g->waiter, &g->optim) != 0)
    return DR_TRAIN_EDEVICE;
  /* NCCL after the model: a rank that cannot hold the model fails before
   * the others wait for it in the communicator's set-up. */
  dr_pg_config_t pc = r->pgc;
  if (dr_nccl_init(&pc, &g->nccl, err, sizeof(err)) != 0) {
    fprintf(stderr, "train: rank %u: cannot set up NCCL: %s (exit %d)\n",
            r->rank, err, DR_TRAIN_ECOMM);
    return DR_TRAIN_ECOMM;
  }
  g->waiter.poll = dr_nccl_poll;
  g->waiter.poll_arg = g->nccl;
  if (r->cmpc.kind == DR_CMP_POWERSGD) {
    dr_gpu_psgd_opts_t po = {r->cmp, r->model, g->comm, g->compute, g->nccl,
                             &g->waiter, r->world, g->scaler};
    if (dr_gpu_psgd_new(&po, &g->psgd) != 0)
      return DR_TRAIN_EDEVICE;
  }
  /* The device clock's origin on the host's monotonic clock, for traces. */
  if (record_origin(g) != 0 ||
      dr_gpu_wait_event(&g->waiter, g->ref, "the device clock's origin") != 0)
    return DR_TRAIN_EDEVICE;
  g->ref_us = dr_mono_us();
  dr__gpu_sample_mem(g);
  rc->launch = dr__gpu_launch_bucket;
  rc->launch_arg = r;
  rc->mem_alloc = bucket_alloc;
  rc->mem_free = bucket_free;
  rc->mem_arg = g;
  r->dev = &dr__gpu_train_device;
  return 0;
}

void dr_gpu_train_close(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  if (g == NULL)
    return;
  /* Idle first: freeing memory that kernels still use is undefined. The
   * waits poll the streams alone: the communicator is healthy or already
   * aborted by the failure that brought us here, and its error must not
   * make a draining stream look stuck. */
  g->waiter.poll = NULL;
  int idle = 1;
  if (g->compute != NULL)
    idle &= dr_gpu_wait_stream(&g->waiter, g->compute, "the compute stream") == 0;
  if (g->comm != NULL)
    idle &= dr_gpu_wait_stream(&g->waiter, g->comm, "the NCCL stream") == 0;
  if (!idle)
    dr_nccl_abort(g->nccl);
  dr_nccl_destroy(&g->nccl); /* after an abort: frees the rest */
  if (!idle) {
    /* A device that did not finish in time: cudaFree would wait for it
     * without a bound, so its memory is left to the process exit. */
    free(g);
    r->gpu = NULL;
    return;
  }
  dr__gpu_ring_free(g);
  dr__gpu_half_free(g);
  dr__gpu_scale_free(g);
  dr_gpu_psgd_free(&g->psgd);
  dr_gpu_optim_free(&g->optim);
  dr_gpu_model_free(&g->model);
  if (g->blas != NULL)
    cublasDestroy(g->blas);
  cudaFree(g->loss_acc);
  cudaFree(g->count);
  cudaFree(g->test_buf);
  if (g->readback != NULL)
    cudaFreeHost(g->readback);
  if (g->readback_done != NULL)
    cudaEventDestroy(g->readback_done);
  if (g->comm_done != NULL)
    cudaEventDestroy(g->comm_done);
  if (g->ref != NULL)
    cudaEventDestroy(g->ref);
  if (g->compute != NULL)
    cudaStreamDestroy(g->compute);
  if (g->comm != NULL)
    cudaStreamDestroy(g->comm);
  free(g);
  r->gpu = NULL;
}

void dr__gpu_sample_mem(dr_gpu_t *g) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    /* Not worth a failure: no sample, and no stale error left behind for
     * the next message that reads cudaGetLastError. */
    (void)cudaGetLastError();
    return;
  }
  uint64_t used = total_b > free_b ? (uint64_t)(total_b - free_b) : 0;
  if (used > g->mem_peak)
    g->mem_peak = used;
}

uint64_t dr_gpu_train_peak_bytes(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  if (g == NULL)
    return 0;
  dr__gpu_sample_mem(g);
  return g->mem_peak;
}

void dr_gpu_train_summary(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  char dev[2048];
  dr_gpu_describe(g->device, dev, sizeof(dev));
  char ls[64];
  fprintf(stderr, "train: rank %u: device %s; precision %s%s; model on the "
          "device %.1f MiB; backend NCCL on its own stream%s, CPU process "
          "group for control; loss scale %s\n", r->rank, dev,
          g->dtype == DR_BF16   ? "bf16 (fp32 master weights)"
          : g->dtype == DR_F16 ? "fp16 (fp32 master weights)"
                               : "fp32",
          g->dtype == DR_F32 ? (r->c.tf32 ? " with TF32 GEMMs"
                                          : " (TF32 off)")
                             : "",
          dr_gpu_model_bytes(g->model) / 1048576.0,
          g->half_kind == DR_CMP_FP16   ? ", gradients summed in fp16"
          : g->half_kind == DR_CMP_BF16 ? ", gradients summed in bf16"
          : g->psgd != NULL             ? ", PowerSGD on cuBLAS"
                                        : "",
          dr_loss_scale_describe(&r->ls, ls, sizeof(ls)));
}

int dr_gpu_train_to_host(dr_run_t *r, int optimizer_too) {
  dr_gpu_t *g = r->gpu;
  /* Every enqueued step harvested: r->ls is the device scaler's state
   * (and an overflow at the floor stops the run here too). */
  if (g->scaler != NULL) {
    int rc = r->dev->harvest(r);
    if (rc != 0)
      return rc;
  }
  if (dr_gpu_model_download(g->model, r->model) != 0 ||
      (optimizer_too && dr_gpu_optim_download(g->optim) != 0) ||
      (optimizer_too && g->psgd != NULL &&
       dr_gpu_psgd_download(g->psgd) != 0)) {
    fprintf(stderr, "train: rank %u: cannot copy the model from cuda:%d "
            "(exit %d)\n", r->rank, g->device, DR_TRAIN_ETIMEOUT);
    return DR_TRAIN_ETIMEOUT;
  }
  return 0;
}

int dr_gpu_train_from_host(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  if (dr_gpu_model_upload(g->model, r->model) != 0 ||
      dr_gpu_optim_upload(g->optim) != 0 || dr__gpu_scale_upload(r) != 0 ||
      (g->psgd != NULL && dr_gpu_psgd_upload(g->psgd) != 0)) {
    fprintf(stderr, "train: rank %u: cannot copy the model to cuda:%d "
            "(exit %d)\n", r->rank, g->device, DR_TRAIN_ETIMEOUT);
    return DR_TRAIN_ETIMEOUT;
  }
  return 0;
}
