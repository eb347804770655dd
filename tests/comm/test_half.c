/* fp16 and bf16 conversions (worker/comm/half.h): round to nearest even,
 * infinities and NaNs, subnormals, every fp16 value round-tripped, and a
 * sweep of fp32 bit patterns against the compiler's own _Float16 where it
 * has one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "half.h"

static float f(uint32_t bits) {
  float v;
  memcpy(&v, &bits, 4);
  return v;
}

static void test_f16_exact_and_range(void **state) {
  (void)state;
  assert_int_equal(dr_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(dr_f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(dr_f32_to_f16(65504.0f), 0x7bff);
  /* 65519.99 rounds down to 65504; 65520 is the tie that goes up (to
   * inf, the "even" neighbour). */
  assert_int_equal(dr_f32_to_f16(65519.0f), 0x7bff);
  assert_int_equal(dr_f32_to_f16(65520.0f), 0x7c00);
  assert_int_equal(dr_f32_to_f16(-1e10f), 0xfc00);
  assert_int_equal(dr_f32_to_f16(0.0f), 0x0000);
  assert_int_equal(dr_f32_to_f16(-0.0f), 0x8000);
}

static void test_f16_ties_to_even(void **state) {
  (void)state;
  /* 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: to 1 (even). */
  assert_int_equal(dr_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  /* 1 + 3 * 2^-11: halfway between 1 + 2^-10 (odd) and 1 + 2^-9: up. */
  assert_int_equal(dr_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  /* Just above the tie rounds up. */
  assert_int_equal(dr_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  /* A carry into the exponent: 2 - 2^-12 rounds to 2. */
  assert_int_equal(dr_f32_to_f16(2.0f - 0x1p-12f), 0x4000);
}

static void test_f16_subnormals(void **state) {
  (void)state;
  assert_int_equal(dr_f32_to_f16(0x1p-24f), 0x0001); /* smallest */
  assert_int_equal(dr_f32_to_f16(0x1p-14f), 0x0400); /* smallest normal */
  assert_int_equal(dr_f32_to_f16(0x1p-15f), 0x0200);
  /* 2^-25 ties between 0 and 2^-24: to 0; a bit above goes to 2^-24. */
  assert_int_equal(dr_f32_to_f16(0x1p-25f), 0x0000);
  assert_int_equal(dr_f32_to_f16(0x1.0002p-25f), 0x0001);
  /* 3 * 2^-25 ties between 1 and 2 (x 2^-24): to 2. */
  assert_int_equal(dr_f32_to_f16(3 * 0x1p-25f), 0x0002);
  assert_int_equal(dr_f32_to_f16(-0x1p-30f), 0x8000);
  assert_true(dr_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(dr_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
}

static void test_f16_inf_nan(void **state) {
  (void)state;
  assert_int_equal(dr_f32_to_f16(f(0x7f800000u)), 0x7c00);
  assert_int_equal(dr_f32_to_f16(f(0xff800000u)), 0xfc00);
  uint16_t n = dr_f32_to_f16(f(0x7fc00001u));
  assert_true(dr_f16_nonfinite(n) && (n & 0x3ff) != 0);
  /* A NaN whose payload lives only in the low bits stays a NaN. */
  n = dr_f32_to_f16(f(0x7f800001u));
  assert_true((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
  assert_true(dr_f16_to_f32(0x7c00) > 3e38f);
  float back = dr_f16_to_f32(0x7e00);
  assert_true(back != back);
  assert_false(dr_f16_nonfinite(0x7bff));
}

static void test_f16_round_trip_all(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0)
      continue; /* NaNs: quietened, checked above */
    assert_int_equal(dr_f32_to_f16(dr_f16_to_f32((uint16_t)h)), h);
  }
}

static void test_f16_against_compiler(void **state) {
  (void)state;
#ifdef __FLT16_MAX__
  for (uint64_t x = 0; x < (1ull << 32); x += 997) {
    float v = f((uint32_t)x);
    if (v != v)
      continue;
    _Float16 want = (_Float16)v;
    uint16_t wb;
    memcpy(&wb, &want, 2);
    if (dr_f32_to_f16(v) != wb)
      fail_msg("0x%08x: 0x%04x, the compiler says 0x%04x", (unsigned)x,
               dr_f32_to_f16(v), wb);
  }
#else
  skip();
#endif
}

static void test_bf16(void **state) {
  (void)state;
  assert_int_equal(dr_f32_to_bf16(1.0f), 0x3f80);
  /* 1 + 2^-8 ties between 1 and 1 + 2^-7: to 1; 1 + 3 * 2^-8 up. */
  assert_int_equal(dr_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  assert_int_equal(dr_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  /* The largest fp32 rounds to inf; bf16 keeps fp32's subnormals. */
  assert_int_equal(dr_f32_to_bf16(f(0x7f7fffffu)), 0x7f80);
  assert_int_equal(dr_f32_to_bf16(f(0x00010000u)), 0x0001);
  assert_int_equal(dr_f32_to_bf16(f(0x00008000u)), 0x0000); /* tie to 0 */
  assert_int_equal(dr_f32_to_bf16(f(0x00018000u)), 0x0002); /* tie up */
  uint16_t n = dr_f32_to_bf16(f(0x7f800001u));
  assert_true(dr_bf16_nonfinite(n) && (n & 0x7f) != 0);
  assert_int_equal(dr_f32_to_bf16(f(0xff800000u)), 0xff80);
  for (uint32_t h = 0; h < 65536; h++)
    if (!((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0))
      assert_int_equal(dr_f32_to_bf16(dr_bf16_to_f32((uint16_t)h)), h);
}

static void test_sums_and_scaling(void **state) {
  (void)state;
  uint16_t d[3] = {dr_f32_to_f16(60000.0f), dr_f32_to_f16(1.0f),
                   dr_f32_to_f16(1.0f)};
  uint16_t s[3] = {dr_f32_to_f16(60000.0f), dr_f32_to_f16(0x1p-11f),
                   dr_f32_to_f16(2.0f)};
  dr_f16_add(d, s, 3);
  assert_int_equal(d[0], 0x7c00); /* each finite, the sum overflows */
  assert_int_equal(d[1], 0x3c00); /* rounded in fp16: the tie to even */
  assert_true(dr_f16_to_f32(d[2]) == 3.0f);
  float in[2] = {1.0f, 70000.0f};
  uint16_t out[2];
  assert_int_equal(dr_f32_to_f16_scaled(in, 0.5f, out, 1), 0);
  assert_true(dr_f16_to_f32(out[0]) == 0.5f);
  assert_int_equal(dr_f32_to_f16_scaled(in, 1.0f, out, 2), 1);
  assert_int_equal(dr_f32_to_f16_scaled(in, 0.5f, out, 2), 0);
  float back[2];
  assert_int_equal(dr_f16_to_f32_scaled(out, 2.0f, back, 2), 0);
  assert_true(back[0] == 1.0f);
  uint16_t inf = 0x7c00;
  assert_int_equal(dr_f16_to_f32_scaled(&inf, 1.0f, back, 1), 1);
  assert_int_equal(dr_f32_to_bf16_scaled(in, 1e34f, out, 2), 1);
  uint16_t bb[2] = {0x3f80, 0x3f80};
  dr_bf16_add(bb, bb + 1, 1);
  assert_int_equal(bb[0], 0x4000);
}

/* The bulk paths (F16C where the host has it) against the scalar
 * conversions, element by element, over values that round, overflow,
 * underflow into subnormals, and NaN. */
static void test_bulk_matches_scalar(void **state) {
  (void)state;
  enum { N = 1003 };
  static float in[N], back[N], ref[N];
  static uint16_t a[N], b[N], h[N];
  uint32_t x = 12345;
  for (size_t i = 0; i < N; i++) {
    x = x * 1664525u + 1013904223u;
    in[i] = f(x & 0xc7ffffffu); /* exponents that cover fp16's range */
  }
  in[5] = f(0x7fc00000u);
  in[6] = 70000.0f;
  in[7] = 0x1p-20f;
  dr_f32_to_f16_scaled(in, 0.5f, h, N);
  int any = 0;
  for (size_t i = 0; i < N; i++) {
    uint16_t want = dr_f32_to_f16(in[i] * 0.5f);
    any |= dr_f16_nonfinite(want);
    if (!(dr_f16_nonfinite(want) && (want & 0x3ff) != 0))
      assert_int_equal(h[i], want);
  }
  assert_int_equal(dr_f32_to_f16_scaled(in, 0.5f, h, N), any);
  dr_f16_to_f32_scaled(h, 3.0f, back, N);
  for (size_t i = 0; i < N; i++) {
    ref[i] = dr_f16_to_f32(h[i]) * 3.0f;
    if (ref[i] == ref[i])
      assert_memory_equal(&back[i], &ref[i], 4);
  }
  for (size_t i = 0; i < N; i++) {
    a[i] = dr_f32_to_f16(in[i] * 0.01f);
    b[i] = dr_f32_to_f16(in[(i * 7) % N] * 0.01f);
  }
  memcpy(h, a, sizeof(a));
  dr_f16_add(h, b, N);
  for (size_t i = 0; i < N; i++) {
    uint16_t want = dr_f32_to_f16(dr_f16_to_f32(a[i]) + dr_f16_to_f32(b[i]));
    if (!(dr_f16_nonfinite(want) && (want & 0x3ff) != 0))
      assert_int_equal(h[i], want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f16_exact_and_range),
      cmocka_unit_test(test_f16_ties_to_even),
      cmocka_unit_test(test_f16_subnormals),
      cmocka_unit_test(test_f16_inf_nan),
      cmocka_unit_test(test_f16_round_trip_all),
      cmocka_unit_test(test_f16_against_compiler),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_sums_and_scaling),
      cmocka_unit_test(test_bulk_matches_scalar),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
