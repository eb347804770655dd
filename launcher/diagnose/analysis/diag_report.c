/* `ddprun diagnose`'s text report. See diag_report.h. */
#include "diag_report.h"

#include <errno.h>
#include <string.h>

#include "plan.h"

#define MIB 1048576.0

/* A known value in a column of width w, "-" for an unknown one. */
static void col(FILE *f, double v, int w) {
  if (v < 0)
    fprintf(f, " %*s", w, "-");
  else
    fprintf(f, " %*.3f", w, v);
}

static void summary(FILE *f, const dr_dg_analysis_t *a) {
  const dr_dg_stats_t *j = &a->job;
  fprintf(f, "ddprun diagnose: %zu rank%s", a->n_used, a->n_used == 1 ? "" : "s");
  if (a->source[0] != '\0' || a->backend[0] != '\0')
    fprintf(f, " (%s%s%s)", a->source, a->source[0] && a->backend[0] ? ", " : "",
            a->backend);
  if (a->n_steps == 0) {
    fprintf(f, ", no step to analyse\n");
    return;
  }
  fprintf(f, ", %zu step%s (%llu to %llu): step %.1f ms", a->n_steps,
          a->n_steps == 1 ? "" : "s", (unsigned long long)a->first_step,
          (unsigned long long)a->last_step, j->step_ms);
  const char *name[] = {"data", "forward", "backward", "optimizer"};
  double v[] = {j->data_ms, j->forward_ms, j->backward_ms, j->optimizer_ms};
  for (int i = 0; i < 4; i++)
    if (v[i] >= 0)
      fprintf(f, ", %s %.1f", name[i], v[i]);
  if (!a->have_colls)
    fprintf(f, "; no collectives\n");
  if (!a->have_colls)
    return;
  fprintf(f, "; communication %.1f ms", j->comm_ms);
  if (j->hidden_ms >= 0 && j->exposed_ms >= 0)
    fprintf(f, ", %.1f hidden, %.1f exposed", j->hidden_ms, j->exposed_ms);
  fprintf(f, "\n");
}

static void rank_table(FILE *f, const dr_dg_analysis_t *a) {
  if (a->n_steps == 0)
    return;
  fprintf(f, "\nranks (medians over the steps, ms):\n");
  fprintf(f, "%5s %9s %9s %9s %9s %9s %9s %9s %9s %9s  %s\n", "rank", "step",
          "data", "forward", "backward", "optimizer", "comm", "hidden",
          "exposed", "wait", "trace");
  for (size_t r = 0; r < a->n_used; r++) {
    const dr_dg_stats_t *s = &a->ranks[r];
    fprintf(f, "%5d", s->rank);
    double v[] = {s->step_ms,   s->data_ms, s->forward_ms, s->backward_ms,
                  s->optimizer_ms, s->comm_ms, s->hidden_ms, s->exposed_ms,
                  s->wait_ms};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
      col(f, v[i], 9);
    fprintf(f, "  %s\n", s->path != NULL ? s->path : "");
  }
}

static void patterns(FILE *f, const dr_dg_analysis_t *a) {
  if (a->n_steps == 0)
    return;
  fprintf(f, "\npatterns:\n");
  for (size_t i = 0; i < a->n_patterns; i++)
    fprintf(f, "  %s\n", a->patterns[i].text);
  if (a->n_patterns == 0)
    fprintf(f, "  none of late start, backlog, tail, all hidden or slow rank "
            "shows%s\n", a->have_grad_colls ? "" : " (no gradient all-reduces)");
}

static void bucket_table(FILE *f, const dr_dg_analysis_t *a) {
  if (a->n_buckets == 0)
    return;
  fprintf(f, "\ngradient all-reduces (medians; ms from the start of the "
          "backward pass):\n");
  fprintf(f, "%5s %6s %9s %9s %9s %9s %9s %9s\n", "#", "bucket", "MiB",
          "ready", "start", "end", "queue", "duration");
  for (size_t k = 0; k < a->n_buckets; k++) {
    const dr_dg_bucket_stats_t *b = &a->buckets[k];
    fprintf(f, "%5zu", k);
    if (b->bucket >= 0)
      fprintf(f, " %6d", b->bucket);
    else
      fprintf(f, " %6s", "-");
    double v[] = {b->mib, b->ready_ms, b->start_ms, b->end_ms, b->queue_ms,
                  b->dur_ms};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
      col(f, v[i], 9);
    fprintf(f, "\n");
  }
}

