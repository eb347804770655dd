/* xoshiro256** seeded through splitmix64, the only randomness of the
 * model, the data and the sampler: every rank draws the same numbers. */
#include <math.h>
#include <pthread.h>
#include <time.h>

#include "nn_internal.h"
#include "mono.h"

static inline uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

uint64_t dr__splitmix64(uint64_t *state) {
  *state += 0x9e3779b97f4a7c15ULL;
  return dr__mix64(*state);
}

uint64_t dr__mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Four consecutive splitmix64 outputs are distinct (it is a bijection of
 * distinct states), so the state is never all zero. */
void dr_rng_seed(dr_rng_t *r, uint64_t seed) {
  uint64_t s = seed;
  for (int i = 0; i < 4; i++) r->s[i] = dr__splitmix64(&s);
}

uint64_t dr_rng_next(dr_rng_t *r) {
  uint64_t *s = r->s;
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double dr_rng_uniform(dr_rng_t *r) {
  return (double)(dr_rng_next(r) >> 11) * 0x1.0p-53;
}

float dr_rng_normal(dr_rng_t *r) {
  double u1 = 1.0 - dr_rng_uniform(r); /* (0, 1]: log stays finite */
  double u2 = dr_rng_uniform(r);
  return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t dr__rng_below(dr_rng_t *r, uint64_t bound) {
  /* Reject the lowest (2^64 mod bound) values so every residue is equally
   * likely. */
  uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t x = dr_rng_next(r);
    if (x >= threshold) return x % bound;
  }
}

void dr__rng_normal_fill(dr_rng_t *r, float *out, size_t n) {
  const float two_pi = (float)(2.0 * M_PI);
  size_t i = 0;
  for (; i + 1 < n; i += 2) {
    float u1 = 1.0f - (float)(dr_rng_next(r) >> 40) * 0x1.0p-24f;
    float u2 = (float)(dr_rng_next(r) >> 40) * 0x1.0p-24f;
    float rad = sqrtf(-2.0f * logf(u1));
    out[i] = rad * cosf(two_pi * u2);
    out[i + 1] = rad * sinf(two_pi * u2);
  }
  if (i < n) out[i] = dr_rng_normal(r);
}

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

uint32_t dr__crc32(uint32_t crc, const void *buf, size_t n_bytes) {
  pthread_once(&crc_once, crc_table_init);
  const unsigned char *p = buf;
  crc = ~crc;
  for (size_t i = 0; i < n_bytes; i++)
    crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}
