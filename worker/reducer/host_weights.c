/* Host-shared weights: the segment, its protocol, and the step's sum and
 * update of this rank's shards. See host_weights.h. */
#include "host_weights.h"

#include "errors.h"
#include "pg.h"
#include "shm_seg.h"
#include "shm_wait.h"
#include "mono.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HW_MAGIC 0x77686464u /* "ddhw" */
#define HW_VERSION 1u
#define HW_ALIGN 4096u
/* Elements summed and updated at a time: the sums stay in L1. */
#define HW_CHUNK 2048u

typedef struct {
  uint32_t magic, version, world, pad;
  uint64_t n_elems, state_elems, max_buckets, arena_elems;
  uint64_t off_ranks, off_table, off_weights, off_state, off_arena;
  _Alignas(64) dr_shm_bell_t bell;      /* rung by every publication */
} hdr_t;

typedef struct {
  _Alignas(64) _Atomic int32_t pid;
  _Atomic uint64_t bwd;    /* the last round whose backward pass it ended */
  _Atomic uint64_t done;   /* the last round it finished */
  dr_pg_activity_t act;    /* its process group's collective, if any */
} rank_t;

typedef struct {
  uint64_t off, n;         /* in floats, within the rank's arena */
  _Atomic uint64_t ready;  /* the round whose gradients these are */
  uint64_t pad;
} entry_t;

struct dr_hostw {
  dr_shm_seg_t seg;
  hdr_t *h;
  rank_t *ranks;
  entry_t *table;          /* [world][max_buckets] */
  float *weights, *state, *arenas;
  dr_hostw_shape_t s;
  size_t slot_elems;       /* half of a rank's arena */
  int slot_used[2];
  uint64_t round;          /* this step's, from 1 */
  uint64_t spin_ns;        /* a wait's spin before it sleeps */
  dr_pg_t *pg;             /* dr_hostw_watch's */
  size_t *reg_off;         /* each parameter's first element (attach) */
  uint64_t (*bucket_us)[2]; /* [max_buckets]: the last step's start, end */
  char name[DR_HOSTW_NAME_MAX + 1];
  float tmp[HW_CHUNK];
};

static size_t up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The layout for s: the offsets a header records. */
static void layout(const dr_hostw_shape_t *s, hdr_t *l, size_t *total) {
  memset(l, 0, sizeof(*l));
  l->world = s->world;
  l->n_elems = s->n_elems;
  l->state_elems = s->state_elems;
  l->max_buckets = s->max_buckets > 0 ? s->max_buckets : 1;
  /* Two plans' worth, each 64-byte aligned. */
  l->arena_elems = 2 * up(s->n_elems > 0 ? s->n_elems : 1, 16);
  size_t off = up(sizeof(hdr_t), HW_ALIGN);
  l->off_ranks = off;
  off = up(off + s->world * sizeof(rank_t), HW_ALIGN);
  l->off_table = off;
  off = up(off + (size_t)s->world * l->max_buckets * sizeof(entry_t),
           HW_ALIGN);
  l->off_weights = off;
  off = up(off + s->n_elems * sizeof(float), HW_ALIGN);
  l->off_state = off;
  off = up(off + s->state_elems * sizeof(float), HW_ALIGN);
  l->off_arena = off;
  *total = off + (size_t)s->world * l->arena_elems * sizeof(float);
}

size_t dr_hostw_bytes(const dr_hostw_shape_t *s) {
  hdr_t l;
  size_t total;
  layout(s, &l, &total);
  return total;
}

static int fail(char *err, size_t n, int rc, const char *what,
                const char *name) {
  snprintf(err, n, "%s %s: %s", what, name, strerror(-rc));
  return rc;
}

static void wire(dr_hostw_t *h) {
  uint8_t *b = h->seg.base;
  h->h = h->seg.base;
  h->ranks = (rank_t *)(void *)(b + h->h->off_ranks);
  h->table = (entry_t *)(void *)(b + h->h->off_table);
  h->weights = (float *)(void *)(b + h->h->off_weights);
  h->state = (float *)(void *)(b + h->h->off_state);
  h->arenas = (float *)(void *)(b + h->h->off_arena);
  h->slot_elems = h->h->arena_elems / 2;
  h->round = 1;
}

