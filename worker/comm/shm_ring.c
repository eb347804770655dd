/* The shared-memory SPSC ring: see shm_ring.h. */
#include "shm_ring.h"

#include "shm_seg.h"

#include <errno.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RING_MAGIC 0x316d687367707264ull /* "drpgshm1" little-endian */
#define HDR_BYTES 4096u

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "the ring needs lock-free (address-free) atomics");

/* Lives at the start of the segment, shared by both processes. Each line
 * is written by one side only (except the abort flag). */
typedef struct {
  /* Written once at creation and attach. */
  alignas(64) uint64_t magic;
  uint64_t capacity;
  _Atomic int32_t producer_pid;
  _Atomic int32_t consumer_pid;
  _Atomic uint32_t aborted;
  /* The producer's line: head, the word it bumps on commit, and whether
   * it sleeps on the consumer's word. */
  alignas(64) _Atomic uint64_t head;
  _Atomic uint32_t data_seq;
  _Atomic uint32_t prod_waiting;
  /* The consumer's line. */
  alignas(64) _Atomic uint64_t tail;
  _Atomic uint32_t space_seq;
  _Atomic uint32_t cons_waiting;
} hdr_t;

_Static_assert(sizeof(hdr_t) <= HDR_BYTES, "ring header exceeds its page");

struct dr_shm_ring {
  dr_shm_seg_t seg;
  hdr_t *h;
  uint8_t *data;
  size_t cap;
  int producer;
  uint64_t pos;  /* head (producer) or tail (consumer): ours alone */
  uint64_t peer; /* last seen tail (producer) or head (consumer) */
};

/* Wakes the side sleeping on word when its flag says it sleeps. The
 * release on the increment pairs with the acquire in prepare: a sleeper
 * that sees the new value also sees what was published before it. */
static void notify(_Atomic uint32_t *flag, _Atomic uint32_t *word) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(flag, memory_order_relaxed)) {
    atomic_fetch_add_explicit(word, 1, memory_order_release);
    dr_shm_wake(word);
  }
}

/* Takes over seg (left alone on failure: NULL). */
static dr_shm_ring_t *wrap(const dr_shm_seg_t *seg, int producer) {
  dr_shm_ring_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  r->seg = *seg;
  r->h = seg->base;
  r->data = (uint8_t *)seg->base + HDR_BYTES;
  r->cap = (size_t)r->h->capacity;
  r->producer = producer;
  return r;
}

static int bad_capacity(size_t capacity) {
  return capacity < 4096 || (capacity & (capacity - 1)) != 0;
}

/* The producer's side of the segment just created under name: on failure
 * it is unmapped and the name removed. */
static int init_producer(const char *name, dr_shm_seg_t *seg, size_t capacity,
                         dr_shm_ring_t **out) {
  hdr_t *h = seg->base;
  h->capacity = capacity;
  atomic_store(&h->producer_pid, (int32_t)getpid());
  h->magic = RING_MAGIC;
  dr_shm_ring_t *r = wrap(seg, 1);
  if (r == NULL) {
    dr_shm_seg_close(seg);
    dr_shm_seg_unlink(name);
    return -ENOMEM;
  }
  *out = r;
  return 0;
}

int dr_shm_ring_create(const char *name, size_t capacity, dr_shm_ring_t **out,
                       const char **what) {
  const char *dummy;
  if (what == NULL)
    what = &dummy;
  *out = NULL;
  *what = "dr_shm_ring_create";
  if (bad_capacity(capacity) || strlen(name) > DR_SHM_NAME_MAX)
    return -EINVAL;
  dr_shm_seg_t seg;
  int rc = dr_shm_seg_create(name, HDR_BYTES + capacity, &seg, what);
  return rc != 0 ? rc : init_producer(name, &seg, capacity, out);
}

int dr_shm_ring_create_named(char *name, size_t n, const char *tag,
                             size_t capacity, dr_shm_ring_t **out, int *taken,
                             const char **what) {
  const char *dummy;
  if (what == NULL)
    what = &dummy;
  *out = NULL;
  *what = "dr_shm_ring_create";
  if (taken != NULL)
    *taken = 0;
  if (bad_capacity(capacity))
    return -EINVAL;
  dr_shm_seg_t seg;
  int rc = dr_shm_seg_create_named(name, n, tag, HDR_BYTES + capacity, &seg,
                                   taken, what);
  return rc != 0 ? rc : init_producer(name, &seg, capacity, out);
}

int dr_shm_ring_open(const char *name, dr_shm_ring_t **out, const char **what) {
  const char *dummy;
  if (what == NULL)
    what = &dummy;
  *out = NULL;
  dr_shm_seg_t seg;
  int rc = dr_shm_seg_open(name, HDR_BYTES + 4096, SIZE_MAX, &seg, what);
  if (rc != 0)
    return rc;
  hdr_t *h = seg.base;
  uint64_t cap = h->capacity;
  if (h->magic != RING_MAGIC || bad_capacity(cap) ||
      HDR_BYTES + cap != seg.n_bytes) {
    *what = "the segment's header";
    dr_shm_seg_close(&seg);
    return -EPROTO;
  }
  dr_shm_ring_t *r = wrap(&seg, 0);
  if (r == NULL) {
    dr_shm_seg_close(&seg);
    return -ENOMEM;
  }
  atomic_store(&h->consumer_pid, (int32_t)getpid());
  *out = r;
  return 0;
}

