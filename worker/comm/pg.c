/* The process group's public face: configuration, the work queue and the
 * communication thread that runs it in submission order. One file past
 * 600 lines: the queue, its thread and the calls that post to it share
 * one lock discipline that reads best in one place (the transports and
 * collectives are files of their own). */
#include "pg_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "auth.h"
#include "errors.h"
#include "mono.h"

#define DEFAULT_TIMEOUT_MS 300000u

/* ---- helpers ----------------------------------------------------------- */

void dr__fmt_bytes(char *out, size_t out_len, uint64_t n) {
  if (n < 1024)
    snprintf(out, out_len, "%" PRIu64 " B", n);
  else if (n < (1u << 20))
    snprintf(out, out_len, "%.1f KiB", n / 1024.0);
  else if (n < (1ull << 30))
    snprintf(out, out_len, "%.1f MiB", n / 1048576.0);
  else
    snprintf(out, out_len, "%.1f GiB", n / 1073741824.0);
}

void dr__work_describe(const dr_work_t *w, char *out, size_t out_len) {
  if (w->kind == DR_WORK_BARRIER) {
    snprintf(out, out_len, "barrier #%" PRIu64, w->seq);
    return;
  }
  char size[32];
  dr__fmt_bytes(size, sizeof(size), w->n_bytes);
  snprintf(out, out_len, "%s #%" PRIu64 " (%s)", dr__work_kind_name(w->kind),
           w->seq, size);
}

static uint64_t now_us(void) { return dr_mono_ns() / 1000u; }

/* snprintf for messages that may be cut short. */
__attribute__((format(printf, 3, 4))) static void msgf(char *out, size_t len,
                                                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, len, fmt, ap);
  va_end(ap);
}

/* ---- configuration ----------------------------------------------------- */

/* Strict decimal: digits only, no sign, within max. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
  if (s == NULL || *s == '\0')
    return -1;
  uint64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9')
      return -1;
    unsigned d = (unsigned)(*p - '0');
    if (v > (max - d) / 10)
      return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

__attribute__((format(printf, 3, 4))) static int bad(char *err, size_t err_len,
                                                     const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
  return DR_EBADARG;
}

/* "host:port", "[v6]:port"; the host part is copied into static storage
 * that lives as long as the process (one endpoint per process). */
static int parse_endpoint(const char *s, const char **host, uint16_t *port) {
  static char host_buf[256];
  const char *colon, *h = s;
  size_t hlen;
  if (s[0] == '[') {
    const char *end = strchr(s, ']');
    if (end == NULL || end[1] != ':')
      return -1;
    h = s + 1;
    hlen = (size_t)(end - h);
    colon = end + 1;
  } else {
    colon = strrchr(s, ':');
    if (colon == NULL)
      return -1;
    hlen = (size_t)(colon - s);
  }
  uint64_t p;
  if (hlen == 0 || hlen >= sizeof(host_buf) ||
      parse_u64(colon + 1, 65535, &p) != 0 || p == 0)
    return -1;
  memcpy(host_buf, h, hlen);
  host_buf[hlen] = '\0';
  *host = host_buf;
  *port = (uint16_t)p;
  return 0;
}

