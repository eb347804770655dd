/* A named POSIX shared-memory segment that the processes of one host map:
 * the set-up under the process group's rings (shm_ring.h) and host-shared
 * weights (worker/reducer/host_weights.h). Waiting on words in it is
 * shm_wait.h.
 *
 * The creator makes the name with O_EXCL and reserves the pages with
 * posix_fallocate, so a /dev/shm too small fails here with -ENOSPC instead
 * of a SIGBUS on first touch; both sides map it populated. A job's names
 * come from proto/os/shm_name.h (dr_shm_seg_create_named): unguessable,
 * with the agent's prefix, new digits while a name is taken. Whoever maps
 * a segment removes the name once every party has mapped it, so that a
 * crash later leaves nothing in /dev/shm; the agent removes what a crash
 * before that leaves.
 *
 * Every call returns 0 or -errno, never logs, and on failure leaves
 * nothing behind (no mapping; no name it created); `what` (may be NULL)
 * then names what failed ("shm_open", "posix_fallocate", "fstat", "mmap",
 * "the segment's size").
 */
#ifndef DR_SHM_SEG_H
#define DR_SHM_SEG_H

#include <stddef.h>

/* A mapping of a whole segment. Owned by whoever filled it; release with
 * dr_shm_seg_close. */
typedef struct {
  void *base;     /* NULL when not mapped */
  size_t n_bytes; /* the segment's size */
} dr_shm_seg_t;

/* Creates the segment `name` ("/..." as shm_open wants it) of n_bytes
 * (> 0) and maps it. -EEXIST when the name exists, -ENOSPC when /dev/shm
 * cannot hold it. */
int dr_shm_seg_create(const char *name, size_t n_bytes, dr_shm_seg_t *seg,
                      const char **what);

/* The same under a new name for tag (dr_shm_create: name is its buffer of
 * n bytes, *taken, may be NULL, how many names were found taken, and
 * -EEXIST when every name tried was). */
int dr_shm_seg_create_named(char *name, size_t n, const char *tag,
                            size_t n_bytes, dr_shm_seg_t *seg, int *taken,
                            const char **what);

/* Maps the existing segment `name`, whose size must lie within
 * [min_bytes, max_bytes] (min_bytes > 0): else -EPROTO and nothing
 * mapped. seg->n_bytes gets the size found either way (to report it). */
int dr_shm_seg_open(const char *name, size_t min_bytes, size_t max_bytes,
                    dr_shm_seg_t *seg, const char **what);

/* Removes the name (mappings stay valid). 0 or -errno (-ENOENT: gone). */
int dr_shm_seg_unlink(const char *name);

/* Unmaps; seg->base NULL. An unmapped seg is fine. */
void dr_shm_seg_close(dr_shm_seg_t *seg);

#endif /* DR_SHM_SEG_H */
