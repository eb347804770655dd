/* The persist tier's thread (--ckpt-persist; ckpt_persist.h): the copies
 * to DIR2 and the restore from it run one after another on a thread of
 * their own, never on the agent's loop, and never in the way of the
 * transfer thread (ckpt_xfer.h), whose fetches the workers wait for: a
 * copy to slow shared storage may take minutes. The loop decides when
 * (at most once a period), hands a job over, and learns that it is done
 * through a uv_async. The last copy at the job's end is waited for, within
 * a bound.
 */
#ifndef DR_CKPT_PERSISTER_H
#define DR_CKPT_PERSISTER_H

#include <stdint.h>
#include <uv.h>

#include "ckpt_persist.h"
#include "ckpt_store.h"

typedef enum { DR_PERSIST_COPY, DR_PERSIST_RESTORE } dr_persist_kind_t;

typedef struct dr_persist_job {
  dr_persist_kind_t kind;
  /* Outcome: dr_persist_copy_out's or dr_persist_restore's code and what
   * it did; ms, how long it took. */
  int rc;
  dr_persist_res_t res;
  uint64_t ms;
  /* The thread's, for dr_persister_last. */
  int last, finished, abandoned;
  uint64_t deadline_ms;
  struct dr_persist_job *next;
} dr_persist_job_t;

/* A job is done, on the loop: the callee owns job (free() it). */
typedef void (*dr_persist_done_cb)(void *arg, dr_persist_job_t *job);

/* What the copies need; every pointer borrowed while the thread runs. */
typedef struct {
  dr_ckpt_store_t *store;
  const char *dir2;
  const char *host; /* this node's name, for partial copies' names */
  uint32_t keep;    /* checkpoints kept in DIR2 */
} dr_persist_cfg_t;

typedef struct dr_persister dr_persister_t;

/* Starts the thread. 0 and *out, or a negative code (no callback then). */
int dr_persister_start(uv_loop_t *loop, const dr_persist_cfg_t *cfg,
                       dr_persist_done_cb cb, void *arg,
                       dr_persister_t **out);

/* Queues job (taken over); jobs run in the order given. Loop thread. */
void dr_persister_submit(dr_persister_t *p, dr_persist_job_t *job);

/* The last copy, at the job's end, blocking the caller: waits for the jobs
 * before it, hands their outcomes to the callback (on this thread, first),
 * then copies the newest checkpoint when DIR2 lacks it, all within
 * bound_ms (a copy under way when it passes is told to stop). 0 and *out
 * (its kind, rc, res and ms), or -ETIMEDOUT. Loop thread. */
int dr_persister_last(dr_persister_t *p, uint64_t bound_ms,
                      dr_persist_job_t *out);

/* Stops the thread: a copy under way ends at its next chunk, what is
 * queued or done but not delivered is dropped, no callback follows.
 * 0; or -EBUSY when the thread has not ended within a few seconds (a
 * write stuck in the kernel): then what it borrows (the store) must
 * outlive ddprun's exit, and its own memory is left to it. The memory
 * goes once the loop has closed the handle. Loop thread. Sets *p to
 * NULL. */
int dr_persister_stop(dr_persister_t **p);

#endif /* DR_CKPT_PERSISTER_H */
