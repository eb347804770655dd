/* Bounded waits and staged copies. See gpu_sync.h. */
#include "gpu_sync.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gpu_check.h"
#include "mono.h"

/* Spins (yielding) for the first 200 us, when short waits are common and
 * latency matters, then sleeps 50 us between queries. */
static void backoff(uint64_t waited_us) {
  if (waited_us < 200) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, 50000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

typedef cudaError_t (*query_fn)(void *obj);

static cudaError_t query_event(void *obj) {
  return cudaEventQuery((cudaEvent_t)obj);
}

static cudaError_t query_stream(void *obj) {
  return cudaStreamQuery((cudaStream_t)obj);
}

static int wait_on(const dr_gpu_waiter_t *w, query_fn q, void *obj,
                   const char *what) {
  uint64_t t0 = dr_mono_us();
  uint64_t limit = (uint64_t)w->timeout_ms * 1000u;
  unsigned polls = 0;
  for (;;) {
    cudaError_t e = q(obj);
    if (e == cudaSuccess)
      return 0;
    if (e != cudaErrorNotReady)
      return dr__gpu_fail(DR_GPU_ECUDA, __FILE__, __LINE__, what,
                          cudaGetErrorString(e));
    /* The hook may be costly (an NCCL query): every 16th poll. */
    if (w->poll != NULL && ++polls % 16 == 0) {
      int rc = w->poll(w->poll_arg);
      if (rc != 0)
        return rc;
    }
    uint64_t waited = dr_mono_us() - t0;
    if (waited > limit) {
      char msg[160];
      snprintf(msg, sizeof(msg), "not done within %.1f s",
               w->timeout_ms / 1000.0);
      return dr__gpu_fail(DR_GPU_ETIMEOUT, __FILE__, __LINE__, what, msg);
    }
    backoff(waited);
  }
}

int dr_gpu_wait_event(const dr_gpu_waiter_t *w, cudaEvent_t ev,
                      const char *what) {
  return wait_on(w, query_event, (void *)ev, what);
}

int dr_gpu_wait_stream(const dr_gpu_waiter_t *w, cudaStream_t s,
                       const char *what) {
  return wait_on(w, query_stream, (void *)s, what);
}

int dr_gpu_staging_new(dr_gpu_staging_t *st, size_t n_bytes) {
  memset(st, 0, sizeof(*st));
  CUDA_CHECK(cudaMallocHost(&st->pinned, n_bytes));
  st->n_bytes = n_bytes;
  CUDA_CHECK(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming));
  return 0;
}

void dr_gpu_staging_free(dr_gpu_staging_t *st) {
  if (st->pinned != NULL)
    cudaFreeHost(st->pinned);
  if (st->done != NULL)
    cudaEventDestroy(st->done);
  memset(st, 0, sizeof(*st));
}

int dr_gpu_copy_d2h(const dr_gpu_waiter_t *w, dr_gpu_staging_t *st,
                    void *dst, const void *src, size_t n_bytes,
                    cudaStream_t s) {
  for (size_t off = 0; off < n_bytes; off += st->n_bytes) {
    size_t n = n_bytes - off < st->n_bytes ? n_bytes - off : st->n_bytes;
    CUDA_CHECK(cudaMemcpyAsync(st->pinned, (const char *)src + off, n,
                               cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaEventRecord(st->done, s));
    int rc = dr_gpu_wait_event(w, st->done, "copy from the device");
    if (rc != 0)
      return rc;
    memcpy((char *)dst + off, st->pinned, n);
  }
  return 0;
}

int dr_gpu_copy_h2d(const dr_gpu_waiter_t *w, dr_gpu_staging_t *st,
                    void *dst, const void *src, size_t n_bytes,
                    cudaStream_t s) {
  for (size_t off = 0; off < n_bytes; off += st->n_bytes) {
    size_t n = n_bytes - off < st->n_bytes ? n_bytes - off : st->n_bytes;
    memcpy(st->pinned, (const char *)src + off, n);
    CUDA_CHECK(cudaMemcpyAsync((char *)dst + off, st->pinned, n,
                               cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaEventRecord(st->done, s));
    int rc = dr_gpu_wait_event(w, st->done, "copy to the device");
    if (rc != 0)
      return rc;
  }
  return 0;
}
