/* Gradient buckets, launched in order as the backward pass makes them
 * ready. See reducer.h. */
#include "reducer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errors.h"
#include "mono.h"

typedef struct {
  size_t base;      /* first element in the reducer's memory */
  size_t n_elems;
  size_t n_params;
  size_t pending;   /* params not yet ready in this pass */
  int launched;
  dr_work_t *work;
} bucket_t;

struct dr_reducer {
  dr_reducer_config_t cfg;
  dr_model_t *m;
  dr_pg_t *pg;
  size_t n_params;
  size_t *elems;       /* [n_params] */
  size_t *bucket_of;   /* [n_params] */
  size_t *order;       /* [n_params] the fill order of the buckets */
  uint64_t *param_ready; /* [n_params] when each was marked ready (us) */
  bucket_t *b;
  size_t nb;
  float *mem;
  int sync;
  size_t next_launch;
  uint8_t *marked;     /* [n_params] marked in this pass; a scratch set
                          between passes */
  size_t *observed;    /* [n_params] first marks of the first synchronised
                          pass, in order; then the order received */
  size_t n_observed;
  uint32_t *msg;       /* [1 + n_params] rank 0's decision, then its order:
                          allocated up front so that no rank can fail
                          before the broadcast its peers are waiting in */
  int observing, observed_done;
  int err;
  char errmsg[256];
  dr_reducer_stats_t stats;
  dr_bucket_times_t *times;
  char desc[512];
};

size_t dr_bucket_plan(const size_t *order, size_t n, const size_t *elems,
                      size_t cap_bytes, size_t first_cap_bytes,
                      size_t *bucket_of) {
  size_t bucket = 0, bytes = 0, count = 0;
  for (size_t k = 0; k < n; k++) {
    size_t p = order[k];
    size_t pb = elems[p] * sizeof(float);
    size_t cap = bucket == 0 ? first_cap_bytes : cap_bytes;
    /* Close the bucket before a parameter that would overflow it. */
    if (count > 0 && bytes + pb > cap) {
      bucket++;
      bytes = 0;
      count = 0;
    }
    bucket_of[p] = bucket;
    bytes += pb;
    count++;
  }
  return n > 0 ? bucket + 1 : 0;
}

/* Zeroed bucket memory for total elements, from the configured allocator
 * or the host's. */
static float *mem_alloc(dr_reducer_t *r, size_t total) {
  size_t n_bytes = (total > 0 ? total : 1) * sizeof(float);
  if (r->cfg.mem_alloc != NULL)
    return r->cfg.mem_alloc(r->cfg.mem_arg, n_bytes);
  float *mem = NULL;
  if (posix_memalign((void **)&mem, 64, n_bytes) != 0)
    return NULL;
  memset(mem, 0, n_bytes);
  return mem;
}

/* Frees what c's allocator (or the host's) gave. */
static void mem_free(const dr_reducer_config_t *c, float *mem) {
  if (mem == NULL)
    return;
  if (c->mem_free != NULL)
    c->mem_free(c->mem_arg, mem);
  else
    free(mem);
}

/* Builds the buckets for order and points every gradient into them. */
static int build(dr_reducer_t *r, const size_t *order) {
  size_t nb = dr_bucket_plan(order, r->n_params, r->elems, r->cfg.cap_bytes,
                             r->cfg.first_cap_bytes, r->bucket_of);
  bucket_t *b = calloc(nb > 0 ? nb : 1, sizeof(*b));
  dr_bucket_times_t *t = calloc(nb > 0 ? nb : 1, sizeof(*t));
  size_t total = 0;
  for (size_t i = 0; i < r->n_params; i++)
    total += r->elems[i];
  float *mem = b != NULL && t != NULL ? mem_alloc(r, total) : NULL;
  if (mem == NULL) {
    free(b);
    free(t);
    return -ENOMEM;
  }
  /* Parameters lie in a bucket in fill order; buckets follow each other. */
  size_t *fill = calloc(nb > 0 ? nb : 1, sizeof(*fill));
  if (fill == NULL) {
    free(b);
    free(t);
    mem_free(&r->cfg, mem);
    return -ENOMEM;
  }
  for (size_t k = 0; k < r->n_params; k++) {
    size_t p = order[k];
    b[r->bucket_of[p]].n_elems += r->elems[p];
    b[r->bucket_of[p]].n_params++;
  }
  for (size_t i = 1; i < nb; i++)
    b[i].base = b[i - 1].base + b[i - 1].n_elems;
  for (size_t k = 0; k < r->n_params; k++) {
    size_t p = order[k], bi = r->bucket_of[p];
    dr_model_param(r->m, p)->g = mem + b[bi].base + fill[bi];
    fill[bi] += r->elems[p];
  }
  free(fill);
  for (size_t i = 0; i < nb; i++)
    t[i].n_elems = b[i].n_elems;
  if (order != r->order)
    memcpy(r->order, order, r->n_params * sizeof(size_t));
  free(r->b);
  free(r->times);
  mem_free(&r->cfg, r->mem);
  r->b = b;
  r->times = t;
  r->mem = mem;
  r->nb = nb;
  return 0;
}

