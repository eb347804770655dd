/* The last collectives one rank issued on a communicator, kept for the
 * report that a hang calls for.
 *
 * On the GPU a collective's peers are not checked as the CPU process
 * group checks them (worker/comm/coll_hdr.c): NCCL pairs the ranks' k-th
 * collectives whatever they are, and ranks out of step hang until a
 * deadline. What is left to tell why is each rank's own history: the
 * NCCL backend records every collective it enqueues here (sequence
 * number, kind, size, when) with its state (enqueuing, pending on the
 * stream, done), and on a timeout prints the last few on stderr and
 * writes all it kept to a file beside the rank's error file, where the
 * agent, or an operator, finds them and compares the ranks':
 *
 *   rank 3: last collectives: #551 allreduce 25.0 MiB done, #552
 *   allreduce 25.0 MiB done, #553 allreduce 4 B pending since 31.2 s
 *
 * The stream runs its collectives in order: the first pending one is the
 * one that does not end; those after it wait behind it.
 *
 * Plain C without CUDA, so that it is tested on any machine. Not
 * thread-safe: one thread (the one that enqueues) owns a history.
 */
#ifndef DR_COLL_HISTORY_H
#define DR_COLL_HISTORY_H

#include <stddef.h>
#include <stdint.h>

/* Collectives kept: the last DR_COLL_HISTORY issued. */
#define DR_COLL_HISTORY 64

/* The name of the file, in the directory of DDPRUN_ERROR_FILE. */
#define DR_COLL_HISTORY_FILE "nccl_collectives.txt"

typedef enum {
  DR_COLL_ENQUEUING = 0, /* issued, the enqueue not complete */
  DR_COLL_PENDING,       /* on the stream, not done */
  DR_COLL_DONE,          /* the stream passed it */
  DR_COLL_UNKNOWN        /* its state could not be read */
} dr_coll_state_t;

typedef struct {
  uint64_t seq;      /* 1, 2, ...: the communicator's collectives */
  const char *kind;  /* static storage: "allreduce" */
  uint64_t n_bytes;
  uint64_t start_us; /* CLOCK_MONOTONIC when the host issued it */
  dr_coll_state_t state;
} dr_coll_entry_t;

typedef struct {
  dr_coll_entry_t slot[DR_COLL_HISTORY];
  uint64_t n; /* issued in all; slot[(seq - 1) % DR_COLL_HISTORY] */
} dr_coll_history_t;

/* Records the next collective (seq n + 1, state ENQUEUING) and returns
 * its slot, where the caller keeps what it needs to update the state
 * (an event) in an array of its own. */
size_t dr_coll_history_add(dr_coll_history_t *h, const char *kind,
                           uint64_t n_bytes, uint64_t now_us);

/* How many are kept (at most DR_COLL_HISTORY), and the k-th of them,
 * oldest first; the slot index of that entry in *slot when not NULL. */
size_t dr_coll_history_len(const dr_coll_history_t *h);
dr_coll_entry_t *dr_coll_history_at(dr_coll_history_t *h, size_t k,
                                    size_t *slot);

/* The last `last` entries, oldest first, on one line: "#552 allreduce
 * 25.0 MiB done, #553 allreduce 4 B pending since 31.2 s"; "none" when
 * nothing was issued. */
void dr_coll_history_line(dr_coll_history_t *h, size_t last, uint64_t now_us,
                          char *out, size_t out_len);

/* Writes every entry kept to path, atomically (path.tmp, then renamed):
 * a comment line naming the rank and why, then one line per collective,
 * oldest first, that scripts compare across ranks:
 *   # rank 3 of 8: the last 64 of 553 NCCL collectives, oldest first,
 *   #   when a training step was not done within 30.0 s
 *   rank=3 seq=553 kind=allreduce bytes=4 state=pending age_s=31.200
 * age_s: seconds since it was issued. 0 or -errno. */
int dr_coll_history_write(dr_coll_history_t *h, uint32_t rank, uint32_t world,
                          const char *why, uint64_t now_us, const char *path);

/* The history file's path: DR_COLL_HISTORY_FILE in the directory of
 * DDPRUN_ERROR_FILE, else of TORCHELASTIC_ERROR_FILE. 0, or -1 when
 * neither is set (or the path does not fit). */
int dr_coll_history_path(char *out, size_t out_len);

/* "pending", "done", ... */
const char *dr_coll_state_name(dr_coll_state_t s);

#endif /* DR_COLL_HISTORY_H */
