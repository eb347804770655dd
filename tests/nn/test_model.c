/* The model: shapes, initialisation, the backward pass's contract with the
 * reducer (ready order, spans, gradient views, scale, accumulate) and the
 * batch-size equivalence data parallelism rests on. */
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
#include "errors.h"
#include "model.h"
#include "nn_internal.h"
#include "mono.h"

static dr_model_t *new_model(const dr_model_config_t *cfg) {
  dr_model_t *m = NULL;
  char err[256] = "";
  int rc = dr_model_new(cfg, &m, err, sizeof err);
  if (rc != 0) fprintf(stderr, "dr_model_new: %d %s\n", rc, err);
  assert_int_equal(rc, 0);
  return m;
}

static const dr_model_config_t small_cfg = {
    .input_dim = 24, .width = 32, .layers = 3, .classes = 10,
    .max_batch = 64, .seed = 7};

/* A batch of n synthetic-like rows with labels spread over the classes. */
static void random_batch(dr_batch_t *b, uint32_t n, uint32_t input_dim,
                         uint32_t classes, uint64_t seed) {
  memset(b, 0, sizeof *b);
  b->n = b->cap = n;
  b->input_dim = input_dim;
  b->x = malloc((size_t)n * input_dim * sizeof(float));
  b->y = malloc((size_t)n * sizeof(int32_t));
  assert_non_null(b->x);
  assert_non_null(b->y);
  dr_rng_t r;
  dr_rng_seed(&r, seed);
  for (size_t i = 0; i < (size_t)n * input_dim; i++) b->x[i] = dr_rng_normal(&r);
  for (uint32_t i = 0; i < n; i++) b->y[i] = (int32_t)dr__rng_below(&r, classes);
}

static void free_batch(dr_batch_t *b) {
  free(b->x);
  free(b->y);
  free(b->tokens);
}

static float *copy_grads(dr_model_t *m) {
  float *out = malloc(dr_model_n_elems(m) * sizeof(float));
  assert_non_null(out);
  size_t off = 0;
  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    dr_param_t *p = dr_model_param(m, i);
    memcpy(out + off, p->g, p->n_elems * sizeof(float));
    off += p->n_elems;
  }
  return out;
}

static void test_reference_param_count(void **state) {
  dr_model_config_t cfg = {.input_dim = 256, .width = 1024, .layers = 4,
                           .classes = 256, .max_batch = 1, .seed = 1};
  dr_model_t *m = new_model(&cfg);
  assert_int_equal(dr_model_n_elems(m), 3674368);
  assert_int_equal(dr_model_n_elems(m), 256 * 1024 + 1024 +
                                            3 * (1024 * 1024 + 1024) +
                                            1024 * 256 + 256);
  /* layers + 1 Linear layers, weight then bias, forward order. */
  static const char *names[] = {"fc0.weight", "fc0.bias", "fc1.weight",
                                "fc1.bias",   "fc2.weight", "fc2.bias",
                                "fc3.weight", "fc3.bias", "head.weight",
                                "head.bias"};
  assert_int_equal(dr_model_n_params(m), 10);
  size_t sum = 0;
  for (size_t i = 0; i < 10; i++) {
    assert_string_equal(dr_model_param(m, i)->name, names[i]);
    sum += dr_model_param(m, i)->n_elems;
  }
  assert_int_equal(sum, 3674368);
  assert_int_equal(dr_model_param(m, 0)->n_elems, 1024 * 256);
  assert_int_equal(dr_model_param(m, 9)->n_elems, 256);
  assert_null(dr_model_param(m, 10));
  dr_model_free(&m);
  assert_null(m);
}

static void test_text_param_count(void **state) {
  dr_model_config_t cfg = {.width = 64, .layers = 2, .context = 8,
                           .embed_dim = 16, .max_batch = 4, .seed = 1};
  dr_model_t *m = new_model(&cfg);
  /* One 256 x 16 table shared by the 8 positions, then 128 -> 64 -> 64 -> 256. */
  assert_int_equal(dr_model_n_elems(m), 256 * 16 + (8 * 16 * 64 + 64) +
                                            (64 * 64 + 64) + (64 * 256 + 256));
  assert_int_equal(dr_model_n_params(m), 7);
  assert_string_equal(dr_model_param(m, 0)->name, "embed.weight");
  assert_int_equal(dr_model_param(m, 0)->n_elems, 256 * 16);
  assert_string_equal(dr_model_param(m, 1)->name, "fc0.weight");
  assert_string_equal(dr_model_param(m, 6)->name, "head.bias");
  assert_int_equal(dr_model_config(m)->classes, 256);
  dr_model_free(&m);
}

