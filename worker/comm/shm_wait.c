/* Waiting on words in shared memory: see shm_wait.h. */
#include "shm_wait.h"
#include "mono.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The longest a sleeper goes without looking at its peer. */
#define SLICE_NS 1000000u

static struct timespec at(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  return ts;
}

uint64_t dr_shm_spin_ns(uint32_t ranks_on_host) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 0 && ranks_on_host <= (uint32_t)cpus ? DR_SHM_SPIN_NS : 0;
}

void dr_shm_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps while *word == val, until the absolute time until_ns at most.
 * 0 (woken, changed, interrupted), -ETIMEDOUT or -errno. */
static int sleep_on(_Atomic uint32_t *word, uint32_t val, uint64_t until_ns) {
  struct timespec abs = at(until_ns);
  long rc = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET, val, &abs,
                    NULL, FUTEX_BITSET_MATCH_ANY);
  if (rc == 0 || errno == EAGAIN || errno == EINTR)
    return 0;
  return -errno;
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

/* ---- a word per direction, a flag per waiter --------------------------- */

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
  uint64_t now = dr_mono_ns();
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
    struct timespec abs = at(deadline_ns);
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
  uint64_t until = now + SLICE_NS < deadline_ns ? now + SLICE_NS : deadline_ns;
  int rc = sleep_on(w[0].word, w[0].val, until);
  if (rc == -ETIMEDOUT)
    return until >= deadline_ns ? -ETIMEDOUT : 0;
  return rc;
}

void dr_shm_wait_done(dr_shm_waiter_t *w) {
  atomic_store_explicit(w->flag, 0, memory_order_relaxed);
}

/* ---- a bell for any number of publishers and waiters ------------------- */

void dr_shm_bell_post(dr_shm_bell_t *b) {
  atomic_fetch_add(&b->word, 1);
  if (atomic_load(&b->sleepers) > 0)
    dr_shm_wake(&b->word);
}

static int reached(const dr_shm_await_t *a) {
  return atomic_load(a->count) >= a->target;
}

int dr_shm_await(const dr_shm_await_t *a, uint64_t deadline_ns) {
  if (reached(a))
    return 0;
  if (a->spin_ns > 0) {
    uint64_t spin_end = dr_mono_ns() + a->spin_ns;
    while (dr_mono_ns() < spin_end) {
      dr_shm_relax();
      if (reached(a))
        return 0;
    }
  }
  for (;;) {
    /* The count is read after this waiter counts as a sleeper, and a
     * publisher stores the count, bumps the word, then reads the sleepers
     * (all sequentially consistent): either this waiter sees the count,
     * or the publisher sees this waiter and wakes it, and a bump since v
     * was read makes the sleep return at once. */
    uint32_t v = atomic_load(&a->bell->word);
    atomic_fetch_add(&a->bell->sleepers, 1);
    if (reached(a)) {
      atomic_fetch_sub(&a->bell->sleepers, 1);
      return 0;
    }
    uint64_t now = dr_mono_ns();
    (void)sleep_on(&a->bell->word, v,
                   now + SLICE_NS < deadline_ns ? now + SLICE_NS
                                                : deadline_ns);
    atomic_fetch_sub(&a->bell->sleepers, 1);
    if (reached(a))
      return 0;
    if (a->check != NULL) {
      int rc = a->check(a->arg);
      if (rc != 0)
        return rc;
    }
    int32_t pid = a->pid != NULL ? atomic_load(a->pid) : 0;
    if (pid > 0 && !dr_pid_alive(pid))
      return -ESRCH;
    if (dr_mono_ns() >= deadline_ns)
      return -ETIMEDOUT;
  }
}
