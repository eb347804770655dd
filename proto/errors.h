/* ddprun error codes.
 *
 * Every fallible function in ddprun returns 0 or a negative code. System
 * errors stay -errno; ddprun's own codes live in the table below, far below
 * any errno value, so one int carries both. dr_strerror() names either kind.
 */
#ifndef DR_ERRORS_H
#define DR_ERRORS_H

/* X(NAME, message). The enum value is DR_E##NAME. Append only: the codes
 * travel on the wire inside ERROR frames. */
#define DR_ERRNO_MAP(X)                                                      \
  X(MAGIC, "bad frame magic (not a ddprun peer)")                            \
  X(VERSION, "protocol version mismatch")                                    \
  X(TYPE, "unknown message type")                                            \
  X(FIELD, "field of the wrong kind for this message")                       \
  X(TOOBIG, "declared length over the limit")                                \
  X(TRUNC, "field runs past the end of the frame")                           \
  X(TRAILING, "bytes left over after the last field")                        \
  X(CLOSED, "connection closed by peer")                                     \
  X(NOTFOUND, "key not found")                                               \
  X(STALE, "request for a generation that is over")                          \
  X(NOAUTH, "this job requires a shared secret")                             \
  X(AUTH, "authentication failed (wrong shared secret)")                     \
  X(RUNID, "run id does not match this job")                                 \
  X(DUPRANK, "node rank already taken")                                      \
  X(BADRANK, "node rank out of range")                                       \
  X(FULL, "job already has its maximum number of nodes")                     \
  X(NPROC, "nproc-per-node differs from the other nodes")                    \
  X(STOPPED, "job has stopped")                                              \
  X(REMOTE, "peer reported an error")                                        \
  X(BADARG, "invalid argument")                                              \
  X(SEQUENCE, "message not allowed in this state")                           \
  X(UNEXPECTED, "unexpected message type in reply")

#define DR__ERR_BASE (-10000)

typedef enum {
  DR__ERR_FIRST = DR__ERR_BASE,
#define DR__ERR_ENUM(name, msg) DR_E##name,
  DR_ERRNO_MAP(DR__ERR_ENUM)
#undef DR__ERR_ENUM
  DR__ERR_LAST
} dr_errno_t;

/* Returns a static string for a code from the table or a -errno value. */
const char *dr_strerror(int code);

/* Returns the symbolic name ("DR_ETOOBIG", "ECONNREFUSED", ...). */
const char *dr_err_name(int code);

/* 1 when code is one of ddprun's own codes (not a -errno). */
int dr_is_own_error(int code);

#endif /* DR_ERRORS_H */