static void test_bad_config(void **state) {
  dr_model_t *m = NULL;
  char err[256] = "";
  dr_model_config_t cfg = small_cfg;
  cfg.layers = 0;
  assert_int_equal(dr_model_new(&cfg, &m, err, sizeof err), DR_EBADARG);
  assert_null(m);
  assert_non_null(strstr(err, "layers"));
  cfg = small_cfg;
  cfg.max_batch = 0;
  assert_int_equal(dr_model_new(&cfg, &m, err, sizeof err), DR_EBADARG);
  cfg = small_cfg;
  cfg.context = 4;
  cfg.embed_dim = 0;
  assert_int_equal(dr_model_new(&cfg, &m, err, sizeof err), DR_EBADARG);
  cfg.embed_dim = 4;
  cfg.classes = 10; /* text predicts bytes */
  assert_int_equal(dr_model_new(&cfg, &m, err, sizeof err), DR_EBADARG);
  assert_null(m);
}

static void test_init_seeded(void **state) {
  dr_model_config_t cfg = small_cfg;
  dr_model_t *a = new_model(&cfg);
  cfg.max_batch = 3; /* activations do not touch the weights */
  dr_model_t *b = new_model(&cfg);
  cfg.seed = 8;
  dr_model_t *c = new_model(&cfg);
  size_t differ = 0;
  for (size_t i = 0; i < dr_model_n_params(a); i++) {
    dr_param_t *pa = dr_model_param(a, i), *pb = dr_model_param(b, i),
               *pc = dr_model_param(c, i);
    assert_memory_equal(pa->w, pb->w, pa->n_elems * sizeof(float));
    for (size_t j = 0; j < pa->n_elems; j++) differ += pa->w[j] != pc->w[j];
  }
  assert_true(differ > dr_model_n_elems(a) * 99 / 100);
  assert_int_equal(dr_model_crc32(a), dr_model_crc32(b));
  assert_int_not_equal(dr_model_crc32(a), dr_model_crc32(c));

  /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)), spread over most of the range. */
  for (size_t i = 0; i < dr_model_n_params(a); i++) {
    dr_param_t *p = dr_model_param(a, i);
    const float bound = 1.0f / sqrtf(i < 2 ? 24.0f : 32.0f);
    float lo = 1, hi = -1;
    for (size_t j = 0; j < p->n_elems; j++) {
      assert_true(fabsf(p->w[j]) <= bound);
      lo = p->w[j] < lo ? p->w[j] : lo;
      hi = p->w[j] > hi ? p->w[j] : hi;
    }
    if (p->n_elems >= 100) {
      assert_true(lo < -0.9f * bound);
      assert_true(hi > 0.9f * bound);
    }
  }
  dr_model_free(&a);
  dr_model_free(&b);
  dr_model_free(&c);
}

