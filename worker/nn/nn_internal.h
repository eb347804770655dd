/* Internals shared by the files of worker/nn. Not part of its public face. */
#ifndef DR_NN_INTERNAL_H
#define DR_NN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

/* splitmix64: advances *state and returns the next output. */
uint64_t dr__splitmix64(uint64_t *state);

/* A stateless 64-bit mixer (splitmix64's finaliser): a bijection. */
uint64_t dr__mix64(uint64_t x);

/* Uniform in [0, bound), bound > 0, without modulo bias. */
uint64_t dr__rng_below(dr_rng_t *r, uint64_t bound);

/* n samples of N(0, 1), drawn in Box-Muller pairs (a different sequence
 * from repeated dr_rng_normal calls). */
void dr__rng_normal_fill(dr_rng_t *r, float *out, size_t n);


/* CRC-32 (zlib's polynomial 0xEDB88320), continued from crc (0 to start). */
uint32_t dr__crc32(uint32_t crc, const void *buf, size_t n_bytes);

#endif /* DR_NN_INTERNAL_H */
