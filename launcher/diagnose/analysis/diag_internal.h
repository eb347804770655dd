/* Internals of `ddprun diagnose`'s analysis, shared by diag_analyze.c (the
 * per-step metrics and their medians), diag_patterns.c, diag_recommend.c
 * and diag_backward.c. Definitions of the metrics: diag_analyze.h. */
#ifndef DR_DIAG_INTERNAL_H
#define DR_DIAG_INTERNAL_H

#include "diag_analyze.h"

#define DR__DG_MIB 1048576.0

/* One rank in one analysed step (ms; -1: unknown). */
typedef struct {
  const dr_dg_step_t *st;
  double step, data, fwd, bwd, opt;
  double comm, hidden, exposed, arrival, wait, own;
  const dr_dg_coll_t **grad; /* its gradient all-reduces, in start order */
  size_t n_grad;
  double last_end_us;        /* the last gradient all-reduce's end, or -1 */
  double backlog;            /* the longest back-to-back run, ms */
  size_t backlog_n;          /* all-reduces in it */
} dr__dg_sample_t;

/* The analysed ranks (by rank) and their samples, rank-major. */
typedef struct {
  size_t n_ranks, n_steps;
  const dr_dg_rank_t **rank;  /* [n_ranks] */
  dr__dg_sample_t *s;         /* [n_ranks * n_steps] */
} dr__dg_ctx_t;

static inline dr__dg_sample_t *dr__dg_at(const dr__dg_ctx_t *c, size_t r,
                                         size_t k) {
  return &c->s[r * c->n_steps + k];
}

/* The median of v[0..n) (reordered), ignoring negative (unknown) values;
 * -1 when none is known. */
double dr__dg_median(double *v, size_t n);

/* The ranks with steps, sorted by rank, into c->rank; a->world, missing
 * ranks, source and backend, with their notes (diag_align.c). 0 or
 * -ENOMEM. */
int dr__dg_pick_ranks(const dr_dg_rank_t *ranks, size_t n, dr__dg_ctx_t *c,
                      dr_dg_analysis_t *a);

/* The steps every picked rank has within o: c->n_steps and c->s with each
 * sample's step set; a->first_step, last_step, n_steps, and a note when
 * the ranks' steps differ. 0 or -ENOMEM. */
int dr__dg_align_steps(const dr_dg_options_t *o, dr__dg_ctx_t *c,
                       dr_dg_analysis_t *a);

/* The patterns, from the filled stats and recommendation (diag_patterns.c).
 * 0 or -ENOMEM. */
int dr__dg_patterns(const dr__dg_ctx_t *c, dr_dg_analysis_t *a);

/* The recommendation (diag_recommend.c): fills a->rec. 0 or -ENOMEM. */
int dr__dg_recommend(const dr__dg_ctx_t *c, dr_dg_analysis_t *a);

/* The backward pass's slowest ops (diag_backward.c): fills a->bwd, from
 * the filled samples. 0 or -ENOMEM. */
int dr__dg_backward(const dr__dg_ctx_t *c, dr_dg_analysis_t *a);

#endif /* DR_DIAG_INTERNAL_H */
