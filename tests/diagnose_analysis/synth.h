/* Synthetic trace models for the diagnose tests: ranks built in code, with
 * times chosen so every answer can be computed by hand. */
#ifndef DR_TEST_SYNTH_H
#define DR_TEST_SYNTH_H

#include "diag_trace.h"

#define SYN_MIB 1048576.0

/* One gradient all-reduce, ms from the backward pass's start. */
typedef struct {
  double mib;            /* 0: size unknown */
  double ready, start, end; /* ready -1: unknown */
} syn_coll_t;

/* One rank's step, ms. The step starts at t0, loads data for `data`, runs
 * the forward pass for `fwd`, the backward pass for `bwd`; the optimizer
 * starts `gap` after the later of the backward end and the last
 * collective's end and runs for `opt`. */
typedef struct {
  double t0, data, fwd, bwd, gap, opt;
  const double *grad;    /* ready times, ms from the backward start */
  size_t n_grad;
  const syn_coll_t *coll;
  size_t n_coll;
} syn_step_t;

/* n ranks (rank i, world `world`, source "torch") of n_steps steps
 * numbered first, first+1, ...; every step of rank r is shape(r, k). */
dr_dg_rank_t *syn_ranks(size_t n, int world, size_t n_steps, uint64_t first,
                        void (*shape)(size_t r, size_t k, syn_step_t *s,
                                      void *arg),
                        void *arg);

/* Writes one step into *st (allocating its arrays). */
void syn_fill_step(dr_dg_step_t *st, uint64_t step, const syn_step_t *s);

/* Appends a collective of any kind to st, absolute ms. */
void syn_add_coll(dr_dg_step_t *st, dr_dg_kind_t kind, double mib,
                  double ready, double start, double end);

/* Appends a backward op to st: its self time in ms, over runs runs. */
void syn_add_op(dr_dg_step_t *st, const char *name, double ms,
                uint32_t runs);

void syn_free(dr_dg_rank_t *r, size_t n);

#endif /* DR_TEST_SYNTH_H */
