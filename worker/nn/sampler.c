/* The distributed sampler. The epoch's permutation of [0, n) is a keyed
 * Feistel network on the next power of four, cycle-walked into [0, n): a
 * bijection computed one position at a time, so a rank builds its shard
 * without the whole permutation and without allocating. The keys come
 * from xoshiro256** seeded with seed + epoch (as DistributedSampler seeds
 * its generator). */
#include "nn_internal.h"

#define FEISTEL_ROUNDS 6

typedef struct {
  uint64_t key[FEISTEL_ROUNDS];
  uint64_t n;
  unsigned half_bits;
  uint64_t mask;
} perm_t;

static void perm_init(perm_t *p, uint64_t seed, uint64_t epoch, uint64_t n) {
  dr_rng_t r;
  dr_rng_seed(&r, seed + epoch);
  for (int i = 0; i < FEISTEL_ROUNDS; i++) p->key[i] = dr_rng_next(&r);
  p->n = n;
  unsigned bits = 0;
  while (bits < 64 && ((uint64_t)1 << bits) < n) bits++;
  p->half_bits = bits < 2 ? 1 : (bits + 1) / 2;
  p->mask = ((uint64_t)1 << p->half_bits) - 1;
}

static uint64_t perm_at(const perm_t *p, uint64_t i) {
  /* Cycle walking: the domain holds fewer than 4n values, so the expected
   * number of passes is under four. Terminates because the network is a
   * bijection and i < n lies on a cycle that returns to [0, n). */
  uint64_t x = i;
  do {
    uint64_t l = x >> p->half_bits, r = x & p->mask;
    for (int k = 0; k < FEISTEL_ROUNDS; k++) {
      uint64_t t = l ^ (dr__mix64(r ^ p->key[k]) & p->mask);
      l = r;
      r = t;
    }
    x = (l << p->half_bits) | r;
  } while (x >= p->n);
  return x;
}

uint64_t dr_sampler_perm(uint64_t seed, uint64_t epoch, uint64_t n,
                         uint64_t pos) {
  if (pos >= n) return pos;
  perm_t p;
  perm_init(&p, seed, epoch, n);
  return perm_at(&p, pos);
}

uint64_t dr_sampler_shard_len(uint64_t n, uint32_t world) {
  return world ? n / world : 0;
}

void dr_sampler_shard(uint64_t seed, uint64_t epoch, uint64_t n,
                      uint32_t rank, uint32_t world, uint64_t *out) {
  if (rank >= world) return;
  perm_t p;
  perm_init(&p, seed, epoch, n);
  const uint64_t len = dr_sampler_shard_len(n, world);
  for (uint64_t j = 0; j < len; j++) out[j] = perm_at(&p, rank + j * world);
}
