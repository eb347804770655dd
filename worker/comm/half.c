/* fp16 and bf16 conversions and sums. See half.h. Bit manipulation only:
 * no rounding mode or hardware conversion is assumed, so every rank of a
 * job computes the same bits on any x86 or ARM host. */
#include "half.h"

#include <string.h>

static uint32_t bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  return x;
}

static float from_bits(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof(f));
  return f;
}

uint16_t dr_f32_to_f16(float f) {
  uint32_t x = bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN: quiet, top payload bits kept */
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x1ffu));
  if (ax >= 0x477ff000u) /* 65520 and above (and inf) round to inf */
    return (uint16_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) { /* normal: 2^-14 and above */
    /* Round to nearest even on the 13 bits dropped; a carry moves into
     * the exponent, which is the right result. */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
  }
  if (ax < 0x33000000u) /* below 2^-25: zero (2^-25 itself ties to 0) */
    return sign;
  /* Subnormal: k * 2^-24 with k = m * 2^(e - 126). */
  uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e; /* 14 .. 24 */
  uint32_t k = m >> shift, rem = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (k & 1u)))
    k++;
  return (uint16_t)(sign | k);
}

float dr_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) /* inf, NaN */
    return from_bits(sign | 0x7f800000u | (m << 13));
  if (e != 0)
    return from_bits(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0)
    return from_bits(sign);
  /* Subnormal: normalise. */
  uint32_t ex = 113u;
  while ((m & 0x400u) == 0) {
    m <<= 1;
    ex--;
  }
  return from_bits(sign | (ex << 23) | ((m & 0x3ffu) << 13));
}

uint16_t dr_f32_to_bf16(float f) {
  uint32_t x = bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x40u);
  /* Near the top a carry makes an infinity: that is the rounding. */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float dr_bf16_to_f32(uint16_t h) { return from_bits((uint32_t)h << 16); }

/* x86's F16C converts 8 at a time with the same rounding (to nearest
 * even, subnormals kept: the conversion instructions ignore MXCSR's
 * flush-to-zero), so a host with it and one without give the same bits.
 * The loops below do the bulk; the scalar code the rest. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_F16C_PATH 1

static int have_f16c(void) {
  static _Atomic int known = -1;
  int v = known;
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
    known = v;
  }
  return v;
}

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* The number of elements done (a multiple of 8); *bad |= a non-finite
 * result. */
__attribute__((target("avx2,f16c"))) static size_t
f16c_from_f32(const float *in, float mul, uint16_t *out, size_t n, int *bad) {
  __m256 m = _mm256_set1_ps(mul);
  __m128i exp = _mm_set1_epi16(0x7c00), acc = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(in + i), m),
                                RNE);
    _mm_storeu_si128((__m128i *)(void *)(out + i), h);
    acc = _mm_or_si128(acc, _mm_cmpeq_epi16(_mm_and_si128(h, exp), exp));
  }
  *bad |= _mm_movemask_epi8(acc) != 0;
  return i;
}

__attribute__((target("avx2,f16c"))) static size_t
f16c_to_f32(const uint16_t *in, float mul, float *out, size_t n, int *bad) {
  __m256 m = _mm256_set1_ps(mul);
  __m128i exp = _mm_set1_epi16(0x7c00), acc = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(in + i));
    acc = _mm_or_si128(acc, _mm_cmpeq_epi16(_mm_and_si128(h, exp), exp));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtph_ps(h), m));
  }
  *bad |= _mm_movemask_epi8(acc) != 0;
  return i;
}

__attribute__((target("avx2,f16c"))) static size_t
f16c_add(uint16_t *d, const uint16_t *s, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_cvtph_ps(
        _mm_loadu_si128((const __m128i *)(const void *)(d + i)));
    __m256 b = _mm256_cvtph_ps(
        _mm_loadu_si128((const __m128i *)(const void *)(s + i)));
    _mm_storeu_si128((__m128i *)(void *)(d + i),
                     _mm256_cvtps_ph(_mm256_add_ps(a, b), RNE));
  }
  return i;
}
#endif

void dr_f16_add(uint16_t *restrict d, const uint16_t *restrict s, size_t n) {
  size_t i = 0;
#ifdef HAVE_F16C_PATH
  if (have_f16c())
    i = f16c_add(d, s, n);
#endif
  for (; i < n; i++)
    d[i] = dr_f32_to_f16(dr_f16_to_f32(d[i]) + dr_f16_to_f32(s[i]));
}

void dr_bf16_add(uint16_t *restrict d, const uint16_t *restrict s, size_t n) {
  for (size_t i = 0; i < n; i++)
    d[i] = dr_f32_to_bf16(dr_bf16_to_f32(d[i]) + dr_bf16_to_f32(s[i]));
}

int dr_f32_to_f16_scaled(const float *in, float mul, uint16_t *out,
                         size_t n) {
  uint16_t bad = 0;
  size_t i = 0;
#ifdef HAVE_F16C_PATH
  int vbad = 0;
  if (have_f16c())
    i = f16c_from_f32(in, mul, out, n, &vbad);
  bad = (uint16_t)vbad;
#endif
  for (; i < n; i++) {
    out[i] = dr_f32_to_f16(in[i] * mul);
    bad |= (uint16_t)((out[i] & 0x7c00u) == 0x7c00u);
  }
  return bad != 0;
}

int dr_f32_to_bf16_scaled(const float *in, float mul, uint16_t *out,
                          size_t n) {
  uint16_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    out[i] = dr_f32_to_bf16(in[i] * mul);
    bad |= (uint16_t)((out[i] & 0x7f80u) == 0x7f80u);
  }
  return bad != 0;
}

int dr_f16_to_f32_scaled(const uint16_t *in, float mul, float *out,
                         size_t n) {
  uint16_t bad = 0;
  size_t i = 0;
#ifdef HAVE_F16C_PATH
  int vbad = 0;
  if (have_f16c())
    i = f16c_to_f32(in, mul, out, n, &vbad);
  bad = (uint16_t)vbad;
#endif
  for (; i < n; i++) {
    bad |= (uint16_t)((in[i] & 0x7c00u) == 0x7c00u);
    out[i] = dr_f16_to_f32(in[i]) * mul;
  }
  return bad != 0;
}

int dr_bf16_to_f32_scaled(const uint16_t *in, float mul, float *out,
                          size_t n) {
  uint16_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    bad |= (uint16_t)((in[i] & 0x7f80u) == 0x7f80u);
    out[i] = dr_bf16_to_f32(in[i]) * mul;
  }
  return bad != 0;
}
