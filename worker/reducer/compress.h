/* Gradient compression of `train --grad-compress none|fp16|bf16|
 * powersgd[:RANK]`, as the reducer's launch hook (reducer.h), with the
 * overflow checks of the loss scaler (loss_scale.h).
 *
 *   fp16, bf16  each bucket is cast to the narrow type, pre-divided by the
 *               world size (so the sum cannot overflow where the average
 *               would not), all-reduced (the process group's narrow sum),
 *               and cast back, divided by the loss scale. Buckets launch
 *               as they become ready, in bucket order, as uncompressed.
 *   powersgd    each gradient that is a matrix worth compressing
 *               (powersgd.h) is sent as P = M Q, then Q = M^T P: per
 *               bucket one all-reduce of its uncompressed tensors and its
 *               P's (launched as the bucket becomes ready), then, after
 *               the last bucket, one of its Q's; M ~ P Q^T. Error feedback
 *               (the residual, per rank) and Q (the same on every rank,
 *               warm-started) carry over to the next step; Q starts from
 *               a generator seeded with the run's seed. The first
 *               start_step steps are all-reduced uncompressed.
 *   none        with the checks on (loss scaling), the fp32 average and
 *               the checks; else the hook is not needed.
 *
 * Per step: dr_cmp_begin_step, the reducer's launches (dr_cmp_launch),
 * dr_reducer_wait, dr_cmp_finish (the rest of the communication, the
 * gradients in fp32 divided by the loss scale, and the overflow flags),
 * then dr_cmp_commit with whether the optimizer took the step: a skipped
 * step leaves the error feedback and Q as they were. Every rank must make
 * the same calls with the same step and scale. State is per parameter,
 * so a rebuild of the buckets keeps it.
 */
#ifndef DR_COMPRESS_H
#define DR_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "pg.h"

typedef enum {
  DR_CMP_NONE = 0,
  DR_CMP_FP16 = 1,
  DR_CMP_BF16 = 2,
  DR_CMP_POWERSGD = 3
} dr_cmp_kind_t;

#define DR_CMP_PSGD_RANK 4
#define DR_CMP_PSGD_START 10

typedef struct {
  dr_cmp_kind_t kind;
  uint32_t rank;         /* PowerSGD's R (default DR_CMP_PSGD_RANK) */
  uint64_t start_step;   /* PowerSGD: steps sent uncompressed first */
  int error_feedback;    /* PowerSGD: 1 (0 for comparison, in tests) */
  uint64_t seed;         /* PowerSGD: Q's initial values */
  int check;             /* overflow flags wanted (loss scaling on) */
} dr_cmp_config_t;

/* "none", "fp16", "bf16", "powersgd", "powersgd:R" (R from 1 to 1024)
 * into kind and rank. 0, or DR_EBADARG with a one-line message. */
int dr_cmp_parse(const char *v, dr_cmp_config_t *c, char *err, size_t n);
/* "fp16", "powersgd:4" */
const char *dr_cmp_name(dr_cmp_kind_t kind, uint32_t rank, char *buf,
                        size_t n);

typedef struct dr_cmp dr_cmp_t;

/* Borrows m and pg (which outlive it). 0 or -ENOMEM. */
int dr_cmp_new(const dr_cmp_config_t *cfg, dr_model_t *m, dr_pg_t *pg,
               dr_cmp_t **out);
void dr_cmp_free(dr_cmp_t **c);

/* Before the step of index step, whose gradients carry the loss scale
 * scale (1 without scaling). */
void dr_cmp_begin_step(dr_cmp_t *c, uint64_t step, float scale);

/* For tests: the next launch sets its bucket's first gradient element to
 * value first (before the checks and the compression). */
void dr_cmp_poison(dr_cmp_t *c, float value);

/* The reducer's launch hook (dr_launch_fn): arg is the dr_cmp_t. */
int dr_cmp_launch(void *arg, size_t bucket, float *data, size_t n_elems,
                  dr_work_t **w);

