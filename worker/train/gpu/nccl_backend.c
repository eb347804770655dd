/* NCCL communicators through the rendezvous store. See nccl_backend.h. */
#include "nccl_backend.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nccl.h>

#include "client.h"
#include "coll_history.h"
#include "errors.h"
#include "gpu_check.h"
#include "mono.h"

/* Collectives named on stderr in a report (all kept go to the file). */
#define REPORT_LAST 8

struct dr_nccl {
  ncclComm_t comm;
  uint32_t rank, world;
  uint32_t timeout_ms;
  int broken;
  int reported; /* the history was reported once: later failures are its
                   consequences */
  /* The collectives enqueued, and for each slot the event recorded on
   * its stream after it (done[i] NULL: none could be created). */
  dr_coll_history_t hist;
  cudaEvent_t done[DR_COLL_HISTORY];
};

/* The n-th communicator this process creates: the same on every rank
 * when all create them in the same order. */
static _Atomic uint64_t instances;

static void nap(void) {
  struct timespec ts = {0, 100000};
  nanosleep(&ts, NULL);
}

/* Polls the communicator until it leaves ncclInProgress. 0, or
 * DR_GPU_ETIMEOUT / DR_GPU_ENCCL with err filled. */
static int settle(dr_nccl_t *n, uint64_t deadline_ms, const char *what,
                  char *err, size_t err_len) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(n->comm, &state);
    if (r != ncclSuccess) {
      snprintf(err, err_len, "%s: ncclCommGetAsyncError failed: %s", what,
               ncclGetErrorString(r));
      return DR_GPU_ENCCL;
    }
    if (state == ncclSuccess)
      return 0;
    if (state != ncclInProgress) {
      snprintf(err, err_len, "%s: %s (%s)", what, ncclGetErrorString(state),
               ncclGetLastError(n->comm));
      return DR_GPU_ENCCL;
    }
    if (dr_mono_ms() >= deadline_ms) {
      snprintf(err, err_len, "%s: not done within %.1f s", what,
               n->timeout_ms / 1000.0);
      return DR_GPU_ETIMEOUT;
    }
    nap();
  }
}

/* This generation's unique id: drawn by rank 0, read by the others. */
static int exchange_id(const dr_pg_config_t *cfg, ncclUniqueId *id,
                       uint64_t deadline_ms, char *err, size_t err_len) {
  if (cfg->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) {
      snprintf(err, err_len, "ncclGetUniqueId failed: %s",
               ncclGetErrorString(r));
      return DR_GPU_ENCCL;
    }
  }
  if (cfg->world <= 1 || cfg->store_host == NULL)
    return 0;
  uint64_t now = dr_mono_ms();
  int left_ms = now < deadline_ms ? (int)(deadline_ms - now) : 1;
  dr_client_opts_t o = {
      .host = cfg->store_host,
      .port = cfg->store_port,
      .run_id = cfg->run_id,
      .secret = cfg->secret,
      .secret_len = cfg->secret_len,
      .connect_timeout_ms = left_ms,
      .io_timeout_ms = 30000,
  };
  dr_client_t *c = NULL;
  char cerr[256] = "";
  int rc = dr_client_open(&o, &c, cerr, sizeof(cerr));
  if (rc != 0) {
    snprintf(err, err_len, "cannot reach the store at %s:%u: %s%s%s",
             cfg->store_host, (unsigned)cfg->store_port, dr_strerror(rc),
             cerr[0] ? ": " : "", cerr);
    return rc == -ETIMEDOUT ? DR_GPU_ETIMEOUT : rc;
  }
  char key[64];
  snprintf(key, sizeof(key), "nccl/%" PRIu64 "/id",
           atomic_fetch_add(&instances, 1) + 1);
  if (cfg->rank == 0) {
    rc = dr_client_set(c, cfg->gen, key, id->internal, sizeof(id->internal));
    if (rc != 0)
      snprintf(err, err_len, "publishing the NCCL id failed: %s%s%s",
               dr_strerror(rc), *dr_client_errmsg(c) ? ": " : "",
               dr_client_errmsg(c));
  } else {
    uint8_t *v = NULL;
    size_t vn = 0;
    now = dr_mono_ms();
    rc = dr_client_get(c, cfg->gen, key,
                       now < deadline_ms ? deadline_ms - now : 1, &v, &vn);
    if (rc == 0 && vn != sizeof(id->internal))
      rc = DR_EBADARG;
    if (rc == 0)
      memcpy(id->internal, v, vn);
    else
      snprintf(err, err_len, "no NCCL id from rank 0 in the store (%s)%s",
               rc == DR_EBADARG ? "wrong size" : dr_strerror(rc),
               rc == -ETIMEDOUT ? ": is rank 0 running with --device cuda?"
                                : "");
    free(v);
    if (rc == -ETIMEDOUT)
      rc = DR_GPU_ETIMEOUT;
  }
  dr_client_close(&c);
  return rc;
}