static void test_crc32(void **state) {
  assert_int_equal(dr__crc32(0, "123456789", 9), 0xCBF43926u);
  assert_int_equal(dr__crc32(dr__crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
  dr_model_t *m = new_model(&small_cfg);
  uint32_t crc = 0;
  for (size_t i = 0; i < dr_model_n_params(m); i++)
    crc = dr__crc32(crc, dr_model_param(m, i)->w,
                    dr_model_param(m, i)->n_elems * sizeof(float));
  assert_int_equal(dr_model_crc32(m), crc);
  const uint32_t before = dr_model_crc32(m);
  dr_model_param(m, 5)->w[3] = nextafterf(dr_model_param(m, 5)->w[3], 1.0f);
  assert_int_not_equal(dr_model_crc32(m), before);
  dr_model_free(&m);
}

/* Events of one forward + backward, in the order the model reported them. */
typedef struct {
  int ready;        /* 1: ready(i), 0: span */
  size_t i;
  char name[24];
  uint64_t t, t0, t1;
} event_t;

typedef struct {
  event_t ev[64];
  int n;
} log_t;

static void on_span(void *arg, const char *name, uint64_t t0, uint64_t t1) {
  log_t *l = arg;
  assert_true(l->n < 64);
  event_t *e = &l->ev[l->n++];
  e->ready = 0;
  snprintf(e->name, sizeof e->name, "%s", name);
  e->t0 = t0;
  e->t1 = t1;
}

static void on_ready(void *arg, size_t i) {
  log_t *l = arg;
  assert_true(l->n < 64);
  event_t *e = &l->ev[l->n++];
  e->ready = 1;
  e->i = i;
  e->t = dr_mono_us();
}

static void check_backward_order(dr_model_t *m, const dr_batch_t *b,
                                 const char *const *bwd_spans, int n_spans) {
  log_t log = {.n = 0};
  dr_model_set_span_hook(m, on_span, &log);
  float loss = dr_model_forward(m, b);
  assert_true(isfinite(loss));
  const int n_fwd = log.n;
  dr_model_backward(m, 1.0f, 0, on_ready, &log);
  dr_model_set_span_hook(m, NULL, NULL);

  /* ready(i) for i = n-1 .. 0, each once; the span of the layer that made
   * them is reported after them, and the next layer's span starts no
   * earlier than the last ready of this one. */
  size_t expect = dr_model_n_params(m);
  int span_k = 0;
  uint64_t last_ready = 0;
  for (int e = n_fwd; e < log.n; e++) {
    event_t *ev = &log.ev[e];
    if (ev->ready) {
      assert_int_equal(ev->i, expect - 1);
      expect--;
      last_ready = ev->t;
    } else {
      assert_true(span_k < n_spans);
      assert_string_equal(ev->name, bwd_spans[span_k]);
      assert_true(ev->t1 >= last_ready);
      if (span_k + 1 < n_spans) {
        /* the following span (reported later) started after this ready */
        for (int f = e + 1; f < log.n; f++) {
          if (!log.ev[f].ready) {
            assert_true(log.ev[f].t0 >= last_ready);
            break;
          }
        }
        /* and the event just before this span is a ready of its layer */
        assert_true(log.ev[e - 1].ready);
      }
      span_k++;
    }
  }
  assert_int_equal(expect, 0);
  assert_int_equal(span_k, n_spans);
}

static void test_ready_order_and_spans(void **state) {
  dr_model_t *m = new_model(&small_cfg);
  dr_batch_t b;
  random_batch(&b, 16, 24, 10, 3);
  log_t log = {.n = 0};
  dr_model_set_span_hook(m, on_span, &log);
  dr_model_forward(m, &b);
  static const char *fwd[] = {"fc0.fwd", "fc1.fwd", "fc2.fwd", "head.fwd",
                              "loss"};
  assert_int_equal(log.n, 5);
  for (int i = 0; i < 5; i++) {
    assert_string_equal(log.ev[i].name, fwd[i]);
    assert_true(log.ev[i].t1 >= log.ev[i].t0);
    if (i) assert_true(log.ev[i].t0 >= log.ev[i - 1].t1);
  }
  static const char *bwd[] = {"head.bwd", "fc2.bwd", "fc1.bwd", "fc0.bwd"};
  check_backward_order(m, &b, bwd, 4);
  dr_model_free(&m);
  free_batch(&b);

  dr_model_config_t tc = {.width = 16, .layers = 2, .context = 4,
                          .embed_dim = 3, .max_batch = 8, .seed = 2};
  m = new_model(&tc);
  dr_batch_t t = {.n = 8, .cap = 8, .context = 4};
  t.tokens = malloc(32);
  t.y = malloc(8 * sizeof(int32_t));
  for (int i = 0; i < 32; i++) t.tokens[i] = (uint8_t)(i * 37);
  for (int i = 0; i < 8; i++) t.y[i] = i * 31;
  static const char *tbwd[] = {"head.bwd", "fc1.bwd", "fc0.bwd", "embed.bwd"};
  check_backward_order(m, &t, tbwd, 4);
  dr_model_free(&m);
  free_batch(&t);
}

/* Overwrite ignores what g held; accumulate adds; scale multiplies (by a
 * power of two exactly: every later gradient is linear in d(logits)). */
static void test_scale_and_accumulate(void **state) {
  dr_model_t *m = new_model(&small_cfg);
  const size_t n = dr_model_n_elems(m);
  dr_batch_t b;
  random_batch(&b, 16, 24, 10, 4);
  dr_model_forward(m, &b);
  dr_model_backward(m, 1.0f, 0, NULL, NULL);
  float *g1 = copy_grads(m);

  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    dr_param_t *p = dr_model_param(m, i);
    for (size_t j = 0; j < p->n_elems; j++) p->g[j] = 1234.5f;
  }
  dr_model_backward(m, 1.0f, 0, NULL, NULL);
  float *g = copy_grads(m);
  assert_memory_equal(g, g1, n * sizeof(float));
  free(g);

  dr_model_backward(m, 2.0f, 0, NULL, NULL);
  g = copy_grads(m);
  for (size_t i = 0; i < n; i++) assert_true(g[i] == 2.0f * g1[i]);
  free(g);

  dr_model_backward(m, 0.5f, 1, NULL, NULL); /* 2 g1 + 0.5 g1 */
  g = copy_grads(m);
  double worst = 0, gmax = 0;
  for (size_t i = 0; i < n; i++) {
    worst = fmax(worst, fabs(g[i] - 2.5 * g1[i]));
    gmax = fmax(gmax, fabs(g1[i]));
  }
  assert_true(worst <= 1e-6 * gmax);
  free(g);
  free(g1);
  dr_model_free(&m);
  free_batch(&b);
}

/* The reducer points g into its buckets: gradients land there. */
static void test_grad_views(void **state) {
  dr_model_t *m = new_model(&small_cfg);
  dr_batch_t b;
  random_batch(&b, 8, 24, 10, 5);
  dr_model_forward(m, &b);
  dr_model_backward(m, 1.0f, 0, NULL, NULL);
  float *want = copy_grads(m);
  const size_t n = dr_model_n_elems(m);
  float *bucket = malloc(n * sizeof(float));
  float **own = malloc(dr_model_n_params(m) * sizeof(float *));
  size_t off = 0;
  /* Reverse registration order inside the bucket, as the reducer lays it. */
  for (size_t i = dr_model_n_params(m); i-- > 0;) {
    dr_param_t *p = dr_model_param(m, i);
    own[i] = p->g;
    memset(own[i], 0, p->n_elems * sizeof(float));
    p->g = bucket + off;
    off += p->n_elems;
  }
  dr_model_backward(m, 1.0f, 0, NULL, NULL);
  off = 0;
  size_t woff = n;
  for (size_t i = dr_model_n_params(m); i-- > 0;) {
    dr_param_t *p = dr_model_param(m, i);
    woff -= p->n_elems;
    assert_memory_equal(bucket + off, want + woff, p->n_elems * sizeof(float));
    for (size_t j = 0; j < p->n_elems; j++) assert_true(own[i][j] == 0.0f);
    off += p->n_elems;
  }
  dr_model_free(&m);
  free(bucket);
  free(own);
  free(want);
  free_batch(&b);
}

/* Data parallelism's premise: the gradient of a batch of 4b is the mean
 * of the gradients of its four quarters (what 4 ranks average). Bound:
 * per tensor, max |difference| <= 1e-6 * max |gradient| (fp32 sums in a
 * different order). */
static void test_batch_split_equivalence(void **state) {
  dr_model_config_t cfg = {.input_dim = 64, .width = 128, .layers = 3,
                           .classes = 32, .max_batch = 64, .seed = 11};
  dr_model_t *m = new_model(&cfg);
  const uint32_t b = 16;
  dr_batch_t big;
  random_batch(&big, 4 * b, 64, 32, 6);
  float loss_big = dr_model_forward(m, &big);
  dr_model_backward(m, 1.0f, 0, NULL, NULL);
  float *g_big = copy_grads(m);

  double loss_sum = 0;
  for (uint32_t q = 0; q < 4; q++) {
    dr_batch_t part = big;
    part.n = part.cap = b;
    part.x = big.x + (size_t)q * b * 64;
    part.y = big.y + q * b;
    loss_sum += dr_model_forward(m, &part);
    dr_model_backward(m, 0.25f, q > 0, NULL, NULL);
  }
  float *g_acc = copy_grads(m);
  assert_true(fabs(loss_sum / 4 - loss_big) <= 1e-6 * fabs(loss_big));
  size_t off = 0;
  double worst_rel = 0;
  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    const size_t ne = dr_model_param(m, i)->n_elems;
    double dmax = 0, gmax = 0;
    for (size_t j = 0; j < ne; j++) {
      dmax = fmax(dmax, fabs((double)g_big[off + j] - g_acc[off + j]));
      gmax = fmax(gmax, fabs(g_big[off + j]));
    }
    assert_true(gmax > 0);
    worst_rel = fmax(worst_rel, dmax / gmax);
    off += ne;
  }
  print_message("batch 64 vs 4 x 16: worst max|diff|/max|g| = %.3g\n", worst_rel);
  assert_true(worst_rel <= 1e-6);
  free(g_big);
  free(g_acc);
  dr_model_free(&m);
  free_batch(&big);
}

