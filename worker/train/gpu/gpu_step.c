/* train's device (train_device.h) on the GPU: the step's parts, its
 * timing from CUDA events, and the evaluation. See gpu_train.h for the
 * streams and what waits on what. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "gpu_scale_internal.h"
#include "gpu_step_internal.h"
#include "gpu_train.h"
#include "train_device.h"

/* A failure during the run: the communicator is aborted so no peer waits
 * on this rank, and train exits 4. First its last collectives are
 * reported: a wait past its deadline is most often a collective that
 * does not end (a peer gone, stuck, or out of step). */
static int failed(dr_run_t *r, const char *what) {
  fprintf(stderr, "train: rank %u: %s failed on cuda:%d (exit %d)\n", r->rank,
          what, r->gpu->device, DR_TRAIN_ETIMEOUT);
  char why[160];
  snprintf(why, sizeof(why), "%s failed on cuda:%d", what, r->gpu->device);
  dr_nccl_report(r->gpu->nccl, why);
  dr_nccl_abort(r->gpu->nccl);
  return DR_TRAIN_ETIMEOUT;
}

/* One of a slot's bucket event arrays grown from old to cap events: the
 * new ones created (timing on). 0 or -1; on failure the array keeps old
 * valid events and the rest is unset. */
static int grow_events(cudaEvent_t **events, size_t old, size_t cap) {
  cudaEvent_t *e = realloc(*events, cap * sizeof(cudaEvent_t));
  if (e == NULL)
    return -1;
  *events = e;
  for (size_t b = old; b < cap; b++)
    CUDA_CHECK(cudaEventCreate(&e[b]));
  return 0;
}

/* Bucket events for buckets [0, n) in every slot. g->cap grows only
 * once every slot has all three arrays at the new size, so that
 * dr__gpu_ring_free destroys exactly the events created (one created in
 * a failed growth is left to the process exit). */
static int grow(dr_gpu_t *g, size_t n) {
  if (n <= g->cap)
    return 0;
  size_t cap = n < 2 * g->cap ? 2 * g->cap : n;
  for (int s = 0; s < DR_GPU_RING; s++) {
    dr_gpu_slot_t *sl = &g->ring[s];
    if (grow_events(&sl->rd, g->cap, cap) != 0 ||
        grow_events(&sl->c0, g->cap, cap) != 0 ||
        grow_events(&sl->c1, g->cap, cap) != 0)
      return -1;
  }
  g->cap = cap;
  return 0;
}

void dr__gpu_ring_free(dr_gpu_t *g) {
  for (int s = 0; s < DR_GPU_RING; s++) {
    dr_gpu_slot_t *sl = &g->ring[s];
    if (sl->start != NULL) {
      cudaEventDestroy(sl->start);
      cudaEventDestroy(sl->bwd_end);
      cudaEventDestroy(sl->opt_start);
      cudaEventDestroy(sl->end);
    }
    for (size_t b = 0; b < g->cap; b++) {
      cudaEventDestroy(sl->rd[b]);
      cudaEventDestroy(sl->c0[b]);
      cudaEventDestroy(sl->c1[b]);
    }
    free(sl->rd);
    free(sl->c0);
    free(sl->c1);
  }
  g->cap = 0;
}

/* The two-byte buffer of bucket b for n elements, on the communication
 * stream; NULL when it cannot be made (printed). */
static void *half_buf(dr_gpu_t *g, size_t b, size_t n) {
  if (b >= g->n_half) {
    void **h = realloc(g->half, (b + 1) * sizeof(*h));
    size_t *e = h != NULL ? realloc(g->half_elems, (b + 1) * sizeof(*e))
                          : NULL;
    if (h != NULL)
      g->half = h;
    if (e == NULL)
      return NULL;
    g->half_elems = e;
    for (size_t i = g->n_half; i <= b; i++) {
      g->half[i] = NULL;
      g->half_elems[i] = 0;
    }
    g->n_half = b + 1;
  }
  if (g->half[b] != NULL && g->half_elems[b] == n)
    return g->half[b];
  /* Stream-ordered: the old buffer goes after the work that used it. */
  if (g->half[b] != NULL)
    cudaFreeAsync(g->half[b], g->comm);
  g->half[b] = NULL;
  g->half_elems[b] = 0;
  void *p = NULL;
  if (cudaMallocAsync(&p, (n > 0 ? n : 1) * 2, g->comm) != cudaSuccess) {
    dr__gpu_fail(DR_GPU_ECUDA, __FILE__, __LINE__,
                 "cudaMallocAsync(compressed bucket)", "");
    return NULL;
  }
  g->half[b] = p;
  g->half_elems[b] = n;
  return p;
}