_Static_assert(sizeof(ncclUniqueId) == DR_NCCL_ID_BYTES,
               "ncclUniqueId is 128 bytes");

int dr_nccl_unique_id(const dr_pg_config_t *cfg, uint8_t id[DR_NCCL_ID_BYTES],
                      char *err, size_t err_len) {
  ncclUniqueId u;
  memset(&u, 0, sizeof(u));
  int rc = exchange_id(cfg, &u, dr_mono_ms() + cfg->timeout_ms, err, err_len);
  if (rc == 0)
    memcpy(id, u.internal, DR_NCCL_ID_BYTES);
  return rc;
}

int dr_nccl_init(const dr_pg_config_t *cfg, dr_nccl_t **out, char *err,
                 size_t err_len) {
  *out = NULL;
  dr_nccl_t *n = calloc(1, sizeof(*n));
  if (n == NULL)
    return -ENOMEM;
  n->rank = cfg->rank;
  n->world = cfg->world > 0 ? cfg->world : 1;
  n->timeout_ms = cfg->timeout_ms;
  uint64_t deadline = dr_mono_ms() + cfg->timeout_ms;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  int rc = exchange_id(cfg, &id, deadline, err, err_len);
  if (rc != 0) {
    free(n);
    return rc;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&n->comm, (int)n->world, id,
                                          (int)n->rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    snprintf(err, err_len, "ncclCommInitRankConfig failed: %s (%s)",
             ncclGetErrorString(r), ncclGetLastError(NULL));
    if (n->comm != NULL)
      ncclCommAbort(n->comm);
    free(n);
    return DR_GPU_ENCCL;
  }
  rc = settle(n, deadline, "NCCL communicator set-up", err, err_len);
  if (rc != 0) {
    ncclCommAbort(n->comm);
    free(n);
    return rc;
  }
  /* Without an event a collective's state stays unknown in the
   * history: no reason to fail the run. */
  for (int i = 0; i < DR_COLL_HISTORY; i++)
    if (cudaEventCreateWithFlags(&n->done[i], cudaEventDisableTiming) !=
        cudaSuccess)
      n->done[i] = NULL;
  *out = n;
  return 0;
}

/* Reads each kept collective's state from its event. Before an abort:
 * after it, kernels end and events complete whatever the peers did. */
static void update_states(dr_nccl_t *n) {
  size_t len = dr_coll_history_len(&n->hist);
  for (size_t k = 0; k < len; k++) {
    size_t slot;
    dr_coll_entry_t *e = dr_coll_history_at(&n->hist, k, &slot);
    if (e->state != DR_COLL_PENDING)
      continue;
    cudaError_t q = cudaEventQuery(n->done[slot]);
    if (q == cudaSuccess)
      e->state = DR_COLL_DONE;
    else if (q != cudaErrorNotReady)
      e->state = DR_COLL_UNKNOWN;
  }
}

void dr_nccl_report(dr_nccl_t *n, const char *why) {
  if (n == NULL || n->reported)
    return;
  n->reported = 1;
  if (!n->broken && n->comm != NULL)
    update_states(n);
  uint64_t now = dr_mono_us();
  char line[1536], path[4096], where[4200] = "";
  dr_coll_history_line(&n->hist, REPORT_LAST, now, line, sizeof(line));
  if (dr_coll_history_path(path, sizeof(path)) == 0) {
    int rc = dr_coll_history_write(&n->hist, n->rank, n->world, why, now,
                                   path);
    if (rc == 0)
      snprintf(where, sizeof(where), "; the last %zu in %s",
               dr_coll_history_len(&n->hist), path);
    else
      snprintf(where, sizeof(where), "; cannot write %s (%s)", path,
               strerror(-rc));
  }
  fprintf(stderr, "train: rank %u: last collectives (NCCL, of %llu): %s%s\n",
          n->rank, (unsigned long long)n->hist.n, line, where);
}

void dr_nccl_abort(dr_nccl_t *n) {
  if (n == NULL || n->comm == NULL)
    return;
  ncclCommAbort(n->comm);
  n->comm = NULL;
  n->broken = 1;
}

