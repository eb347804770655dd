/* Checkpoint files of `train`: the format, writing with an atomic commit,
 * verification, reading, and the directory's housekeeping. Pure file code
 * (no process group, no model): any program can read a checkpoint by
 * linking this folder's ckpt_*.c, the error table (proto/errors.c) and
 * dr_open_regular (proto/os/fs.c) alone.
 *
 * A checkpoint directory holds one file per checkpoint, named
 * ckpt-<step, 10 digits>.bin. A file is written under a temporary name
 * (the final name + ".tmp." + the writer's pid) in the same directory,
 * fsynced, renamed to its final name, and the directory is fsynced: a
 * checkpoint is complete only after the rename. Readers ignore every name
 * that is not exactly ckpt-DDDDDDDDDD.bin, never block on what is so
 * named (a FIFO, a device or a directory is not a checkpoint: refused
 * before a byte is read), and take a file's step from its header, not its
 * name: a file renamed to another step is still the checkpoint of the
 * step it records.
 *
 * File layout of version 3, integers little-endian, reals IEEE-754
 * binary64 little-endian (offset, bytes, field):
 *
 *     0   8  magic "DDPRCKPT"
 *     8   4  format version (3)
 *    12   4  header size in bytes (256 in versions 2 and 3)
 *    16   8  payload size in bytes = 4 * (param_elems + optim_elems +
 *            comm_elems)
 *    24   4  CRC-32 of the payload (zlib's polynomial)
 *    28   4  RNG version (DR_CKPT_RNG_XOSHIRO)
 *    32   8  step: optimizer steps done, i.e. the 0-based step to run next
 *    40   8  total steps of the learning-rate schedule
 *    48   8  epoch = step / steps_per_epoch
 *    56   8  position in the epoch = step % steps_per_epoch
 *    64   8  steps per epoch
 *    72   8  seed (data, initial weights, sampler)
 *    80   8  training samples (the sampler permutes [0, n))
 *    88   8  global batch (samples per optimizer step, all ranks)
 *    96   4  optimizer: 0 SGD, 1 AdamW
 *   100   4  hidden layers
 *   104   4  width
 *   108   4  input dim (0 for text)
 *   112   4  classes
 *   116   4  context (0 for synthetic)
 *   120   4  embed dim (0 for synthetic)
 *   124   4  gradient compression: byte 0 the kind (0 none, 1 fp16,
 *            2 bf16, 3 PowerSGD), byte 1 bit 0 set when PowerSGD ran
 *            without error feedback (other bits 0), bytes 2-3 PowerSGD's
 *            rank
 *   128   8  parameter floats
 *   136   8  optimizer-state floats
 *   144   8  compression-state floats (PowerSGD: Q, then every rank's
 *            error feedback, rank 0 first)
 *   152   8  PowerSGD's start step (the steps sent uncompressed)
 *   160   8  warmup steps
 *   168   8  learning rate (real)
 *   176   8  final learning rate as a fraction of it (real)
 *   184   8  SGD momentum (real)
 *   192   8  weight decay (real)
 *   200   8  AdamW beta1 (real)
 *   208   8  AdamW beta2 (real)
 *   216   8  AdamW epsilon (real)
 *   224   8  loss scale in force for the next step (real; 1 with none)
 *   232   8  loss scaler: steps since the last overflow or growth
 *   240   8  loss scaler: steps skipped for an overflow
 *   248   4  loss-scale mode: 0 none, 1 fixed, 2 dynamic
 *   252   4  CRC-32 of header bytes [0, 252)
 *   256      payload: the parameters in registration order, then the
 *            optimizer state (slot-major), then the compression state,
 *            fp32 little-endian
 *
 * Version 2 (still read; never written) has zeros at 124, 144-160 and
 * 224-252: no compression, no loss scaling, no compression state.
 *
 * Version 1 (still read; never written) is the same up to byte 144, then
 * 12 reserved bytes, the header CRC at 156 over [0, 156), and the payload
 * at 160: it records no learning-rate schedule and no hyper-parameters
 * (has_schedule is 0 when one is read).
 *
 * A file is valid when its magic is right, its version and header size
 * are a known pair (1 and 160, 2 or 3 and 256), the header CRC matches, the
 * reserved bytes are zero, the payload size agrees with the float counts, the
 * file is exactly header + payload bytes long, and the payload CRC
 * matches. Any flipped byte or a truncation is therefore rejected.
 */