/* --grad-compress fp16|bf16 on the communication stream: the bucket
 * divided by the world size and cast, summed in two bytes by NCCL, cast
 * back in place. */
static int launch_half(dr_run_t *r, size_t bucket, float *data, size_t n) {
  dr_gpu_t *g = r->gpu;
  int bf16 = g->half_kind == DR_CMP_BF16;
  void *h = half_buf(g, bucket, n);
  if (h == NULL)
    return DR_GPU_ECUDA;
  KERNEL_CHECK(dr_k_to_half(data, 1.0f / (float)r->world, h, bf16, n,
                            g->comm));
  int rc = dr__gpu_scale_own_half(r, h, n);
  if (rc == 0)
    rc = dr_nccl_allreduce_sum_half(g->nccl, h, n, bf16, g->comm);
  if (rc != 0)
    return rc;
  KERNEL_CHECK(dr_k_from_half(h, data, bf16, n, g->comm));
  return 0;
}

void dr__gpu_half_free(dr_gpu_t *g) {
  for (size_t i = 0; i < g->n_half; i++)
    if (g->half[i] != NULL)
      cudaFree(g->half[i]);
  free(g->half);
  free(g->half_elems);
  g->half = NULL;
  g->half_elems = NULL;
  g->n_half = 0;
}

int dr__gpu_launch_bucket(void *arg, size_t bucket, float *data,
                          size_t n_elems, dr_work_t **w) {
  dr_run_t *r = arg;
  dr_gpu_t *g = r->gpu;
  *w = NULL; /* nothing for the host to wait on: the streams order it */
  if (grow(g, bucket + 1) != 0)
    return DR_GPU_ECUDA;
  dr_gpu_slot_t *sl = g->cur;
  /* The bucket's gradients are written when the compute stream reaches
   * this event: its ready time in the trace, and what the all-reduce
   * waits for. */
  CUDA_CHECK(cudaEventRecord(sl->rd[bucket], g->compute));
  CUDA_CHECK(cudaStreamWaitEvent(g->comm, sl->rd[bucket], 0));
  CUDA_CHECK(cudaEventRecord(sl->c0[bucket], g->comm));
  int rc = dr__gpu_scale_own(r, data, n_elems);
  if (rc == 0 && dr_gpu_psgd_active(g->psgd, sl->step)) {
    /* Unscaled in its first round: the sum is only checked. */
    rc = dr_gpu_psgd_launch(g->psgd, bucket, data, n_elems);
    if (rc == 0)
      rc = dr__gpu_scale_check_sum(r, data, n_elems);
  } else if (rc == 0) {
    rc = g->half_kind != DR_CMP_NONE
             ? launch_half(r, bucket, data, n_elems)
             : dr_nccl_allreduce_avg(g->nccl, data, n_elems, g->comm);
    if (rc == 0)
      rc = dr__gpu_scale_sum(r, data, n_elems);
  }
  if (rc != 0)
    return rc;
  CUDA_CHECK(cudaEventRecord(sl->c1[bucket], g->comm));
  if (bucket + 1 > sl->nb)
    sl->nb = bucket + 1;
  return 0;
}

static double ms_between(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? ms : 0.0;
}

static uint64_t host_us(const dr_gpu_t *g, cudaEvent_t e) {
  double ms = ms_between(g->ref, e);
  return g->ref_us + (uint64_t)(ms > 0 ? ms * 1000.0 : 0);
}

/* The step's spans on the device's clock (mapped onto the host's): the
 * step from its start mark to the optimizer's end, its compute and
 * optimizer, and each bucket's all-reduce on the communication stream
 * with the time the compute stream had written its gradients. The host's
 * time on the batches is traced as it happens (train_loop.c). */
static void trace_slot(dr_run_t *r, const dr_gpu_slot_t *sl) {
  dr_gpu_t *g = r->gpu;
  if (r->trace == NULL)
    return;
  char name[48];
  snprintf(name, sizeof(name), "step %llu", (unsigned long long)sl->step);
  dr_trace_span(r->trace, DR_TRACE_COMPUTE, name, host_us(g, sl->start),
                host_us(g, sl->end));
  dr_trace_span(r->trace, DR_TRACE_COMPUTE, "forward+backward",
                host_us(g, sl->start), host_us(g, sl->bwd_end));
  dr_trace_span(r->trace, DR_TRACE_COMPUTE, "optimizer",
                host_us(g, sl->opt_start), host_us(g, sl->end));
  for (size_t b = 0; b < sl->nb; b++)
    dr_trace_allreduce(r->trace, b,
                       dr_reducer_bucket_elems(r->red, b) * sizeof(float),
                       host_us(g, sl->rd[b]), host_us(g, sl->c0[b]),
                       host_us(g, sl->c1[b]));
}

