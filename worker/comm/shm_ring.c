/* The shared-memory SPSC ring: see shm_ring.h. */
#include "shm_ring.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
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
  hdr_t *h;
  uint8_t *data;
  size_t cap;
  size_t map_len;
  int producer;
  uint64_t pos;  /* head (producer) or tail (consumer): ours alone */
  uint64_t peer; /* last seen tail (producer) or head (consumer) */
};

static long futex_wake(_Atomic uint32_t *word) {
  return syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL,
                 0);
}

/* Wakes the side sleeping on word when its flag says it sleeps. The
 * release on the increment pairs with the acquire in prepare: a sleeper
 * that sees the new value also sees what was published before it. */
static void notify(_Atomic uint32_t *flag, _Atomic uint32_t *word) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(flag, memory_order_relaxed)) {
    atomic_fetch_add_explicit(word, 1, memory_order_release);
    futex_wake(word);
  }
}

static dr_shm_ring_t *wrap(void *map, size_t map_len, int producer) {
  dr_shm_ring_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  r->h = map;
  r->data = (uint8_t *)map + HDR_BYTES;
  r->cap = (size_t)r->h->capacity;
  r->map_len = map_len;
  r->producer = producer;
  return r;
}

int dr_shm_ring_create(const char *name, size_t capacity, dr_shm_ring_t **out,
                       const char **what) {
  const char *dummy;
  if (what == NULL)
    what = &dummy;
  *out = NULL;
  *what = "dr_shm_ring_create";
  if (capacity < 4096 || (capacity & (capacity - 1)) != 0 ||
      strlen(name) > DR_SHM_NAME_MAX)
    return -EINVAL;
  size_t total = HDR_BYTES + capacity;
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *what = "shm_open";
    return -errno;
  }
  /* Reserves the pages now: a full tmpfs says ENOSPC here rather than
   * raising SIGBUS when the ring is first written. */
  int rc = posix_fallocate(fd, 0, (off_t)total);
  if (rc != 0) {
    *what = "posix_fallocate";
    close(fd);
    shm_unlink(name);
    return -rc;
  }
  void *map = mmap(NULL, total, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
  int saved = errno;
  close(fd);
  if (map == MAP_FAILED) {
    *what = "mmap";
    shm_unlink(name);
    return -saved;
  }
  hdr_t *h = map;
  h->capacity = capacity;
  atomic_store(&h->producer_pid, (int32_t)getpid());
  h->magic = RING_MAGIC;
  dr_shm_ring_t *r = wrap(map, total, 1);
  if (r == NULL) {
    munmap(map, total);
    shm_unlink(name);
    return -ENOMEM;
  }
  *out = r;
  return 0;
}

int dr_shm_ring_open(const char *name, dr_shm_ring_t **out, const char **what) {
  const char *dummy;
  if (what == NULL)
    what = &dummy;
  *out = NULL;
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    *what = "shm_open";
    return -errno;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *what = "fstat";
    int e = errno;
    close(fd);
    return -e;
  }
  size_t total = (size_t)st.st_size;
  if (total < HDR_BYTES + 4096) {
    *what = "the segment's size";
    close(fd);
    return -EPROTO;
  }
  void *map = mmap(NULL, total, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
  int saved = errno;
  close(fd);
  if (map == MAP_FAILED) {
    *what = "mmap";
    return -saved;
  }
  hdr_t *h = map;
  uint64_t cap = h->capacity;
  if (h->magic != RING_MAGIC || cap < 4096 || (cap & (cap - 1)) != 0 ||
      HDR_BYTES + cap != total) {
    *what = "the segment's header";
    munmap(map, total);
    return -EPROTO;
  }
  dr_shm_ring_t *r = wrap(map, total, 0);
  if (r == NULL) {
    munmap(map, total);
    return -ENOMEM;
  }
  atomic_store(&h->consumer_pid, (int32_t)getpid());
  *out = r;
  return 0;
}

int dr_shm_ring_unlink(const char *name) {
  return shm_unlink(name) == 0 ? 0 : -errno;
}

void dr_shm_ring_close(dr_shm_ring_t **rp) {
  dr_shm_ring_t *r = *rp;
  if (r == NULL)
    return;
  munmap(r->h, r->map_len);
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

void dr_shm_wait_done(dr_shm_waiter_t *w) {
  atomic_store_explicit(w->flag, 0, memory_order_relaxed);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* struct futex_waitv as the kernel defines it (linux/futex.h, 5.16+),
 * spelled out so the build does not depend on the headers' age. */
struct waitv {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t reserved;
};

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
#define WAITV_U32 2 /* FUTEX2_SIZE_U32; no FUTEX2_PRIVATE: shared */

/* 1 unknown, 2 futex_waitv works, 0 it does not (ENOSYS). */
static _Atomic int have_waitv = 1;

int dr_shm_wait(dr_shm_waiter_t *w, int n, uint64_t deadline_ns) {
  if (n <= 0 || n > 8)
    return -EINVAL;
  uint64_t now = now_ns();
  if (now >= deadline_ns)
    return -ETIMEDOUT;
  if (atomic_load_explicit(&have_waitv, memory_order_relaxed) != 0) {
    struct waitv v[8];
    for (int i = 0; i < n; i++) {
      v[i].val = w[i].val;
      v[i].uaddr = (uint64_t)(uintptr_t)w[i].word;
      v[i].flags = WAITV_U32;
      v[i].reserved = 0;
    }
    struct timespec abs = {(time_t)(deadline_ns / 1000000000u),
                           (long)(deadline_ns % 1000000000u)};
    long rc = syscall(SYS_futex_waitv, v, (unsigned)n, 0u, &abs,
                      CLOCK_MONOTONIC);
    if (rc >= 0)
      return 0;
    if (errno == EAGAIN || errno == EINTR)
      return 0;
    if (errno == ETIMEDOUT)
      return -ETIMEDOUT;
    if (errno != ENOSYS)
      return -errno;
    atomic_store_explicit(&have_waitv, 0, memory_order_relaxed);
  }
  /* Without futex_waitv: sleep on the first word only, in 1 ms slices, so
   * a change on the others is noticed within that. */
  uint64_t until = now + 1000000u < deadline_ns ? now + 1000000u : deadline_ns;
  struct timespec abs = {(time_t)(until / 1000000000u),
                         (long)(until % 1000000000u)};
  long rc = syscall(SYS_futex, (uint32_t *)w[0].word,
                    FUTEX_WAIT_BITSET, w[0].val, &abs, NULL,
                    FUTEX_BITSET_MATCH_ANY);
  if (rc == 0 || errno == EAGAIN || errno == EINTR)
    return 0;
  if (errno == ETIMEDOUT)
    return until >= deadline_ns ? -ETIMEDOUT : 0;
  return -errno;
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

int dr_pid_alive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return 0;
  /* kill() succeeds on a zombie: one that exited but was not reaped yet
   * is as dead as one that was. */
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : 1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return 1;
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')');
  if (paren == NULL || paren[1] != ' ')
    return 1;
  return !(paren[2] == 'Z' || paren[2] == 'X');
}

void dr_shm_ring_abort(dr_shm_ring_t *r) {
  atomic_store(&r->h->aborted, 1);
  atomic_fetch_add_explicit(&r->h->data_seq, 1, memory_order_release);
  atomic_fetch_add_explicit(&r->h->space_seq, 1, memory_order_release);
  futex_wake(&r->h->data_seq);
  futex_wake(&r->h->space_seq);
}

int dr_shm_ring_aborted(const dr_shm_ring_t *r) {
  return atomic_load_explicit(&r->h->aborted, memory_order_acquire) != 0;
}
