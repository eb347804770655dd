/* Copying a checkpoint from one directory to another on this host, for
 * the persist tier (ckpt_persist.h): a regular file, or a directory with
 * its files and directories (links and special files left out, as a peer
 * copy leaves them, at most DR_CKPT_DEPTH_MAX levels deep), never
 * following a link on either side. Every file and directory written is
 * fsynced before the copy counts as done, so that the caller's rename is
 * the commit. Blocking, for the plane's threads; never logs.
 */
#ifndef DR_CKPT_COPY_H
#define DR_CKPT_COPY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* What bounds a copy, checked before each chunk. */
typedef struct {
  const atomic_int *cancel; /* nonzero: -ECANCELED; NULL: never */
  uint64_t deadline_ms;     /* dr_mono_ms() past it: -ETIMEDOUT; 0: none */
  /* Called after each chunk written, with arg (tests look at the
   * directories then); NULL: none. */
  void (*on_chunk)(void *arg);
  void *arg;
} dr_ckpt_copy_io_t;

/* Which side a failed copy failed on. */
typedef enum { DR_COPY_SRC, DR_COPY_DST } dr_copy_side_t;

/* Copies the checkpoint open at in (a regular file, or a directory's
 * O_DIRECTORY descriptor; dr_ckpt_open_at; the caller closes it) to
 * to_dir/to_name, which must not exist: a file is made 0600, a directory
 * 0700. 0 and *bytes (of its files); or a negative code with *side saying
 * whether reading or writing failed, and nothing left at to_name:
 * DR_ENOTFOUND when the checkpoint went meanwhile (removed by its
 * retention), DR_EBADARG for a tree deeper than DR_CKPT_DEPTH_MAX,
 * -ECANCELED, -ETIMEDOUT (io), or -errno (-ENOSPC, -EROFS, -EIO...). */
int dr_ckpt_copy(int in, int is_dir, int to_dir, const char *to_name,
                 const dr_ckpt_copy_io_t *io, uint64_t *bytes,
                 dr_copy_side_t *side);

#endif /* DR_CKPT_COPY_H */
