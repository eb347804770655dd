/* `ddprun status`: the answer as tables on stdout (the job, its nodes,
 * its ranks and the slowest one; with --env each node's summary, with
 * --stacks the stacks), every byte from the server escaped. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "size_text.h"
#include "status_internal.h"

/* A host for a table cell: printable, cut to fit. */
const char *dr__status_host_cell(dr_bytes_t h, char *out, size_t n) {
  size_t k = 0;
  for (uint32_t i = 0; i < h.len && k + 1 < n; i++)
    out[k++] = isprint(h.p[i]) ? (char)h.p[i] : '?';
  out[k] = '\0';
  return out;
}

const char *dr__status_size(uint64_t bytes, char *out, size_t n) {
  if (bytes == DR_NONE) {
    snprintf(out, n, "-");
    return out;
  }
  return dr_size_text(bytes, out, n);
}

static const char *secs(uint64_t ms, char *out, size_t n) {
  if (ms == DR_NONE)
    snprintf(out, n, "-");
  else if (ms < 100000)
    snprintf(out, n, "%.1f s", (double)ms / 1000.0);
  else
    snprintf(out, n, "%.0f s", (double)ms / 1000.0);
  return out;
}

/* Bytes from the server, printable: the server log's escaper (printable
 * ASCII as is, every other byte and the backslash as \xNN), a chunk at a
 * time since the text has no bound of its own. */
#define ESC_CHUNK 256u
static void put_escaped(FILE *f, const void *p, size_t n_bytes) {
  char out[4 * ESC_CHUNK + 8];
  for (size_t i = 0; i < n_bytes; i += ESC_CHUNK) {
    size_t k = n_bytes - i < ESC_CHUNK ? n_bytes - i : ESC_CHUNK;
    fputs(dr_log_sample((const uint8_t *)p + i, k, out, sizeof(out)), f);
  }
}

/* A text of lines from the server: each line escaped after indent, each
 * ended by a newline (the last one too, when the text lacks it). */
void dr__status_put_lines(const char *indent, const void *p, size_t n_bytes) {
  const char *t = p, *end = t + n_bytes;
  while (t < end) {
    const char *nl = memchr(t, '\n', (size_t)(end - t));
    size_t len = nl != NULL ? (size_t)(nl - t) : (size_t)(end - t);
    fputs(indent, stdout);
    put_escaped(stdout, t, len);
    putchar('\n');
    t += len + (nl != NULL);
  }
}

static void print_head(const dr_status_args_t *a, const dr_status_report_t *r) {
  const dr_job_status_t *js = &r->js;
  char t[32];
  printf("job '%s' at %s:%u: ", a->run_id, a->host, a->port);
  if (js->state == DR_JS_DONE) {
    printf("done, exit code %llu, %s ago: ", (unsigned long long)js->exit_code,
           secs(js->elapsed_ms, t, sizeof(t)));
    put_escaped(stdout, js->reason.p, js->reason.len);
    printf("\n");
  } else {
    printf("%s generation %llu for %s; restarts used %u of %u\n",
           js->state == DR_JS_FORMING ? "forming" : "running",
           (unsigned long long)js->gen, secs(js->elapsed_ms, t, sizeof(t)),
           js->restarts_used, js->max_restarts);
  }
  uint32_t in = 0, waiting = 0, world = 0;
  for (size_t i = 0; i < r->n_nodes; i++) {
    if (r->nodes[i].state == DR_NS_WAITING) {
      waiting++;
      continue;
    }
    in++;
    world += r->nodes[i].nproc;
  }
  char nn[32];
  if (js->min_nodes == js->max_nodes)
    snprintf(nn, sizeof(nn), "%u", js->max_nodes);
  else
    snprintf(nn, sizeof(nn), "%u:%u", js->min_nodes, js->max_nodes);
  printf("nodes: %u of --nnodes %s%s, %u workers", in, nn,
         js->state == DR_JS_FORMING ? " joined" : "", world);
  if (js->state == DR_JS_FORMING && in < js->min_nodes)
    printf("; %u more needed", js->min_nodes - in);
  if (waiting > 0)
    printf("; %u waiting for the next round", waiting);
  printf("\n");
}

