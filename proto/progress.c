#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
  _Atomic uint64_t seq;
  _Atomic uint64_t step;
  _Atomic uint32_t flags;
  char pad[DR_PROGRESS_SLOT_BYTES - 2 * sizeof(uint64_t) - sizeof(uint32_t)];
} slot_t;

_Static_assert(sizeof(slot_t) == DR_PROGRESS_SLOT_BYTES, "slot size");
_Static_assert(offsetof(slot_t, seq) == DR_PROGRESS_OFF_SEQ, "seq offset");
_Static_assert(offsetof(slot_t, step) == DR_PROGRESS_OFF_STEP, "step offset");
_Static_assert(offsetof(slot_t, flags) == DR_PROGRESS_OFF_FLAGS,
               "flags offset");

struct dr_progress {
  slot_t *slots;
  size_t n_bytes;
  uint32_t n;
  uint32_t mine; /* worker side: its slot */
  uint64_t seq;
};

static int map(int fd, size_t n_bytes, slot_t **out) {
  void *p = mmap(NULL, n_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return -errno;
  *out = p;
  return 0;
}

int dr_progress_create(const char *path, uint32_t n, dr_progress_t **out) {
  dr_progress_t *p = calloc(1, sizeof(*p));
  if (p == NULL)
    return -ENOMEM;
  p->n = n;
  p->n_bytes = (size_t)(n > 0 ? n : 1) * sizeof(slot_t);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  int rc = fd < 0 ? -errno : 0;
  if (rc == 0 && ftruncate(fd, (off_t)p->n_bytes) != 0)
    rc = -errno;
  if (rc == 0)
    rc = map(fd, p->n_bytes, &p->slots);
  if (fd >= 0)
    close(fd);
  if (rc != 0) {
    free(p);
    return rc;
  }
  memset(p->slots, 0, p->n_bytes);
  *out = p;
  return 0;
}

void dr_progress_reset(dr_progress_t *p, uint32_t i) {
  if (p != NULL && i < p->n) {
    atomic_store(&p->slots[i].seq, 0);
    atomic_store(&p->slots[i].step, 0);
    atomic_store(&p->slots[i].flags, 0);
  }
}

dr_progress_sample_t dr_progress_read(const dr_progress_t *p, uint32_t i) {
  dr_progress_sample_t s = {0, 0, 0};
  if (p != NULL && i < p->n) {
    s.seq = atomic_load_explicit(&p->slots[i].seq, memory_order_acquire);
    s.step = atomic_load_explicit(&p->slots[i].step, memory_order_relaxed);
    s.flags = atomic_load_explicit(&p->slots[i].flags, memory_order_relaxed);
  }
  return s;
}

void dr_progress_close(dr_progress_t **pp) {
  dr_progress_t *p = *pp;
  if (p == NULL)
    return;
  munmap(p->slots, p->n_bytes);
  free(p);
  *pp = NULL;
}

dr_progress_t *dr_progress_attach_env(void) {
  const char *path = getenv("DDPRUN_PROGRESS_FILE");
  const char *lr = getenv("LOCAL_RANK");
  if (path == NULL || lr == NULL)
    return NULL;
  uint32_t mine = (uint32_t)strtoul(lr, NULL, 10);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  off_t size = lseek(fd, 0, SEEK_END);
  dr_progress_t *p = calloc(1, sizeof(*p));
  if (p == NULL || size < (off_t)((mine + 1) * sizeof(slot_t)) ||
      map(fd, (size_t)size, &p->slots) != 0) {
    close(fd);
    free(p);
    return NULL;
  }
  close(fd);
  p->n_bytes = (size_t)size;
  p->n = (uint32_t)(p->n_bytes / sizeof(slot_t));
  p->mine = mine;
  atomic_store_explicit(&p->slots[mine].flags, DR_PROGRESS_REPORTS,
                        memory_order_relaxed);
  return p;
}

void dr_progress_report(dr_progress_t *p, uint64_t step) {
  if (p == NULL)
    return;
  atomic_store_explicit(&p->slots[p->mine].step, step, memory_order_relaxed);
  atomic_store_explicit(&p->slots[p->mine].seq, ++p->seq, memory_order_release);
}