/* Waits for the slot's step and reads its times into r->times. */
static int harvest(dr_run_t *r, dr_gpu_slot_t *sl) {
  dr_gpu_t *g = r->gpu;
  if (!sl->used)
    return 0;
  if (dr_gpu_wait_event(&g->waiter, sl->end, "a training step") != 0)
    return failed(r, "waiting for a step");
  dr_step_time_t *st = &r->times[sl->step];
  st->compute_ms = ms_between(sl->start, sl->bwd_end);
  st->comm_ms = st->exposed_ms = 0;
  for (size_t b = 0; b < sl->nb; b++) {
    double d = ms_between(sl->c0[b], sl->c1[b]);
    /* Exposed: the part after the backward pass ended. */
    double after = ms_between(sl->bwd_end, sl->c1[b]);
    st->comm_ms += d;
    st->exposed_ms += after <= 0 ? 0 : after < d ? after : d;
  }
  /* A step's time runs from the previous step's end, so that device idle
   * time (the host preparing data) counts, as it does on the CPU. */
  double end_ms = ms_between(g->ref, sl->end);
  if (g->have_last_end && sl->step > r->start_step)
    st->step_ms = end_ms - g->last_end_ms;
  else
    st->step_ms = ms_between(sl->start, sl->end);
  g->last_end_ms = end_ms;
  g->have_last_end = 1;
  /* At a step's end the step's memory is still held: train allocates its
   * device memory up front and cuBLAS and NCCL keep what they take, so
   * after the first steps a sample now and then suffices. */
  if (sl->step < r->start_step + 8 || sl->step % 100 == 0)
    dr__gpu_sample_mem(g);
  trace_slot(r, sl);
  sl->used = 0;
  return dr__gpu_scale_harvest(r, (size_t)(sl - g->ring), sl->step);
}