int dr_pg_config_from_env(dr_pg_config_t *cfg, char *err, size_t err_len) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->world = 1;
  cfg->local_world = 1;
  cfg->timeout_ms = DEFAULT_TIMEOUT_MS;
  cfg->run_id = "none";
  const char *rank = getenv("RANK"), *world = getenv("WORLD_SIZE");
  if ((rank == NULL) != (world == NULL))
    return bad(err, err_len, "%s is set but %s is not",
               rank != NULL ? "RANK" : "WORLD_SIZE",
               rank != NULL ? "WORLD_SIZE" : "RANK");
  const char *v = getenv("DR_PG_FORCE_TCP");
  cfg->force_tcp = v != NULL && *v != '\0' && strcmp(v, "0") != 0;
  const char *sch = getenv("DR_PG_SCHEDULE");
  if (sch != NULL && *sch != '\0') {
    if (strcmp(sch, "thread") == 0)
      cfg->schedule = DR_PG_SCHED_THREAD;
    else if (strcmp(sch, "inline") == 0)
      cfg->schedule = DR_PG_SCHED_INLINE;
    else if (strcmp(sch, "auto") != 0)
      return bad(err, err_len, "DR_PG_SCHEDULE='%s': expected auto, thread "
                 "or inline", sch);
  }
  if (rank == NULL)
    return 0;

  uint64_t r, w;
  if (parse_u64(world, UINT32_MAX, &w) != 0 || w == 0)
    return bad(err, err_len, "WORLD_SIZE='%s' is not a positive integer",
               world);
  if (parse_u64(rank, UINT32_MAX, &r) != 0 || r >= w)
    return bad(err, err_len, "RANK='%s' is not in 0..WORLD_SIZE-1 (%s)", rank,
               world);
  cfg->rank = (uint32_t)r;
  cfg->world = (uint32_t)w;
  cfg->local_rank = cfg->rank;
  cfg->local_world = cfg->world;
  const char *lr = getenv("LOCAL_RANK"), *lw = getenv("LOCAL_WORLD_SIZE");
  uint64_t x;
  if (lw != NULL) {
    if (parse_u64(lw, UINT32_MAX, &x) != 0 || x == 0)
      return bad(err, err_len,
                 "LOCAL_WORLD_SIZE='%s' is not a positive integer", lw);
    cfg->local_world = (uint32_t)x;
  }
  if (lr != NULL) {
    if (parse_u64(lr, UINT32_MAX, &x) != 0 || x >= cfg->local_world)
      return bad(err, err_len,
                 "LOCAL_RANK='%s' is not in 0..LOCAL_WORLD_SIZE-1", lr);
    cfg->local_rank = (uint32_t)x;
  }
  if (cfg->world == 1)
    return 0;

  const char *ep = getenv("DDPRUN_RDZV_ENDPOINT");
  if (ep == NULL || *ep == '\0')
    return bad(err, err_len,
               "WORLD_SIZE is %s but DDPRUN_RDZV_ENDPOINT is not set "
               "(launch with ddprun)",
               world);
  if (parse_endpoint(ep, &cfg->store_host, &cfg->store_port) != 0)
    return bad(err, err_len, "DDPRUN_RDZV_ENDPOINT='%s' is not HOST:PORT", ep);
  const char *run_id = getenv("DDPRUN_RUN_ID");
  if (run_id != NULL && *run_id != '\0')
    cfg->run_id = run_id;
  const char *gen = getenv("DDPRUN_GENERATION");
  if (gen == NULL || parse_u64(gen, UINT64_MAX, &cfg->gen) != 0)
    return bad(err, err_len,
               "DDPRUN_GENERATION='%s' is not a generation number",
               gen != NULL ? gen : "(unset)");
  uint8_t *secret = NULL;
  size_t secret_len = 0;
  const char *file = getenv("DDPRUN_SECRET_FILE");
  int rc = dr_auth_secret_load(file, &secret, &secret_len);
  if (rc != 0) {
    snprintf(err, err_len, "cannot load the store secret from %s: %s",
             file != NULL && *file ? file : "DDPRUN_SECRET", dr_strerror(rc));
    return DR_EBADARG;
  }
  cfg->secret = secret;
  cfg->secret_len = secret_len;
  return 0;
}

void dr_pg_config_free(dr_pg_config_t *cfg) {
  uint8_t *s = (uint8_t *)cfg->secret;
  if (s != NULL)
    dr_auth_secret_free(&s, cfg->secret_len);
  cfg->secret = NULL;
  cfg->secret_len = 0;
}

/* ---- work -------------------------------------------------------------- */

void dr__work_unref(dr_work_t *w) {
  if (atomic_fetch_sub(&w->refs, 1) == 1)
    free(w);
}

static void work_complete(dr_pg_t *pg, dr_work_t *w, int rc, const char *msg) {
  w->rc = rc;
  msgf(w->err, sizeof(w->err), "%s", msg != NULL ? msg : "");
  atomic_store(&w->end_us, now_us());
  pthread_mutex_lock(&pg->mu);
  atomic_store(&w->done, 1);
  pthread_cond_broadcast(&pg->done_cv);
  pthread_mutex_unlock(&pg->mu);
}