static void test_forward_misfit_and_empty(void **state) {
  dr_model_t *m = new_model(&small_cfg);
  dr_batch_t b;
  random_batch(&b, 65, 24, 10, 7); /* one row over max_batch */
  assert_true(isnan(dr_model_forward(m, &b)));
  b.n = 4;
  b.input_dim = 23;
  assert_true(isnan(dr_model_forward(m, &b)));
  /* Nothing to differentiate: overwrite leaves zeros, ready still fires. */
  log_t log = {.n = 0};
  dr_model_backward(m, 1.0f, 0, on_ready, &log);
  assert_int_equal(log.n, (int)dr_model_n_params(m));
  for (size_t i = 0; i < dr_model_n_params(m); i++) {
    dr_param_t *p = dr_model_param(m, i);
    for (size_t j = 0; j < p->n_elems; j++) assert_true(p->g[j] == 0.0f);
  }
  b.input_dim = 24;
  b.n = 0;
  assert_true(dr_model_forward(m, &b) == 0.0f);
  dr_model_free(&m);
  free_batch(&b);
}

/* Initial loss near ln(classes). correct() takes the argmax of the
 * logits, which is the class of least loss: relabelled with each row's
 * least-loss class (found one row and one label at a time), every row is
 * right. */
static void test_loss_and_correct(void **state) {
  dr_model_t *m = new_model(&small_cfg);
  dr_batch_t b;
  random_batch(&b, 64, 24, 10, 8);
  const float loss = dr_model_forward(m, &b);
  assert_true(fabsf(loss - logf(10.0f)) < 0.3f);
  int32_t best_y[64];
  for (uint32_t r = 0; r < 64; r++) {
    int32_t c;
    dr_batch_t one = b;
    one.n = 1;
    one.x = b.x + (size_t)r * 24;
    one.y = &c;
    float best_loss = INFINITY;
    for (c = 0; c < 10; c++) {
      const float l = dr_model_forward(m, &one);
      if (l < best_loss) {
        best_loss = l;
        best_y[r] = c;
      }
    }
  }
  const uint32_t before = dr_model_correct(m, &b);
  memcpy(b.y, best_y, sizeof best_y);
  assert_int_equal(dr_model_correct(m, &b), 64);
  assert_true(before < 64);
  dr_model_free(&m);
  free_batch(&b);
}

