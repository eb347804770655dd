/* The forward and backward passes. Every GEMM goes through cblas_sgemm
 * (row-major, weights [out][in] as nn.Linear keeps them); the loops between
 * them (bias, ReLU, softmax, masks) are written so the compiler vectorises
 * them: restrict pointers, no calls, no branches it cannot turn into
 * selects. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "model_internal.h"
#include "nn_internal.h"
#include "mono.h"

typedef struct {
  dr_model_t *m;
  uint64_t t0;
} span_t;

static inline void span_begin(span_t *s, dr_model_t *m) {
  s->m = m;
  s->t0 = m->span ? dr_mono_us() : 0;
}

static inline void span_end(span_t *s, const char *name) {
  if (s->m->span) s->m->span(s->m->span_arg, name, s->t0, dr_mono_us());
}

/* exp(x) for x <= 0 (softmax arguments after subtracting the row
 * maximum); below -87 the result is exp(-87), about 1.6e-38, instead of a
 * denormal. Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-7
 * polynomial for exp(r), 2^n built in the exponent bits; within 1 ulp of
 * exp over every float in [-87, 0]. Written without calls or branches so loops over it vectorise. A NaN or infinite x gives
 * NaN (through x - x), so one non-finite logit makes the loss NaN and the
 * training loop stops. */
static inline float exp_nonpos(float x) {
  /* NaN compares false and becomes -87: the int conversion below needs a
   * number. */
  const float xc = x > -87.0f ? x : -87.0f;
  /* Adding 1.5 * 2^23 rounds to the nearest integer in float arithmetic. */
  const float shifter = 12582912.0f;
  const float n = (xc * 1.44269504088896341f + shifter) - shifter;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union {
    uint32_t u;
    float f;
  } two_n;
  two_n.u = (uint32_t)((int32_t)n + 127) << 23;
  return p * two_n.f + (x - x);
}

static void add_bias(float *restrict y, const float *restrict b, uint32_t n,
                     uint32_t out) {
  for (uint32_t r = 0; r < n; r++) {
    float *restrict row = y + (size_t)r * out;
    for (uint32_t j = 0; j < out; j++) row[j] += b[j];
  }
}

static void add_bias_relu(float *restrict y, const float *restrict b,
                          uint32_t n, uint32_t out) {
  for (uint32_t r = 0; r < n; r++) {
    float *restrict row = y + (size_t)r * out;
    for (uint32_t j = 0; j < out; j++) {
      const float v = row[j] + b[j];
      row[j] = v > 0.0f ? v : 0.0f;
    }
  }
}

static void linear_forward(const dr_model_t *m, const dr__linear_t *l,
                           const float *x, float *y, uint32_t n, int relu) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)l->out,
              (int)l->in, 1.0f, x, (int)l->in, m->params[l->w].w, (int)l->in,
              0.0f, y, (int)l->out);
  if (relu)
    add_bias_relu(y, m->params[l->b].w, n, l->out);
  else
    add_bias(y, m->params[l->b].w, n, l->out);
}

static void embed_forward(dr_model_t *m, const uint8_t *tokens, uint32_t n) {
  const uint32_t ctx = m->cfg.context, e = m->cfg.embed_dim;
  const float *table = m->params[0].w;
  float *x = m->act[0];
  for (size_t i = 0; i < (size_t)n * ctx; i++)
    memcpy(x + i * e, table + (size_t)tokens[i] * e, e * sizeof(float));
}

/* Copies the batch's input into the model and runs every Linear; the last
 * one's output (logits) lands in probs. 0, or -1 when b does not fit. */
