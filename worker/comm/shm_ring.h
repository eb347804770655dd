/* A single-producer single-consumer byte ring in a POSIX shared-memory
 * segment: the data path of a process-group link between two ranks on one
 * host.
 *
 * The producer creates the segment (dr_shm_ring_create_named), the
 * consumer maps it by name (dr_shm_ring_open) and unlinks the name at once
 * (the producer too, when the consumer said it has mapped it), so a crash
 * later leaves nothing in /dev/shm. The segment's set-up, its names and
 * their clean-up after a crash before that are shm_seg.h's.
 *
 * Layout: a header page, then `capacity` bytes of data (a power of two).
 * head (bytes ever committed) belongs to the producer, tail (bytes ever
 * released) to the consumer; each lives on its own cache line with the
 * futex word its owner bumps. Either side sleeps on the other's word
 * (dr_shm_wait, shm_wait.h) after setting its "waiting" flag, so a commit
 * or release costs a system call only when the peer actually sleeps.
 * Producer and consumer hand out contiguous spans (never across the wrap
 * point), so data is written and reduced in place, without a bounce
 * buffer.
 *
 * Both sides record their pid in the header; dr_shm_ring_peer_alive()
 * tells a dead (or zombie) peer from a slow one. Either side may set the
 * abort flag, which wakes the other.
 *
 * The functions never block (dr_shm_wait does), never log, and return 0
 * or -errno. One ring is used by one thread on each side.
 */
#ifndef DR_SHM_RING_H
#define DR_SHM_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shm_wait.h"

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

/* The same under a new name for tag (dr_shm_seg_create_named: name is a
 * buffer of n bytes; *taken, may be NULL, how many names were taken). */
int dr_shm_ring_create_named(char *name, size_t n, const char *tag,
                             size_t capacity, dr_shm_ring_t **out, int *taken,
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

/* Prepares to wait until at least `bytes` are free (producer) or readable
 * (consumer). Returns 1 when that already holds or the ring is aborted
 * (nothing to wait for; *w untouched), else 0 with *w armed for
 * dr_shm_wait(): the peer will wake it on its next commit or release.
 * Every armed waiter must be disarmed with dr_shm_wait_done() after the
 * wait. */
int dr_shm_ring_prepare_write(dr_shm_ring_t *r, size_t bytes,
                              dr_shm_waiter_t *w);
int dr_shm_ring_prepare_read(dr_shm_ring_t *r, size_t bytes,
                             dr_shm_waiter_t *w);

/* The peer's pid (0 before the consumer attached, for the producer). */
int dr_shm_ring_peer_pid(const dr_shm_ring_t *r);

/* 0 when the peer process is gone or a zombie, 1 when it runs (or cannot
 * be checked). */
int dr_shm_ring_peer_alive(const dr_shm_ring_t *r);

/* Marks the ring aborted and wakes the peer. */
void dr_shm_ring_abort(dr_shm_ring_t *r);
int dr_shm_ring_aborted(const dr_shm_ring_t *r);

#endif /* DR_SHM_RING_H */
