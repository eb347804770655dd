/* The rules of the agent's checkpoint plane that need no file, socket or
 * clock of their own, so that each has a unit test: which names are
 * checkpoints and of which step, which paths inside a directory
 * checkpoint a peer may send, and the pace of a replication (a token
 * bucket with the time passed in).
 *
 * The name rule (docs/ddprun.md, "Checkpoints in node memory"): a
 * checkpoint is a regular file or a directory that appears in the
 * checkpoint directory by rename. Its step is the last run of decimal
 * digits in the part of its name before its first '.'
 * (ckpt-0000000190.bin, step_190.pt, epoch3-step190: 190). Names that
 * begin with '.', end in ".tmp" or hold ".tmp." (train's and ddprun_ckpt's
 * temporary files, ckpt-0000000190.bin.tmp.4242), and names without a
 * digit there, are not checkpoints.
 */
#ifndef DR_CKPT_RULES_H
#define DR_CKPT_RULES_H

#include <stddef.h>
#include <stdint.h>

/* A directory checkpoint's entries, as a peer may send them: at most this
 * deep (components of a path) and this many. */
#define DR_CKPT_DEPTH_MAX 16
#define DR_CKPT_ENTRIES_MAX 65536u
/* A name or a path component, at most (the file system's NAME_MAX). */
#define DR_CKPT_NAME_MAX 255u

/* 1 and *step (when step is not NULL) when name is a checkpoint's by the
 * rule above, else 0. A step that does not fit below DR_NONE (UINT64_MAX)
 * is not one. */
int dr_ckpt_name_step(const char *name, uint64_t *step);

/* The same for a name off the wire (n bytes, not NUL-terminated), which
 * must also be at most DR_CKPT_NAME_MAX bytes with no '/', NUL or other
 * control byte: 1 and *step, or 0. */
int dr_ckpt_wire_name(const uint8_t *p, size_t n, uint64_t *step);

/* 0 when p[0..n) is a path a peer may send for an entry of a directory
 * checkpoint: relative ('/'-separated), of 1 to DR_CKPT_DEPTH_MAX
 * components, none empty, "." or "..", none over DR_CKPT_NAME_MAX bytes,
 * and no NUL or control byte; *depth (when not NULL) is its number of
 * components. Else DR_EBADARG. */
int dr_ckpt_path_check(const uint8_t *p, size_t n, int *depth);

/* A token bucket over bytes: rate bytes per second (0: no cap), at most
 * burst bytes saved up, full at the start. Time is passed in (a
 * monotonic clock in nanoseconds), so that the arithmetic has a
 * deterministic test; the caller sleeps. */
typedef struct {
  uint64_t rate, burst;
  double tokens;   /* may go below 0: the debt of what was let through */
  uint64_t last_ns;
} dr_tbucket_t;

void dr_tbucket_init(dr_tbucket_t *tb, uint64_t rate, uint64_t burst,
                     uint64_t now_ns);

/* Takes n_bytes at now_ns and returns how many nanoseconds to wait before
 * sending them (0: at once). Each take is charged whether or not the
 * caller waits, so that a sender that waits as told keeps to the rate on
 * average over any span longer than burst / rate. */
uint64_t dr_tbucket_take(dr_tbucket_t *tb, uint64_t n_bytes, uint64_t now_ns);

#endif /* DR_CKPT_RULES_H */
