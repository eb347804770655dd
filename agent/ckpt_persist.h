/* The persist tier (--ckpt-persist DIR2; docs/ddprun.md, "Checkpoints in
 * node memory"): copies of the job's newest checkpoint on slower shared
 * storage (NFS, a bucket mount) that outlive every node, and the way back
 * into an empty --ckpt-dir.
 *
 * DIR2 holds checkpoints by the name rule (ckpt_rules.h), each renamed in
 * only once whole: written first under a hidden name,
 * .ddprun-partial.<host>.<pid>.<n>, every file and directory fsynced, then
 * renamed, and DIR2 fsynced. Retention counts and removes only names of
 * the rule (regular files and directories); anything else in DIR2 is left
 * alone. A partial copy that a killed agent of this host left (its pid is
 * gone) is removed by the next copy from this host.
 *
 * Blocking, for the plane's threads (ckpt_persister.h); never logs: a
 * failure comes back as a code and a one-line reason.
 */
#ifndef DR_CKPT_PERSIST_H
#define DR_CKPT_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_copy.h"
#include "ckpt_rules.h"
#include "ckpt_store.h"

/* What a copy or a restore did. */
typedef struct {
  char name[DR_CKPT_NAME_MAX + 1]; /* the checkpoint ("" when none) */
  uint64_t step;
  uint64_t bytes;                  /* of its files */
  /* A failure: what failed, in words that name neither the checkpoint nor
   * a temporary name ("cannot write there (No space left on device)"), so
   * that the same trouble reads the same from one copy to the next. After
   * a restore that succeeded: why newer ones were passed over ("" when
   * none were). */
  char why[400];
} dr_persist_res_t;

/* Copies the newest checkpoint of s to dir2 when dir2 holds none as new
 * (dir2 made with its missing parents, mode 0700, when missing), then
 * keeps the newest `keep` of dir2. host: this node's name, for the
 * partial copy's name. 0 and *res: copied; 1: nothing to copy (s holds
 * none, or none newer than dir2's newest; res names s's newest when there
 * is one); DR_ENOTFOUND: the checkpoint was removed from s before it was
 * whole (a newer one took its place); or a negative code with res->why
 * (-ECANCELED and -ETIMEDOUT by io). Nothing of a failed copy stays. */
int dr_persist_copy_out(dr_ckpt_store_t *s, const char *dir2, uint32_t keep,
                        const char *host, const dr_ckpt_copy_io_t *io,
                        dr_persist_res_t *res);

/* When s holds no checkpoint: dir2's newest copied into s as the store
 * takes a copy in (under DIR/.ddprun/incoming, renamed in once whole),
 * counted as this node's own; the next newest when one cannot be read. 0
 * and *res; 1: nothing to restore (s holds a checkpoint, or dir2 is
 * missing or holds none); or a negative code with res->why. */
int dr_persist_restore(const char *dir2, dr_ckpt_store_t *s,
                       const dr_ckpt_copy_io_t *io, dr_persist_res_t *res);

/* Keeps the newest `keep` checkpoints of the directory dir2fd and removes
 * the others, never following a link. How many went, or the first
 * -errno (the rest were still tried). */
int dr_persist_retain(int dir2fd, uint32_t keep);

#endif /* DR_CKPT_PERSIST_H */
