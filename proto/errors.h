/* ddprun error codes: one table for every module.
 *
 * Every fallible function in ddprun returns 0 or a negative code. System
 * errors stay -errno; ddprun's own codes live in the lists below, far below
 * any errno value, so one int carries both. dr_strerror() and dr_err_name()
 * know every code of every module.
 *
 * Each module owns a range of DR_ERR_RANGE codes above its base; its codes
 * count up from base + 1 in the order of its list:
 *
 *   module         base     its codes           names        list
 *   proto (wire)   -10000   -9999 .. -9001      DR_E*        DR_ERRNO_MAP
 *   process group  -11000   -10999 .. -10001    DR_PG_E*     DR_PG_ERRNO_MAP
 *   checkpoint     -12000   -11999 .. -11001    DR_CKPT_E*   DR_CKPT_ERRNO_MAP
 *   GPU            -13000   -12999 .. -12001    DR_GPU_E*    DR_GPU_ERRNO_MAP
 *
 * Append only, and only at the end of a module's own list: a code is its
 * base plus its place in the list. The proto codes travel on the wire
 * inside ERROR frames (as positive values: 9999 for DR_EMAGIC), so none of
 * them may move; the others never leave a process, but appending keeps
 * them stable too. A new module takes the next range down and a line in
 * DR_ERR_MODULES and DR_ERR_ALL. tests/unit/test_errors.c checks that no
 * value is used twice, that every code has a message and a name, and that
 * each module's codes stay in its range.
 */
#ifndef DR_ERRORS_H
#define DR_ERRORS_H

#define DR_ERR_RANGE 1000 /* codes reserved per module */

/* X(NAME, message) for each module; NAME is the enum constant. */

/* proto: framing, messages, the rendezvous' refusals. */
#define DR_ERRNO_MAP(X)                                                      \
  X(DR_EMAGIC, "bad frame magic (not a ddprun peer)")                        \
  X(DR_EVERSION, "protocol version mismatch")                                \
  X(DR_ETYPE, "unknown message type")                                        \
  X(DR_EFIELD, "field of the wrong kind for this message")                   \
  X(DR_ETOOBIG, "declared length over the limit")                            \
  X(DR_ETRUNC, "field runs past the end of the frame")                       \
  X(DR_ETRAILING, "bytes left over after the last field")                    \
  X(DR_ECLOSED, "connection closed by peer")                                 \
  X(DR_ENOTFOUND, "key not found")                                           \
  X(DR_ESTALE, "request for a generation that is over")                      \
  X(DR_ENOAUTH, "this job requires a shared secret")                         \
  X(DR_EAUTH, "authentication failed (wrong shared secret)")                 \
  X(DR_ERUNID, "run id does not match this job")                             \
  X(DR_EDUPRANK, "node rank already taken")                                  \
  X(DR_EBADRANK, "node rank out of range")                                   \
  X(DR_EFULL, "job already has its maximum number of nodes")                 \
  X(DR_ENPROC, "nproc-per-node differs from the other nodes")                \
  X(DR_ESTOPPED, "job has stopped")                                          \
  X(DR_EREMOTE, "peer reported an error")                                    \
  X(DR_EBADARG, "invalid argument")                                          \
  X(DR_ESEQUENCE, "message not allowed in this state")                       \
  X(DR_EUNEXPECTED, "unexpected message type in reply")                     \
  X(DR_ENOTREG, "not a regular file (a FIFO, device or socket)")            \
  X(DR_ECHECKSUM, "checksum mismatch (the data changed on the way)")         \
  X(DR_ESTANDBY, "a standby rendezvous server: not serving the job now")      \
  X(DR_ESUPERSEDED, "a rendezvous server of a higher term serves the job")

/* The process group of train (worker/comm/pg.h): collectives. */
#define DR_PG_ERRNO_MAP(X)                                                   \
  X(DR_PG_ETIMEOUT, "a peer did not arrive within the timeout")              \
  X(DR_PG_EPEER, "a peer went away")                                         \
  X(DR_PG_EBROKEN, "the process group is broken by an earlier failure")      \
  X(DR_PG_EMISMATCH, "collectives out of step (ranks in different ones)")