static int gpu_harvest(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  /* Oldest first: the step-to-step times need the order. */
  for (int k = 0; k < DR_GPU_RING; k++) {
    dr_gpu_slot_t *next = NULL;
    for (int s = 0; s < DR_GPU_RING; s++)
      if (g->ring[s].used && (next == NULL || g->ring[s].step < next->step))
        next = &g->ring[s];
    if (next == NULL)
      break;
    int rc = harvest(r, next);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static int record(cudaEvent_t e, cudaStream_t s) {
  CUDA_CHECK(cudaEventRecord(e, s));
  return 0;
}

/* The optimizer after the last bucket's all-reduce (and the loss
 * scaler's agreement): one event suffices, the communication stream runs
 * its work in order. */
static int order_optimizer(dr_run_t *r, dr_gpu_slot_t *sl) {
  dr_gpu_t *g = r->gpu;
  CUDA_CHECK(cudaEventRecord(sl->bwd_end, g->compute));
  if (dr__gpu_scale_agree(r) != 0)
    return DR_GPU_ENCCL;
  CUDA_CHECK(cudaEventRecord(g->comm_done, g->comm));
  CUDA_CHECK(cudaStreamWaitEvent(g->compute, g->comm_done, 0));
  CUDA_CHECK(cudaEventRecord(sl->opt_start, g->compute));
  return 0;
}

static int slot_events(dr_gpu_slot_t *sl) {
  if (sl->start != NULL)
    return 0;
  CUDA_CHECK(cudaEventCreate(&sl->start));
  CUDA_CHECK(cudaEventCreate(&sl->bwd_end));
  CUDA_CHECK(cudaEventCreate(&sl->opt_start));
  CUDA_CHECK(cudaEventCreate(&sl->end));
  return 0;
}

/* Batches from the synthetic task cost the host some 5 us a row (the
 * teacher network labels each one), as much as a large model's step on a
 * GPU: the rows are filled by up to 8 threads (as many as this process
 * may run on), each into its own slice of the batch. */
#define FILL_THREADS 8
#define FILL_MIN_ROWS 512

typedef struct {
  const dr_dataset_t *data;
  const uint64_t *idx;
  uint32_t n;
  dr_batch_t view;
} fill_job_t;

static void *fill_main(void *arg) {
  fill_job_t *j = arg;
  dr_data_fill(j->data, DR_SPLIT_TRAIN, j->idx, j->n, &j->view);
  return NULL;
}

static int fill_threads(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return 1;
  int n = CPU_COUNT(&set);
  return n < 1 ? 1 : n > FILL_THREADS ? FILL_THREADS : n;
}

static void fill_batch(dr_run_t *r, const uint64_t *idx, uint32_t n) {
  dr_batch_t *b = &r->batch;
  int t = n >= FILL_MIN_ROWS ? fill_threads() : 1;
  if (t <= 1) {
    dr_data_fill(r->data, DR_SPLIT_TRAIN, idx, n, b);
    return;
  }
  fill_job_t jobs[FILL_THREADS];
  pthread_t th[FILL_THREADS];
  int started[FILL_THREADS] = {0};
  uint32_t per = (n + (uint32_t)t - 1) / (uint32_t)t, filled = 0;
  for (int k = 0; k < t; k++) {
    uint32_t lo = (uint32_t)k * per < n ? (uint32_t)k * per : n;
    uint32_t hi = lo + per < n ? lo + per : n;
    fill_job_t *j = &jobs[k];
    j->data = r->data;
    j->idx = idx + lo;
    j->n = hi - lo;
    j->view = *b;
    j->view.n = 0;
    j->view.cap = hi - lo;
    j->view.x = b->x != NULL ? b->x + (size_t)lo * b->input_dim : NULL;
    j->view.tokens =
        b->tokens != NULL ? b->tokens + (size_t)lo * b->context : NULL;
    j->view.y = b->y + lo;
    started[k] = j->n > 0 && pthread_create(&th[k], NULL, fill_main, j) == 0;
    if (!started[k] && j->n > 0)
      fill_main(j); /* no thread: fill it here */
  }
  for (int k = 0; k < t; k++) {
    if (started[k])
      pthread_join(th[k], NULL);
    filled += jobs[k].view.n;
  }
  b->n = filled;
}

/* Bounds the queue (waits for the step DR_GPU_RING back), then marks the
 * step's start on the compute stream. */
static int gpu_step_begin(dr_run_t *r, uint64_t step) {
  dr_gpu_t *g = r->gpu;
  if (dr_nccl_poll(g->nccl) != 0)
    return failed(r, "the NCCL communicator");
  dr_gpu_slot_t *sl = &g->ring[step % DR_GPU_RING];
  int rc = harvest(r, sl);
  if (rc != 0)
    return rc;
  if (slot_events(sl) != 0)
    return failed(r, "creating events");
  sl->step = step;
  sl->nb = 0;
  g->cur = sl;
  dr__gpu_scale_step(r, step);
  if (record(sl->start, g->compute) != 0)
    return failed(r, "marking the step's start");
  return 0;
}

/* The loss adds up on the device until gpu_loss reads it. */
static int gpu_forward(dr_run_t *r, double *loss) {
  dr_gpu_t *g = r->gpu;
  *loss = 0;
  if (dr_gpu_model_forward(g->model, &r->batch, &g->loss_acc[0]) != 0)
    return failed(r, "the forward pass");
  return 0;
}

static int gpu_backward(dr_run_t *r, float scale, int accumulate,
                        dr_grad_ready_fn ready, void *arg) {
  /* With a loss scaler the scale is the device's (the host's r->ls lags
   * behind it): the model multiplies it in. */
  if (r->gpu->scaler != NULL)
    scale = 1.0f / (float)r->c.grad_accum;
  if (dr_gpu_model_backward(r->gpu->model, scale, accumulate, ready, arg) !=
      0)
    return failed(r, "the backward pass");
  return 0;
}

/* The gradient all-reduce could not be launched (dr_reducer_wait fails on
 * the GPU only for that: the host never waits for the stream-ordered
 * all-reduces): no peer may wait for the collectives this rank misses. */
static void gpu_abort(dr_run_t *r) {
  dr_nccl_report(r->gpu->nccl, "a gradient all-reduce could not be launched");
  dr_nccl_abort(r->gpu->nccl);
}

/* After the last all-reduce on the communication stream, then the step's
 * end mark; the slot is harvested later. */
static int gpu_optimize(dr_run_t *r, uint64_t step) {
  dr_gpu_t *g = r->gpu;
  dr_gpu_slot_t *sl = g->cur;
  if (order_optimizer(r, sl) != 0)
    return failed(r, "ordering the optimizer after the all-reduce");
  if (dr_gpu_optim_step(g->optim, g->model, r->model, step,
                        dr__gpu_scale_flags(g)) != 0)
    return failed(r, "the optimizer step");
  if (dr_gpu_psgd_active(g->psgd, step) &&
      dr_gpu_psgd_commit(g->psgd, dr__gpu_scale_flags(g)) != 0)
    return failed(r, "PowerSGD's state update");
  if (dr__gpu_scale_update(r, (size_t)(sl - g->ring), step) != 0)
    return failed(r, "the loss scale's update");
  if (record(sl->end, g->compute) != 0)
    return failed(r, "marking the step's end");
  sl->used = 1;
  return 0;
}

static int alloc_test_buf(dr_gpu_t *g) {
  if (g->test_buf == NULL) {
    CUDA_CHECK(cudaMalloc((void **)&g->test_buf, sizeof(float)));
    CUDA_CHECK(cudaMemsetAsync(g->test_buf, 0, sizeof(float), g->comm));
  }
  return 0;
}

/* DDPRUN_COLL_TEST_EXTRA: one NCCL all-reduce more than the peers issue,
 * on the communication stream before the step's buckets. NCCL cannot
 * tell: the ranks' collectives pair up wrongly and hang until the
 * deadline of a later wait, which then prints each rank's last
 * collectives (nccl_backend.c). */
static int gpu_test_allreduce(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  if (alloc_test_buf(g) != 0)
    return failed(r, "the extra all-reduce's buffer (test hook)");
  if (dr_nccl_allreduce_avg(g->nccl, g->test_buf, 1, g->comm) != 0)
    return failed(r, "the extra all-reduce (test hook)");
  return 0;
}

static int enqueue_read(dr_gpu_t *g, const void *src, size_t n_bytes) {
  CUDA_CHECK(cudaMemcpyAsync(g->readback, src, n_bytes,
                             cudaMemcpyDeviceToHost, g->compute));
  CUDA_CHECK(cudaEventRecord(g->readback_done, g->compute));
  return 0;
}

static int zero(void *p, size_t n_bytes, cudaStream_t s) {
  CUDA_CHECK(cudaMemsetAsync(p, 0, n_bytes, s));
  return 0;
}

/* Copies n_bytes (at most 4 doubles) of device memory to g->readback and
 * waits. */
static int read_back(dr_run_t *r, const void *src, size_t n_bytes,
                     const char *what) {
  dr_gpu_t *g = r->gpu;
  if (enqueue_read(g, src, n_bytes) != 0)
    return failed(r, what);
  if (dr_gpu_wait_event(&g->waiter, g->readback_done, what) != 0)
    return failed(r, what);
  return 0;
}

/* The step losses since the last read, then the steps' times. */
static int gpu_loss(dr_run_t *r, double *sum) {
  dr_gpu_t *g = r->gpu;
  int rc = read_back(r, &g->loss_acc[0], sizeof(double), "reading the loss");
  if (rc != 0)
    return rc;
  *sum = g->readback[0] / r->c.grad_accum;
  if (zero(&g->loss_acc[0], sizeof(double), g->compute) != 0)
    return failed(r, "resetting the loss");
  return gpu_harvest(r);
}

static int gpu_eval_begin(dr_run_t *r) {
  dr_gpu_t *g = r->gpu;
  if (zero(&g->loss_acc[1], sizeof(double), g->compute) != 0 ||
      zero(g->count, sizeof(uint32_t), g->compute) != 0)
    return failed(r, "resetting the evaluation sums");
  return 0;
}

/* The sums add up on the device until gpu_eval_end reads them. */
static int gpu_eval_batch(dr_run_t *r, double *correct, double *loss_sum) {
  dr_gpu_t *g = r->gpu;
  (void)correct, (void)loss_sum;
  if (dr_gpu_model_evaluate(g->model, &r->batch, &g->loss_acc[1],
                            g->count) != 0)
    return failed(r, "the evaluation");
  return 0;
}

static int gpu_eval_end(dr_run_t *r, double *correct, double *loss_sum) {
  dr_gpu_t *g = r->gpu;
  int rc = read_back(r, &g->loss_acc[1], sizeof(double),
                     "reading the evaluation loss");
  if (rc != 0)
    return rc;
  *loss_sum = g->readback[0];
  rc = read_back(r, g->count, sizeof(uint32_t),
                 "reading the evaluation count");
  if (rc != 0)
    return rc;
  uint32_t hits;
  memcpy(&hits, g->readback, sizeof(hits));
  *correct = hits;
  return 0;
}

const dr_train_device_t dr__gpu_train_device = {
    .name = "cuda",
    .async = 1,
    .step_begin = gpu_step_begin,
    .fill = fill_batch,
    .forward = gpu_forward,
    .backward = gpu_backward,
    .optimize = gpu_optimize,
    .abort = gpu_abort,
    .loss = gpu_loss,
    .harvest = gpu_harvest,
    .test_allreduce = gpu_test_allreduce,
    .eval_begin = gpu_eval_begin,
    .eval_batch = gpu_eval_batch,
    .eval_end = gpu_eval_end,
};
