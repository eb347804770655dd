/* A checkpoint on the wire (wire.h, "Checkpoint peers"): read from the
 * checkpoint directory and sent as CKPT_ENTRY, CKPT_DATA and CKPT_END
 * frames after its CKPT_PUT, and received into DIR/.ddprun/incoming,
 * checked and renamed into DIR. Blocking, on the plane's threads (ckpt_io.h
 * bounds every wait). Never logs: failures come back as a code and a
 * one-line reason.
 */
#ifndef DR_CKPT_STREAM_H
#define DR_CKPT_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_io.h"
#include "ckpt_rules.h"
#include "ckpt_store.h"
#include "wire.h"

/* An entry of a directory checkpoint, in the order it travels. */
typedef struct {
  char *path;       /* relative, '/'-separated */
  uint32_t kind;    /* DR_CKPT_FILE or DR_CKPT_DIR */
  uint64_t n_bytes; /* a file's size when planned */
} dr_ckpt_ent_t;

/* A checkpoint to send: open, and for a directory its entries (each
 * directory before what it holds, names in byte order, links and special
 * files left out), planned before its CKPT_PUT says its size. */
typedef struct {
  int fd;           /* the file, or an O_DIRECTORY descriptor */
  int is_dir;
  uint64_t total;   /* bytes of its files */
  dr_ckpt_ent_t *e;
  size_t n, cap;
} dr_ckpt_src_t;

/* Opens checkpoint name of s and plans it. 0; DR_ENOTFOUND; DR_EBADARG
 * (why says which entry) for a directory that a peer would refuse (deeper
 * than DR_CKPT_DEPTH_MAX, more than DR_CKPT_ENTRIES_MAX entries, a name
 * with a control byte); or -errno. */
int dr_ckpt_src_open(dr_ckpt_store_t *s, const char *name, dr_ckpt_src_t *src,
                     char *why, size_t why_len);
void dr_ckpt_src_close(dr_ckpt_src_t *src);

/* Sends src's entries, bytes and checksum (what follows its CKPT_PUT),
 * paced by pace when it is not NULL. Before each chunk, a frame the peer
 * sent meanwhile (its ERROR: no room, a refusal) ends the send with the
 * peer's code, its message in why. 0 or a negative code. */
int dr_ckpt_stream_out(dr_ckpt_conn_t *c, dr_ckpt_src_t *src,
                       dr_tbucket_t *pace, uint32_t req, char *why,
                       size_t why_len);

/* Receives what follows put (already checked: its name is a checkpoint's)
 * into a private directory under DIR/.ddprun/incoming, checks every path,
 * length and the checksum, and renames the checkpoint into DIR as name
 * with origin put->origin (dr_ckpt_store_commit). Nothing of a failed
 * copy stays. 0; -EEXIST (DIR holds name already); DR_ECHECKSUM; a
 * protocol code (DR_ESEQUENCE for a frame out of place, DR_EBADARG for a
 * path or length refused); or an I/O code; why says which. */
int dr_ckpt_stream_in(dr_ckpt_conn_t *c, dr_ckpt_store_t *s,
                      const dr_ckpt_put_t *put, const char *name, char *why,
                      size_t why_len);

#endif /* DR_CKPT_STREAM_H */
