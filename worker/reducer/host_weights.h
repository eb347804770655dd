/* Host-shared weights: one copy of the parameters and the optimizer state
 * for all ranks of one host, in a POSIX shared-memory segment; each rank's
 * gradient buckets in the same segment, where the others read them.
 *
 * Once every rank's backward pass is over (a pass still reads a layer's
 * weights after it published the layer's gradients), rank k (ring
 * position k: every rank is on this host, so the ring's order is the
 * ranks') sums shard k of every bucket straight from every rank's bucket,
 * in the ring all-reduce's order and with its division (((x[k] + x[k+1])
 * + ...) + x[k-1]) / W, and applies the optimizer to that shard of the
 * shared weights at once, a few thousand elements at a time. A second
 * barrier ends the step: every shard is updated before any rank's next
 * forward pass reads the weights. Each weight is thus updated by one
 * rank, with the same bits the all-reduce and a full optimizer pass on
 * every rank would give, at a fraction of the memory traffic: no copies
 * through rings, no all-gather, one optimizer pass per host instead of one
 * per rank.
 *
 * Protocol in the segment: per rank and bucket an entry (offset, length,
 * ready round) that the rank fills when its gradients of the bucket are
 * final (the reducer's launch hook, which wakes nobody), and per rank the
 * last round whose backward pass it ended (the first barrier) and the
 * last it finished (the second). The two barriers are the only waits:
 * past the first, every rank's entries of the round are in place, and one
 * that is not is an error (out of step), not something to wait for. A
 * wait for a rank (dr_shm_await, worker/comm/shm_wait.h) spins briefly
 * when the host has a CPU for each rank, then sleeps on one bell that
 * each rank rings as it reaches a barrier; it checks that rank's process
 * and collective every millisecond and gives up at the deadline.
 *
 * Rank 0 creates the segment under a new name (dr_hostw_create) and
 * copies its weights and optimizer state in; the others open it by the
 * name rank 0 gives them and check that their own weights are the same
 * bits; the name is removed once every rank mapped it (by every rank that
 * did), so a crash later leaves nothing in /dev/shm. The name is
 * unguessable, with the prefix the agent cleans up when a crash comes
 * before that (worker/comm/shm_seg.h).
 */
#ifndef DR_HOST_WEIGHTS_H
#define DR_HOST_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"
#include "pg.h"

typedef struct dr_hostw dr_hostw_t;

/* Longest segment name (without the NUL). */
#define DR_HOSTW_NAME_MAX 200
#define DR_HOSTW_MAX_WORLD 1024u

typedef struct {
  uint32_t rank, world;  /* world <= DR_HOSTW_MAX_WORLD */
  size_t n_elems;      /* the model's */
  size_t state_elems;  /* the optimizer's (slots x n_elems) */
  size_t max_buckets;  /* the parameter count: no plan has more buckets */
} dr_hostw_shape_t;

/* Bytes of the segment for shape (to report a /dev/shm too small). */
size_t dr_hostw_bytes(const dr_hostw_shape_t *s);

/* Rank 0: creates the segment `name`, copies the weights and state in.
 * Others: map it and check their weights against it (DR_EBADARG with err
 * when they differ, or the shape does). 0 or -errno (-ENOSPC: /dev/shm too
 * small) with err saying which call failed. Does not repoint anything:
 * dr_hostw_attach does. */
int dr_hostw_open(const char *name, const dr_hostw_shape_t *s,
                  const float *weights, const float *state, dr_hostw_t **out,
                  char *err, size_t err_len);
/* As rank 0's dr_hostw_open, under a new name for tag, left in name (a
 * buffer of n bytes) for the others; *taken (may be NULL) gets how many
 * names were found taken, and -EEXIST says every one tried was
 * (dr_shm_seg_create_named). */
int dr_hostw_create(char *name, size_t n, const char *tag,
                    const dr_hostw_shape_t *s, const float *weights,
                    const float *state, dr_hostw_t **out, int *taken,
                    char *err, size_t err_len);
/* Removes the name, once every rank opened it (any rank may; a name
 * already gone is fine). */
void dr_hostw_unlink(dr_hostw_t *h);
/* Unmaps; *h NULL. Nothing may use the weights, state or buckets after. */
void dr_hostw_close(dr_hostw_t **h);

/* Publishes which collective this rank's group runs, in the segment, and
 * reads the others': a wait for a rank that is in a collective this rank
 * never issued fails at once (DR_PG_EMISMATCH) instead of at the deadline.
 * pg must outlive h. */
void dr_hostw_watch(dr_hostw_t *h, dr_pg_t *pg);

/* Points the model's weights and the optimizer's state into the segment
 * (the model's and optimizer's own copies are freed). 0 or -ENOMEM, with
 * nothing repointed. */
int dr_hostw_attach(dr_hostw_t *h, dr_model_t *m, dr_optim_t *o);

/* The reducer's memory hooks: this rank's bucket memory, in the segment
 * (two plans' worth: a rebuild allocates before it frees). */
void *dr_hostw_alloc(void *arg, size_t n_bytes);
void dr_hostw_free(void *arg, void *p);
/* The reducer's launch hook: records bucket b (data, n) as final for
 * this round, for the others to read after the backward-pass barrier.
 * Completes at once (*w stays NULL) and wakes nobody. */
int dr_hostw_launch(void *arg, size_t bucket, float *data, size_t n_elems,
                    dr_work_t **w);

typedef struct {
  uint64_t wait_us;    /* at the two barriers */
  uint64_t work_us;    /* summing and updating this rank's shards */
} dr_hostw_stats_t;

/* The step after the backward pass: a barrier (every rank's backward pass
 * over: its buckets are all published); then for each of the n_buckets
 * buckets in order, sums this rank's shard from every rank's bucket and
 * updates it with the optimizer at step (0-based); then a barrier (every
 * shard updated). deadline_ns is CLOCK_MONOTONIC, for both barriers.
 * Failure codes beside -errno: a peer exited (DR_PG_EPEER) or did not
 * arrive by the deadline (DR_PG_ETIMEOUT) at a barrier, is in a collective
 * this rank never issued (DR_PG_EMISMATCH), or published another bucket
 * shape or round than this rank's (DR_PG_EMISMATCH); err names the rank
 * and what it was waiting for. */
int dr_hostw_step(dr_hostw_t *h, dr_model_t *m, dr_optim_t *o,
                  size_t n_buckets, uint64_t step, uint64_t deadline_ns,
                  dr_hostw_stats_t *st, char *err, size_t err_len);

/* Bucket b's part of the last step: from the end of this rank's backward
 * pass (the first bucket, whose span thus holds the wait at the first
 * barrier) or of the bucket before (the others) to when its shard was
 * summed and updated (CLOCK_MONOTONIC microseconds; both 0 before any
 * step). 0, or -1 for a bucket past max_buckets. */
int dr_hostw_bucket_us(const dr_hostw_t *h, size_t b, uint64_t *start_us,
                       uint64_t *end_us);

#endif /* DR_HOST_WEIGHTS_H */
