/* Data for `train`: a deterministic synthetic task and byte-level next
 * character prediction on a text file, with the distributed sampler.
 *
 * synthetic: sample i (of n) is x = N(0,1) vector drawn from a generator
 *   seeded by (seed, split, i), labelled by a fixed random teacher MLP (one
 *   hidden layer of 64 tanh units, its own seed): learnable, and the same
 *   on every rank without storing anything. The teacher's output biases
 *   are tuned at creation so that the classes are about equally frequent.
 * text: position i predicts byte i+context from bytes [i, i+context); the
 *   last eval_frac of the file is the held-out split: eval sample j has the
 *   target byte cut + j, cut = len - floor(len * eval_frac), and its
 *   context may reach back before cut. Train has cut - context samples,
 *   eval floor(len * eval_frac).
 */
#ifndef DR_DATA_H
#define DR_DATA_H

#include <stddef.h>
#include <stdint.h>

enum { DR_SPLIT_TRAIN = 0, DR_SPLIT_EVAL = 1 };

/* A batch, allocated by dr_batch_new for up to cap rows. */
typedef struct {
  uint32_t n, cap;
  uint32_t input_dim;  /* synthetic: floats per row */
  uint32_t context;    /* text: bytes per row */
  float *x;            /* [cap * input_dim] or NULL */
  uint8_t *tokens;     /* [cap * context] or NULL */
  int32_t *y;          /* [cap] */
} dr_batch_t;

typedef struct dr_dataset dr_dataset_t;

/* 0; DR_EBADARG for input_dim 0 or over 2^20, classes outside [2, 4096],
 * n_train 0; -ENOMEM. Takes some 0.1 s (256 classes) to tune the teacher.
 * Caller owns *out; free with dr_data_free. */
int dr_data_synthetic(uint64_t seed, uint64_t n_train, uint64_t n_eval,
                      uint32_t input_dim, uint32_t classes,
                      dr_dataset_t **out);
/* DR_EBADARG with err for a file too short for context (no train sample,
 * or no eval sample while eval_frac > 0), context outside [1, 4096] or
 * eval_frac outside [0, 1); -errno (with err) to read. */
int dr_data_text(const char *path, uint32_t context, double eval_frac,
                 dr_dataset_t **out, char *err, size_t err_len);
void dr_data_free(dr_dataset_t **d);

uint64_t dr_data_len(const dr_dataset_t *d, int split);
uint32_t dr_data_input_dim(const dr_dataset_t *d); /* 0 for text */
uint32_t dr_data_context(const dr_dataset_t *d);   /* 0 for synthetic */
uint32_t dr_data_classes(const dr_dataset_t *d);

/* 0, DR_EBADARG (cap 0) or -ENOMEM. Free with dr_batch_free. */
int dr_batch_new(const dr_dataset_t *d, uint32_t cap, dr_batch_t *b);
void dr_batch_free(dr_batch_t *b);

/* Fills b with the samples idx[0..n) of split (n <= b->cap, from a batch
 * of the same dataset), in order; an index past the split's end is
 * skipped, so b->n < n tells of a caller's bug. Thread-safe for distinct
 * batches. */
void dr_data_fill(const dr_dataset_t *d, int split, const uint64_t *idx,
                  uint32_t n, dr_batch_t *b);

/* The distributed sampler, as PyTorch's DistributedSampler with shuffle
 * and drop_last: the epoch's permutation of [0, n) is seeded by
 * seed + epoch (the same on every rank), cut to a multiple of world, and
 * rank r takes positions r, r + world, r + 2 world, ... so the ranks'
 * shards are disjoint and equal in size (n / world each). A rank that
 * takes its step-s batch of b as shard[s*b, (s+1)*b) gets, with the other
 * ranks, exactly perm[s*world*b, (s+1)*world*b): the batch a single rank
 * with batch world*b would take at step s. Nothing is allocated. */
uint64_t dr_sampler_shard_len(uint64_t n, uint32_t world);
/* Writes rank's shard (dr_sampler_shard_len entries) of epoch. */
void dr_sampler_shard(uint64_t seed, uint64_t epoch, uint64_t n,
                      uint32_t rank, uint32_t world, uint64_t *out);
/* perm[pos] of epoch (pos < n; pos itself otherwise). */
uint64_t dr_sampler_perm(uint64_t seed, uint64_t epoch, uint64_t n,
                         uint64_t pos);

/* A small seeded generator (xoshiro256**) used by data and model. */
typedef struct { uint64_t s[4]; } dr_rng_t;
void dr_rng_seed(dr_rng_t *r, uint64_t seed);
uint64_t dr_rng_next(dr_rng_t *r);
double dr_rng_uniform(dr_rng_t *r);   /* [0, 1) */
float dr_rng_normal(dr_rng_t *r);     /* N(0, 1) */

#endif /* DR_DATA_H */
