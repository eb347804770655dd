/* The global batch of an elastic job across world sizes (elastic_batch.h). */
#include "elastic_batch.h"

dr_eb_verdict_t dr_eb_fit(uint64_t ckpt_global, uint32_t batch,
                          uint32_t world, uint32_t accum, uint32_t max_batch,
                          uint32_t *per_rank) {
  *per_rank = batch;
  uint64_t split = (uint64_t)world * accum;
  if (split == 0)
    return DR_EB_UNFIT;
  if ((uint64_t)batch * split == ckpt_global)
    return DR_EB_SAME;
  if (ckpt_global == 0 || ckpt_global % split != 0 ||
      ckpt_global / split > max_batch)
    return DR_EB_UNFIT;
  *per_rank = (uint32_t)(ckpt_global / split);
  return DR_EB_KEEP;
}

size_t dr_eb_unfit_nodes(uint64_t global, uint32_t accum,
                         uint32_t local_world, uint32_t min_nodes,
                         uint32_t max_nodes, uint32_t *bad, size_t n) {
  size_t found = 0;
  for (uint64_t nodes = min_nodes; nodes <= max_nodes; nodes++) {
    uint64_t split = nodes * local_world * accum;
    if (split != 0 && global % split == 0)
      continue;
    if (found < n)
      bad[found] = (uint32_t)nodes;
    found++;
  }
  return found;
}

static uint64_t gcd(uint64_t a, uint64_t b) {
  while (b != 0) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

uint64_t dr_eb_common(uint32_t accum, uint32_t local_world,
                      uint32_t min_nodes, uint32_t max_nodes,
                      uint64_t limit) {
  uint64_t l = 1;
  for (uint64_t nodes = min_nodes; nodes <= max_nodes; nodes++) {
    uint64_t split = nodes * local_world * accum;
    if (split == 0)
      return 0;
    uint64_t step = split / gcd(l, split);
    if (l > limit / step)
      return 0;
    l *= step;
  }
  return l;
}