static void hostw_free(dr_hostw_t *h) {
  dr_shm_seg_close(&h->seg);
  free(h->reg_off);
  free(h->bucket_us);
  free(h);
}

/* A handle for s, not mapped yet; NULL when out of memory. */
static dr_hostw_t *hostw_new(const dr_hostw_shape_t *s) {
  dr_hostw_t *h = calloc(1, sizeof(*h));
  if (h != NULL)
    h->bucket_us = calloc(s->max_buckets > 0 ? s->max_buckets : 1,
                          sizeof(*h->bucket_us));
  if (h == NULL || h->bucket_us == NULL) {
    free(h);
    return NULL;
  }
  h->s = *s;
  h->spin_ns = dr_shm_spin_ns(s->world); /* every rank is on this host */
  return h;
}

/* Takes h's segment, mapped under name: the creator copies the weights
 * and state in, the others check theirs against them. On failure h is
 * freed. */
static int hostw_take(dr_hostw_t *h, const char *name, int creator,
                      const float *weights, const float *state,
                      dr_hostw_t **out, char *err, size_t err_len) {
  const dr_hostw_shape_t *s = &h->s;
  hdr_t want;
  size_t total;
  layout(s, &want, &total);
  snprintf(h->name, sizeof(h->name), "%s", name);
  if (creator) {
    memcpy(h->seg.base, &want, offsetof(hdr_t, bell));
    wire(h);
    memcpy(h->weights, weights, s->n_elems * sizeof(float));
    if (s->state_elems > 0)
      memcpy(h->state, state, s->state_elems * sizeof(float));
    h->h->version = HW_VERSION;
    h->h->magic = HW_MAGIC;
  } else {
    hdr_t *got = h->seg.base;
    int rc = 0;
    if (got->magic != HW_MAGIC || got->version != HW_VERSION ||
        memcmp(&got->world, &want.world,
               offsetof(hdr_t, bell) - offsetof(hdr_t, world)) != 0) {
      snprintf(err, err_len, "shared-weights segment %s was made for "
               "another world size or model", name);
      rc = DR_EBADARG;
    } else {
      wire(h);
      if (memcmp(h->weights, weights, s->n_elems * sizeof(float)) != 0 ||
          (s->state_elems > 0 &&
           memcmp(h->state, state, s->state_elems * sizeof(float)) != 0)) {
        snprintf(err, err_len, "rank %u's weights or optimizer state differ "
                 "from rank 0's at the start", s->rank);
        rc = DR_EBADARG;
      }
    }
    if (rc != 0) {
      hostw_free(h);
      return rc;
    }
  }
  atomic_store(&h->ranks[s->rank].pid, (int32_t)getpid());
  *out = h;
  return 0;
}

static int bad_shape(const dr_hostw_shape_t *s) {
  return s->rank >= s->world || s->world > DR_HOSTW_MAX_WORLD;
}

int dr_hostw_open(const char *name, const dr_hostw_shape_t *s,
                  const float *weights, const float *state, dr_hostw_t **out,
                  char *err, size_t err_len) {
  *out = NULL;
  if (strlen(name) > DR_HOSTW_NAME_MAX || bad_shape(s)) {
    snprintf(err, err_len, "bad shared-weights segment %s", name);
    return DR_EBADARG;
  }
  dr_hostw_t *h = hostw_new(s);
  if (h == NULL)
    return -ENOMEM;
  size_t total = dr_hostw_bytes(s);
  int creator = s->rank == 0;
  const char *what = "shm_open";
  int rc = creator ? dr_shm_seg_create(name, total, &h->seg, &what)
                   : dr_shm_seg_open(name, total, total, &h->seg, &what);
  if (rc == -EPROTO && !creator) {
    snprintf(err, err_len, "shared-weights segment %s holds %zu bytes, "
             "this rank's model wants %zu", name, h->seg.n_bytes, total);
    rc = DR_EBADARG;
  } else if (rc != 0) {
    fail(err, err_len, rc, what, name);
  }
  if (rc != 0) {
    hostw_free(h);
    return rc;
  }
  return hostw_take(h, name, creator, weights, state, out, err, err_len);
}