static void work_run(dr_pg_t *pg, dr_work_t *w);

/* Runs w on the communication thread, or on the waiting one, saying so
 * where dr_pg_publish_activity asked. */
void dr__work_run(dr_pg_t *pg, dr_work_t *w) {
  dr_pg_activity_t *a = atomic_load(&pg->activity);
  if (a != NULL) {
    atomic_store(&a->kind, (uint32_t)w->kind);
    atomic_store(&a->n_bytes, (uint64_t)w->n_bytes);
    atomic_store(&a->seq, w->seq);
  }
  work_run(pg, w);
  if (a != NULL)
    atomic_store(&a->seq, 0);
}

void dr_pg_publish_activity(dr_pg_t *pg, dr_pg_activity_t *a) {
  atomic_store(&pg->activity, a);
}

uint64_t dr_pg_issued(dr_pg_t *pg) {
  pthread_mutex_lock(&pg->mu);
  uint64_t n = pg->next_seq;
  pthread_mutex_unlock(&pg->mu);
  return n;
}

void dr_pg_activity_describe(const dr_pg_activity_t *a, char *out,
                             size_t out_len) {
  dr_work_t w;
  memset(&w, 0, sizeof(w));
  w.kind = (dr_work_kind_t)atomic_load(&a->kind);
  w.n_bytes = (size_t)atomic_load(&a->n_bytes);
  w.seq = atomic_load(&a->seq);
  dr__work_describe(&w, out, out_len);
}

static void work_run(dr_pg_t *pg, dr_work_t *w) {
  atomic_store(&w->start_us, now_us());
  char desc[96], msg[sizeof(w->err)];
  dr__work_describe(w, desc, sizeof(desc));
  if (atomic_load(&pg->broken)) {
    msgf(msg, sizeof(msg), "%s: not run, the group is broken: %s", desc,
         pg->broken_msg);
    work_complete(pg, w, DR_PG_EBROKEN, msg);
    return;
  }
  dr_pg_fail_t f;
  memset(&f, 0, sizeof(f));
  uint64_t deadline = dr_mono_ns() + (uint64_t)pg->timeout_ms * 1000000u;
  int rc = dr__coll_run(pg, w, deadline, &f);
  if (rc == 0) {
    work_complete(pg, w, 0, NULL);
    return;
  }
  if (rc == DR_PG_ETIMEOUT || rc == DR_PG_EPEER || rc == DR_PG_EMISMATCH) {
    if (f.origin == pg->rank)
      msgf(msg, sizeof(msg), "%s: %s", desc, f.text);
    else if (f.seq == w->seq)
      msgf(msg, sizeof(msg), "%s: %s (reported by rank %u)", desc, f.text,
           f.origin);
    else
      msgf(msg, sizeof(msg), "%s: %s (reported by rank %u in #%" PRIu64 ")",
           desc, f.text, f.origin, f.seq);
    /* Pass it on, so the whole ring fails at once with the root cause
     * instead of each rank timing out on its neighbour. */
    dr__pg_abort(pg, &f);
  } else {
    msgf(msg, sizeof(msg), "%s: %s", desc, dr_strerror(rc));
    f.code = DR_PG_EPEER;
    f.blamed = f.origin = pg->rank;
    f.seq = w->seq;
    msgf(f.text, sizeof(f.text), "rank %u failed (%s)", pg->rank,
         dr_strerror(rc));
    dr__pg_abort(pg, &f);
    rc = DR_PG_EPEER;
  }
  msgf(pg->broken_msg, sizeof(pg->broken_msg), "%s", msg);
  atomic_store(&pg->broken, 1);
  work_complete(pg, w, rc, msg);
}

dr_work_t *dr__pg_pop_locked(dr_pg_t *pg) {
  dr_work_t *w = pg->head;
  if (w != NULL) {
    pg->head = w->next;
    if (pg->head == NULL)
      pg->tail = NULL;
  }
  return w;
}

