/* The distributed sampler: DistributedSampler(shuffle, drop_last) with
 * seed + epoch, and the union property the equivalence of world sizes
 * rests on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "data.h"

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The epoch's permutation, position by position. */
static uint64_t *full_perm(uint64_t seed, uint64_t epoch, uint64_t n) {
  uint64_t *p = malloc((n ? n : 1) * sizeof *p);
  assert_non_null(p);
  for (uint64_t i = 0; i < n; i++) p[i] = dr_sampler_perm(seed, epoch, n, i);
  return p;
}

static void test_permutation(void **state) {
  static const uint64_t sizes[] = {1, 2, 3, 5, 16, 17, 1000, 4097};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    const uint64_t n = sizes[s];
    uint64_t *p = full_perm(9, 0, n);
    qsort(p, n, sizeof *p, cmp_u64);
    for (uint64_t i = 0; i < n; i++) assert_int_equal(p[i], i);
    free(p);
  }
  /* Shuffled: few fixed points, not the identity. */
  uint64_t *p = full_perm(9, 0, 1000);
  int fixed = 0;
  for (int i = 0; i < 1000; i++) fixed += p[i] == (uint64_t)i;
  assert_true(fixed < 10);
  free(p);
}

/* Shards are disjoint, of equal length n / world, together exactly the
 * permutation cut to a multiple of world, each rank's at r, r + W, ... */
static void test_shards(void **state) {
  static const uint32_t worlds[] = {1, 2, 3, 4, 7, 8};
  const uint64_t n = 1003;
  uint64_t *perm = full_perm(5, 2, n);
  for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
    const uint32_t W = worlds[w];
    const uint64_t len = dr_sampler_shard_len(n, W);
    assert_int_equal(len, n / W);
    uint64_t *all = malloc(len * W * sizeof *all);
    for (uint32_t r = 0; r < W; r++) {
      uint64_t *shard = all + r * len;
      dr_sampler_shard(5, 2, n, r, W, shard);
      for (uint64_t j = 0; j < len; j++) assert_int_equal(shard[j], perm[r + j * W]);
    }
    qsort(all, len * W, sizeof *all, cmp_u64);
    for (uint64_t i = 1; i < len * W; i++) assert_true(all[i - 1] < all[i]);
    uint64_t *head = malloc(len * W * sizeof *head);
    memcpy(head, perm, len * W * sizeof *head);
    qsort(head, len * W, sizeof *head, cmp_u64);
    assert_memory_equal(all, head, len * W * sizeof *all);
    free(head);
    free(all);
  }
  free(perm);
  assert_int_equal(dr_sampler_shard_len(3, 4), 0);
  assert_int_equal(dr_sampler_shard_len(8, 0), 0);
}

/* Step s of W ranks with batch b covers exactly step s of one rank with
 * batch W * b: perm[s W b, (s + 1) W b). */
static void test_union_matches_world_one(void **state) {
  static const uint32_t worlds[] = {1, 2, 3, 4, 8};
  const uint64_t n = 5000, b = 12;
  uint64_t *perm = full_perm(77, 3, n);
  for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
    const uint32_t W = worlds[w];
    const uint64_t len = dr_sampler_shard_len(n, W);
    uint64_t *shards = malloc(len * W * sizeof *shards);
    for (uint32_t r = 0; r < W; r++)
      dr_sampler_shard(77, 3, n, r, W, shards + r * len);
    uint64_t *one = malloc(n * sizeof *one); /* world 1 */
    dr_sampler_shard(77, 3, n, 0, 1, one);
    assert_memory_equal(one, perm, n * sizeof *one);
    const uint64_t steps = len / b;
    uint64_t *got = malloc(W * b * sizeof *got), *want = malloc(W * b * sizeof *want);
    for (uint64_t s = 0; s < steps; s++) {
      for (uint32_t r = 0; r < W; r++)
        memcpy(got + r * b, shards + r * len + s * b, b * sizeof *got);
      memcpy(want, one + s * W * b, W * b * sizeof *want);
      qsort(got, W * b, sizeof *got, cmp_u64);
      qsort(want, W * b, sizeof *want, cmp_u64);
      assert_memory_equal(got, want, W * b * sizeof *got);
    }
    free(got);
    free(want);
    free(one);
    free(shards);
  }
  free(perm);
}

static void test_epochs_and_seeds_differ(void **state) {
  const uint64_t n = 1000;
  uint64_t a[500], b[500], c[500], d[500];
  dr_sampler_shard(1, 0, n, 1, 2, a);
  dr_sampler_shard(1, 1, n, 1, 2, b);
  dr_sampler_shard(2, 0, n, 1, 2, c);
  dr_sampler_shard(1, 0, n, 1, 2, d);
  assert_memory_equal(a, d, sizeof a);
  int same_ab = 0, same_ac = 0;
  for (int i = 0; i < 500; i++) {
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
  }
  assert_true(same_ab < 10);
  assert_true(same_ac < 10);
  /* PyTorch seeds the epoch with seed + epoch: (1, 1) is (2, 0). */
  assert_memory_equal(b, c, sizeof b);
}

static void test_large_n_without_allocation(void **state) {
  /* A shard of a huge index space costs only its own length. */
  const uint64_t n = (uint64_t)1 << 40;
  uint64_t out[4];
  assert_int_equal(dr_sampler_shard_len(n, 1u << 30), 1024);
  for (int i = 0; i < 4; i++) {
    out[i] = dr_sampler_perm(3, 0, n, (uint64_t)i);
    assert_true(out[i] < n);
  }
  assert_true(out[0] != out[1] && out[1] != out[2]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_permutation),
      cmocka_unit_test(test_shards),
      cmocka_unit_test(test_union_matches_world_one),
      cmocka_unit_test(test_epochs_and_seeds_differ),
      cmocka_unit_test(test_large_n_without_allocation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
