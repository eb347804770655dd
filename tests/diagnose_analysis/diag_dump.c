/* Prints the report of a synthetic job, for diag_json.sh:
 *   diag_dump [--text] full|bare|partial|empty|no_backward
 * full: 4 ranks, sized buckets, rank 3 slow by its data, two backward
 * ops; bare: no
 * collectives; partial: world 8 with 6 traces, unequal steps, unknown
 * sizes; empty: no trace; no_backward: no backward pass (its ops then
 * count for nothing). */
#include <stdio.h>
#include <string.h>

#include "diag_analyze.h"
#include "diag_report.h"
#include "synth.h"

/* Gradients at 10..60 ms of the backward pass; buckets of 2, 4, 3 MiB at
 * 20, 40, 60 taking 1 + MiB ms; rank 3 loads data 20 ms longer, so the
 * others' last all-reduce ends 20 ms later. */
static void full(size_t r, size_t k, syn_step_t *s, void *arg) {
  static const double grad[] = {10, 20, 30, 40, 50, 60};
  static syn_coll_t c[8][3];
  int sized = *(const int *)arg;
  double late = r == 3 ? 0 : 20;
  c[r][0] = (syn_coll_t){sized * 2, 20, 20, 23};
  c[r][1] = (syn_coll_t){sized * 4, 40, 40, 45};
  c[r][2] = (syn_coll_t){sized * 3, 60, 60, 64 + late};
  s->data = r == 3 ? 23 : 3, s->fwd = 17, s->bwd = 60, s->opt = 10;
  s->grad = grad;
  s->n_grad = 6;
  s->coll = c[r];
  s->n_coll = 3;
}

static void bare(size_t r, size_t k, syn_step_t *s, void *arg) {
  s->data = 1, s->fwd = 10, s->bwd = 20, s->opt = 5;
}

int main(int argc, char **argv) {
  int text = argc > 2 && strcmp(argv[1], "--text") == 0;
  const char *what = argc > 1 ? argv[argc - 1] : "";
  dr_dg_rank_t *r = NULL;
  dr_dg_rank_t use[8];
  size_t n = 0, made = 0;
  int sized = 1, unsized = 0;
  if (strcmp(what, "full") == 0 || strcmp(what, "no_backward") == 0) {
    r = syn_ranks(made = n = 4, 4, 5, 100, full, &sized);
    snprintf(r[0].path, sizeof(r[0].path), "dir/\"rank 0\"\\\t.json");
    for (size_t i = 0; i < n; i++)
      for (size_t k = 0; k < r[i].n_steps; k++) {
        syn_add_op(&r[i].steps[k], "AddmmBackward0", 40, 3);
        syn_add_op(&r[i].steps[k], "torch::autograd::AccumulateGrad", 6, 6);
      }
    if (strcmp(what, "no_backward") == 0)
      for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r[i].n_steps; k++)
          r[i].steps[k].bwd_t0_us = r[i].steps[k].bwd_t1_us = -1;
    memcpy(use, r, n * sizeof(*r));
  } else if (strcmp(what, "bare") == 0) {
    r = syn_ranks(made = n = 2, 2, 3, 0, bare, NULL);
    memcpy(use, r, n * sizeof(*r));
  } else if (strcmp(what, "partial") == 0) {
    r = syn_ranks(made = 8, 8, 4, 0, full, &unsized);
    for (size_t i = 0; i < 8; i++)
      if (i != 3 && i != 7)
        use[n++] = r[i];
    use[1].n_steps = 3; /* rank 1: steps 0 to 2 (a copy; r keeps 4) */
  } else if (strcmp(what, "empty") != 0) {
    fprintf(stderr, "usage: diag_dump [--text] "
            "full|bare|partial|empty|no_backward\n");
    return 2;
  }
  dr_dg_analysis_t a;
  if (dr_dg_analyze(use, n, NULL, &a) != 0) {
    fprintf(stderr, "diag_dump: out of memory\n");
    return 1;
  }
  int rc = text ? dr_dg_report_text(stdout, &a) : dr_dg_report_json(stdout, &a);
  dr_dg_analysis_free(&a);
  syn_free(r, made);
  return rc == 0 ? 0 : 1;
}