static void print_nodes(const dr_status_report_t *r) {
  if (r->n_nodes == 0)
    return;
  printf("  %-5s %-24s %7s %-11s %9s %9s  %s\n", "node", "host", "workers",
         "ranks", "heard", "reported", "state");
  for (size_t i = 0; i < r->n_nodes; i++) {
    const dr_node_rec_t *x = &r->nodes[i];
    char node[16], ranks[32], host[64], hb[24], rep[24];
    if (x->node_rank == DR_NO_RANK)
      snprintf(node, sizeof(node), "-");
    else
      snprintf(node, sizeof(node), "%u", x->node_rank);
    if (x->first_rank == DR_NO_RANK || x->nproc == 0)
      snprintf(ranks, sizeof(ranks), "-");
    else
      snprintf(ranks, sizeof(ranks), "%u-%u", x->first_rank,
               x->first_rank + x->nproc - 1);
    printf("  %-5s %-24s %7u %-11s %9s %9s  %s\n", node,
           dr__status_host_cell(x->host, host, sizeof(host)), x->nproc, ranks,
           secs(x->hb_age_ms, hb, sizeof(hb)),
           secs(x->report_age_ms, rep, sizeof(rep)),
           dr_node_state_name(x->state));
  }
}

static const char *rank_state_cell(const dr_rank_rec_t *x, char *out,
                                   size_t n) {
  if (x->state == DR_RS_EXITED)
    snprintf(out, n, "exited %d", x->exit_code);
  else if (x->state == DR_RS_KILLED)
    snprintf(out, n, "killed SIG%s", sigabbrev_np((int)x->signal) != NULL
                                         ? sigabbrev_np((int)x->signal)
                                         : "?");
  else
    snprintf(out, n, "%s", dr_rank_state_name(x->state));
  return out;
}

/* Rank x's health cells: RSS, peak RSS, CPU (percent of one CPU), and
 * with GPU figures in the job, its GPU memory and its GPU's utilisation. */
typedef struct {
  char rss[16], peak[16], cpu[16], gpu_mem[16], gpu_util[16];
} health_cells_t;

static void health_cells(const dr_rank_rec_t *x, health_cells_t *c) {
  dr__status_size(x->rss_bytes, c->rss, sizeof(c->rss));
  dr__status_size(x->rss_peak_bytes, c->peak, sizeof(c->peak));
  dr__status_size(x->gpu_mem_bytes, c->gpu_mem, sizeof(c->gpu_mem));
  if (x->cpu_milli == DR_NO_U32)
    snprintf(c->cpu, sizeof(c->cpu), "-");
  else
    snprintf(c->cpu, sizeof(c->cpu), "%.0f%%", x->cpu_milli / 10.0);
  if (x->gpu_util == DR_NO_U32)
    snprintf(c->gpu_util, sizeof(c->gpu_util), "-");
  else
    snprintf(c->gpu_util, sizeof(c->gpu_util), "%u%%", x->gpu_util);
}

/* The ranks whose memory stands out: RSS well above the job's median, a
 * GPU nearly full. */
