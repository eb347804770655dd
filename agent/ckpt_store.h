/* The agent's checkpoint directory (--ckpt-dir): what it holds, where
 * each checkpoint came from, and how many are kept.
 *
 * DIR holds checkpoints by the name rule of ckpt_rules.h, regular files
 * and directories (links are neither followed nor counted), and the
 * agent's own hidden directory DIR/.ddprun/:
 *   lock       held (flock) while an agent uses DIR: one agent per DIR
 *   origins    the index: "<node rank> <name>" per line for each
 *              checkpoint a peer sent, rewritten whole by rename; a
 *              checkpoint not in it is this node's own
 *   incoming/  copies being received, one private directory each; only a
 *              whole, verified copy is renamed into DIR
 *
 * Retention: after each new checkpoint, the newest `keep` of each origin
 * (this node's, and each node rank that sent some) stay; the others are
 * removed, a directory with what it holds, never following a link.
 *
 * Thread-safe: the agent's loop, the peer server's threads and the
 * transfer thread share one store; every call takes its lock.
 */
#ifndef DR_CKPT_STORE_H
#define DR_CKPT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_rules.h"

/* The origin of a checkpoint this node's own workers wrote. */
#define DR_CKPT_LOCAL UINT32_MAX

typedef struct dr_ckpt_store dr_ckpt_store_t;

typedef struct {
  char name[DR_CKPT_NAME_MAX + 1];
  uint64_t step;
  int is_dir;
  uint32_t origin; /* a node rank, or DR_CKPT_LOCAL */
} dr_ckpt_item_t;

/* Makes dir if missing (with its missing parents, mode 0700), makes sure
 * this process can write there (DIR/.ddprun and its lock), takes the lock,
 * empties DIR/.ddprun/incoming of what a killed agent left, and reads the
 * index. keep >= 1. Returns 0 and *out, or a negative code with a one-line
 * reason in err ("cannot create /x/ckpt (Permission denied)"). */
int dr_ckpt_store_open(const char *dir, uint32_t keep, dr_ckpt_store_t **out,
                       char *err, size_t err_len);
/* Releases the lock and frees *s; sets it to NULL. */
void dr_ckpt_store_close(dr_ckpt_store_t **s);

/* The directory as given. Borrowed for the store's life. */
const char *dr_ckpt_store_dir(const dr_ckpt_store_t *s);

/* The checkpoints in DIR, newest step first (then by name): *items is
 * malloc'd (free() it), *n how many. 0 or a negative code. */
int dr_ckpt_store_list(dr_ckpt_store_t *s, dr_ckpt_item_t **items, size_t *n);

/* The newest step in DIR, or DR_NONE (UINT64_MAX) when it holds none. */
uint64_t dr_ckpt_store_newest(dr_ckpt_store_t *s);

/* The name of a checkpoint of step in DIR (this node's own first) into
 * name[n], and its origin: 0, or DR_ENOTFOUND. */
int dr_ckpt_store_find_step(dr_ckpt_store_t *s, uint64_t step, char *name,
                            size_t n, uint32_t *origin);

/* Where name came from: the index's node rank, or DR_CKPT_LOCAL. */
uint32_t dr_ckpt_store_origin(dr_ckpt_store_t *s, const char *name);

/* The watch saw name appear in DIR by rename: 1 when this node's workers
 * made it (the index forgets any earlier copy of that name from a peer),
 * 0 when it is one this store renamed in itself (dr_ckpt_store_commit). */
int dr_ckpt_store_claim(dr_ckpt_store_t *s, const char *name);

/* A new private directory under DIR/.ddprun/incoming for one copy: its
 * name into tmp[n] and an O_DIRECTORY descriptor of it (*dirfd; caller
 * closes). 0 or -errno. */
int dr_ckpt_store_incoming(dr_ckpt_store_t *s, char *tmp, size_t n,
                           int *dirfd);

/* Moves incoming/tmp/name into DIR as name, never over an existing entry
 * (-EEXIST then, and the copy is discarded), with origin recorded in the
 * index first (a node rank; DR_CKPT_LOCAL for one that counts as this
 * node's own, a restore from --ckpt-persist); then applies retention.
 * Removes incoming/tmp in every case. 0 or a negative code. */
int dr_ckpt_store_commit(dr_ckpt_store_t *s, const char *tmp,
                         const char *name, uint32_t origin);
/* Removes incoming/tmp and whatever it holds. */
void dr_ckpt_store_discard(dr_ckpt_store_t *s, const char *tmp);

/* Keeps the newest `keep` checkpoints of each origin among those of step
 * upto or less and removes the others of those; a later one is left alone
 * and not counted (UINT64_MAX: all count). A commit retains up to the
 * step it committed. Returns how many were removed, or a negative code
 * (the first failure; the rest were still tried). */
int dr_ckpt_store_retain(dr_ckpt_store_t *s, uint64_t upto);

/* Opens checkpoint name for reading, without following a link: *fd (a
 * regular file, or an O_DIRECTORY descriptor; caller closes) and
 * *is_dir. 0, DR_ENOTFOUND, or -errno. */
int dr_ckpt_store_open_item(dr_ckpt_store_t *s, const char *name, int *fd,
                            int *is_dir);

/* Bytes free for this user on DIR's file system. 0 or -errno. */
int dr_ckpt_store_room(dr_ckpt_store_t *s, uint64_t *bytes);

/* The checkpoints by the name rule in directory dirfd (regular files and
 * directories, never links), newest step first (then by name), origin
 * DR_CKPT_LOCAL: *items malloc'd (free() it), *n how many. 0 or -errno. */
int dr_ckpt_list_at(int dirfd, dr_ckpt_item_t **items, size_t *n);

/* mkdir -p, mode 0700 for every directory it makes. 0 or -errno. */
int dr_ckpt_mkdirs(const char *path);

/* Opens name under dirfd for reading as dr_ckpt_store_open_item does: a
 * regular file or a directory, never through a link. */
int dr_ckpt_open_at(int dirfd, const char *name, int *fd, int *is_dir);

/* Renames from_dir/from to to_dir/to, never over an existing entry:
 * -EEXIST then. A file system without RENAME_NOREPLACE (NFS) gets a look
 * first, which leaves a window only to another writer of that name. 0 or
 * -errno. */
int dr_ckpt_rename_new(int from_dir, const char *from, int to_dir,
                       const char *to);

/* Removes name under dirfd, a directory with everything in it (at most 64
 * levels deep), never following a link. 0 (also when name is gone) or the
 * first -errno. */
int dr_ckpt_rm_at(int dirfd, const char *name);

#endif /* DR_CKPT_STORE_H */