/* After dr_reducer_wait succeeded: the gradients, averaged over the
 * ranks, in fp32 and unscaled. *local_bad: this rank's own gradients (or
 * their cast to the narrow type) were not finite; *sum_bad: the reduced
 * result is not (the same on every rank). Both 0 without check. 0, or a
 * collective's failure code with its message. */
int dr_cmp_finish(dr_cmp_t *c, int *local_bad, int *sum_bad, char *err,
                  size_t err_len);

/* The step was applied (1) or skipped (0). */
void dr_cmp_commit(dr_cmp_t *c, int applied);

/* Microseconds of the last step's communication after the reducer's
 * (PowerSGD's second round). */
uint64_t dr_cmp_extra_comm_us(const dr_cmp_t *c);
/* Bytes this rank's last step handed to the process group (all rounds). */
uint64_t dr_cmp_sent_bytes(const dr_cmp_t *c);

/* The bytes the last launch of bucket handed to the process group (its
 * first round); 0 for a bucket never launched. */
uint64_t dr_cmp_bucket_bytes(const dr_cmp_t *c, size_t bucket);
/* PowerSGD's second rounds of the last step: how many, and for the k-th
 * its bytes and its duration (us). */
size_t dr_cmp_n_round2(const dr_cmp_t *c);
void dr_cmp_round2(const dr_cmp_t *c, size_t k, uint64_t *n_bytes,
                   uint64_t *dur_us);

/* The state a checkpoint keeps: Q (q_elems, the same on every rank) and
 * this rank's error feedback (ef_elems). Both 0 but for PowerSGD. The
 * pointers are valid until the next dr_cmp_commit (which swaps the
 * current state with the step's new one). */
size_t dr_cmp_q_elems(const dr_cmp_t *c);
size_t dr_cmp_ef_elems(const dr_cmp_t *c);
float *dr_cmp_q(dr_cmp_t *c);
float *dr_cmp_ef(dr_cmp_t *c);

/* One gradient of a bucket, as PowerSGD lays the bucket out. */
typedef struct {
  size_t param;
  float *g;            /* in the bucket's memory */
  size_t rows, cols;
  int psgd;            /* sent as P and Q */
  size_t off1;         /* in the first round's buffer: the tensor, or P */
  size_t off2;         /* in the second round's: its Q */
} dr_cmp_item_t;

/* The model's gradients that lie in [data, data + n), in memory order
 * (the bucket's own, the same on every rank), and the two rounds'
 * buffers: first the uncompressed tensors, then each compressed one's P
 * (n1 floats); each Q (n2). *items is malloc'd. 0 or -ENOMEM. The CPU's
 * and the GPU's PowerSGD (gpu_psgd.h) both lay buckets out so. */
int dr_cmp_layout(const dr_cmp_t *c, float *data, size_t n,
                  dr_cmp_item_t **items, size_t *n_items, size_t *n1,
                  size_t *n2);
/* 1 when a layout made for [data, data + n) still holds: every item's
 * gradient is where it was (a rebuild of the buckets moves them, and may
 * hand out the same memory again). */
int dr_cmp_layout_holds(const dr_cmp_t *c, const float *data, size_t n,
                        const float *was_data, size_t was_n,
                        const dr_cmp_item_t *items, size_t n_items);

/* Where parameter param's Q and error feedback lie in those (SIZE_MAX:
 * the parameter is not compressed), and the configuration: for another
 * implementation of the same rounds (the GPU's, gpu_psgd.h). */
size_t dr_cmp_q_off(const dr_cmp_t *c, size_t param);
size_t dr_cmp_ef_off(const dr_cmp_t *c, size_t param);
const dr_cmp_config_t *dr_cmp_config(const dr_cmp_t *c);

/* "powersgd:4: 3 of 6 tensors compressed (12.3x fewer bytes)" */
const char *dr_cmp_describe(dr_cmp_t *c);

#endif /* DR_COMPRESS_H */
