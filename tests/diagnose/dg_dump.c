/* Prints what the readers make of traces, for the shell tests and the
 * benchmark (not `ddprun diagnose` itself).
 *   dg_dump FILE|DIR...            every rank, step, collective and
 *                                  backward op
 *   dg_dump --summary FILE|DIR...  one line per rank, and the read time
 *   dg_dump --merge OUT FILE...    writes the merged trace
 * Exit 0, or 1 with the reader's one line on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diag_merge.h"
#include "diag_read.h"

static const char *kind(dr_dg_kind_t k) {
  static const char *names[] = {"allreduce", "broadcast", "allgather",
                                "reduce_scatter", "barrier", "other"};
  return (unsigned)k < 6 ? names[k] : "?";
}

static void dump(const dr_dg_rank_t *r) {
  printf("rank %d world %d source %s backend %s offset %s%.0f steps %zu\n",
         r->rank, r->world, r->source, r->backend[0] ? r->backend : "-",
         r->have_clock_offset ? "" : "unknown/", r->clock_offset_us,
         r->n_steps);
  if (r->note[0] != '\0')
    printf("note %s\n", r->note);
  for (size_t i = 0; i < r->n_steps; i++) {
    const dr_dg_step_t *s = &r->steps[i];
    printf("step %llu t %.3f %.3f data %.3f fwd %.3f %.3f bwd %.3f %.3f "
           "opt %.3f %.3f grads %zu colls %zu\n",
           (unsigned long long)s->step, s->t0_us, s->t1_us, s->data_us,
           s->fwd_t0_us, s->fwd_t1_us, s->bwd_t0_us, s->bwd_t1_us,
           s->opt_t0_us, s->opt_t1_us, s->n_grad, s->n_colls);
    for (size_t k = 0; k < s->n_grad; k++)
      printf("  grad %.3f\n", s->grad_ready_us[k]);
    for (size_t k = 0; k < s->n_colls; k++) {
      const dr_dg_coll_t *c = &s->colls[k];
      printf("  coll %s bytes %llu bucket %d ready %.3f start %.3f end "
             "%.3f\n",
             kind(c->kind), (unsigned long long)c->n_bytes, c->bucket,
             c->ready_us, c->start_us, c->end_us);
    }
    for (size_t k = 0; k < s->n_bwd_ops; k++)
      printf("  op %s self %.3f runs %u\n", s->bwd_ops[k].name,
             s->bwd_ops[k].self_us, s->bwd_ops[k].n_runs);
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  char err[1024];
  if (argc >= 4 && strcmp(argv[1], "--merge") == 0) {
    int rc = dr_dg_merge(argv[2], (const char *const *)argv + 3,
                         (size_t)argc - 3, NULL, 0, err, sizeof(err));
    if (rc != 0) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    return 0;
  }
  int summary = argc > 1 && strcmp(argv[1], "--summary") == 0;
  int first = 1 + summary;
  if (argc <= first) {
    fprintf(stderr, "usage: dg_dump [--summary] FILE|DIR... | --merge OUT "
                    "FILE...\n");
    return 2;
  }
  dr_dg_set_t set;
  double t0 = now();
  int rc = dr_dg_read_set((const char *const *)argv + first,
                          (size_t)(argc - first), 0, &set, err, sizeof(err));
  double t1 = now();
  if (rc != 0) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  if (set.note[0] != '\0')
    printf("set note %s\n", set.note);
  for (size_t i = 0; i < set.n_ranks; i++) {
    const dr_dg_rank_t *r = &set.ranks[i];
    if (!summary) {
      dump(r);
      continue;
    }
    size_t n_coll = 0;
    for (size_t k = 0; k < r->n_steps; k++)
      n_coll += r->steps[k].n_colls;
    printf("rank %d source %s steps %zu colls %zu\n", r->rank, r->source,
           r->n_steps, n_coll);
  }
  if (summary)
    printf("read %zu ranks in %.3f s\n", set.n_ranks, t1 - t0);
  dr_dg_set_free(&set);
  return 0;
}
