/* An elastic job's global batch across world sizes (worker/train/
 * elastic_batch.c): what a resume at another size does with the
 * checkpoint's global batch, and which sizes a global batch cannot be
 * split over. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "elastic_batch.h"

#define MAXB (1u << 20)

static void test_fit_same(void **state) {
  (void)state;
  uint32_t b = 0;
  /* 8 per rank on 6 ranks: the checkpoint's 48 as it is. */
  assert_int_equal(dr_eb_fit(48, 8, 6, 1, MAXB, &b), DR_EB_SAME);
  assert_int_equal(b, 8);
  assert_int_equal(dr_eb_fit(96, 8, 6, 2, MAXB, &b), DR_EB_SAME);
  assert_int_equal(b, 8);
}

static void test_fit_keep(void **state) {
  (void)state;
  uint32_t b = 0;
  /* 3 nodes of 2 lose one: 48 over 4 ranks is 12 each. */
  assert_int_equal(dr_eb_fit(48, 8, 4, 1, MAXB, &b), DR_EB_KEEP);
  assert_int_equal(b, 12);
  /* Grown: 48 over 12 ranks is 4 each. */
  assert_int_equal(dr_eb_fit(48, 8, 12, 1, MAXB, &b), DR_EB_KEEP);
  assert_int_equal(b, 4);
  /* With accumulation: 96 = b x 4 ranks x 2. */
  assert_int_equal(dr_eb_fit(96, 8, 4, 2, MAXB, &b), DR_EB_KEEP);
  assert_int_equal(b, 12);
  /* One rank takes it all, up to the model's limit. */
  assert_int_equal(dr_eb_fit(MAXB, 1, 1, 1, MAXB, &b), DR_EB_KEEP);
  assert_int_equal(b, MAXB);
}

static void test_fit_unfit(void **state) {
  (void)state;
  uint32_t b = 0;
  /* 30 (5 on 6 ranks) over 4 ranks. */
  assert_int_equal(dr_eb_fit(30, 5, 4, 1, MAXB, &b), DR_EB_UNFIT);
  assert_int_equal(b, 5);
  /* Divisible by the world, not by world x accum. */
  assert_int_equal(dr_eb_fit(32, 8, 4, 3, MAXB, &b), DR_EB_UNFIT);
  /* Over the per-rank limit. */
  assert_int_equal(dr_eb_fit((uint64_t)MAXB * 2, 1, 1, 1, MAXB, &b),
                   DR_EB_UNFIT);
  /* Nothing recorded, or nothing to split over. */
  assert_int_equal(dr_eb_fit(0, 8, 4, 1, MAXB, &b), DR_EB_UNFIT);
  assert_int_equal(dr_eb_fit(48, 8, 0, 1, MAXB, &b), DR_EB_UNFIT);
  assert_int_equal(dr_eb_fit(48, 8, 4, 0, MAXB, &b), DR_EB_UNFIT);
}

static void test_unfit_nodes(void **state) {
  (void)state;
  uint32_t bad[4] = {0};
  /* 48 on 2 ranks a node: 2, 3, 4, 6 nodes divide; 5 does not. */
  assert_int_equal(dr_eb_unfit_nodes(48, 1, 2, 2, 6, bad, 4), 1);
  assert_int_equal(bad[0], 5);
  /* Every size of 2:3 divides 48 at 2 ranks a node. */
  assert_int_equal(dr_eb_unfit_nodes(48, 1, 2, 2, 3, bad, 4), 0);
  /* 8 on one rank a node over 1:8 nodes: 3, 5, 6, 7 do not; only the
   * first two fit in bad, all four are counted. */
  bad[0] = bad[1] = bad[2] = 0;
  assert_int_equal(dr_eb_unfit_nodes(8, 1, 1, 1, 8, bad, 2), 4);
  assert_int_equal(bad[0], 3);
  assert_int_equal(bad[1], 5);
  assert_int_equal(bad[2], 0);
  /* Accumulation counts: 16 x 1 rank x 3 micro-batches never divides. */
  assert_int_equal(dr_eb_unfit_nodes(16, 3, 1, 1, 2, bad, 4), 2);
}

static void test_common(void **state) {
  (void)state;
  /* 2 ranks a node, 2:3 nodes: lcm(4, 6) = 12. */
  assert_int_equal(dr_eb_common(1, 2, 2, 3, 1000), 12);
  /* 1:4 nodes of one rank, accum 2: lcm(2, 4, 6, 8) = 24. */
  assert_int_equal(dr_eb_common(2, 1, 1, 4, 1000), 24);
  /* The same over a limit of 23: none that fits. */
  assert_int_equal(dr_eb_common(2, 1, 1, 4, 23), 0);
  /* Many sizes overflow any limit before they overflow 64 bits. */
  assert_int_equal(dr_eb_common(1, 8, 1, 1000, UINT64_MAX / 2), 0);
  /* Whatever it returns, every size divides it. */
  uint64_t l = dr_eb_common(3, 4, 2, 7, 1u << 30);
  assert_true(l > 0);
  for (uint64_t n = 2; n <= 7; n++)
    assert_int_equal(l % (n * 4 * 3), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fit_same),   cmocka_unit_test(test_fit_keep),
      cmocka_unit_test(test_fit_unfit),  cmocka_unit_test(test_unfit_nodes),
      cmocka_unit_test(test_common),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