#ifndef DR_CKPT_H
#define DR_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/* The format written; dr_ckpt_read and friends also take version 1. */
#define DR_CKPT_VERSION 3
#define DR_CKPT_HEADER_BYTES 256
#define DR_CKPT_V1_HEADER_BYTES 160
/* The RNG of data, initial weights and sampler: xoshiro256** seeded
 * through splitmix64, each epoch's permutation seeded by seed + epoch.
 * Nothing but the seed is kept; a change of generator changes this. */
#define DR_CKPT_RNG_XOSHIRO 1

/* Failure codes, beside -errno (proto/errors.h's table, which
 * dr_strerror() reads):
 *   DR_CKPT_EMAGIC    not a checkpoint
 *   DR_CKPT_EVERSION  a format version or header size unknown
 *   DR_CKPT_EHEADER   header CRC mismatch or inconsistent sizes
 *   DR_CKPT_ESIZE     file shorter or longer than declared
 *   DR_CKPT_ECRC      payload CRC mismatch
 *   DR_CKPT_ESHAPE    buffers do not match the file's counts
 *   DR_CKPT_ESTEP     the header records another step than the name
 * and, for what is named like a checkpoint but is not a file, -EISDIR or
 * DR_ENOTREG (a FIFO, a device, a socket). */

/* What a failure of this module says about the directory, for a caller
 * that must tell a disk that refuses from a run that may simply retry. */
typedef enum {
  DR_CKPT_FAIL_OTHER = 0, /* a file that is not a valid checkpoint, a
                             vanished file or directory, an interrupted
                             call: another attempt may succeed */
  DR_CKPT_FAIL_STORAGE,   /* the storage refuses: full (ENOSPC), over quota
                             (EDQUOT, EFBIG), read-only (EROFS), no
                             permission (EACCES, EPERM), or an I/O error
                             (EIO): the same call fails again until someone
                             acts */
  DR_CKPT_FAIL_NOMEM      /* -ENOMEM */
} dr_ckpt_fail_kind_t;

/* The kind of a code returned by this module (0 is OTHER). */
dr_ckpt_fail_kind_t dr_ckpt_fail_kind(int code);

typedef struct {
  uint32_t version;        /* read: the file's; write: ignored */
  uint32_t header_bytes;   /* read only: the file's (160 in version 1) */
  uint32_t rng_version;
  uint64_t payload_bytes;  /* read only */
  uint32_t payload_crc32;  /* read only */
  uint64_t step;
  uint64_t total_steps;
  uint64_t epoch, epoch_pos, steps_per_epoch;
  uint64_t seed;
  uint64_t train_samples;
  uint64_t global_batch;
  uint32_t optimizer;
  uint32_t layers, width, input_dim, classes, context, embed_dim;
  uint64_t param_elems;
  uint64_t optim_elems;
  /* The learning-rate schedule and the optimizer's hyper-parameters as
   * the run was given them, whatever the optimizer uses. Read: zero, and
   * has_schedule 0, in a version-1 file. */
  int has_schedule;        /* read only */
  uint64_t warmup_steps;
  double lr, min_lr_frac;
  double momentum, weight_decay, beta1, beta2, eps;
  /* Gradient compression and loss scaling (zero before version 3). */
  uint32_t grad_compress;  /* dr_cmp_kind_t */
  uint32_t powersgd_rank;
  uint32_t powersgd_no_ef;
  uint64_t powersgd_start;
  uint64_t comm_elems;     /* compression-state floats */
  uint32_t loss_scale_mode; /* dr_ls_mode_t */
  double loss_scale;
  uint64_t ls_good, ls_skipped;
} dr_ckpt_header_t;

/* The payload's floats: param_elems + optim_elems + comm_elems. */
uint64_t dr_ckpt_floats(const dr_ckpt_header_t *h);

/* A run of floats of the payload: the writer reads it, the reader fills
 * it. The spans of a call follow each other in payload order. */
typedef struct {
  float *p;
  size_t n_elems;
} dr_ckpt_span_t;

/* CRC-32 as zlib's crc32(): start with 0, feed the result back in. */
uint32_t dr_ckpt_crc32(uint32_t crc, const void *buf, size_t n_bytes);