static void *comm_thread(void *arg) {
  dr_pg_t *pg = arg;
  int tid = (int)syscall(SYS_gettid);
  dr__pg_comm_priority(pg);
  pthread_mutex_lock(&pg->mu);
  atomic_store(&pg->comm_tid, tid);
  pthread_cond_broadcast(&pg->done_cv);
  pthread_mutex_unlock(&pg->mu);
  for (;;) {
    pthread_mutex_lock(&pg->mu);
    while (pg->head == NULL && !pg->stop)
      pthread_cond_wait(&pg->queue_cv, &pg->mu);
    dr_work_t *w = dr__pg_pop_locked(pg);
    pthread_mutex_unlock(&pg->mu);
    if (w == NULL)
      return NULL;
    dr__work_run(pg, w);
    dr__work_unref(w);
  }
}

static int submit_typed(dr_pg_t *pg, dr_work_kind_t kind, void *buf,
                        const void *in, size_t n_bytes, dr_pg_op_t op,
                        dr_pg_dtype_t dtype, uint32_t root, dr_work_t **out) {
  *out = NULL;
  if (atomic_load(&pg->broken))
    return DR_PG_EBROKEN;
  dr_work_t *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return -ENOMEM;
  w->kind = kind;
  w->pg = pg;
  w->buf = buf;
  w->in = in;
  w->n_bytes = n_bytes;
  w->op = op;
  w->dtype = dtype;
  w->root = root;
  if (pg->world == 1) {
    /* Nothing to exchange: done at once. */
    pthread_mutex_lock(&pg->mu);
    w->seq = ++pg->next_seq;
    pthread_mutex_unlock(&pg->mu);
    atomic_store(&w->start_us, now_us());
    if (kind == DR_WORK_ALLGATHER && n_bytes > 0 && buf != in)
      memmove(buf, in, n_bytes);
    atomic_store(&w->refs, 1);
    atomic_store(&w->end_us, now_us());
    atomic_store(&w->done, 1);
    *out = w;
    return 0;
  }
  atomic_store(&w->refs, 2);
  pthread_mutex_lock(&pg->mu);
  w->seq = ++pg->next_seq;
  if (pg->tail != NULL)
    pg->tail->next = w;
  else
    pg->head = w;
  pg->tail = w;
  pthread_cond_signal(&pg->queue_cv);
  pthread_mutex_unlock(&pg->mu);
  *out = w;
  return 0;
}

static int submit(dr_pg_t *pg, dr_work_kind_t kind, void *buf, const void *in,
                  size_t n_bytes, dr_pg_op_t op, uint32_t root,
                  dr_work_t **out) {
  return submit_typed(pg, kind, buf, in, n_bytes, op, DR_PG_F32, root, out);
}

int dr_pg_allreduce(dr_pg_t *pg, float *buf, size_t n_elems, dr_pg_op_t op,
                    dr_work_t **w) {
  return dr_pg_allreduce_typed(pg, buf, n_elems, DR_PG_F32, op, w);
}

int dr_pg_allreduce_typed(dr_pg_t *pg, void *buf, size_t n_elems,
                          dr_pg_dtype_t dtype, dr_pg_op_t op, dr_work_t **w) {
  int f32 = dtype == DR_PG_F32;
  if (!(f32 && (op == DR_PG_SUM || op == DR_PG_AVG || op == DR_PG_MAX)) &&
      !((dtype == DR_PG_F16 || dtype == DR_PG_BF16) && op == DR_PG_SUM)) {
    *w = NULL;
    return DR_EBADARG;
  }
  return submit_typed(pg, DR_WORK_ALLREDUCE, buf, NULL,
                      n_elems * (f32 ? 4 : 2), op, dtype, 0, w);
}

int dr_pg_broadcast(dr_pg_t *pg, void *buf, size_t n_bytes, uint32_t root,
                    dr_work_t **w) {
  if (root >= pg->world) {
    *w = NULL;
    return DR_EBADARG;
  }
  return submit(pg, DR_WORK_BROADCAST, buf, NULL, n_bytes, DR_PG_SUM, root, w);
}

