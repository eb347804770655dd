/* The model of `train`: an MLP in fp32 on the CPU through BLAS.
 *
 *   synthetic: x[input_dim] -> (Linear+ReLU) x layers of width -> Linear ->
 *              classes, softmax cross-entropy.
 *   text:      context bytes -> embedding (256 x embed_dim each, concatenated
 *              to context*embed_dim) -> the same MLP -> 256 classes.
 *
 * Parameters are registered in forward order (embed.weight, fc0.weight,
 * fc0.bias, ..., head.weight, head.bias); the backward pass produces their
 * gradients in reverse order and reports each one the moment it is final,
 * so the reducer can start communicating while the pass goes on. Weights
 * are initialised from the seed alone, as PyTorch's defaults draw them
 * (embedding N(0, 1); Linear weight and bias U(-1/sqrt(fan_in),
 * 1/sqrt(fan_in))): identical on every rank for the same seed, whatever
 * max_batch is.
 * Threads: BLAS uses OMP_NUM_THREADS (set by the caller). A model is used
 * by one thread at a time; the reducer may read a gradient from another
 * thread once ready() has reported it.
 */
#ifndef DR_MODEL_H
#define DR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

typedef struct {
  float *w;           /* values: the model's, or rebound */
  float *g;           /* gradient: model-owned, or a view set by the reducer */
  size_t n_elems;
  /* The shape, row-major: a Linear's weight is out x in, the embedding
   * 256 x embed_dim, a bias n_elems x 1. rows * cols == n_elems. */
  size_t rows, cols;
  char name[32];
} dr_param_t;

/* The largest width, input dim, class count, context x embed dim and
 * max_batch: every BLAS dimension and leading dimension stays in an int,
 * and every size_t product far from overflow. Callers that take these
 * settings from a user check them against this bound. */
#define DR_MODEL_MAX_DIM (1u << 20)

typedef struct {
  uint32_t input_dim;  /* synthetic input size; ignored for text */
  uint32_t width;
  uint32_t layers;     /* hidden layers, >= 1 */
  uint32_t classes;    /* 256 for text */
  uint32_t context;    /* text: bytes of context; 0 = synthetic */
  uint32_t embed_dim;  /* text: embedding size per byte */
  uint32_t max_batch;  /* activations are allocated for this many rows */
  uint64_t seed;
} dr_model_config_t;

typedef struct dr_model dr_model_t;

/* Called around each layer's forward and backward work, for traces and
 * timings: name like "fc1.fwd", monotonic microseconds. */
typedef void (*dr_span_fn)(void *arg, const char *name, uint64_t t0_us,
                           uint64_t t1_us);
/* Called when param i's gradient is final for this backward pass. */
typedef void (*dr_grad_ready_fn)(void *arg, size_t i);

/* 0, DR_EBADARG (with err) or -ENOMEM (with err naming what could not
 * be allocated). Caller owns *out; free with
 * dr_model_free. Every param->g starts pointing into zeroed gradient memory
 * of the model's own; the reducer may repoint it (the model never
 * reallocates or frees a g it did not allocate). */
int dr_model_new(const dr_model_config_t *cfg, dr_model_t **out, char *err,
                 size_t err_len);
void dr_model_free(dr_model_t **m);

size_t dr_model_n_params(const dr_model_t *m);
dr_param_t *dr_model_param(dr_model_t *m, size_t i);
size_t dr_model_n_elems(const dr_model_t *m); /* all parameters */
/* The configuration in effect (text: classes 256, input_dim 0). */
const dr_model_config_t *dr_model_config(const dr_model_t *m);

void dr_model_set_span_hook(dr_model_t *m, dr_span_fn fn, void *arg);

/* Points every param->w into mem (dr_model_n_elems floats, registration
 * order, holding the weights already), which outlives the model's use,
 * and frees the model's own copy. */
void dr_model_rebind_weights(dr_model_t *m, float *mem);

/* Forward on b (b->n <= max_batch); returns the mean cross-entropy loss
 * over the batch (nats; 0 for an empty batch), keeping what the backward
 * pass needs (b's contents are copied: b may be refilled at once). Labels
 * must lie in [0, classes). NAN when b does not fit the model (too many
 * rows, other input_dim or context): the backward that follows produces
 * zero gradients. Spans: "embed.fwd" (text), "fc0.fwd" ... "head.fwd",
 * "loss". */
float dr_model_forward(dr_model_t *m, const dr_batch_t *b);

/* Backward of the last forward: each gradient is scale * d(mean loss)/dw,
 * written to param->g, or added to it when accumulate is set. ready (may
 * be NULL) is called per parameter as soon as its gradient is complete,
 * in reverse registration order, each exactly once: a Linear's bias and
 * weight together, before the next layer's backward starts. Spans:
 * "head.bwd" ... "fc0.bwd", "embed.bwd" (text); a layer's span ends after
 * its ready calls (it also computes the gradient of its input). */
void dr_model_backward(dr_model_t *m, float scale, int accumulate,
                       dr_grad_ready_fn ready, void *arg);

/* Correct top-1 predictions of the model on b (runs a forward pass, so a
 * backward after it produces zero gradients; ties go to the lower class). */
uint32_t dr_model_correct(dr_model_t *m, const dr_batch_t *b);

/* CRC-32 (zlib's) of the raw bytes of all parameter values in
 * registration order. */
uint32_t dr_model_crc32(const dr_model_t *m);

/* One line naming the BLAS library, its kernel core and its thread count,
 * for the environment summary. */
void dr_model_blas_info(char *buf, size_t len);

#endif /* DR_MODEL_H */
