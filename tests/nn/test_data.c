/* The synthetic task (deterministic, learnable, balanced) and the text
 * dataset (positions, eval split, errors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "errors.h"
#include "nn_internal.h"

static void test_synthetic_deterministic(void **state) {
  dr_dataset_t *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(dr_data_synthetic(42, 1000, 100, 16, 8, &a), 0);
  assert_int_equal(dr_data_synthetic(42, 1000, 100, 16, 8, &b), 0);
  assert_int_equal(dr_data_synthetic(43, 1000, 100, 16, 8, &c), 0);
  assert_int_equal(dr_data_len(a, DR_SPLIT_TRAIN), 1000);
  assert_int_equal(dr_data_len(a, DR_SPLIT_EVAL), 100);
  assert_int_equal(dr_data_input_dim(a), 16);
  assert_int_equal(dr_data_context(a), 0);
  assert_int_equal(dr_data_classes(a), 8);

  dr_batch_t ba, bb, bc;
  assert_int_equal(dr_batch_new(a, 8, &ba), 0);
  assert_int_equal(dr_batch_new(b, 8, &bb), 0);
  assert_int_equal(dr_batch_new(c, 8, &bc), 0);
  assert_non_null(ba.x);
  assert_null(ba.tokens);
  /* A sample is a function of (seed, split, index) alone: the same in
   * another dataset object, at another row, in another batch. */
  const uint64_t i1[4] = {5, 999, 0, 17}, i2[3] = {17, 3, 5};
  dr_data_fill(a, DR_SPLIT_TRAIN, i1, 4, &ba);
  dr_data_fill(b, DR_SPLIT_TRAIN, i2, 3, &bb);
  assert_int_equal(ba.n, 4);
  assert_int_equal(bb.n, 3);
  assert_memory_equal(ba.x + 3 * 16, bb.x, 16 * sizeof(float));
  assert_memory_equal(ba.x, bb.x + 2 * 16, 16 * sizeof(float));
  assert_int_equal(ba.y[3], bb.y[0]);
  assert_int_equal(ba.y[0], bb.y[2]);
  /* Another seed, or the other split, gives other inputs. */
  dr_data_fill(c, DR_SPLIT_TRAIN, i1, 4, &bc);
  assert_memory_not_equal(ba.x, bc.x, 16 * sizeof(float));
  dr_data_fill(b, DR_SPLIT_EVAL, i1, 1, &bb);
  assert_memory_not_equal(ba.x, bb.x, 16 * sizeof(float));
  /* Out-of-range indices are skipped. */
  const uint64_t bad[3] = {1, 100, 2};
  dr_data_fill(b, DR_SPLIT_EVAL, bad, 3, &bb);
  assert_int_equal(bb.n, 2);

  dr_batch_free(&ba);
  dr_batch_free(&bb);
  dr_batch_free(&bc);
  assert_null(ba.x);
  dr_data_free(&a);
  dr_data_free(&b);
  dr_data_free(&c);
  assert_null(a);
}

/* Labels are spread over every class, each within [0.5, 1.5] of its fair
 * share over 16,000 samples (a raw random teacher gives some classes
 * several times others). Inputs look N(0, 1). */
static void test_synthetic_balanced(void **state) {
  enum { C = 16, N = 16000, D = 32, B = 500 };
  dr_dataset_t *d = NULL;
  assert_int_equal(dr_data_synthetic(1, N, 0, D, C, &d), 0);
  dr_batch_t b;
  assert_int_equal(dr_batch_new(d, B, &b), 0);
  uint64_t idx[B];
  unsigned count[C] = {0};
  double sum = 0, sum2 = 0;
  for (uint64_t s = 0; s < N; s += B) {
    for (uint64_t i = 0; i < B; i++) idx[i] = s + i;
    dr_data_fill(d, DR_SPLIT_TRAIN, idx, B, &b);
    for (unsigned r = 0; r < B; r++) {
      assert_in_range(b.y[r], 0, C - 1);
      count[b.y[r]]++;
    }
    for (unsigned i = 0; i < B * D; i++) {
      sum += b.x[i];
      sum2 += (double)b.x[i] * b.x[i];
    }
  }
  unsigned lo = N, hi = 0;
  for (int c = 0; c < C; c++) {
    lo = count[c] < lo ? count[c] : lo;
    hi = count[c] > hi ? count[c] : hi;
  }
  print_message("16 classes over %d samples: min %u max %u (fair %d)\n", N, lo,
                hi, N / C);
  assert_true(lo >= N / C / 2);
  assert_true(hi <= N / C * 3 / 2);
  const double mean = sum / ((double)N * D), var = sum2 / ((double)N * D);
  assert_true(mean > -0.02 && mean < 0.02);
  assert_true(var > 0.97 && var < 1.03);
  dr_batch_free(&b);
  dr_data_free(&d);
}

static void test_synthetic_bad_args(void **state) {
  dr_dataset_t *d = NULL;
  assert_int_equal(dr_data_synthetic(1, 10, 0, 0, 8, &d), DR_EBADARG);
  assert_int_equal(dr_data_synthetic(1, 10, 0, 8, 1, &d), DR_EBADARG);
  assert_int_equal(dr_data_synthetic(1, 0, 0, 8, 8, &d), DR_EBADARG);
  assert_null(d);
}

typedef struct {
  char path[64];
} tmpfile_t;

static int tmp_setup(void **state) {
  tmpfile_t *t = calloc(1, sizeof *t);
  snprintf(t->path, sizeof t->path, "/tmp/test_nn_data.XXXXXX");
  int fd = mkstemp(t->path);
  if (fd < 0) return -1;
  close(fd);
  *state = t;
  return 0;
}

