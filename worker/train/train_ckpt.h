/* Internals of train's checkpoints, shared by train_ckpt.c (resume),
 * train_ckpt_save.c (writing), train_ckpt_fit.c (whether a file fits the
 * run) and train_ckpt_cmp.c (compression and loss-scale state). */
#ifndef DR_TRAIN_CKPT_H
#define DR_TRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "train.h"

/* train_ckpt.c: what resuming and writing share. */

/* The exit code of a failure of ckpt.h: a disk that refuses stops the
 * job (a restart would fail at the same step), memory is its own code,
 * anything else may pass with a restart. */
int dr__train_ckpt_exit_code(int rc);
/* What a person does about a failure of the storage kind in dir, in buf
 * (returned). */
const char *dr__train_ckpt_advice(char *buf, size_t n, int rc,
                                  const char *dir);
/* " (exit N: ...)" for a code of dr__train_ckpt_exit_code, in buf
 * (returned). */
const char *dr__train_ckpt_exit_note(int code, char *buf, size_t n);
/* The model's parameters in registration order, then the optimizer state,
 * then cmp_elems floats of compression state at cmp: the payload's spans,
 * *n of them, pointing into the run's live state. Caller frees; NULL when
 * out of memory. */
dr_ckpt_span_t *dr__train_ckpt_spans(dr_run_t *r, float *cmp,
                                     uint64_t cmp_elems, size_t *n);

/* train_ckpt_fit.c */

/* The header this run would write at step: shape, data, batch, epoch
 * position, and the schedule and hyper-parameters as given. */
void dr__train_ckpt_header(dr_run_t *r, uint64_t step, dr_ckpt_header_t *h);

/* 0 when the checkpoint f (read from path) fits this run; else prints one
 * line naming the first field that differs, with both values, and returns
 * DR_TRAIN_ECONFIG. Changed schedule settings (--steps among them) and
 * hyper-parameters are named together in one line; with
 * --allow-schedule-change they pass, reported in that line. A larger
 * --steps passes with --extend-schedule too, its effect said in one line.
 * *sched_steps: the total_steps of the schedule the run goes on with. */
int dr__train_ckpt_fits(dr_run_t *r, const char *path,
                        const dr_ckpt_header_t *f, uint64_t *sched_steps);

/* train_ckpt_cmp.c: gradient compression and loss scaling. */

/* Sets the header's compression and loss-scale fields from this run. */
void dr__train_ckpt_cmp_header(dr_run_t *r, dr_ckpt_header_t *h);
/* 0 when f's compression and loss-scale settings fit this run (or differ
 * and --allow-schedule-change is given, said in one line), else prints
 * one line naming them and returns DR_TRAIN_ECONFIG. *take_state: the
 * file's compression state is this run's to load; *take_scale: its loss
 * scaler's state. */
int dr__train_ckpt_cmp_fits(dr_run_t *r, const char *path,
                            const dr_ckpt_header_t *f, int *take_state,
                            int *take_scale);
/* Every rank: *out := Q then every rank's error feedback (rank 0 first),
 * *n floats (0 and NULL without any); caller frees. An exit code. */
int dr__train_ckpt_cmp_gather(dr_run_t *r, float **out, uint64_t *n);
/* Every rank: rank 0's state (as gathered; NULL elsewhere) is broadcast
 * and each rank takes Q and its own error feedback. An exit code. */
int dr__train_ckpt_cmp_scatter(dr_run_t *r, float *state);

#endif /* DR_TRAIN_CKPT_H */
