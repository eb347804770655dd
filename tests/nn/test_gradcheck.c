/* The backward pass against central finite differences of an independent
 * forward pass in double, on tiny models, for every element of every
 * parameter tensor. Bound: per tensor, ||g - fd|| <= 1e-4 ||fd||
 * (the analytic gradient is fp32; fd is double with h = 1e-6, whose own
 * error is near 1e-10), and the fp32 loss within 1e-5 of the double one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "model.h"
#include "nn_internal.h"

#define FD_STEP 1e-6
#define GRAD_RTOL 1e-5

typedef struct {
  dr_model_t *m;
  const dr_model_config_t *cfg;
  const dr_batch_t *b;
  double **w;          /* double copies of every parameter */
  double min_preact;   /* smallest |pre-activation| seen (ReLU kinks) */
} ref_t;

static double ref_loss(ref_t *r) {
  const dr_model_config_t *c = r->cfg;
  const int text = c->context > 0;
  const uint32_t in0 = text ? c->context * c->embed_dim : c->input_dim;
  const uint32_t classes = text ? 256 : c->classes;
  const size_t first = text ? 1 : 0;
  size_t maxd = in0 > c->width ? in0 : c->width;
  maxd = classes > maxd ? classes : maxd;
  double *a = calloc(maxd, sizeof(double)), *z = calloc(maxd, sizeof(double));
  double total = 0;
  r->min_preact = INFINITY;
  for (uint32_t row = 0; row < r->b->n; row++) {
    if (text) {
      for (uint32_t j = 0; j < c->context; j++)
        for (uint32_t e = 0; e < c->embed_dim; e++)
          a[j * c->embed_dim + e] =
              r->w[0][r->b->tokens[row * c->context + j] * c->embed_dim + e];
    } else {
      for (uint32_t k = 0; k < in0; k++) a[k] = r->b->x[row * in0 + k];
    }
    uint32_t in = in0;
    for (uint32_t l = 0; l <= c->layers; l++) {
      const int head = l == c->layers;
      const uint32_t out = head ? classes : c->width;
      const double *w = r->w[first + 2 * l], *bias = r->w[first + 2 * l + 1];
      for (uint32_t o = 0; o < out; o++) {
        double s = bias[o];
        for (uint32_t k = 0; k < in; k++) s += w[o * in + k] * a[k];
        if (!head) r->min_preact = fmin(r->min_preact, fabs(s));
        z[o] = head ? s : (s > 0 ? s : 0);
      }
      memcpy(a, z, out * sizeof(double));
      in = out;
    }
    double mx = a[0], sum = 0;
    for (uint32_t k = 1; k < classes; k++) mx = fmax(mx, a[k]);
    for (uint32_t k = 0; k < classes; k++) sum += exp(a[k] - mx);
    total += log(sum) + mx - a[r->b->y[row]];
  }
  free(a);
  free(z);
  return total / r->b->n;
}

static void gradcheck(const dr_model_config_t *cfg, const dr_batch_t *b) {
  dr_model_t *m = NULL;
  char err[256];
  assert_int_equal(dr_model_new(cfg, &m, err, sizeof err), 0);
  const size_t np = dr_model_n_params(m);
  ref_t r = {.m = m, .cfg = cfg, .b = b};
  r.w = calloc(np, sizeof(double *));
  for (size_t i = 0; i < np; i++) {
    dr_param_t *p = dr_model_param(m, i);
    r.w[i] = malloc(p->n_elems * sizeof(double));
    for (size_t j = 0; j < p->n_elems; j++) r.w[i][j] = p->w[j];
  }
  const float loss = dr_model_forward(m, b);
  dr_model_backward(m, 1.0f, 0, NULL, NULL);
  const double loss_ref = ref_loss(&r);
  /* FD across a ReLU kink measures nothing: the data keep clear of it. */
  assert_true(r.min_preact > 100 * FD_STEP);
  assert_true(fabs(loss - loss_ref) <= 1e-5 * fabs(loss_ref));

  for (size_t i = 0; i < np; i++) {
    dr_param_t *p = dr_model_param(m, i);
    double num = 0, den = 0;
    for (size_t j = 0; j < p->n_elems; j++) {
      const double keep = r.w[i][j];
      r.w[i][j] = keep + FD_STEP;
      const double up = ref_loss(&r);
      r.w[i][j] = keep - FD_STEP;
      const double down = ref_loss(&r);
      r.w[i][j] = keep;
      const double fd = (up - down) / (2 * FD_STEP);
      num += (p->g[j] - fd) * (p->g[j] - fd);
      den += fd * fd;
    }
    const double rel = sqrt(num) / sqrt(den);
    print_message("%-14s %6zu elems  ||g - fd|| / ||fd|| = %.2e\n", p->name,
                  p->n_elems, rel);
    assert_true(den > 0);
    assert_true(rel <= GRAD_RTOL);
  }
  for (size_t i = 0; i < np; i++) free(r.w[i]);
  free(r.w);
  dr_model_free(&m);
}

static void test_mlp(void **state) {
  const dr_model_config_t cfg = {.input_dim = 5, .width = 7, .layers = 2,
                                 .classes = 4, .max_batch = 6, .seed = 3};
  dr_batch_t b = {.n = 6, .cap = 6, .input_dim = 5};
  float x[30];
  int32_t y[6] = {0, 1, 2, 3, 1, 2};
  dr_rng_t r;
  dr_rng_seed(&r, 99);
  for (int i = 0; i < 30; i++) x[i] = dr_rng_normal(&r);
  b.x = x;
  b.y = y;
  gradcheck(&cfg, &b);
}

static void test_text(void **state) {
  /* Repeated tokens exercise the embedding's scatter-add. */
  const dr_model_config_t cfg = {.width = 6, .layers = 1, .context = 3,
                                 .embed_dim = 2, .max_batch = 4, .seed = 5};
  uint8_t tok[12] = {'a', 'b', 'a', 'c', 'a', 'b', 'z', 'z', 'z', 0, 255, 'a'};
  int32_t y[4] = {'b', 'z', 0, 255};
  dr_batch_t b = {.n = 4, .cap = 4, .context = 3, .tokens = tok, .y = y};
  gradcheck(&cfg, &b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp),
      cmocka_unit_test(test_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