static int forward_logits(dr_model_t *m, const dr_batch_t *b) {
  const uint32_t n = b->n;
  if (n > m->cfg.max_batch ||
      (m->text ? (b->context != m->cfg.context || (n && !b->tokens))
               : (b->input_dim != m->cfg.input_dim || (n && !b->x)))) {
    m->n = 0;
    return -1;
  }
  m->n = n;
  span_t s;
  if (m->text) {
    span_begin(&s, m);
    memcpy(m->tokens, b->tokens, (size_t)n * m->cfg.context);
    embed_forward(m, b->tokens, n);
    span_end(&s, "embed.fwd");
  } else {
    memcpy(m->act[0], b->x, (size_t)n * m->cfg.input_dim * sizeof(float));
  }
  memcpy(m->labels, b->y, (size_t)n * sizeof(int32_t));
  if (n == 0) return 0;
  for (uint32_t k = 0; k < m->n_linear; k++) {
    const int head = k + 1 == m->n_linear;
    span_begin(&s, m);
    linear_forward(m, &m->lin[k], m->act[k], head ? m->probs : m->act[k + 1],
                   n, !head);
    span_end(&s, m->lin[k].fwd);
  }
  return 0;
}

/* The row maximum by pairwise halving into scratch (n/2 floats): each pass
 * is an elementwise loop the compiler vectorises, where a running max is a
 * reduction it may not reorder without -ffast-math. */
static float row_max(const float *v, uint32_t n, float *scratch) {
  float mx = v[0];
  const float *src = v;
  while (n > 8) {
    const uint32_t h = n / 2;
    if (n & 1) mx = src[n - 1] > mx ? src[n - 1] : mx;
    for (uint32_t c = 0; c < h; c++)
      scratch[c] = src[c] > src[c + h] ? src[c] : src[c + h];
    src = scratch;
    n = h;
  }
  for (uint32_t c = 0; c < n; c++) mx = src[c] > mx ? src[c] : mx;
  return mx;
}

/* A sum in eight fixed lanes: vector adds (a plain loop would need
 * -ffast-math's reassociation), in an order that does not depend on the
 * build. */
#define LANES 8
static float row_sum(const float *restrict v, uint32_t n) {
  float lane[LANES] = {0};
  uint32_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) lane[k] += v[i + k];
  float sum = 0.0f;
  for (int k = 0; k < LANES; k++) sum += lane[k];
  for (; i < n; i++) sum += v[i];
  return sum;
}

/* In place: logits -> probabilities, row by row, with max subtraction so
 * no exp overflows. Returns the summed cross-entropy (natural log). */
static double softmax_xent(float *restrict probs, const int32_t *labels,
                           uint32_t n, uint32_t classes, float *scratch) {
  double total = 0.0;
  for (uint32_t r = 0; r < n; r++) {
    float *restrict row = probs + (size_t)r * classes;
    const float mx = row_max(row, classes, scratch);
    const uint32_t y = (uint32_t)labels[r] < classes ? (uint32_t)labels[r] : 0;
    const float target = row[y] - mx;
    for (uint32_t c = 0; c < classes; c++) row[c] = exp_nonpos(row[c] - mx);
    const float sum = row_sum(row, classes);
    const float inv = 1.0f / sum;
    for (uint32_t c = 0; c < classes; c++) row[c] *= inv;
    total += (double)logf(sum) - (double)target;
  }
  return total;
}

float dr_model_forward(dr_model_t *m, const dr_batch_t *b) {
  if (forward_logits(m, b) < 0) return NAN;
  if (m->n == 0) return 0.0f;
  span_t s;
  span_begin(&s, m);
  /* dbuf is free until the backward pass. */
  double total =
      softmax_xent(m->probs, m->labels, m->n, m->cfg.classes, m->dbuf[0]);
  span_end(&s, "loss");
  return (float)(total / m->n);
}

uint32_t dr_model_correct(dr_model_t *m, const dr_batch_t *b) {
  if (forward_logits(m, b) < 0) return 0;
  const uint32_t C = m->cfg.classes;
  uint32_t correct = 0;
  for (uint32_t r = 0; r < m->n; r++) {
    const float *row = m->probs + (size_t)r * C;
    uint32_t best = 0;
    for (uint32_t c = 1; c < C; c++)
      if (row[c] > row[best]) best = c;
    correct += (int32_t)best == m->labels[r];
  }
  /* The logits are not probabilities: nothing is left for a backward. */
  m->n = 0;
  return correct;
}

