/* A single-producer single-consumer byte ring in a POSIX shared-memory
 * segment: the data path of a process-group link between two ranks on one
 * host.
 *
 * The producer creates the segment (dr_shm_ring_create), the consumer maps
 * it by name (dr_shm_ring_open) and unlinks the name at once (the producer
 * too, when the consumer said it has mapped it), so a crash later leaves
 * nothing in /dev/shm; the process group names its rings with
 * proto/os/shm_name.h, whose prefix the agent cleans up after a crash
 * before that. Space is reserved with posix_fallocate: a /dev/shm too small
 * for the ring fails here with -ENOSPC instead of a SIGBUS on first touch.
 *
 * Layout: a header page, then `capacity` bytes of data (a power of two).
 * head (bytes ever committed) belongs to the producer, tail (bytes ever
 * released) to the consumer; each lives on its own cache line with the
 * futex word its owner bumps. Either side sleeps on the other's word
 * after setting its "waiting" flag, so a commit or release costs a system
 * call only when the peer actually sleeps. Producer and consumer hand out
 * contiguous spans (never across the wrap point), so data is written and
 * reduced in place, without a bounce buffer.
 *
 * Both sides record their pid in the header; dr_shm_ring_peer_alive()
 * tells a dead (or zombie) peer from a slow one. Either side may set the
 * abort flag, which wakes the other.
 *
 * The functions never block except dr_shm_wait(), never log, and return 0
 * or -errno. One ring is used by one thread on each side.
 */
#ifndef DR_SHM_RING_H
#define DR_SHM_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dr_shm_ring dr_shm_ring_t;

/* Longest name accepted (without the NUL), e.g.
 * "/ddprun-4242-1f2e3d4c-0123456789abcdef-ring0to1". */
#define DR_SHM_NAME_MAX 200

/* Creates and maps the segment `name` ("/..." as shm_open wants it) with
 * `capacity` data bytes (a power of two, at least 4096), as the producer.
 * Fails with -EEXIST when the name exists, -ENOSPC when /dev/shm cannot
 * hold it, or another -errno; `what` (may be NULL) then names the call that
 * failed ("shm_open", "posix_fallocate", "mmap"). On failure nothing is left
 * behind. */
int dr_shm_ring_create(const char *name, size_t capacity, dr_shm_ring_t **out,
                       const char **what);

/* Maps an existing segment as the consumer and records this process's
 * pid in it. -EPROTO when it does not hold a ring of this version. */
int dr_shm_ring_open(const char *name, dr_shm_ring_t **out, const char **what);

/* Removes the name (the mappings stay valid). 0 or -errno. */
int dr_shm_ring_unlink(const char *name);

/* Unmaps and frees; sets *r to NULL. NULL is fine. */
void dr_shm_ring_close(dr_shm_ring_t **r);

size_t dr_shm_ring_capacity(const dr_shm_ring_t *r);

/* ---- producer ---------------------------------------------------------- */

/* The contiguous free span at the write position: *p and its length (0
 * when the ring is full). */
size_t dr_shm_ring_write_span(dr_shm_ring_t *r, void **p);

/* Publishes n bytes written at the span (n <= its length), or skips n
 * bytes of padding without writing them (n <= the free space). */
void dr_shm_ring_commit(dr_shm_ring_t *r, size_t n);

/* Bytes free in all (contiguous or not). */
size_t dr_shm_ring_free(dr_shm_ring_t *r);

/* ---- consumer ---------------------------------------------------------- */

/* The contiguous readable span at the read position (0 when empty). */
size_t dr_shm_ring_read_span(dr_shm_ring_t *r, const void **p);

/* Bytes readable in all. */
size_t dr_shm_ring_used(dr_shm_ring_t *r);

/* Releases n bytes (n <= dr_shm_ring_used()). */
void dr_shm_ring_release(dr_shm_ring_t *r, size_t n);

/* ---- waiting, liveness, abort ------------------------------------------ */

/* What dr_shm_wait() sleeps on. Filled by a prepare call. */
typedef struct {
  _Atomic uint32_t *word; /* the futex word */
  uint32_t val;           /* its value when prepared */
  _Atomic uint32_t *flag; /* this side's "waiting" flag */
} dr_shm_waiter_t;

/* Prepares to wait until at least `bytes` are free (producer) or readable
 * (consumer). Returns 1 when that already holds or the ring is aborted
 * (nothing to wait for; *w untouched), else 0 with *w armed: the peer will
 * wake it on its next commit or release. Every armed waiter must be
 * disarmed with dr_shm_wait_done() after the wait. */
int dr_shm_ring_prepare_write(dr_shm_ring_t *r, size_t bytes,
                              dr_shm_waiter_t *w);
int dr_shm_ring_prepare_read(dr_shm_ring_t *r, size_t bytes,
                             dr_shm_waiter_t *w);
void dr_shm_wait_done(dr_shm_waiter_t *w);

/* Sleeps until one of the n armed waiters (n <= 8) is woken or the absolute
 * CLOCK_MONOTONIC time deadline_ns passes. Uses futex_waitv; on a kernel
 * without it, sleeps on the first word at most 1 ms at a time. Returns 0
 * (woken or spurious: re-check), -ETIMEDOUT, or -errno. */
int dr_shm_wait(dr_shm_waiter_t *w, int n, uint64_t deadline_ns);

/* The peer's pid (0 before the consumer attached, for the producer). */
int dr_shm_ring_peer_pid(const dr_shm_ring_t *r);

/* 0 when the peer process is gone or a zombie, 1 when it runs (or cannot
 * be checked). */
int dr_shm_ring_peer_alive(const dr_shm_ring_t *r);

/* 0 when process pid is gone or a zombie, 1 when it runs (or cannot be
 * checked). */
int dr_pid_alive(int pid);

/* Marks the ring aborted and wakes the peer. */
void dr_shm_ring_abort(dr_shm_ring_t *r);
int dr_shm_ring_aborted(const dr_shm_ring_t *r);

#endif /* DR_SHM_RING_H */
