/* The CPU reference of the GPU model in bf16: the CPU model's formulas,
 * with every value rounded to bf16 where the GPU stores it in bf16 (the
 * input or embedding output, each hidden GEMM's output before and after
 * bias and ReLU, the gradients flowing between layers, the weights as GEMM
 * operands), and fp32 where the GPU keeps fp32 (logits, softmax, weight
 * and bias gradients). Sums run in double: the GPU's fp32 sums differ from
 * them by rounding, far below bf16's.
 *
 * Against the fp32 CPU model a bf16 model differs by far more than any
 * kernel's error (ReLU masks flip where a pre-activation is near zero, and
 * bias gradients are sums that cancel): up to 25% of a parameter's largest
 * gradient on the model checked here. Against this reference the bound is
 * a kernel's: 1e-2. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check_util.h"

/* The two-byte type's rounding: bf16's or fp16's (ref_half). */
static float (*q)(float) = bf16_round;

int ref_half(dr_model_t *m, const dr_batch_t *b, float scale, float *loss,
             float *grads, int f16) {
  q = f16 ? f16_round : bf16_round;
  return ref_bf16(m, b, scale, loss, grads);
}

int ref_bf16(dr_model_t *m, const dr_batch_t *b, float scale, float *loss,
             float *grads) {
  const dr_model_config_t *c = dr_model_config(m);
  const int text = c->context > 0;
  const uint32_t n = b->n, L = c->layers + 1, C = c->classes;
  const uint32_t in_dim = text ? c->context * c->embed_dim : c->input_dim;
  const size_t first = text ? 1 : 0;
  uint32_t *in = malloc(L * sizeof(uint32_t)), *out = malloc(L * sizeof(uint32_t));
  size_t *off = malloc(dr_model_n_params(m) * sizeof(size_t));
  float **act = calloc(L + 1, sizeof(float *));
  size_t o = 0;
  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    off[i] = o;
    o += dr_model_param(m, i)->n_elems;
  }
  for (uint32_t k = 0; k < L; k++) {
    in[k] = k == 0 ? in_dim : c->width;
    out[k] = k + 1 == L ? C : c->width;
  }
  act[0] = malloc((size_t)n * in_dim * sizeof(float));
  if (text) {
    const float *table = dr_model_param(m, 0)->w;
    for (size_t t = 0; t < (size_t)n * c->context; t++)
      for (uint32_t j = 0; j < c->embed_dim; j++)
        act[0][t * c->embed_dim + j] =
            q(table[(size_t)b->tokens[t] * c->embed_dim + j]);
  } else {
    for (size_t i = 0; i < (size_t)n * in_dim; i++)
      act[0][i] = q(b->x[i]);
  }
  for (uint32_t k = 0; k < L; k++) {
    const int head = k + 1 == L;
    const float *w = dr_model_param(m, first + 2 * k)->w;
    const float *bias = dr_model_param(m, first + 2 * k + 1)->w;
    act[k + 1] = malloc((size_t)n * out[k] * sizeof(float));
    for (uint32_t r = 0; r < n; r++)
      for (uint32_t j = 0; j < out[k]; j++) {
        double s = 0;
        for (uint32_t i = 0; i < in[k]; i++)
          s += (double)q(w[(size_t)j * in[k] + i]) * act[k][(size_t)r * in[k] + i];
        float v = head ? (float)s : q((float)s);
        v = v + bias[j];
        if (!head)
          v = q(v > 0 ? v : 0.0f);
        act[k + 1][(size_t)r * out[k] + j] = v;
      }
  }
  /* Softmax cross-entropy and its gradient, as the GPU's kernels. */
  const float coef = scale / (float)n;
  float *d = malloc((size_t)n * C * sizeof(float));
  double total = 0;
  for (uint32_t r = 0; r < n; r++) {
    const float *l = act[L] + (size_t)r * C;
    double mx = l[0], s = 0;
    for (uint32_t k = 1; k < C; k++)
      mx = l[k] > mx ? l[k] : mx;
    for (uint32_t k = 0; k < C; k++)
      s += exp(l[k] - mx);
    uint32_t y = (uint32_t)b->y[r] < C ? (uint32_t)b->y[r] : 0;
    total += log(s) - (l[y] - mx);
    for (uint32_t k = 0; k < C; k++) {
      float v = coef * (float)(exp(l[k] - mx) / s);
      if (k == y)
        v -= coef;
      d[(size_t)r * C + k] = q(v);
    }
  }
  *loss = (float)(total / n);
  for (uint32_t k = L; k-- > 0;) {
    const float *w = dr_model_param(m, first + 2 * k)->w;
    float *gw = grads + off[first + 2 * k];
    float *gb = grads + off[first + 2 * k + 1];
    for (uint32_t j = 0; j < out[k]; j++) {
      double sb = 0;
      for (uint32_t r = 0; r < n; r++)
        sb += d[(size_t)r * out[k] + j];
      gb[j] = (float)sb;
      for (uint32_t i = 0; i < in[k]; i++) {
        double s = 0;
        for (uint32_t r = 0; r < n; r++)
          s += (double)d[(size_t)r * out[k] + j] * act[k][(size_t)r * in[k] + i];
        gw[(size_t)j * in[k] + i] = (float)s;
      }
    }
    if (k == 0 && !text)
      break;
    float *dx = malloc((size_t)n * in[k] * sizeof(float));
    for (uint32_t r = 0; r < n; r++)
      for (uint32_t i = 0; i < in[k]; i++) {
        double s = 0;
        for (uint32_t j = 0; j < out[k]; j++)
          s += (double)d[(size_t)r * out[k] + j] * q(w[(size_t)j * in[k] + i]);
        float v = q((float)s);
        if (k > 0 && !(act[k][(size_t)r * in[k] + i] > 0))
          v = 0.0f;
        dx[(size_t)r * in[k] + i] = v;
      }
    free(d);
    d = dx;
  }
  if (text) {
    float *ge = grads + off[0];
    const uint32_t e = c->embed_dim;
    memset(ge, 0, 256 * (size_t)e * sizeof(float));
    for (size_t t = 0; t < (size_t)n * c->context; t++)
      for (uint32_t j = 0; j < e; j++)
        ge[(size_t)b->tokens[t] * e + j] += d[t * e + j];
  }
  free(d);
  for (uint32_t k = 0; k <= L; k++)
    free(act[k]);
  free(act), free(in), free(out), free(off);
  return 0;
}