int dr_hostw_create(char *name, size_t n, const char *tag,
                    const dr_hostw_shape_t *s, const float *weights,
                    const float *state, dr_hostw_t **out, int *taken,
                    char *err, size_t err_len) {
  *out = NULL;
  if (taken != NULL)
    *taken = 0;
  if (bad_shape(s)) {
    snprintf(err, err_len, "bad shared-weights segment %s", tag);
    return DR_EBADARG;
  }
  dr_hostw_t *h = hostw_new(s);
  if (h == NULL)
    return -ENOMEM;
  const char *what = "shm_open";
  int rc = dr_shm_seg_create_named(name, n, tag, dr_hostw_bytes(s), &h->seg,
                                   taken, &what);
  if (rc != 0) {
    fail(err, err_len, rc, what, name);
    hostw_free(h);
    return rc;
  }
  return hostw_take(h, name, 1, weights, state, out, err, err_len);
}

void dr_hostw_unlink(dr_hostw_t *h) { dr_shm_seg_unlink(h->name); }

void dr_hostw_close(dr_hostw_t **hp) {
  dr_hostw_t *h = *hp;
  if (h == NULL)
    return;
  if (h->pg != NULL)
    dr_pg_publish_activity(h->pg, NULL);
  hostw_free(h);
  *hp = NULL;
}

void dr_hostw_watch(dr_hostw_t *h, dr_pg_t *pg) {
  h->pg = pg;
  dr_pg_publish_activity(pg, &h->ranks[h->s.rank].act);
}

/* Rank q is in a collective this rank never issued: it cannot arrive. */
static int out_of_step(dr_hostw_t *h, uint32_t q, const char *what,
                       char *err, size_t err_len) {
  if (h->pg == NULL)
    return 0;
  const dr_pg_activity_t *a = &h->ranks[q].act;
  uint64_t seq = atomic_load(&a->seq), mine = dr_pg_issued(h->pg);
  if (seq == 0 || seq <= mine)
    return 0;
  char desc[96];
  dr_pg_activity_describe(a, desc, sizeof(desc));
  snprintf(err, err_len, "out of step: rank %u is in %s, which rank %u "
           "never issued: rank %u is in the shared-weights step after #%llu, "
           "waiting for rank %u to reach %s", q, desc, h->s.rank, h->s.rank,
           (unsigned long long)mine, q, what);
  return 1;
}

int dr_hostw_attach(dr_hostw_t *h, dr_model_t *m, dr_optim_t *o) {
  size_t np = dr_model_n_params(m);
  h->reg_off = malloc((np > 0 ? np : 1) * sizeof(size_t));
  if (h->reg_off == NULL)
    return -ENOMEM;
  size_t off = 0;
  for (size_t i = 0; i < np; i++) {
    h->reg_off[i] = off;
    off += dr_model_param(m, i)->n_elems;
  }
  dr_model_rebind_weights(m, h->weights);
  if (h->s.state_elems > 0)
    dr_optim_rebind_state(o, h->state);
  return 0;
}

static float *arena(const dr_hostw_t *h, uint32_t q) {
  return h->arenas + (size_t)q * h->h->arena_elems;
}

void *dr_hostw_alloc(void *arg, size_t n_bytes) {
  dr_hostw_t *h = arg;
  if (n_bytes > h->slot_elems * sizeof(float))
    return NULL;
  for (int i = 0; i < 2; i++)
    if (!h->slot_used[i]) {
      h->slot_used[i] = 1;
      float *p = arena(h, h->s.rank) + (size_t)i * h->slot_elems;
      memset(p, 0, n_bytes);
      return p;
    }
  return NULL;
}

