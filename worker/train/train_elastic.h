/* An elastic job's global batch across world sizes (train_elastic.c). */
#ifndef DR_TRAIN_ELASTIC_H
#define DR_TRAIN_ELASTIC_H

#include "train.h"

/* Under ddprun --nnodes MIN:MAX without --global-batch: the per-rank
 * batch that keeps the newest checkpoint's global batch on this world
 * size (said once), or DR_TRAIN_ECONFIG with one line when it cannot be
 * split; on a fresh start, a warning naming the sizes the job may reach
 * that its global batch cannot be split over. Every rank calls it, after
 * the process group is up and before setup. 0 or an exit code. */
int dr_train_elastic(dr_run_t *r);

#endif /* DR_TRAIN_ELASTIC_H */
