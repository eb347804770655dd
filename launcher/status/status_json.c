/* `ddprun status --json`: the answer as one JSON object on stdout; the
 * server's texts as JSON strings, control bytes escaped; with --env each
 * node's summary as its lines ("env", null when not known). */
#include <stdio.h>

#include "status_internal.h"

static void jstr(dr_bytes_t b) {
  putchar('"');
  for (uint32_t i = 0; i < b.len; i++) {
    unsigned char c = b.p[i];
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c == '\n')
      fputs("\\n", stdout);
    else if (c == '\t')
      fputs("\\t", stdout);
    else if (c < 0x20 || c == 0x7f)
      printf("\\u%04x", c);
    else
      putchar(c); /* UTF-8 passes through */
  }
  putchar('"');
}

static void jnum(uint64_t v) {
  if (v == DR_NONE)
    fputs("null", stdout);
  else
    printf("%llu", (unsigned long long)v);
}

static void jsecs(uint64_t ms) {
  if (ms == DR_NONE)
    fputs("null", stdout);
  else
    printf("%.3f", (double)ms / 1000.0);
}

/* A text of lines as an array of strings, one per line; null when none. */
static void jlines(const dr_bytes_t *t) {
  if (t == NULL) {
    fputs("null", stdout);
    return;
  }
  putchar('[');
  for (uint32_t at = 0, i = 0; at < t->len; i++) {
    uint32_t len = 0;
    while (at + len < t->len && t->p[at + len] != '\n')
      len++;
    dr_bytes_t line = {t->p + at, len};
    printf("%s", i == 0 ? "" : ", ");
    jstr(line);
    at += len + 1; /* past its newline, or the end */
  }
  putchar(']');
}

static void jrank(uint32_t v) {
  if (v == DR_NO_RANK)
    fputs("null", stdout);
  else
    printf("%u", v);
}

void dr__status_print_json(const dr_status_args_t *a,
                           const dr_status_report_t *r) {
  const dr_job_status_t *js = &r->js;
  printf("{\"run_id\": ");
  jstr(dr_str(a->run_id));
  printf(", \"endpoint\": \"%s:%u\", \"state\": \"%s\", \"generation\": %llu,"
         " \"elapsed_s\": ", a->host, a->port, dr_job_state_name(js->state),
         (unsigned long long)js->gen);
  jsecs(js->elapsed_ms);
  printf(", \"restarts_used\": %u, \"max_restarts\": %u, \"min_nodes\": %u,"
         " \"max_nodes\": %u, \"exit_code\": ", js->restarts_used,
         js->max_restarts, js->min_nodes, js->max_nodes);
  jnum(js->exit_code);
  printf(", \"reason\": ");
  jstr(js->reason);
  printf(",\n \"nodes\": [");
  for (size_t i = 0; i < r->n_nodes; i++) {
    const dr_node_rec_t *x = &r->nodes[i];
    printf("%s\n  {\"node_rank\": ", i == 0 ? "" : ",");
    jrank(x->node_rank);
    printf(", \"host\": ");
    jstr(x->host);
    printf(", \"nproc\": %u, \"first_rank\": ", x->nproc);
    jrank(x->first_rank);
    printf(", \"state\": \"%s\", \"heartbeat_age_s\": ",
           dr_node_state_name(x->state));
    jsecs(x->hb_age_ms);
    printf(", \"report_age_s\": ");
    jsecs(x->report_age_ms);
    if (a->env) {
      printf(", \"env\": ");
      jlines(dr__status_env_of(r, i));
    }
    printf("}");
  }
  printf("],\n \"ranks\": [");
  for (size_t i = 0; i < r->n_ranks; i++) {
    const dr_rank_rec_t *x = &r->ranks[i];
    printf("%s\n  {\"rank\": %u, \"node_rank\": %u, \"local_rank\": %u, "
           "\"pid\": %u, \"state\": \"%s\", \"exit_code\": ",
           i == 0 ? "" : ",", x->rank, x->node_rank, x->local_rank, x->pid,
           dr_rank_state_name(x->state));
    if (x->state == DR_RS_EXITED)
      printf("%d", x->exit_code);
    else
      fputs("null", stdout);
    printf(", \"signal\": ");
    if (x->state == DR_RS_KILLED)
      printf("%u", x->signal);
    else
      fputs("null", stdout);
    printf(", \"step\": ");
    jnum(x->step);
    printf(", \"step_age_s\": ");
    jsecs(x->step_age_ms);
    printf(", \"steps_per_s\": ");
    if (x->rate_milli == DR_NONE)
      fputs("null", stdout);
    else
      printf("%.3f", (double)x->rate_milli / 1000.0);
    printf(", \"rss_bytes\": ");
    jnum(x->rss_bytes);
    printf(", \"rss_peak_bytes\": ");
    jnum(x->rss_peak_bytes);
    printf(", \"cpu\": ");
    if (x->cpu_milli == DR_NO_U32)
      fputs("null", stdout);
    else
      printf("%.3f", x->cpu_milli / 1000.0);
    printf(", \"gpu_memory_bytes\": ");
    jnum(x->gpu_mem_bytes);
    printf(", \"gpu_util_percent\": ");
    jnum(x->gpu_util == DR_NO_U32 ? DR_NONE : x->gpu_util);
    printf(", \"gpu_device_used_bytes\": ");
    jnum(x->gpu_used_bytes);
    printf(", \"gpu_device_total_bytes\": ");
    jnum(x->gpu_total_bytes);
    double above = dr__status_rss_above(r, x);
    printf(", \"rss_above_median\": ");
    if (above > 0)
      printf("%.3f", above);
    else
      fputs("null", stdout);
    printf(", \"gpu_memory_full\": %s}",
           dr__status_gpu_full(x) > 0 ? "true" : "false");
  }
  printf("],\n \"rss_median_bytes\": ");
  jnum(r->rss_median);
  printf(",\n \"slowest\": ");
  if (r->slowest < 0) {
    fputs("null", stdout);
  } else {
    const dr_rank_rec_t *s = &r->ranks[r->slowest];
    printf("{\"rank\": %u, \"node_rank\": %u, \"pid\": %u, \"step\": %llu, "
           "\"behind\": %.0f, \"advancing\": %s}", s->rank, s->node_rank,
           s->pid, (unsigned long long)s->step, r->behind,
           dr__status_stale(s) ? "false" : "true");
  }
  if (a->stacks) {
    printf(",\n \"stacks\": [");
    for (size_t i = 0; i < r->n_stacks; i++) {
      const dr_stack_rec_t *x = &r->stacks[i];
      printf("%s\n  {\"rank\": %u, \"node_rank\": %u, \"pid\": %u, "
             "\"ok\": %s, \"where\": ", i == 0 ? "" : ",", x->rank,
             x->node_rank, x->pid, x->code == 0 ? "true" : "false");
      char where[200];
      dr__status_stack_where(x, where, sizeof(where));
      jstr(dr_str(where));
      printf(", \"text\": ");
      jstr(x->text);
      printf("}");
    }
    printf("]");
  }
  printf("}\n");
}