static void print_health(const dr_status_report_t *r) {
  char a[16], b[16], c[16];
  for (size_t i = 0; i < r->n_ranks; i++) {
    const dr_rank_rec_t *x = &r->ranks[i];
    double above = dr__status_rss_above(r, x);
    if (above > 0)
      printf("memory: rank %u: RSS %s, %.0f%% above the median %s\n", x->rank,
             dr__status_size(x->rss_bytes, a, sizeof(a)), above * 100.0,
             dr__status_size(r->rss_median, b, sizeof(b)));
  }
  for (size_t i = 0; i < r->n_ranks; i++) {
    const dr_rank_rec_t *x = &r->ranks[i];
    double full = dr__status_gpu_full(x);
    if (full <= 0)
      continue;
    const dr_node_rec_t *n = dr__status_node_of(r, x->node_rank);
    char host[64] = "?";
    if (n != NULL)
      dr__status_host_cell(n->host, host, sizeof(host));
    printf("gpu memory: rank %u (node %u on %s): its GPU has %.0f%% of its "
           "memory in use (%s of %s; the rank's processes %s)\n", x->rank,
           x->node_rank, host, full * 100.0,
           dr__status_size(x->gpu_used_bytes, a, sizeof(a)),
           dr__status_size(x->gpu_total_bytes, b, sizeof(b)),
           dr__status_size(x->gpu_mem_bytes, c, sizeof(c)));
  }
}

static void print_ranks(const dr_status_report_t *r) {
  if (r->n_ranks == 0) {
    if (r->js.state == DR_JS_RUNNING)
      printf("ranks: none reported yet\n");
    return;
  }
  printf("  %-6s %-5s %-5s %-8s %-12s %10s %10s %9s %9s %9s %5s", "rank",
         "node", "local", "pid", "state", "step", "last step", "steps/s",
         "rss", "peak rss", "cpu");
  if (r->have_gpu)
    printf(" %9s %4s", "gpu mem", "gpu");
  printf("\n");
  for (size_t i = 0; i < r->n_ranks; i++) {
    const dr_rank_rec_t *x = &r->ranks[i];
    char st[40], step[24], ago[24], rate[24];
    health_cells_t hc;
    if (x->step == DR_NONE)
      snprintf(step, sizeof(step), "-");
    else
      snprintf(step, sizeof(step), "%llu", (unsigned long long)x->step);
    if (x->rate_milli == DR_NONE)
      snprintf(rate, sizeof(rate), "-");
    else
      snprintf(rate, sizeof(rate), "%.2f", (double)x->rate_milli / 1000.0);
    health_cells(x, &hc);
    printf("  %-6u %-5u %-5u %-8u %-12s %10s %10s %9s %9s %9s %5s", x->rank,
           x->node_rank, x->local_rank, x->pid,
           rank_state_cell(x, st, sizeof(st)), step,
           secs(x->step_age_ms, ago, sizeof(ago)), rate, hc.rss, hc.peak,
           hc.cpu);
    if (r->have_gpu)
      printf(" %9s %4s", hc.gpu_mem, hc.gpu_util);
    printf("\n");
  }
  if (r->slowest < 0) {
    printf("slowest: none known (no rank reports its steps through "
           "DDPRUN_PROGRESS_FILE)\n");
    return;
  }
  const dr_rank_rec_t *s = &r->ranks[r->slowest];
  const dr_node_rec_t *n = dr__status_node_of(r, s->node_rank);
  char host[64] = "?", ago[24];
  if (n != NULL)
    dr__status_host_cell(n->host, host, sizeof(host));
  printf("slowest: rank %u (node %u on %s, pid %u) at step %llu, last "
         "stepped %s ago", s->rank, s->node_rank, host, s->pid,
         (unsigned long long)s->step, secs(s->step_age_ms, ago, sizeof(ago)));
  if (r->behind >= 1)
    printf("; %.0f step%s behind the fastest", r->behind,
           r->behind >= 0.5 && r->behind < 1.5 ? "" : "s");
  else
    printf("; in step with the others");
  if (s->state == DR_RS_STOPPED)
    printf("; stopped (a signal or a debugger)");
  else if (dr__status_stale(s))
    printf("; not advancing");
  printf("\n");
}

void dr__status_print_table(const dr_status_args_t *a,
                            const dr_status_report_t *r) {
  print_head(a, r);
  print_nodes(r);
  print_ranks(r);
  print_health(r);
  if (a->env)
    dr__status_print_env(r);
  if (a->stacks && r->n_stacks == 0)
    printf("stacks: none (no generation runs)\n");
  dr__status_print_stacks(r);
}
