/* train's host-shared weights (train_hostw.c; the mechanism is
 * host_weights.h). */
#ifndef DR_TRAIN_HOSTW_H
#define DR_TRAIN_HOSTW_H

#include "train.h"

/* Before the loop, after any resume (every rank holds the same weights):
 * decides with the other ranks whether to share, and sets it up (r->hostw,
 * the weights, the optimizer state and the buckets moved into the
 * segment). A collective: every rank calls it. Returns an exit code: 0
 * also when the run goes on with a copy each. */
int dr_train_hostw_open(dr_run_t *r);

/* In place of the optimizer, after the backward pass: the shards' sums
 * and updates, then the barrier; st gets the time as communication, all
 * of it exposed. Returns an exit code. */
int dr_train_hostw_step(dr_run_t *r, uint64_t step, dr_step_time_t *st);

#endif /* DR_TRAIN_HOSTW_H */