/* A diverged model must not report a finite loss: one NaN weight, or one
 * infinite logit, makes the loss NaN. */
static void test_nonfinite_loss(void **state) {
  dr_model_t *m = new_model(&small_cfg);
  dr_batch_t b;
  random_batch(&b, 8, 24, 10, 9);
  assert_true(isfinite(dr_model_forward(m, &b)));
  dr_param_t *head_w = dr_model_param(m, 6);
  assert_string_equal(head_w->name, "head.weight");
  const float keep = head_w->w[0];
  head_w->w[0] = NAN; /* only class 0's logit becomes NaN */
  assert_true(isnan(dr_model_forward(m, &b)));
  head_w->w[0] = keep;
  assert_true(isfinite(dr_model_forward(m, &b)));
  dr_param_t *head_b = dr_model_param(m, 7);
  head_b->w[3] = INFINITY;
  assert_true(isnan(dr_model_forward(m, &b)));
  dr_model_free(&m);
  free_batch(&b);
}

static void test_blas_info(void **state) {
  char buf[512];
  dr_model_blas_info(buf, sizeof buf);
  assert_non_null(strstr(buf, "OpenBLAS"));
  assert_non_null(strstr(buf, "thread"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_param_count),
      cmocka_unit_test(test_text_param_count),
      cmocka_unit_test(test_bad_config),
      cmocka_unit_test(test_init_seeded),
      cmocka_unit_test(test_crc32),
      cmocka_unit_test(test_ready_order_and_spans),
      cmocka_unit_test(test_scale_and_accumulate),
      cmocka_unit_test(test_grad_views),
      cmocka_unit_test(test_batch_split_equivalence),
      cmocka_unit_test(test_forward_misfit_and_empty),
      cmocka_unit_test(test_loss_and_correct),
      cmocka_unit_test(test_nonfinite_loss),
      cmocka_unit_test(test_blas_info),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