int dr_reducer_new(const dr_reducer_config_t *cfg, dr_model_t *m, dr_pg_t *pg,
                   dr_reducer_t **out) {
  if (cfg->cap_bytes == 0 || cfg->first_cap_bytes == 0 ||
      (pg == NULL && cfg->launch == NULL))
    return DR_EBADARG;
  dr_reducer_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return -ENOMEM;
  r->cfg = *cfg;
  r->m = m;
  r->pg = pg;
  r->n_params = dr_model_n_params(m);
  size_t n = r->n_params > 0 ? r->n_params : 1;
  r->elems = calloc(n, sizeof(size_t));
  r->bucket_of = calloc(n, sizeof(size_t));
  r->marked = calloc(n, sizeof(uint8_t));
  r->observed = calloc(n, sizeof(size_t));
  r->msg = calloc(n + 1, sizeof(uint32_t));
  r->order = calloc(n, sizeof(size_t));
  r->param_ready = calloc(n, sizeof(uint64_t));
  size_t *order = calloc(n, sizeof(size_t));
  int rc = -ENOMEM;
  if (r->elems != NULL && r->bucket_of != NULL && r->marked != NULL &&
      r->observed != NULL && r->msg != NULL && r->order != NULL &&
      r->param_ready != NULL && order != NULL) {
    for (size_t i = 0; i < r->n_params; i++) {
      r->elems[i] = dr_model_param(m, i)->n_elems;
      order[i] = r->n_params - 1 - i; /* reverse registration order */
    }
    rc = build(r, order);
  }
  free(order);
  if (rc != 0) {
    dr_reducer_free(&r);
    return rc;
  }
  r->observing = cfg->rebuild;
  *out = r;
  return 0;
}

int dr_reducer_redirect(dr_reducer_t *r, dr_launch_fn launch,
                        void *launch_arg, void *(*alloc_fn)(void *, size_t),
                        void (*mem_free_fn)(void *, void *), void *mem_arg) {
  const dr_reducer_config_t old = r->cfg;
  float *old_mem = r->mem;
  r->cfg.launch = launch;
  r->cfg.launch_arg = launch_arg;
  r->cfg.mem_alloc = alloc_fn;
  r->cfg.mem_free = mem_free_fn;
  r->cfg.mem_arg = mem_arg;
  r->mem = NULL; /* build() frees what it replaces: not this, not here */
  int rc = build(r, r->order);
  if (rc != 0) {
    r->cfg = old;
    r->mem = old_mem;
    return rc;
  }
  mem_free(&old, old_mem);
  return 0;
}

void dr_reducer_free(dr_reducer_t **rp) {
  dr_reducer_t *r = *rp;
  if (r == NULL)
    return;
  for (size_t i = 0; i < r->nb; i++)
    if (r->b[i].work != NULL)
      dr_work_free(&r->b[i].work);
  free(r->elems);
  free(r->bucket_of);
  free(r->order);
  free(r->param_ready);
  free(r->marked);
  free(r->observed);
  free(r->msg);
  free(r->b);
  free(r->times);
  mem_free(&r->cfg, r->mem);
  free(r);
  *rp = NULL;
}

size_t dr_reducer_n_buckets(const dr_reducer_t *r) { return r->nb; }

size_t dr_reducer_bucket_elems(const dr_reducer_t *r, size_t b) {
  return b < r->nb ? r->b[b].n_elems : 0;
}

