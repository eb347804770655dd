/* fp16 (IEEE binary16) and bf16 (bfloat16) next to fp32, for gradients
 * that travel in two bytes.
 *
 * Conversions from fp32 round to nearest, ties to even, as the hardware
 * does: a value beyond the narrow type's range becomes an infinity of its
 * sign (fp16: 65520 and above, since 65504 is the largest finite one), a
 * value below half the smallest subnormal becomes a zero of its sign,
 * subnormals are kept (fp16: 2^-24 .. 2^-14; bf16 has fp32's range), and
 * a NaN stays a NaN (quiet, its sign kept). Conversions to fp32 are exact.
 *
 * The sums are what the process group's reductions use: each pair added
 * in fp32 and the result rounded to the narrow type, so a sum computed in
 * the same order gives the same bits everywhere.
 */
#ifndef DR_HALF_H
#define DR_HALF_H

#include <stddef.h>
#include <stdint.h>

uint16_t dr_f32_to_f16(float f);
float dr_f16_to_f32(uint16_t h);
uint16_t dr_f32_to_bf16(float f);
float dr_bf16_to_f32(uint16_t h);

/* 1 when h is an infinity or a NaN. */
static inline int dr_f16_nonfinite(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u;
}
static inline int dr_bf16_nonfinite(uint16_t h) {
  return (h & 0x7f80u) == 0x7f80u;
}

/* d[i] := round(d[i] + s[i]) for n elements. */
void dr_f16_add(uint16_t *restrict d, const uint16_t *restrict s, size_t n);
void dr_bf16_add(uint16_t *restrict d, const uint16_t *restrict s, size_t n);

/* out[i] := round(in[i] * mul); returns 1 when any out[i] is not finite
 * (an overflow of the narrow type, or an input that was not finite). */
int dr_f32_to_f16_scaled(const float *in, float mul, uint16_t *out, size_t n);
int dr_f32_to_bf16_scaled(const float *in, float mul, uint16_t *out,
                          size_t n);
/* out[i] := in[i] * mul in fp32; returns 1 when any in[i] is not
 * finite. */
int dr_f16_to_f32_scaled(const uint16_t *in, float mul, float *out, size_t n);
int dr_bf16_to_f32_scaled(const uint16_t *in, float mul, float *out,
                          size_t n);

#endif /* DR_HALF_H */