/* Checkpoint files (worker/ckpt/ckpt.h). */
#define DR_CKPT_ERRNO_MAP(X)                                                 \
  X(DR_CKPT_EMAGIC, "not a checkpoint (bad magic)")                          \
  X(DR_CKPT_EVERSION, "unknown checkpoint format version")                   \
  X(DR_CKPT_EHEADER, "corrupt checkpoint header")                            \
  X(DR_CKPT_ESIZE,                                                           \
    "checkpoint file size differs from its header (truncated?)")             \
  X(DR_CKPT_ECRC, "checkpoint payload checksum mismatch")                    \
  X(DR_CKPT_ESHAPE, "checkpoint sizes do not match the buffers")            \
  X(DR_CKPT_ESTEP, "checkpoint of another step than its name says")

/* The GPU path of train (worker/train/gpu/gpu_check.h): CUDA, cuBLAS, NCCL. */
#define DR_GPU_ERRNO_MAP(X)                                                  \
  X(DR_GPU_ECUDA, "a CUDA runtime call failed")                              \
  X(DR_GPU_ECUBLAS, "a cuBLAS call failed")                                  \
  X(DR_GPU_ENCCL,                                                            \
    "an NCCL call failed, or the communicator reported an asynchronous "     \
    "error")                                                                 \
  X(DR_GPU_ETIMEOUT, "the device or a peer did not finish in time")          \
  X(DR_GPU_ENODEV, "no usable GPU")

/* Every code of every module. */
#define DR_ERR_ALL(X)                                                        \
  DR_ERRNO_MAP(X) DR_PG_ERRNO_MAP(X) DR_CKPT_ERRNO_MAP(X) DR_GPU_ERRNO_MAP(X)

#define DR__ERR_BASE (-10000)
#define DR__PG_ERR_BASE (-11000)
#define DR__CKPT_ERR_BASE (-12000)
#define DR__GPU_ERR_BASE (-13000)

/* X(module, list, base, first, last): a module's codes lie strictly
 * between its sentinels first (= base) and last, and last is at most
 * base + DR_ERR_RANGE. */
#define DR_ERR_MODULES(X)                                                    \
  X(proto, DR_ERRNO_MAP, DR__ERR_BASE, DR__ERR_FIRST, DR__ERR_LAST)          \
  X(pg, DR_PG_ERRNO_MAP, DR__PG_ERR_BASE, DR__PG_ERR_FIRST,                  \
    DR__PG_ERR_LAST)                                                         \
  X(ckpt, DR_CKPT_ERRNO_MAP, DR__CKPT_ERR_BASE, DR__CKPT_ERR_FIRST,          \
    DR__CKPT_ERR_LAST)                                                       \
  X(gpu, DR_GPU_ERRNO_MAP, DR__GPU_ERR_BASE, DR__GPU_ERR_FIRST,              \
    DR__GPU_ERR_LAST)

#define DR__ERR_ENUM(name, msg) name,

typedef enum {
  DR__ERR_FIRST = DR__ERR_BASE,
  DR_ERRNO_MAP(DR__ERR_ENUM)
  DR__ERR_LAST
} dr_errno_t;

enum {
  DR__PG_ERR_FIRST = DR__PG_ERR_BASE,
  DR_PG_ERRNO_MAP(DR__ERR_ENUM)
  DR__PG_ERR_LAST
};

enum {
  DR__CKPT_ERR_FIRST = DR__CKPT_ERR_BASE,
  DR_CKPT_ERRNO_MAP(DR__ERR_ENUM)
  DR__CKPT_ERR_LAST
};

enum {
  DR__GPU_ERR_FIRST = DR__GPU_ERR_BASE,
  DR_GPU_ERRNO_MAP(DR__ERR_ENUM)
  DR__GPU_ERR_LAST
};

#undef DR__ERR_ENUM

/* Returns a static string for a code of any module or a -errno value. */
const char *dr_strerror(int code);

/* Returns the symbolic name ("DR_ETOOBIG", "DR_PG_EPEER", "ECONNREFUSED",
 * ...). */
const char *dr_err_name(int code);

/* 1 when code is one of ddprun's own codes, of any module (not a
 * -errno). */
int dr_is_own_error(int code);

#endif /* DR_ERRORS_H */