void dr_hostw_free(void *arg, void *p) {
  dr_hostw_t *h = arg;
  for (int i = 0; i < 2; i++)
    if (p == arena(h, h->s.rank) + (size_t)i * h->slot_elems)
      h->slot_used[i] = 0;
}

int dr_hostw_launch(void *arg, size_t bucket, float *data, size_t n_elems,
                    dr_work_t **w) {
  dr_hostw_t *h = arg;
  (void)w;
  if (bucket >= h->h->max_buckets)
    return DR_EBADARG;
  entry_t *e = &h->table[(size_t)h->s.rank * h->h->max_buckets + bucket];
  e->off = (uint64_t)(data - arena(h, h->s.rank));
  e->n = n_elems;
  /* Read after the backward-pass barrier, which orders it: no wake-up. */
  atomic_store_explicit(&e->ready, h->round, memory_order_relaxed);
  return 0;
}

typedef struct {
  dr_hostw_t *h;
  uint32_t q;
  const char *what;
  char *err;
  size_t err_len;
} awaited_t;

/* dr_shm_await's check at each wake-up. */
static int check_in_step(void *arg) {
  awaited_t *t = arg;
  return out_of_step(t->h, t->q, t->what, t->err, t->err_len)
             ? DR_PG_EMISMATCH
             : 0;
}

/* Waits until *word reaches this round; rank q is the one it waits for.
 * what: "the end of its backward pass" or "the end of the step". */
static int wait_round(dr_hostw_t *h, _Atomic uint64_t *word, uint32_t q,
                      const char *what, uint64_t deadline_ns, char *err,
                      size_t err_len) {
  awaited_t t = {h, q, what, err, err_len};
  dr_shm_await_t a = {.bell = &h->h->bell, .count = word, .target = h->round,
                      .spin_ns = h->spin_ns, .pid = &h->ranks[q].pid,
                      .check = check_in_step, .arg = &t};
  int rc = dr_shm_await(&a, deadline_ns);
  if (rc == -ESRCH) {
    snprintf(err, err_len, "rank %u (pid %d) exited while rank %u waited "
             "for %s (shared weights, step round %llu)", q,
             (int)atomic_load(&h->ranks[q].pid), h->s.rank, what,
             (unsigned long long)h->round);
    return DR_PG_EPEER;
  }
  if (rc == -ETIMEDOUT) {
    snprintf(err, err_len, "rank %u did not reach %s within the timeout "
             "(shared weights; rank %u waited)", q, what, h->s.rank);
    return DR_PG_ETIMEOUT;
  }
  return rc;
}

/* tmp[0..n) = the ring's AVG of elements at of every rank's bucket xs:
 * coll.c's reduce-scatter starts segment k at position k and completes it
 * at position k - 1, ((x[k] + x[k+1]) + ... + x[k-1]) / W. Rank k sums
 * segment k (every rank is on this host: positions are ranks). */
static void sum_chunk(const dr_hostw_t *h, float *const *xs, size_t at,
                      size_t n, float *restrict tmp) {
  uint32_t W = h->s.world, k = h->s.rank;
  const float *own = xs[k] + at, *last = xs[(k + W - 1) % W] + at;
  const float div = (float)W;
  for (size_t j = 0; j < n; j++)
    tmp[j] = own[j];
  for (uint32_t t = 1; t + 1 < W; t++) {
    const float *x = xs[(k + t) % W] + at;
    for (size_t j = 0; j < n; j++)
      tmp[j] += x[j];
  }
  for (size_t j = 0; j < n; j++)
    tmp[j] = (tmp[j] + last[j]) / div;
}