int dr_pg_allgather(dr_pg_t *pg, const void *in, size_t n_bytes, void *out,
                    dr_work_t **w) {
  return submit(pg, DR_WORK_ALLGATHER, out, in, n_bytes, DR_PG_SUM, 0, w);
}

int dr_pg_barrier(dr_pg_t *pg, dr_work_t **w) {
  return submit(pg, DR_WORK_BARRIER, NULL, NULL, 0, DR_PG_SUM, 0, w);
}

int dr_work_wait_keep(dr_work_t *w, char *err, size_t err_len) {
  if (w == NULL)
    return DR_EBADARG;
  if (!atomic_load(&w->done) && w->pg->inline_run)
    dr__pg_run_until(w->pg, w);
  if (!atomic_load(&w->done)) {
    /* The communication thread finishes every queued work within its
     * deadline, so this wait is bounded too. */
    dr_pg_t *pg = w->pg;
    pthread_mutex_lock(&pg->mu);
    while (!atomic_load(&w->done))
      pthread_cond_wait(&pg->done_cv, &pg->mu);
    pthread_mutex_unlock(&pg->mu);
  }
  if (err != NULL && err_len > 0)
    snprintf(err, err_len, "%s", w->err);
  return w->rc;
}

void dr_work_free(dr_work_t **wp) {
  if (*wp != NULL)
    dr__work_unref(*wp);
  *wp = NULL;
}

int dr_work_wait(dr_work_t **wp, char *err, size_t err_len) {
  int rc = dr_work_wait_keep(*wp, err, err_len);
  dr_work_free(wp);
  return rc;
}

int dr_work_done(const dr_work_t *w) { return atomic_load(&w->done); }

uint64_t dr_work_start_us(const dr_work_t *w) {
  return atomic_load(&w->start_us);
}

uint64_t dr_work_end_us(const dr_work_t *w) { return atomic_load(&w->end_us); }

static int sync_wait(int rc, dr_work_t **w, char *err, size_t err_len) {
  if (rc != 0) {
    if (err != NULL && err_len > 0)
      snprintf(err, err_len, "%s", dr_strerror(rc));
    return rc;
  }
  return dr_work_wait(w, err, err_len);
}

int dr_pg_allreduce_sync(dr_pg_t *pg, float *buf, size_t n_elems, dr_pg_op_t op,
                         char *err, size_t err_len) {
  dr_work_t *w = NULL;
  int rc = dr_pg_allreduce(pg, buf, n_elems, op, &w);
  return sync_wait(rc, &w, err, err_len);
}

int dr_pg_broadcast_sync(dr_pg_t *pg, void *buf, size_t n_bytes, uint32_t root,
                         char *err, size_t err_len) {
  dr_work_t *w = NULL;
  int rc = dr_pg_broadcast(pg, buf, n_bytes, root, &w);
  return sync_wait(rc, &w, err, err_len);
}

int dr_pg_allgather_sync(dr_pg_t *pg, const void *in, size_t n_bytes, void *out,
                         char *err, size_t err_len) {
  dr_work_t *w = NULL;
  int rc = dr_pg_allgather(pg, in, n_bytes, out, &w);
  return sync_wait(rc, &w, err, err_len);
}

int dr_pg_barrier_sync(dr_pg_t *pg, char *err, size_t err_len) {
  dr_work_t *w = NULL;
  int rc = dr_pg_barrier(pg, &w);
  return sync_wait(rc, &w, err, err_len);
}

/* ---- life cycle -------------------------------------------------------- */

uint32_t dr_pg_rank(const dr_pg_t *pg) { return pg->rank; }
uint32_t dr_pg_world(const dr_pg_t *pg) { return pg->world; }
int dr_pg_comm_tid(const dr_pg_t *pg) { return atomic_load(&pg->comm_tid); }
const char *dr_pg_describe(const dr_pg_t *pg) { return pg->describe; }