static int tmp_teardown(void **state) {
  tmpfile_t *t = *state;
  unlink(t->path);
  free(t);
  return 0;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
  assert_int_equal(fclose(f), 0);
}

static void test_text_positions(void **state) {
  tmpfile_t *t = *state;
  /* 20 bytes, eval_frac 0.25: cut = 15, eval targets are bytes 15..19. */
  write_file(t->path, "abcdefghijklmnopqrst");
  dr_dataset_t *d = NULL;
  char err[256] = "";
  assert_int_equal(dr_data_text(t->path, 4, 0.25, &d, err, sizeof err), 0);
  assert_int_equal(dr_data_len(d, DR_SPLIT_TRAIN), 11); /* targets e..o */
  assert_int_equal(dr_data_len(d, DR_SPLIT_EVAL), 5);   /* targets p..t */
  assert_int_equal(dr_data_context(d), 4);
  assert_int_equal(dr_data_input_dim(d), 0);
  assert_int_equal(dr_data_classes(d), 256);

  dr_batch_t b;
  assert_int_equal(dr_batch_new(d, 3, &b), 0);
  assert_non_null(b.tokens);
  assert_null(b.x);
  const uint64_t idx[3] = {0, 10, 3};
  dr_data_fill(d, DR_SPLIT_TRAIN, idx, 3, &b);
  assert_int_equal(b.n, 3);
  assert_memory_equal(b.tokens, "abcd", 4);
  assert_int_equal(b.y[0], 'e');
  assert_memory_equal(b.tokens + 4, "klmn", 4);
  assert_int_equal(b.y[1], 'o'); /* the last training target */
  assert_memory_equal(b.tokens + 8, "defg", 4);
  assert_int_equal(b.y[2], 'h');

  const uint64_t ev[3] = {0, 4, 5};
  dr_data_fill(d, DR_SPLIT_EVAL, ev, 3, &b);
  assert_int_equal(b.n, 2); /* 5 is past the eval split */
  assert_memory_equal(b.tokens, "lmno", 4);
  assert_int_equal(b.y[0], 'p');
  assert_memory_equal(b.tokens + 4, "pqrs", 4);
  assert_int_equal(b.y[1], 't');
  dr_batch_free(&b);
  dr_data_free(&d);

  /* No eval split. */
  assert_int_equal(dr_data_text(t->path, 4, 0.0, &d, err, sizeof err), 0);
  assert_int_equal(dr_data_len(d, DR_SPLIT_TRAIN), 16);
  assert_int_equal(dr_data_len(d, DR_SPLIT_EVAL), 0);
  dr_data_free(&d);
}

static void test_text_errors(void **state) {
  tmpfile_t *t = *state;
  dr_dataset_t *d = NULL;
  char err[256] = "";
  write_file(t->path, "short");
  assert_int_equal(dr_data_text(t->path, 5, 0.0, &d, err, sizeof err),
                   DR_EBADARG);
  assert_null(d);
  assert_non_null(strstr(err, "too short"));
  /* Long enough to train, too short to hold out anything. */
  err[0] = 0;
  assert_int_equal(dr_data_text(t->path, 2, 0.1, &d, err, sizeof err),
                   DR_EBADARG);
  assert_non_null(strstr(err, "eval"));
  assert_int_equal(dr_data_text(t->path, 4, 0.0, &d, err, sizeof err), 0);
  assert_int_equal(dr_data_len(d, DR_SPLIT_TRAIN), 1);
  dr_data_free(&d);
  write_file(t->path, "");
  assert_int_equal(dr_data_text(t->path, 1, 0.0, &d, err, sizeof err),
                   DR_EBADARG);
  assert_int_equal(dr_data_text("/nonexistent/ddprun-text", 4, 0.1, &d, err,
                                sizeof err),
                   -ENOENT);
  assert_non_null(strstr(err, "/nonexistent/ddprun-text"));
  assert_int_equal(dr_data_text(t->path, 0, 0.1, &d, err, sizeof err),
                   DR_EBADARG);
  assert_int_equal(dr_data_text(t->path, 4, 1.0, &d, err, sizeof err),
                   DR_EBADARG);
  assert_null(d);
}

static void test_rng(void **state) {
  /* Reference vectors: splitmix64 from 0, xoshiro256** from {1, 2, 3, 4}. */
  uint64_t sm = 0;
  assert_int_equal(dr__splitmix64(&sm), 0xe220a8397b1dcdafULL);
  dr_rng_t x = {{1, 2, 3, 4}};
  assert_int_equal(dr_rng_next(&x), 11520);
  assert_int_equal(dr_rng_next(&x), 0);
  assert_int_equal(dr_rng_next(&x), 1509978240);
  assert_int_equal(dr_rng_next(&x), 1215971899390074240ULL);

  dr_rng_t a, b;
  dr_rng_seed(&a, 1);
  dr_rng_seed(&b, 1);
  for (int i = 0; i < 100; i++) assert_int_equal(dr_rng_next(&a), dr_rng_next(&b));
  dr_rng_seed(&b, 2);
  assert_int_not_equal(dr_rng_next(&a), dr_rng_next(&b));
  double mean = 0;
  for (int i = 0; i < 100000; i++) {
    double u = dr_rng_uniform(&a);
    assert_true(u >= 0.0 && u < 1.0);
    mean += u;
  }
  mean /= 100000;
  assert_true(mean > 0.49 && mean < 0.51);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_synthetic_deterministic),
      cmocka_unit_test(test_synthetic_balanced),
      cmocka_unit_test(test_synthetic_bad_args),
      cmocka_unit_test_setup_teardown(test_text_positions, tmp_setup,
                                      tmp_teardown),
      cmocka_unit_test_setup_teardown(test_text_errors, tmp_setup,
                                      tmp_teardown),
      cmocka_unit_test(test_rng),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
