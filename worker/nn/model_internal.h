/* The model's representation, shared by model.c (construction, parameters)
 * and model_pass.c (forward and backward). */
#ifndef DR_MODEL_INTERNAL_H
#define DR_MODEL_INTERNAL_H

#include "model.h"

typedef struct {
  uint32_t in, out;
  size_t w, b;          /* indices of weight [out][in] and bias [out] */
  char fwd[24], bwd[24]; /* span names: "fc0.fwd", "head.bwd" */
} dr__linear_t;

struct dr_model {
  dr_model_config_t cfg;
  int text;
  uint32_t in_dim;      /* the first Linear's input: input_dim or context*embed_dim */
  uint32_t max_dim;     /* max(in_dim, width, classes) */

  size_t n_params, n_elems;
  dr_param_t *params;
  float *w_all;         /* all values, registration order */
  float *g_own;         /* the model's gradient memory (params may point elsewhere) */

  uint32_t n_linear;    /* layers + 1 */
  dr__linear_t *lin;

  /* Activations of the last forward, n rows each: act[k] is Linear k's
   * input (act[0] the copied input or the embedding output, act[k > 0]
   * post-ReLU), probs the softmax of the logits. */
  float **act;
  float *probs;         /* [max_batch][classes] */
  float *dbuf[2];       /* [max_batch][max_dim]: gradients ping-pong */
  float *bias_sum;      /* [max_dim] */
  int32_t *labels;      /* [max_batch] */
  uint8_t *tokens;      /* text: [max_batch][context] */
  uint32_t n;           /* rows of the last forward */

  dr_span_fn span;
  void *span_arg;
};

#endif /* DR_MODEL_INTERNAL_H */