/* Writes DIR/ckpt-<step>.bin ("%s/ckpt-%010llu.bin"; n must hold it). 0 or
 * -ENAMETOOLONG. */
int dr_ckpt_path(char *buf, size_t n, const char *dir, uint64_t step);

/* Called after the temporary file is complete and fsynced, before the
 * rename (a test hook: a delay here lets a test kill the writer). */
typedef void (*dr_ckpt_before_commit_fn)(void *arg, const char *tmp_path);

/* Writes the checkpoint of h->step into dir (which must exist): header
 * from h (version, payload size and CRCs are filled in), payload from
 * spans, whose element counts must add up to dr_ckpt_floats(h). Temporary file, fsync, before_commit (may be NULL),
 * rename, fsync of the directory. On failure nothing is left under the
 * final name that was not there before, the temporary file is removed,
 * and err names the failing call and path. Returns 0, DR_CKPT_ESHAPE,
 * -EISDIR or DR_ENOTREG before anything is written when the final name is
 * taken by a directory or another entry that is not a regular file (or a
 * symbolic link), which is never replaced, or -errno. path (may be NULL)
 * receives the final name. */
int dr_ckpt_write(const char *dir, const dr_ckpt_header_t *h,
                  const dr_ckpt_span_t *spans, size_t n_spans,
                  dr_ckpt_before_commit_fn before_commit, void *arg,
                  char *path, size_t path_len, char *err, size_t err_len);

/* Reads and checks the header of path and the file's size (not the
 * payload CRC). 0, a DR_CKPT_E* code or -errno, with err. */
int dr_ckpt_read_header(const char *path, dr_ckpt_header_t *h, char *err,
                        size_t err_len);

/* The full check: dr_ckpt_read_header, then the payload CRC (streamed; no
 * allocation of the payload's size). */
int dr_ckpt_verify(const char *path, dr_ckpt_header_t *h, char *err,
                   size_t err_len);

/* Reads path into spans (counts must add up to the file's param_elems +
 * optim_elems, else DR_CKPT_ESHAPE before anything is written), checking
 * everything dr_ckpt_verify checks. On failure the spans hold unspecified
 * values. */
int dr_ckpt_read(const char *path, dr_ckpt_header_t *h,
                 const dr_ckpt_span_t *spans, size_t n_spans, char *err,
                 size_t err_len);

/* Steps of the checkpoint names of dir's regular files (or symbolic
 * links to them), newest first: a directory or FIFO so named is not
 * listed. *steps is malloc'd (caller frees; NULL when *n is 0). A missing
 * dir lists nothing (0). 0 or -errno. */
int dr_ckpt_list(const char *dir, uint64_t **steps, size_t *n);

/* Called for each entry dr_ckpt_find_latest passes over that may have
 * been newer than its choice. */
typedef void (*dr_ckpt_skip_fn)(void *arg, const char *path, int code,
                                const char *why);

/* The newest checkpoint in dir that verifies, by the step its header
 * records: 1 with *h and path, 0 when there is none, or -errno when dir
 * cannot be read (-ENOMEM). Headers are read first (never blocking), then
 * files are verified newest step first. Reported to skip (may be NULL),
 * once each, and passed over: every file that fails verification, and
 * every entry whose name is newer than the choice but that is not a
 * regular file (-EISDIR, DR_ENOTREG), whose header cannot be read, or
 * whose header records an older step (DR_CKPT_ESTEP). */
int dr_ckpt_find_latest(const char *dir, dr_ckpt_header_t *h, char *path,
                        size_t path_len, dr_ckpt_skip_fn skip, void *arg);

/* Deletes the temporary files of writers other than this process (a
 * writer killed before its rename leaves one). Returns how many it
 * deleted, or -errno (err) for the first failure. */
int dr_ckpt_remove_temp(const char *dir, char *err, size_t err_len);

/* Deletes every checkpoint of dir but the keep newest with step <= upto
 * (files of later steps are left alone: they are not this run's history),
 * then the temporary files as dr_ckpt_remove_temp. Returns how many files
 * it deleted, or -errno (err) for the first failure. */
int dr_ckpt_prune(const char *dir, uint64_t upto, uint32_t keep, char *err,
                  size_t err_len);

#endif /* DR_CKPT_H */
