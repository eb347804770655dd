/* `ddprun diagnose --json`: the analysis as one JSON object. The schema
 * is in diag_report.h. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "diag_report.h"
#include "plan.h"

#define MIB 1048576.0

/* A JSON string: quotes, backslashes and control bytes escaped; other
 * bytes as they are (paths are the traces' own). */
static void str(FILE *f, const char *s) {
  if (s == NULL) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

/* A duration or size: null when unknown (negative) or not finite. */
static void num(FILE *f, double v) {
  if (v < 0 || !isfinite(v))
    fputs("null", f);
  else
    fprintf(f, "%.6f", v);
}

/* A signed number; null when not finite. */
static void snum(FILE *f, double v) {
  if (!isfinite(v))
    fputs("null", f);
  else
    fprintf(f, "%.6f", v);
}

static void key(FILE *f, const char *k, int first) {
  fprintf(f, "%s\"%s\": ", first ? "" : ", ", k);
}

static void kv(FILE *f, const char *k, double v) {
  key(f, k, 0);
  num(f, v);
}

static void stats(FILE *f, const dr_dg_stats_t *s) {
  key(f, "step_ms", 1);
  num(f, s->step_ms);
  kv(f, "data_ms", s->data_ms);
  kv(f, "forward_ms", s->forward_ms);
  kv(f, "backward_ms", s->backward_ms);
  kv(f, "optimizer_ms", s->optimizer_ms);
  kv(f, "comm_ms", s->comm_ms);
  kv(f, "hidden_ms", s->hidden_ms);
  kv(f, "exposed_ms", s->exposed_ms);
  kv(f, "arrival_ms", s->arrival_ms);
  kv(f, "wait_ms", s->wait_ms);
}

static void pattern(FILE *f, const dr_dg_pattern_t *p) {
  int slow = p->kind == DR_DG_PAT_SLOW_RANK;
  int bl = p->kind == DR_DG_PAT_BACKLOG;
  fputs("{", f);
  key(f, "name", 1);
  str(f, p->name);
  key(f, "text", 0);
  str(f, p->text);
  kv(f, "ms", p->ms);
  kv(f, "frac", p->frac);
  key(f, "cause", 0);
  str(f, p->cause[0] ? p->cause : NULL);
  key(f, "cause_ms", 0);
  if (slow)
    snum(f, p->cause_ms);
  else
    num(f, p->cause[0] && strcmp(p->cause, "unknown") != 0 ? p->cause_ms : -1);
  kv(f, "share", bl && strcmp(p->cause, "unknown") != 0 ? p->share : -1);
  key(f, "count", 0);
  if (bl)
    fprintf(f, "%zu", p->n);
  else
    fputs("null", f);
  key(f, "rank", 0);
  if (slow)
    fprintf(f, "%d", p->rank);
  else
    fputs("null", f);
  key(f, "data_excess_ms", 0);
  snum(f, slow ? p->data_excess_ms : NAN);
  key(f, "compute_excess_ms", 0);
  snum(f, slow ? p->compute_excess_ms : NAN);
  kv(f, "whatif_step_ms", slow ? p->whatif_step_ms : -1);
  key(f, "whatif_frac", 0);
  snum(f, slow ? p->whatif_frac : NAN);
  fputs("}", f);
}

static void candidate(FILE *f, double mib, const dr_plan_result_t *c) {
  fprintf(f, "{\"bucket_mib\": %.9g, \"buckets\": %zu", mib, c->n_buckets);
  kv(f, "allreduce_ms", c->allreduce_ms);
  kv(f, "comm_ms", c->comm_ms);
  kv(f, "finish_ms", c->finish_ms);
  kv(f, "exposed_ms", c->exposed_ms);
  kv(f, "hidden_frac", c->hidden_frac);
  kv(f, "step_ms", c->step_ms);
  fputs("}", f);
}

static void recommendation(FILE *f, const dr_dg_recommend_t *r) {
  fprintf(f, "{\"available\": %s, \"reason\": ", r->ok ? "true" : "false");
  str(f, r->ok ? NULL : r->why);
  key(f, "fit", 0);
  if (r->n_samples == 0) {
    fputs("null", f);
  } else {
    fputs("{", f);
    key(f, "alpha_ms", 1);
    num(f, r->alpha_ms);
    kv(f, "bandwidth_mib_per_ms",
       r->bytes_per_ms >= DR_PLAN_FAST_BPM ? -1 : r->bytes_per_ms / MIB);
    fprintf(f, ", \"samples\": %zu, \"sizes\": %zu, \"weak\": %s}",
            r->n_samples, r->n_sizes, r->fit_weak ? "true" : "false");
  }
  if (!r->ok) {
    fputs("}", f);
    return;
  }
  kv(f, "forward_ms", r->forward_ms);
  kv(f, "backward_ms", r->backward_ms);
  kv(f, "optimizer_ms", r->optimizer_ms);
  kv(f, "first_bucket_mib", r->first_cap_bytes / MIB);
  fprintf(f, ", \"gradients\": %zu, \"candidates\": [", r->n_params);
  for (size_t k = 0; k < r->n_caps; k++) {
    fputs(k ? ",\n    " : "\n    ", f);
    candidate(f, r->caps_mib[k], &r->cand[k]);
  }
  fprintf(f, "],\n   \"best_bucket_mib\": %.9g, \"change\": %s, \"how\": ",
          r->caps_mib[r->best], r->change ? "true" : "false");
  str(f, r->how);
  fputs(",\n   \"in_use\": {", f);
  key(f, "largest_bucket_mib", 1);
  num(f, r->in_use_mib);
  fprintf(f, ", \"buckets\": %zu", r->in_use.n_buckets);
  kv(f, "predicted_step_ms", r->in_use.step_ms);
  kv(f, "measured_step_ms", r->measured_step_ms);
  fputs("}}", f);
}

static void backward_ops(FILE *f, const dr_dg_backward_t *b) {
  if (b->n_steps == 0) {
    fputs("null", f);
    return;
  }
  fputs("{\"rank\": ", f);
  if (b->rank >= 0)
    fprintf(f, "%d", b->rank);
  else
    fputs("null", f);
  fputs(", \"path\": ", f);
  str(f, b->path);
  fprintf(f, ", \"steps\": %zu", b->n_steps);
  kv(f, "backward_ms", b->backward_ms);
  kv(f, "ops_ms", b->ops_ms);
  fprintf(f, ", \"kinds\": %zu, \"top\": [", b->n_kinds);
  for (size_t i = 0; i < b->n_top; i++) {
    const dr_dg_op_stats_t *t = &b->top[i];
    fputs(i ? ",\n    {" : "\n    {", f);
    key(f, "name", 1);
    str(f, t->name);
    kv(f, "total_ms", t->total_ms);
    kv(f, "ms_per_step", t->step_ms);
    kv(f, "share", t->share);
    fprintf(f, ", \"runs\": %zu}", t->n_runs);
  }
  fputs("]}", f);
}

int dr_dg_report_json(FILE *f, const dr_dg_analysis_t *a) {
  fprintf(f, "{\"version\": 1, \"source\": ");
  str(f, a->source);
  fputs(", \"backend\": ", f);
  str(f, a->backend);
  fprintf(f, ",\n \"world\": ");
  if (a->world > 0)
    fprintf(f, "%d", a->world);
  else
    fputs("null", f);
  fprintf(f, ", \"ranks_given\": %zu, \"ranks_used\": %zu, \"missing_ranks\": [",
          a->n_ranks, a->n_used);
  for (size_t i = 0; i < a->n_missing; i++)
    fprintf(f, "%s%d", i ? ", " : "", a->missing[i]);
  fprintf(f, "],\n \"steps\": {\"count\": %zu, \"first\": ", a->n_steps);
  if (a->n_steps > 0)
    fprintf(f, "%llu, \"last\": %llu}", (unsigned long long)a->first_step,
            (unsigned long long)a->last_step);
  else
    fputs("null, \"last\": null}", f);
  fputs(",\n \"summary\": {", f);
  stats(f, &a->job);
  fputs("},\n \"ranks\": [", f);
  for (size_t r = 0; r < a->n_used; r++) {
    const dr_dg_stats_t *s = &a->ranks[r];
    fprintf(f, "%s{\"rank\": %d, \"path\": ", r ? ",\n   " : "\n   ", s->rank);
    str(f, s->path);
    fprintf(f, ", \"trace_steps\": %zu, ", s->n_steps);
    stats(f, s);
    fputs("}", f);
  }
  fputs("],\n \"buckets\": [", f);
  for (size_t k = 0; k < a->n_buckets; k++) {
    const dr_dg_bucket_stats_t *b = &a->buckets[k];
    fprintf(f, "%s{\"index\": %zu, \"bucket\": ", k ? ",\n   " : "\n   ", k);
    if (b->bucket >= 0)
      fprintf(f, "%d", b->bucket);
    else
      fputs("null", f);
    kv(f, "mib", b->mib);
    kv(f, "ready_ms", b->ready_ms);
    kv(f, "start_ms", b->start_ms);
    kv(f, "end_ms", b->end_ms);
    kv(f, "queue_ms", b->queue_ms);
    kv(f, "duration_ms", b->dur_ms);
    fprintf(f, ", \"samples\": %zu}", b->n_samples);
  }
  fputs("],\n \"patterns\": [", f);
  for (size_t i = 0; i < a->n_patterns; i++) {
    fputs(i ? ",\n   " : "\n   ", f);
    pattern(f, &a->patterns[i]);
  }
  fputs("],\n \"recommendation\": ", f);
  recommendation(f, &a->rec);
  fputs(",\n \"backward_ops\": ", f);
  backward_ops(f, &a->bwd);
  fputs(",\n \"notes\": [", f);
  for (size_t i = 0; i < a->n_notes; i++) {
    fputs(i ? ",\n   " : "\n   ", f);
    str(f, a->notes[i]);
  }
  fputs("]}\n", f);
  return ferror(f) ? -EIO : 0;
}
