/* Internals of the gradient compressor, shared by compress.c (the launch
 * hook, fp16/bf16, the state) and compress_psgd.c (PowerSGD's rounds).
 * Not installed. */
#ifndef DR_COMPRESS_INTERNAL_H
#define DR_COMPRESS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "compress.h"

/* One gradient of a bucket (compress.h). */
typedef dr_cmp_item_t item_t;

/* How a bucket went out this step. */
enum { SENT_F32 = 0, SENT_HALF, SENT_PSGD };

typedef struct {
  float *data;         /* the bucket's memory and size: the cache key */
  size_t n_elems;
  item_t *items;
  size_t n_items;
  uint16_t *half;      /* fp16, bf16: n_elems */
  float *buf1, *buf2;  /* PowerSGD: uncompressed + P's; Q's */
  size_t n1, n2;
  dr_work_t *w2;
  int sent;
  uint64_t bytes1, bytes2, dur2_us; /* the last step's rounds */
} bkt_t;

struct dr_cmp {
  dr_cmp_config_t cfg;
  dr_model_t *m;
  dr_pg_t *pg;
  uint32_t world;
  bkt_t *b;
  size_t nb;
  size_t *launched;    /* bucket indices in launch order, this step */
  size_t n_launched;
  uint64_t step;
  float scale;
  int poison;
  float poison_value;
  int local_bad;
  size_t n_params;
  size_t *q_off, *ef_off; /* per parameter; SIZE_MAX: not compressed */
  float *q, *q_next, *ef, *ef_next;
  size_t q_elems, ef_elems, n_matrices;
  uint64_t extra_us, sent_bytes;
  char desc[160];
};

/* 1 when any of x[0..n) is an infinity or a NaN. */
static inline int dr__cmp_nonfinite(const float *x, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++)
    bad |= !(x[i] - x[i] == 0.0f); /* NaN for an infinity or a NaN */
  return bad;
}

/* ---- compress_psgd.c ---------------------------------------------------- */

/* The first round for bucket b: M = g / scale (+ the error feedback), the
 * uncompressed tensors and each P = M Q into buf1. */
void dr__cmp_psgd_round1(dr_cmp_t *c, bkt_t *b);
/* After the first round's all-reduce: the uncompressed tensors averaged
 * into the gradients, the P's orthonormalised, each Q = M^T P, their
 * average launched (b->w2). 0 or the launch's code. */
int dr__cmp_psgd_round2(dr_cmp_t *c, bkt_t *b);
/* After the second round: M ~ P Q^T into the gradients, the residual and
 * Q kept for the next step (committed by dr_cmp_commit). */
void dr__cmp_psgd_decompress(dr_cmp_t *c, bkt_t *b);

#endif /* DR_COMPRESS_INTERNAL_H */
