/* Internals of train's checkpoints, shared by train_ckpt.c (resume and
 * save) and train_ckpt_fit.c (whether a file fits the run). */
#ifndef DR_TRAIN_CKPT_H
#define DR_TRAIN_CKPT_H

#include <stdint.h>

#include "ckpt.h"
#include "train.h"

/* The header this run would write at step: shape, data, batch, epoch
 * position, and the schedule and hyper-parameters as given. */
void dr__train_ckpt_header(dr_run_t *r, uint64_t step, dr_ckpt_header_t *h);

/* 0 when the checkpoint f (read from path) fits this run; else prints one
 * line naming the first field that differs, with both values, and returns
 * DR_TRAIN_ECONFIG. Changed schedule settings and hyper-parameters are
 * named together in one line; with --allow-schedule-change they pass,
 * reported in that line. */
int dr__train_ckpt_fits(dr_run_t *r, const char *path,
                        const dr_ckpt_header_t *f);

#endif /* DR_TRAIN_CKPT_H */