/* Sums and updates this rank's shard of bucket b (all ranks' published). */
static void shard(dr_hostw_t *h, dr_model_t *m, dr_optim_t *o, size_t b,
                  float *const *xs, uint64_t step) {
  uint32_t W = h->s.world, k = h->s.rank;
  size_t n = h->table[(size_t)k * h->h->max_buckets + b].n;
  size_t base = n / W, rem = n % W;
  size_t lo = k * base + (k < rem ? k : rem), hi = lo + base + (k < rem);
  const float *mine = xs[k];
  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    dr_param_t *p = dr_model_param(m, i);
    if (p->g < mine || p->g >= mine + n)
      continue;
    size_t po = (size_t)(p->g - mine), pe = po + p->n_elems;
    size_t a = po > lo ? po : lo, z = pe < hi ? pe : hi;
    for (size_t c = a; c < z; c += HW_CHUNK) {
      size_t len = z - c < HW_CHUNK ? z - c : HW_CHUNK;
      sum_chunk(h, xs, c, len, h->tmp);
      dr_optim_update(o, h->reg_off[i] + (c - po), p->w + (c - po), h->tmp,
                      len, step);
    }
  }
}

int dr_hostw_step(dr_hostw_t *h, dr_model_t *m, dr_optim_t *o,
                  size_t n_buckets, uint64_t step, uint64_t deadline_ns,
                  dr_hostw_stats_t *st, char *err, size_t err_len) {
  memset(st, 0, sizeof(*st));
  uint32_t W = h->s.world;
  size_t MB = h->h->max_buckets;
  float *xs[DR_HOSTW_MAX_WORLD];
  /* No weight changes before every backward pass is over: a pass reads
   * a layer's weights after it published the layer's gradients. Past
   * this barrier every rank has published every bucket of the round. */
  uint64_t t0 = dr_mono_ns();
  atomic_store(&h->ranks[h->s.rank].bwd, h->round);
  dr_shm_bell_post(&h->h->bell);
  for (uint32_t q = 0; q < W; q++) {
    int rc = wait_round(h, &h->ranks[q].bwd, q, "the end of its backward "
                        "pass", deadline_ns, err, err_len);
    if (rc != 0)
      return rc;
  }
  st->wait_us += (dr_mono_ns() - t0) / 1000;
  /* A bucket's span starts where this rank began to wait for it (the
   * first one at the end of its backward pass), as a collective run on
   * the waiting thread does: the wait for a slow rank is inside it. */
  uint64_t from = t0;
  for (size_t b = 0; b < n_buckets && b < MB; b++) {
    const entry_t *me = &h->table[(size_t)h->s.rank * MB + b];
    for (uint32_t q = 0; q < W; q++) {
      const entry_t *e = &h->table[(size_t)q * MB + b];
      uint64_t ready = atomic_load_explicit(&e->ready, memory_order_relaxed);
      if (ready != h->round || e->n != me->n ||
          e->off + e->n > h->h->arena_elems) {
        snprintf(err, err_len, "shared weights out of step: rank %u's "
                 "bucket %zu holds %llu elements of round %llu, rank %u's "
                 "%llu of round %llu", q, b, (unsigned long long)e->n,
                 (unsigned long long)ready, h->s.rank,
                 (unsigned long long)me->n, (unsigned long long)h->round);
        return DR_PG_EMISMATCH;
      }
      xs[q] = arena(h, q) + e->off;
    }
    uint64_t t1 = dr_mono_ns();
    shard(h, m, o, b, xs, step);
    uint64_t t2 = dr_mono_ns();
    st->work_us += (t2 - t1) / 1000;
    h->bucket_us[b][0] = from / 1000;
    h->bucket_us[b][1] = t2 / 1000;
    from = t2;
  }
  uint64_t t3 = dr_mono_ns();
  atomic_store(&h->ranks[h->s.rank].done, h->round);
  dr_shm_bell_post(&h->h->bell);
  for (uint32_t q = 0; q < W; q++) {
    int rc = wait_round(h, &h->ranks[q].done, q, "the end of the step",
                        deadline_ns, err, err_len);
    if (rc != 0)
      return rc;
  }
  st->wait_us += (dr_mono_ns() - t3) / 1000;
  h->round++;
  return 0;
}

int dr_hostw_bucket_us(const dr_hostw_t *h, size_t b, uint64_t *start_us,
                       uint64_t *end_us) {
  if (b >= h->h->max_buckets)
    return -1;
  *start_us = h->bucket_us[b][0];
  *end_us = h->bucket_us[b][1];
  return 0;
}
