/* The reducer: gradient buckets whose all-reduce overlaps the backward pass,
 * as PyTorch DDP does it.
 *
 * Parameters go into buckets in reverse registration order (the order the
 * backward pass produces them), each bucket up to cap bytes and the first
 * up to first_cap bytes; a bucket is closed before a parameter that would
 * overflow it, so only a parameter larger than the cap makes a bucket
 * larger than the cap (alone). Gradients are views into the buckets' flat
 * memory: the backward pass writes them in place, nothing is copied.
 *
 * During backward, each parameter is marked ready as soon as its gradient
 * is final. A bucket whose parameters are all ready is launched at once,
 * but buckets launch strictly in bucket order (a bucket ready early waits
 * for the lower-numbered ones), so every rank issues the same collectives
 * in the same order. The optimizer waits only at the end (dr_reducer_wait).
 * After the first synchronised step, the buckets are rebuilt in the order
 * the parameters actually became ready, using rank 0's order on every rank.
 * Rank 0 alone decides whether to rebuild: only when its observation holds
 * every parameter once; otherwise every rank keeps its plan. What the other
 * ranks observed themselves does not matter.
 * With no_sync (gradient accumulation) nothing is launched; with overlap
 * off everything is launched after the backward pass, for comparison.
 */
#ifndef DR_REDUCER_H
#define DR_REDUCER_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "pg.h"

/* ---- planning (pure) --------------------------------------------------- */

/* Assigns params to buckets. order[0..n) lists parameter indices in the
 * order they fill buckets; elems[i] is param i's element count (fp32).
 * Writes bucket_of[param] and returns the number of buckets. cap_bytes and
 * first_cap_bytes must be >= 1. */
size_t dr_bucket_plan(const size_t *order, size_t n, const size_t *elems,
                      size_t cap_bytes, size_t first_cap_bytes,
                      size_t *bucket_of);

/* ---- the reducer -------------------------------------------------------- */

typedef struct dr_reducer dr_reducer_t;

/* How a bucket is handed to communication; the default is an AVG
 * all-reduce on the process group. Tests inject their own. Returns 0 or a
 * negative code; *w may stay NULL for launches that complete at once. */
typedef int (*dr_launch_fn)(void *arg, size_t bucket, float *data,
                            size_t n_elems, dr_work_t **w);

typedef struct {
  size_t cap_bytes;        /* --bucket-cap-mb */
  size_t first_cap_bytes;  /* --first-bucket-mb */
  int overlap;             /* 0: launch after backward (--no-overlap) */
  int rebuild;             /* rebuild in observed order after step one */
  dr_launch_fn launch;     /* NULL: all-reduce (AVG) on pg */
  void *launch_arg;
  /* Where bucket memory lives (the GPU path keeps it on the device, where
   * only its launch hook touches it). NULL: host memory. Else mem_alloc
   * returns n_bytes of zeroed memory or NULL, and mem_free releases what
   * it returned (called on a rebuild, after the optimizer consumed the
   * step's gradients, and by dr_reducer_free). */
  void *(*mem_alloc)(void *arg, size_t n_bytes);
  void (*mem_free)(void *arg, void *p);
  void *mem_arg;
} dr_reducer_config_t;

/* Plans the buckets over m's parameters and points every param->g into
 * bucket memory. pg may be NULL only with a custom launch. */
int dr_reducer_new(const dr_reducer_config_t *cfg, dr_model_t *m, dr_pg_t *pg,
                   dr_reducer_t **out);
void dr_reducer_free(dr_reducer_t **r);

/* Moves the buckets into memory from mem_alloc (freed with mem_free) and
 * hands them to launch from now on, as dr_reducer_config_t's hooks would.
 * Between steps only: the gradients are not kept. 0, or -ENOMEM with the
 * reducer as it was. */
int dr_reducer_redirect(dr_reducer_t *r, dr_launch_fn launch,
                        void *launch_arg, void *(*mem_alloc)(void *, size_t),
                        void (*mem_free)(void *, void *), void *mem_arg);

size_t dr_reducer_n_buckets(const dr_reducer_t *r);
size_t dr_reducer_bucket_elems(const dr_reducer_t *r, size_t b);
/* "3 buckets: 1.0, 25.0, 12.3 MiB" */
const char *dr_reducer_describe(dr_reducer_t *r);

/* Before each backward pass: sync = 0 accumulates locally (no_sync).
 * After the first synchronised step (with rebuild on) this is a
 * collective: rank 0 broadcasts its decision, rebuild or keep, with its
 * observed order, and every rank follows it, so every rank must make this
 * call there whatever it observed. 0, or a failure code with its message
 * (the broadcast's, -ENOMEM, or DR_EBADARG for an order from rank 0 that
 * is not a permutation of the parameters). */
int dr_reducer_begin(dr_reducer_t *r, int sync, char *err, size_t err_len);

/* The model's grad-ready hook (dr_grad_ready_fn): arg is the reducer. Only
 * a parameter's first mark in a pass counts (its ready time, its place in
 * the observed order, its bucket's readiness); a second one is ignored. */
void dr_reducer_mark_ready(void *arg, size_t param);

/* After the backward pass: launches what is left (everything when overlap
 * is off). */
void dr_reducer_end_backward(dr_reducer_t *r);

/* Waits for every launched bucket. 0, or the first failure's code with
 * its message in err. */
int dr_reducer_wait(dr_reducer_t *r, char *err, size_t err_len);

/* Figures of the last synchronised step, microseconds (monotonic). */
typedef struct {
  uint64_t backward_end_us; /* when dr_reducer_end_backward was called */
  uint64_t comm_us;         /* sum of the buckets' all-reduce durations */
  uint64_t exposed_us;      /* all-reduce time after the backward end */
  uint64_t first_launch_us; /* when the first bucket was launched */
} dr_reducer_stats_t;

void dr_reducer_stats(const dr_reducer_t *r, dr_reducer_stats_t *s);

/* Per bucket of the last step: launch, start and end (monotonic us). */
typedef struct {
  uint64_t ready_us, launch_us, start_us, end_us;
  size_t n_elems;
} dr_bucket_times_t;
const dr_bucket_times_t *dr_reducer_bucket_times(const dr_reducer_t *r);

/* ---- planning support (train --bucket-cap-mb auto) ----------------------- */

/* The parameters in the order they fill the buckets ([n_params]). */
const size_t *dr_reducer_order(const dr_reducer_t *r);
/* When each parameter was marked ready, monotonic us, indexed by
 * parameter: in the last synchronised pass, or earlier (then before that
 * pass began) for one it did not mark; 0 for one never marked. */
const uint64_t *dr_reducer_param_ready_us(const dr_reducer_t *r);
size_t dr_reducer_cap_bytes(const dr_reducer_t *r);

/* Rebuilds the buckets with a new cap (the first bucket's is kept), in the
 * current fill order. Only between steps (nothing launched). Every rank
 * must pass the same cap (rank 0's decision) so that the buckets agree.
 * 0, DR_EBADARG, or -ENOMEM (the old buckets stay). Gradients point into
 * the new memory afterwards. */
int dr_reducer_replan(dr_reducer_t *r, size_t cap_bytes);

#endif /* DR_REDUCER_H */