int dr_shm_ring_unlink(const char *name) { return dr_shm_seg_unlink(name); }

void dr_shm_ring_close(dr_shm_ring_t **rp) {
  dr_shm_ring_t *r = *rp;
  if (r == NULL)
    return;
  dr_shm_seg_close(&r->seg);
  free(r);
  *rp = NULL;
}

size_t dr_shm_ring_capacity(const dr_shm_ring_t *r) { return r->cap; }

/* ---- producer ---------------------------------------------------------- */

size_t dr_shm_ring_free(dr_shm_ring_t *r) {
  r->peer = atomic_load_explicit(&r->h->tail, memory_order_acquire);
  return r->cap - (size_t)(r->pos - r->peer);
}

size_t dr_shm_ring_write_span(dr_shm_ring_t *r, void **p) {
  size_t free_bytes = dr_shm_ring_free(r);
  size_t off = (size_t)r->pos & (r->cap - 1);
  size_t to_end = r->cap - off;
  *p = r->data + off;
  return free_bytes < to_end ? free_bytes : to_end;
}

void dr_shm_ring_commit(dr_shm_ring_t *r, size_t n) {
  if (n == 0)
    return;
  r->pos += n;
  atomic_store_explicit(&r->h->head, r->pos, memory_order_release);
  notify(&r->h->cons_waiting, &r->h->data_seq);
}

/* ---- consumer ---------------------------------------------------------- */

size_t dr_shm_ring_used(dr_shm_ring_t *r) {
  r->peer = atomic_load_explicit(&r->h->head, memory_order_acquire);
  return (size_t)(r->peer - r->pos);
}

size_t dr_shm_ring_read_span(dr_shm_ring_t *r, const void **p) {
  size_t used = dr_shm_ring_used(r);
  size_t off = (size_t)r->pos & (r->cap - 1);
  size_t to_end = r->cap - off;
  *p = r->data + off;
  return used < to_end ? used : to_end;
}

void dr_shm_ring_release(dr_shm_ring_t *r, size_t n) {
  if (n == 0)
    return;
  r->pos += n;
  atomic_store_explicit(&r->h->tail, r->pos, memory_order_release);
  notify(&r->h->prod_waiting, &r->h->space_seq);
}

/* ---- waiting ----------------------------------------------------------- */

/* Arms *w on word; returns 1 (disarmed again) when ready() holds after
 * the flag is visible, else 0. */
static int arm(dr_shm_ring_t *r, size_t bytes, _Atomic uint32_t *flag,
               _Atomic uint32_t *word, dr_shm_waiter_t *w) {
  atomic_store_explicit(flag, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst);
  uint32_t val = atomic_load_explicit(word, memory_order_acquire);
  size_t have = r->producer ? dr_shm_ring_free(r) : dr_shm_ring_used(r);
  if (have >= bytes || dr_shm_ring_aborted(r)) {
    atomic_store_explicit(flag, 0, memory_order_relaxed);
    return 1;
  }
  w->word = word;
  w->val = val;
  w->flag = flag;
  return 0;
}

int dr_shm_ring_prepare_write(dr_shm_ring_t *r, size_t bytes,
                              dr_shm_waiter_t *w) {
  if (dr_shm_ring_free(r) >= bytes || dr_shm_ring_aborted(r))
    return 1;
  return arm(r, bytes, &r->h->prod_waiting, &r->h->space_seq, w);
}

int dr_shm_ring_prepare_read(dr_shm_ring_t *r, size_t bytes,
                             dr_shm_waiter_t *w) {
  if (dr_shm_ring_used(r) >= bytes || dr_shm_ring_aborted(r))
    return 1;
  return arm(r, bytes, &r->h->cons_waiting, &r->h->data_seq, w);
}

/* ---- liveness and abort ------------------------------------------------ */

int dr_shm_ring_peer_pid(const dr_shm_ring_t *r) {
  return r->producer ? atomic_load(&r->h->consumer_pid)
                     : atomic_load(&r->h->producer_pid);
}

int dr_shm_ring_peer_alive(const dr_shm_ring_t *r) {
  int pid = dr_shm_ring_peer_pid(r);
  return pid <= 0 || dr_pid_alive(pid);
}

void dr_shm_ring_abort(dr_shm_ring_t *r) {
  atomic_store(&r->h->aborted, 1);
  atomic_fetch_add_explicit(&r->h->data_seq, 1, memory_order_release);
  atomic_fetch_add_explicit(&r->h->space_seq, 1, memory_order_release);
  dr_shm_wake(&r->h->data_seq);
  dr_shm_wake(&r->h->space_seq);
}

int dr_shm_ring_aborted(const dr_shm_ring_t *r) {
  return atomic_load_explicit(&r->h->aborted, memory_order_acquire) != 0;
}
