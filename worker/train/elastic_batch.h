/* The global batch of an elastic job (ddprun --nnodes MIN:MAX) across
 * world sizes: what a resume at another size does with the checkpoint's
 * global batch, and which sizes the job may reach that a global batch
 * cannot be split over. Arithmetic only; train_elastic.c applies it. */
#ifndef DR_ELASTIC_BATCH_H
#define DR_ELASTIC_BATCH_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  DR_EB_SAME,  /* batch x world x accum is the checkpoint's already */
  DR_EB_KEEP,  /* another per-rank batch (*per_rank) keeps it */
  DR_EB_UNFIT  /* world x accum does not divide it, or the per-rank
                  batch would exceed max_batch */
} dr_eb_verdict_t;

/* The checkpoint's global batch ckpt_global against a run of batch per
 * rank on world ranks with accum micro-batches per step. *per_rank is the
 * batch per rank that keeps it (DR_EB_KEEP), else batch. */
dr_eb_verdict_t dr_eb_fit(uint64_t ckpt_global, uint32_t batch,
                          uint32_t world, uint32_t accum, uint32_t max_batch,
                          uint32_t *per_rank);

/* The node counts in [min_nodes, max_nodes] over which global cannot be
 * split (nodes x local_world x accum does not divide it), smallest first:
 * up to n of them into bad; returns how many there are in all. */
size_t dr_eb_unfit_nodes(uint64_t global, uint32_t accum,
                         uint32_t local_world, uint32_t min_nodes,
                         uint32_t max_nodes, uint32_t *bad, size_t n);

/* The smallest global batch that every world size of [min_nodes,
 * max_nodes] x local_world x accum divides (their least common multiple),
 * or 0 when it exceeds limit. */
uint64_t dr_eb_common(uint32_t accum, uint32_t local_world,
                      uint32_t min_nodes, uint32_t max_nodes,
                      uint64_t limit);

#endif /* DR_ELASTIC_BATCH_H */