/* d(loss)/d(logits) = coef * (p - onehot(y)), coef = scale / n. */
static void xent_backward(const float *restrict probs,
                          const int32_t *restrict labels, float *restrict d,
                          uint32_t n, uint32_t classes, float coef) {
  for (uint32_t r = 0; r < n; r++) {
    const float *restrict p = probs + (size_t)r * classes;
    float *restrict row = d + (size_t)r * classes;
    for (uint32_t c = 0; c < classes; c++) row[c] = coef * p[c];
    const uint32_t y = (uint32_t)labels[r] < classes ? (uint32_t)labels[r] : 0;
    row[y] -= coef;
  }
}

static void column_sums(const float *restrict d, uint32_t n, uint32_t out,
                        float *restrict sum) {
  memset(sum, 0, out * sizeof(float));
  for (uint32_t r = 0; r < n; r++) {
    const float *restrict row = d + (size_t)r * out;
    for (uint32_t j = 0; j < out; j++) sum[j] += row[j];
  }
}

static void store_grad(float *restrict g, const float *restrict v, size_t n,
                       int accumulate) {
  if (accumulate)
    for (size_t i = 0; i < n; i++) g[i] += v[i];
  else
    memcpy(g, v, n * sizeof(float));
}

/* dx *= (a > 0): ReLU's derivative, read off its output a. */
static void relu_backward(float *restrict dx, const float *restrict a,
                          size_t n) {
  for (size_t i = 0; i < n; i++) dx[i] = a[i] > 0.0f ? dx[i] : 0.0f;
}

static void embed_backward(dr_model_t *m, const float *restrict dx,
                           int accumulate) {
  const uint32_t ctx = m->cfg.context, e = m->cfg.embed_dim;
  float *g = m->params[0].g;
  if (!accumulate) memset(g, 0, m->params[0].n_elems * sizeof(float));
  for (size_t i = 0; i < (size_t)m->n * ctx; i++) {
    float *restrict row = g + (size_t)m->tokens[i] * e;
    const float *restrict src = dx + i * e;
    for (uint32_t j = 0; j < e; j++) row[j] += src[j];
  }
}

static void zero_backward(dr_model_t *m, int accumulate,
                          dr_grad_ready_fn ready, void *arg) {
  for (size_t i = m->n_params; i-- > 0;) {
    if (!accumulate)
      memset(m->params[i].g, 0, m->params[i].n_elems * sizeof(float));
    if (ready) ready(arg, i);
  }
}

void dr_model_backward(dr_model_t *m, float scale, int accumulate,
                       dr_grad_ready_fn ready, void *arg) {
  const uint32_t n = m->n;
  if (n == 0) {
    zero_backward(m, accumulate, ready, arg);
    return;
  }
  /* The scale and the batch mean ride on d(logits); every later gradient
   * is linear in it. */
  float *d = m->dbuf[0], *dx = m->dbuf[1];
  xent_backward(m->probs, m->labels, d, n, m->cfg.classes, scale / (float)n);
  const float beta = accumulate ? 1.0f : 0.0f;
  for (uint32_t k = m->n_linear; k-- > 0;) {
    const dr__linear_t *l = &m->lin[k];
    span_t s;
    span_begin(&s, m);
    /* dW[out][in] (+)= d^T x; db = column sums of d. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)l->out,
                (int)l->in, (int)n, 1.0f, d, (int)l->out, m->act[k],
                (int)l->in, beta, m->params[l->w].g, (int)l->in);
    column_sums(d, n, l->out, m->bias_sum);
    store_grad(m->params[l->b].g, m->bias_sum, l->out, accumulate);
    if (ready) {
      ready(arg, l->b);
      ready(arg, l->w);
    }
    if (k > 0 || m->text) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n,
                  (int)l->in, (int)l->out, 1.0f, d, (int)l->out,
                  m->params[l->w].w, (int)l->in, 0.0f, dx, (int)l->in);
      if (k > 0) relu_backward(dx, m->act[k], (size_t)n * l->in);
      float *t = d;
      d = dx;
      dx = t;
    }
    span_end(&s, l->bwd);
  }
  if (m->text) {
    span_t s;
    span_begin(&s, m);
    embed_backward(m, d, accumulate);
    if (ready) ready(arg, 0);
    span_end(&s, "embed.bwd");
  }
}