const char *dr_reducer_describe(dr_reducer_t *r) {
  size_t o = (size_t)snprintf(r->desc, sizeof(r->desc), "%zu bucket%s:", r->nb,
                              r->nb == 1 ? "" : "s");
  for (size_t i = 0; i < r->nb && o < sizeof(r->desc); i++) {
    double kib = r->b[i].n_elems * sizeof(float) / 1024.0;
    o += (size_t)snprintf(r->desc + o, sizeof(r->desc) - o, "%s %.4g %s",
                          i == 0 ? "" : ",", kib < 1024 ? kib : kib / 1024,
                          kib < 1024 ? "KiB" : "MiB");
  }
  return r->desc;
}

static int rebuild(dr_reducer_t *r, char *err, size_t err_len);

int dr_reducer_begin(dr_reducer_t *r, int sync, char *err, size_t err_len) {
  /* The first synchronised step has been observed and its gradients
   * consumed by the optimizer: now the buckets may move. */
  if (r->observing && r->observed_done) {
    int rc = rebuild(r, err, err_len);
    if (rc != 0)
      return rc;
  }
  r->sync = sync;
  r->next_launch = 0;
  memset(r->marked, 0, r->n_params * sizeof(uint8_t));
  for (size_t i = 0; i < r->nb; i++) {
    r->b[i].pending = r->b[i].n_params;
    r->b[i].launched = 0;
  }
  if (sync) {
    memset(&r->stats, 0, sizeof(r->stats));
    for (size_t i = 0; i < r->nb; i++) {
      size_t n = r->times[i].n_elems;
      memset(&r->times[i], 0, sizeof(r->times[i]));
      r->times[i].n_elems = n;
    }
    r->n_observed = 0;
  }
  return 0;
}

static void launch(dr_reducer_t *r, size_t i) {
  bucket_t *b = &r->b[i];
  b->launched = 1;
  uint64_t t = dr_mono_us();
  r->times[i].launch_us = t;
  if (r->stats.first_launch_us == 0)
    r->stats.first_launch_us = t;
  if (r->err != 0)
    return;
  float *data = r->mem + b->base;
  int rc = r->cfg.launch != NULL
               ? r->cfg.launch(r->cfg.launch_arg, i, data, b->n_elems, &b->work)
               : dr_pg_allreduce(r->pg, data, b->n_elems, DR_PG_AVG, &b->work);
  if (rc != 0) {
    r->err = rc;
    snprintf(r->errmsg, sizeof(r->errmsg),
             "cannot launch the all-reduce of bucket %zu (%s)", i,
             dr_strerror(rc));
  }
}

/* Launches every ready bucket that is next in order. */
static void launch_in_order(dr_reducer_t *r) {
  while (r->next_launch < r->nb && r->b[r->next_launch].pending == 0)
    launch(r, r->next_launch++);
}

void dr_reducer_mark_ready(void *arg, size_t param) {
  dr_reducer_t *r = arg;
  /* Only a parameter's first mark in a pass counts: a second one would
   * count it twice in the observed order (and lose another from it), and
   * complete its bucket while a gradient in it is still being written. */
  if (!r->sync || param >= r->n_params || r->marked[param])
    return;
  r->marked[param] = 1;
  if (r->observing) /* at most n_params: one first mark each */
    r->observed[r->n_observed++] = param;
  uint64_t t = dr_mono_us();
  r->param_ready[param] = t;
  size_t bi = r->bucket_of[param];
  bucket_t *b = &r->b[bi];
  if (--b->pending == 0) {
    r->times[bi].ready_us = t;
    if (r->cfg.overlap)
      launch_in_order(r);
  }
}

void dr_reducer_end_backward(dr_reducer_t *r) {
  if (!r->sync)
    return;
  r->stats.backward_end_us = dr_mono_us();
  /* Every parameter of an MLP is used, so all are ready; launching the
   * rest regardless keeps ranks in step even if one was not. */
  while (r->next_launch < r->nb)
    launch(r, r->next_launch++);
}

/* 1 when v[0..n_v) holds each of 0..n-1 exactly once. seen: n bytes of
 * scratch. */