static void free_events(dr_nccl_t *n) {
  for (int i = 0; i < DR_COLL_HISTORY; i++)
    if (n->done[i] != NULL)
      cudaEventDestroy(n->done[i]);
}

void dr_nccl_destroy(dr_nccl_t **np) {
  dr_nccl_t *n = *np;
  if (n == NULL)
    return;
  if (n->comm != NULL) {
    char err[256];
    ncclResult_t r = ncclCommFinalize(n->comm);
    int ok = (r == ncclSuccess || r == ncclInProgress) &&
             settle(n, dr_mono_ms() + n->timeout_ms, "NCCL finalize", err,
                    sizeof(err)) == 0;
    if (ok)
      ncclCommDestroy(n->comm);
    else
      ncclCommAbort(n->comm);
  }
  free_events(n);
  free(n);
  *np = NULL;
}

/* One in-place all-reduce of n_elems of type t (elem_bytes each). */
static int allreduce(dr_nccl_t *n, void *buf, size_t n_elems,
                     ncclDataType_t t, size_t elem_bytes, ncclRedOp_t op,
                     cudaStream_t s) {
  if (n->broken || n->comm == NULL)
    return DR_GPU_ENCCL;
  size_t slot = dr_coll_history_add(&n->hist, "allreduce",
                                    (uint64_t)n_elems * elem_bytes,
                                    dr_mono_us());
  NCCL_CHECK(ncclAllReduce(buf, buf, n_elems, t, op, n->comm, s));
  /* A non-blocking communicator may still be enqueueing: the call is
   * complete (on the host) once the state leaves ncclInProgress. */
  char err[512];
  int rc = settle(n, dr_mono_ms() + n->timeout_ms, "ncclAllReduce enqueue", err,
                  sizeof(err));
  if (rc != 0) {
    dr__gpu_fail(rc, __FILE__, __LINE__, "ncclAllReduce", err);
    dr_nccl_report(n, err);
    dr_nccl_abort(n);
    return rc;
  }
  dr_coll_entry_t *e = &n->hist.slot[slot];
  e->state = n->done[slot] != NULL &&
                     cudaEventRecord(n->done[slot], s) == cudaSuccess
                 ? DR_COLL_PENDING
                 : DR_COLL_UNKNOWN;
  return 0;
}

int dr_nccl_allreduce_avg(dr_nccl_t *n, float *buf, size_t n_elems,
                          cudaStream_t s) {
  return allreduce(n, buf, n_elems, ncclFloat32, sizeof(float), ncclAvg, s);
}

int dr_nccl_allreduce_sum(dr_nccl_t *n, float *buf, size_t n_elems,
                          cudaStream_t s) {
  return allreduce(n, buf, n_elems, ncclFloat32, sizeof(float), ncclSum, s);
}

int dr_nccl_allreduce_max(dr_nccl_t *n, float *buf, size_t n_elems,
                          cudaStream_t s) {
  return allreduce(n, buf, n_elems, ncclFloat32, sizeof(float), ncclMax, s);
}

int dr_nccl_allreduce_sum_half(dr_nccl_t *n, void *buf, size_t n_elems,
                               int bf16, cudaStream_t s) {
  return allreduce(n, buf, n_elems, bf16 ? ncclBfloat16 : ncclFloat16, 2,
                   ncclSum, s);
}

int dr_nccl_poll(void *arg) {
  dr_nccl_t *n = arg;
  if (n == NULL)
    return 0;
  if (n->broken || n->comm == NULL)
    return DR_GPU_ENCCL;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(n->comm, &state);
  if (r == ncclSuccess && (state == ncclSuccess || state == ncclInProgress))
    return 0;
  const char *what = ncclGetErrorString(r != ncclSuccess ? r : state);
  dr__gpu_fail(DR_GPU_ENCCL, __FILE__, __LINE__, "ncclCommGetAsyncError",
               what);
  char why[256];
  snprintf(why, sizeof(why), "the NCCL communicator reported: %s", what);
  dr_nccl_report(n, why);
  dr_nccl_abort(n);
  return DR_GPU_ENCCL;
}

void dr_nccl_version(char *buf, size_t len) {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) {
    snprintf(buf, len, "NCCL (version unknown)");
    return;
  }
  /* Since 2.9: major * 10000 + minor * 100 + patch. */
  snprintf(buf, len, "NCCL %d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
}