static void pg_free(dr_pg_t *pg) {
  dr__link_close(&pg->send);
  dr__link_close(&pg->recv);
  free(pg->order);
  free(pg->describe);
  pthread_cond_destroy(&pg->queue_cv);
  pthread_cond_destroy(&pg->done_cv);
  pthread_mutex_destroy(&pg->mu);
  free(pg);
}

int dr_pg_init(const dr_pg_config_t *cfg, dr_pg_t **out, char *err,
               size_t err_len) {
  *out = NULL;
  if (cfg->world == 0 || cfg->rank >= cfg->world) {
    snprintf(err, err_len, "rank %u is not in a world of %u", cfg->rank,
             cfg->world);
    return DR_EBADARG;
  }
  if (cfg->world > 1 && cfg->store_host == NULL) {
    snprintf(err, err_len,
             "a world of %u needs the rendezvous store's "
             "address",
             cfg->world);
    return DR_EBADARG;
  }
  dr_pg_t *pg = calloc(1, sizeof(*pg));
  if (pg == NULL) {
    snprintf(err, err_len, "out of memory");
    return -ENOMEM;
  }
  pg->rank = cfg->rank;
  pg->world = cfg->world;
  pg->local_rank = cfg->local_rank;
  pg->local_world = cfg->local_world;
  pg->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
  pg->chunk = cfg->chunk_bytes;
  pg->spin_ns = dr_shm_spin_ns(cfg->local_world);
  /* DR_PG_TCP_LOWAT=BYTES: another wake-up size (1: one per segment), to
   * measure what it is worth. */
  pg->tcp_lowat = DR_PG_TCP_LOWAT;
  const char *lw = getenv("DR_PG_TCP_LOWAT");
  uint64_t lwv;
  if (lw != NULL && parse_u64(lw, 1u << 30, &lwv) == 0 && lwv > 0)
    pg->tcp_lowat = (size_t)lwv;
  dr__link_init(&pg->send);
  dr__link_init(&pg->recv);
  pthread_mutex_init(&pg->mu, NULL);
  pthread_cond_init(&pg->queue_cv, NULL);
  pthread_cond_init(&pg->done_cv, NULL);

  if (pg->world == 1) {
    pg->describe = strdup("world of 1: no links");
    if (pg->describe == NULL) {
      pg_free(pg);
      snprintf(err, err_len, "out of memory");
      return -ENOMEM;
    }
    *out = pg;
    return 0;
  }
  int rc = dr__pg_bootstrap(pg, cfg, err, err_len);
  if (rc != 0) {
    pg_free(pg);
    return rc;
  }
  dr__pg_choose_schedule(pg, cfg->schedule);
  if (pg->inline_run) {
    *out = pg;
    return 0;
  }
  /* Signals belong to the main thread: the communication thread starts
   * with all of them blocked. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  rc = pthread_create(&pg->thread, NULL, comm_thread, pg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    snprintf(err, err_len, "pthread_create failed: %s", strerror(rc));
    pg_free(pg);
    return -rc;
  }
  pg->have_thread = 1;
  /* Its id is known before the first collective: a caller that samples
   * the thread's CPU time from the start finds it. */
  pthread_mutex_lock(&pg->mu);
  while (atomic_load(&pg->comm_tid) == 0)
    pthread_cond_wait(&pg->done_cv, &pg->mu);
  pthread_mutex_unlock(&pg->mu);
  dr__pg_note_priority(pg);
  *out = pg;
  return 0;
}

void dr_pg_destroy(dr_pg_t **pgp) {
  dr_pg_t *pg = *pgp;
  if (pg == NULL)
    return;
  /* Works nobody waited for still run, as the thread would run them. */
  if (pg->inline_run && pg->tail != NULL) {
    dr_work_t *last = pg->tail;
    atomic_fetch_add(&last->refs, 1);
    dr__pg_run_until(pg, last);
    dr__work_unref(last);
  }
  if (pg->have_thread) {
    pthread_mutex_lock(&pg->mu);
    pg->stop = 1;
    pthread_cond_signal(&pg->queue_cv);
    pthread_mutex_unlock(&pg->mu);
    pthread_join(pg->thread, NULL);
  }
  pg_free(pg);
  *pgp = NULL;
}
