/* Exit codes of a worker, and what the agent and the server do with them.
 *
 * One table for every part: train returns these codes, the agent tells a
 * failure of its own from an echo of another's, the server decides restart
 * or stop, and the failure summary and the README name them. A code not in
 * the table (1, 127, ...) and any signal are crashes: restartable, and a
 * root cause. ddprun itself exits with the root cause's code, or 128+N for
 * a worker killed by signal N.
 *
 * X(NAME, code, policy, echo, brief, meaning). The enum value is
 * DR_EXIT_##NAME; brief is a noun phrase for messages, meaning one line.
 *   policy  DR_EXIT_DONE     success
 *           DR_EXIT_RESTART  restartable, from the job's budget
 *           DR_EXIT_STOP     stops the job at once; the budget is not spent
 *   echo    1 when the code is often only the consequence of another rank's
 *           failure (a peer that died, a peer that stopped first): the server
 *           waits briefly for the root cause before acting on it. */
#ifndef DR_EXIT_CODES_H
#define DR_EXIT_CODES_H

#include <stddef.h>

typedef enum { DR_EXIT_DONE, DR_EXIT_RESTART, DR_EXIT_STOP } dr_exit_policy_t;

#define DR_EXIT_MAP(X)                                                        \
  X(OK, 0, DR_EXIT_DONE, 0, "done", "every worker finished")                 \
  X(CONFIG, 2, DR_EXIT_STOP, 0, "configuration error",                       \
    "bad flags or config, a program that cannot be executed, a checkpoint "  \
    "that does not fit the run")                                             \
  X(COMM, 3, DR_EXIT_RESTART, 1, "communication failure",                    \
    "the process group could not be set up, or the rendezvous was lost or "  \
    "never completed")                                                       \
  X(TIMEOUT, 4, DR_EXIT_RESTART, 1, "timeout",                               \
    "a collective timed out, lost a peer or found the ranks out of step, "  \
    "or the worker hung (--hang-timeout)")                                   \
  X(NONFINITE, 5, DR_EXIT_STOP, 0, "non-finite loss",                        \
    "the loss became NaN or infinite, or the gradients overflowed with the " \
    "loss scale at its floor")                                               \
  X(STORAGE, 6, DR_EXIT_STOP, 0, "checkpoint storage failure",               \
    "a checkpoint could not be written or read (disk full, quota, read-only, "\
    "permission, I/O error); the previous checkpoint is kept")               \
  X(NOMEM, 7, DR_EXIT_RESTART, 0, "out of memory",                           \
    "an allocation failed, or a worker could not be started (fork() at the "  \
    "memory or process limit)")                                              \
  X(PEER, 8, DR_EXIT_RESTART, 1, "another rank failed",                      \
    "stopped because another rank failed; that rank is the root cause")      \
  X(DEVICE, 9, DR_EXIT_RESTART, 0, "GPU failure",                           \
    "a CUDA call failed while setting up the device, the model or the "     \
    "optimizer (the device, its driver or its memory)")                     \
  X(PREEMPTED, 75, DR_EXIT_STOP, 0, "preempted (SIGUSR1)",                   \
    "stopped on SIGUSR1 after a checkpoint; run the job again to resume "    \
    "(EX_TEMPFAIL)")

typedef enum {
#define DR__EXIT_ENUM(name, code, policy, echo, brief, meaning) DR_EXIT_##name = code,
  DR_EXIT_MAP(DR__EXIT_ENUM)
#undef DR__EXIT_ENUM
} dr_exit_code_t;

typedef struct {
  int code;
  const char *name;    /* "STORAGE" */
  dr_exit_policy_t policy;
  int echo;
  const char *brief;   /* "checkpoint storage failure" */
  const char *meaning; /* one line, for --help, the summary and the README */
} dr_exit_info_t;

/* The table's row for code, or NULL for a code not in it (a crash). */
const dr_exit_info_t *dr_exit_info(int code);

/* The rows in code order, and how many; for --help and the tests. */
const dr_exit_info_t *dr_exit_table(int *n);

/* What happens to a worker that exited with code, or was killed by signal
 * (0 when it exited): a signal is a crash (restartable), except SIGUSR1,
 * which is a preemption (the program did not handle it). */
dr_exit_policy_t dr_exit_policy(int code, int signal);

/* 1 when the failure may be an echo of another rank's failure. */
int dr_exit_is_echo(int code, int signal);

/* The same, also for a program whose every error exits 1 (PyTorch): a
 * failure whose message (its error file or last lines, len bytes) says a
 * peer went away ("Connection closed by peer", "Connection reset by peer",
 * "Broken pipe", DistNetworkError, NCCL's "remote process exited") is an
 * echo too. */
int dr_failure_is_echo(int code, int signal, const char *msg, size_t len);

#endif /* DR_EXIT_CODES_H */