static void recommendation(FILE *f, const dr_dg_analysis_t *a) {
  const dr_dg_recommend_t *r = &a->rec;
  if (a->n_steps == 0)
    return;
  if (!r->ok) {
    fprintf(f, "\nbucket size: no recommendation: %s\n", r->why);
    return;
  }
  fprintf(f, "\nbucket size (the planner's model fitted to the traces: alpha "
          "%.3f ms, ", r->alpha_ms);
  if (r->bytes_per_ms >= DR_PLAN_FAST_BPM)
    fprintf(f, "no cost per byte");
  else
    fprintf(f, "%.4g MiB/ms", r->bytes_per_ms / MIB);
  fprintf(f, ", from %zu all-reduces of %zu size%s; %zu gradients):\n",
          r->n_samples, r->n_sizes, r->n_sizes == 1 ? "" : "s", r->n_params);
  if (r->fit_weak)
    fprintf(f, "  weak fit: every all-reduce has one size, so the per-call "
            "cost and the bandwidth are not told apart\n");
  fprintf(f, "%12s %8s %14s %10s %11s %7s %9s\n", "bucket MiB", "buckets",
          "ms/all-reduce", "finish ms", "exposed ms", "hidden", "step ms");
  for (size_t k = 0; k < r->n_caps; k++) {
    const dr_plan_result_t *c = &r->cand[k];
    fprintf(f, "%12g %8zu %14.3f %10.3f %11.3f %7.3f %9.3f\n", r->caps_mib[k],
            c->n_buckets, c->allreduce_ms, c->finish_ms, c->exposed_ms,
            c->hidden_frac, c->step_ms);
  }
  fprintf(f, "  in use: %zu bucket%s, the largest %.3g MiB: predicted %.3f ms",
          r->in_use.n_buckets, r->in_use.n_buckets == 1 ? "" : "s",
          r->in_use_mib, r->in_use.step_ms);
  if (r->measured_step_ms >= 0)
    fprintf(f, ", measured %.3f ms", r->measured_step_ms);
  const dr_plan_result_t *b = &r->cand[r->best];
  double gain = r->in_use.step_ms > 0 ? 100 * (b->step_ms / r->in_use.step_ms - 1) : 0;
  if (r->change)
    fprintf(f, "\n  use %g MiB: %s (predicted %.3f ms, %+.1f%% from the cap in "
            "use)\n", r->caps_mib[r->best], r->how, b->step_ms, gain);
  else
    fprintf(f, "\n  keep the cap in use: the best candidate, %g MiB, predicts "
            "%.3f ms (%+.1f%%), within %.0f%% of it\n", r->caps_mib[r->best],
            b->step_ms, gain, 100 * DR_DG_GAIN_FRAC);
}

static void backward_ops(FILE *f, const dr_dg_analysis_t *a) {
  const dr_dg_backward_t *b = &a->bwd;
  if (a->n_steps == 0)
    return;
  if (b->n_steps == 0) {
    fprintf(f, "\nslowest backward ops: none in the traces (PyTorch's "
            "autograd::engine::evaluate_function events, train's LAYER.bwd "
            "spans)\n");
    return;
  }
  if (b->rank >= 0)
    fprintf(f, "\nslowest backward ops (rank %d, ", b->rank);
  else
    fprintf(f, "\nslowest backward ops (%s, ", b->path);
  fprintf(f, "the longest backward pass; mean per step over %zu step%s):\n",
          b->n_steps, b->n_steps == 1 ? "" : "s");
  fprintf(f, "%5s  %-36s %9s %9s %7s %9s\n", "#", "op", "ms/step", "total ms",
          "share", "runs/step");
  for (size_t i = 0; i < b->n_top; i++) {
    const dr_dg_op_stats_t *t = &b->top[i];
    fprintf(f, "%5zu  %-36s %9.3f %9.3f", i + 1, t->name, t->step_ms,
            t->total_ms);
    if (t->share >= 0)
      fprintf(f, " %6.1f%%", 100 * t->share);
    else
      fprintf(f, " %7s", "-");
    fprintf(f, " %9.4g\n", (double)t->n_runs / (double)b->n_steps);
  }
  double n = (double)b->n_steps;
  fprintf(f, "  all %zu op%s: %.3f ms a step", b->n_kinds,
          b->n_kinds == 1 ? "" : "s", b->ops_ms / n);
  if (b->backward_ms > 0)
    fprintf(f, ", %.1f%% of the backward pass (%.3f ms a step)",
            100 * b->ops_ms / b->backward_ms, b->backward_ms / n);
  fprintf(f, "\n");
}

int dr_dg_report_text(FILE *f, const dr_dg_analysis_t *a) {
  summary(f, a);
  for (size_t i = 0; i < a->n_notes; i++)
    fprintf(f, "note: %s\n", a->notes[i]);
  rank_table(f, a);
  patterns(f, a);
  bucket_table(f, a);
  recommendation(f, a);
  backward_ops(f, a);
  return ferror(f) ? -EIO : 0;
}