static int is_permutation(const size_t *v, size_t n_v, size_t n,
                          uint8_t *seen) {
  if (n_v != n)
    return 0;
  memset(seen, 0, n * sizeof(uint8_t));
  for (size_t i = 0; i < n; i++) {
    if (v[i] >= n || seen[v[i]])
      return 0;
    seen[v[i]] = 1;
  }
  return 1;
}

/* Rebuilds the buckets in rank 0's observed ready order, or keeps them, as
 * rank 0 decides. Every rank enters the broadcast whatever it observed
 * itself: a rank that returned on its own view would leave its peers
 * waiting in the broadcast, and the buckets would differ between ranks. */
static int rebuild(dr_reducer_t *r, char *err, size_t err_len) {
  size_t n = r->n_params;
  int many = r->pg != NULL && dr_pg_world(r->pg) > 1;
  r->observing = 0;
  if (!many || dr_pg_rank(r->pg) == 0) {
    /* Incomplete (a parameter never marked) or too many for the message:
     * keep the plan. r->marked is free between passes. */
    r->msg[0] = n <= UINT32_MAX &&
                is_permutation(r->observed, r->n_observed, n, r->marked);
    for (size_t i = 0; i < n; i++)
      r->msg[1 + i] = r->msg[0] ? (uint32_t)r->observed[i] : 0;
  }
  if (many) {
    int rc = dr_pg_broadcast_sync(r->pg, r->msg, (n + 1) * sizeof(uint32_t),
                                  0, err, err_len);
    if (rc != 0)
      return rc;
  }
  if (r->msg[0] == 0)
    return 0;
  for (size_t i = 0; i < n; i++)
    r->observed[i] = r->msg[1 + i];
  if (!is_permutation(r->observed, n, n, r->marked)) {
    snprintf(err, err_len, "the bucket order from rank 0 is not a "
             "permutation of the %zu parameters", n);
    return DR_EBADARG;
  }
  int rc = build(r, r->observed);
  if (rc != 0)
    snprintf(err, err_len, "cannot rebuild the buckets (%s)", dr_strerror(rc));
  return rc;
}

int dr_reducer_wait(dr_reducer_t *r, char *err, size_t err_len) {
  if (!r->sync)
    return 0;
  int rc = r->err;
  if (rc != 0)
    snprintf(err, err_len, "%s", r->errmsg);
  for (size_t i = 0; i < r->nb; i++) {
    bucket_t *b = &r->b[i];
    if (b->work == NULL)
      continue;
    char msg[256];
    int w = dr_work_wait_keep(b->work, msg, sizeof(msg));
    if (w != 0 && rc == 0) {
      rc = w;
      snprintf(err, err_len, "%s", msg);
    }
    r->times[i].start_us = dr_work_start_us(b->work);
    r->times[i].end_us = dr_work_end_us(b->work);
    dr_work_free(&b->work);
    uint64_t start = r->times[i].start_us, end = r->times[i].end_us;
    if (end > start)
      r->stats.comm_us += end - start;
    /* Exposed: the part of each all-reduce after the backward pass ended,
     * so it never exceeds the communication itself. */
    uint64_t from = start > r->stats.backward_end_us ? start
                                                      : r->stats.backward_end_us;
    if (end > from)
      r->stats.exposed_us += end - from;
  }
  if (rc == 0 && r->observing)
    r->observed_done = 1;
  return rc;
}

void dr_reducer_stats(const dr_reducer_t *r, dr_reducer_stats_t *s) {
  *s = r->stats;
}

const dr_bucket_times_t *dr_reducer_bucket_times(const dr_reducer_t *r) {
  return r->times;
}

const size_t *dr_reducer_order(const dr_reducer_t *r) { return r->order; }

const uint64_t *dr_reducer_param_ready_us(const dr_reducer_t *r) {
  return r->param_ready;
}

size_t dr_reducer_cap_bytes(const dr_reducer_t *r) { return r->cfg.cap_bytes; }

int dr_reducer_replan(dr_reducer_t *r, size_t cap_bytes) {
  if (cap_bytes == 0)
    return DR_EBADARG;
  size_t old = r->cfg.cap_bytes;
  r->cfg.cap_bytes = cap_bytes;
  int rc = build(r, r->order);
  if (rc != 0)
    r->cfg.cap_bytes = old;
  return rc;
}
