/* Waiting for another process of this host through a word in shared
 * memory (shm_seg.h): the process group's rings (shm_ring.h) and
 * host-shared weights (worker/reducer/host_weights.h).
 *
 * A waiter spins first, for about what the other side needs to finish a
 * piece of work (dr_shm_spin_ns), then sleeps on a futex word that the
 * other side bumps when it publishes; the publisher makes the system call
 * only when a waiter says it sleeps. A sleeper wakes at least every
 * millisecond to check that the process it waits for still runs
 * (dr_pid_alive), and gives up at its deadline: nothing waits forever on a
 * dead or stuck peer. The futex words are shared (no FUTEX_PRIVATE):
 * several processes map them.
 *
 * All times are CLOCK_MONOTONIC nanoseconds. Never logs.
 */
#ifndef DR_SHM_WAIT_H
#define DR_SHM_WAIT_H

#include <stdatomic.h>
#include <stdint.h>

/* How long a waiter spins before it sleeps: about what a peer needs to
 * copy or reduce a piece. */
#define DR_SHM_SPIN_NS 30000u

/* The spin for a host that runs ranks_on_host ranks: DR_SHM_SPIN_NS when
 * it has a CPU for each, else 0: the spin would hold the CPU that the
 * awaited rank needs. */
uint64_t dr_shm_spin_ns(uint32_t ranks_on_host);

/* One turn of a spin loop, between two looks at the clock and the awaited
 * word: PAUSE on x86, which frees the core's pipeline for its sibling. */
static inline void dr_shm_relax(void) {
  for (int i = 0; i < 32; i++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

/* Wakes every process asleep on word. */
void dr_shm_wake(_Atomic uint32_t *word);

/* 0 when process pid is gone or a zombie, 1 when it runs (or cannot be
 * checked). */
int dr_pid_alive(int pid);

/* ---- a word per direction, a flag per waiter (the rings) --------------- */

/* What dr_shm_wait() sleeps on; the ring's prepare calls fill it
 * (shm_ring.h). */
typedef struct {
  _Atomic uint32_t *word; /* the futex word */
  uint32_t val;           /* its value when prepared */
  _Atomic uint32_t *flag; /* this side's "waiting" flag */
} dr_shm_waiter_t;

/* Sleeps until one of the n armed waiters (n <= 8) is woken or the absolute
 * time deadline_ns passes. Uses futex_waitv; on a kernel without it,
 * sleeps on the first word at most 1 ms at a time. Returns 0 (woken or
 * spurious: re-check), -ETIMEDOUT, or -errno. The caller checks its peers
 * between calls. */
int dr_shm_wait(dr_shm_waiter_t *w, int n, uint64_t deadline_ns);

/* Disarms a waiter after the wait: clears its flag. */
void dr_shm_wait_done(dr_shm_waiter_t *w);

/* ---- a bell for any number of publishers and waiters (shared weights) -- */

/* Lives in the segment; zeroed memory is a valid bell. */
typedef struct {
  _Atomic uint32_t word;     /* bumped by every publication */
  _Atomic uint32_t sleepers; /* waiters in the futex wait */
} dr_shm_bell_t;

/* Rings after a publication (a sequentially consistent store): a waiter
 * that went to sleep before it is woken, one that comes after sees it. */
void dr_shm_bell_post(dr_shm_bell_t *b);

/* One wait: until *count reaches target. */
typedef struct {
  dr_shm_bell_t *bell;
  const _Atomic uint64_t *count;
  uint64_t target;
  uint64_t spin_ns;           /* first (dr_shm_spin_ns) */
  const _Atomic int32_t *pid; /* the process that advances count (<= 0 or
                                 NULL: not checked) */
  /* Called at each wake-up that finds count short, before the pid is
   * checked (may be NULL): nonzero ends the wait with that code, which
   * must be none of the codes below. */
  int (*check)(void *arg);
  void *arg;
} dr_shm_await_t;

/* Spins, then sleeps on the bell at most 1 ms at a time. Returns 0 when
 * *count >= target, -ESRCH when the process *pid is gone, -ETIMEDOUT at
 * deadline_ns, or check's code. */
int dr_shm_await(const dr_shm_await_t *a, uint64_t deadline_ns);

#endif /* DR_SHM_WAIT_H */
