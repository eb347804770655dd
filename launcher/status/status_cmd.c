/* `ddprun status`: one STATUS request to the job's rendezvous server, and
 * its answer as a table or JSON. Everything shown comes from the server,
 * which holds what the agents report over their own connections, and is
 * taken as untrusted: its texts are read only within their lengths (they
 * carry no NUL) and printed with control bytes escaped, so that a broken
 * or hostile server can neither read this process's memory out nor drive
 * the user's terminal. */
#include "status_cmd.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "cli_util.h"
#include "client.h"
#include "errors.h"
#include "exit_codes.h"
#include "log.h"
#include "stacks.h"
#include "wire.h"

#define DEFAULT_PORT 29400u
#define DEFAULT_TIMEOUT_MS 5000u
#define DEFAULT_STACKS_MS 10000u

static const char usage_text[] =
    "usage: ddprun status --rdzv-endpoint HOST[:PORT] --rdzv-id ID\n"
    "                     [--secret-file FILE] [--stacks] [--json]\n"
    "                     [--timeout S] [--stacks-timeout S]\n"
    "\n"
    "Asks the job's rendezvous server what the job does: its state,\n"
    "generation and restarts, each node with its host and how long ago it\n"
    "was heard from, and each rank's pid, state, last step and step rate as\n"
    "its agent reports them (every heartbeat while they change), with the\n"
    "slowest rank named. While a round forms: who has joined.\n"
    "\n"
    "  --rdzv-endpoint HOST[:PORT]  the job's rendezvous server (port 29400\n"
    "                               when left out)\n"
    "  --rdzv-id ID                 the job's run id\n"
    "  --secret-file FILE           the job's shared secret, when it has one\n"
    "                               (default: $DDPRUN_SECRET)\n"
    "  --stacks                     also every rank's stack, collected by the\n"
    "                               agents (py-spy, eu-stack or gdb where\n"
    "                               the build has them)\n"
    "  --json                       print JSON instead of the tables\n"
    "  --timeout S                  connecting and each answer (default: 5)\n"
    "  --stacks-timeout S           how long the server waits for the\n"
    "                               agents' stacks (default: 10)\n"
    "  -h, --help                   this text\n"
    "\n"
    "Options are also spelled with underscores and take their value as\n"
    "--name VALUE or --name=VALUE.\n"
    "\n"
    "Exit codes: 0 answered; 2 bad options, or the server refused this\n"
    "client (the job's secret is needed, or it serves another job); 3 the\n"
    "server could not be reached or did not answer in time.\n";

typedef struct {
  char host[256];
  uint16_t port;
  const char *run_id;
  const char *secret_file;
  int stacks, json;
  uint32_t timeout_ms, stacks_ms;
} args_t;

#define bad(...) dr_usage_error("ddprun status", __VA_ARGS__)

/* HOST[:PORT] or [ADDR][:PORT]. */
static int parse_endpoint(const char *v, args_t *a) {
  const char *host = v, *port = NULL;
  size_t len;
  if (v[0] == '[') {
    const char *close = strchr(v, ']');
    if (close == NULL || (close[1] != '\0' && close[1] != ':'))
      return bad("--rdzv-endpoint '%s': expected [ADDR]:PORT", v);
    host = v + 1;
    len = (size_t)(close - host);
    port = close[1] == ':' ? close + 2 : NULL;
  } else {
    const char *colon = strchr(v, ':');
    if (colon != NULL && strchr(colon + 1, ':') != NULL)
      return bad("--rdzv-endpoint '%s': an IPv6 address needs brackets, as "
                 "[ADDR]:PORT", v);
    len = colon != NULL ? (size_t)(colon - v) : strlen(v);
    port = colon != NULL ? colon + 1 : NULL;
  }
  if (len == 0 || len >= sizeof(a->host))
    return bad("--rdzv-endpoint '%s': expected HOST[:PORT]", v);
  memcpy(a->host, host, len);
  a->host[len] = '\0';
  uint32_t p = DEFAULT_PORT;
  if (port != NULL && dr_parse_u32(port, 1, 65535, &p) != 0)
    return bad("--rdzv-endpoint '%s': the port must be 1-65535", v);
  a->port = (uint16_t)p;
  return 0;
}

/* "--rdzv_id=x" reads as "--rdzv-id" with "x". */
static void flag_name(const char *arg, char *name, size_t n,
                      const char **inline_val) {
  const char *eq = strchr(arg, '=');
  size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
  if (len >= n)
    len = n - 1;
  for (size_t i = 0; i < len; i++)
    name[i] = i >= 2 && arg[i] == '_' ? '-' : arg[i];
  name[len] = '\0';
  *inline_val = eq != NULL ? eq + 1 : NULL;
}

static int parse(int argc, char **argv, args_t *a) {
  memset(a, 0, sizeof(*a));
  a->timeout_ms = DEFAULT_TIMEOUT_MS;
  a->stacks_ms = DEFAULT_STACKS_MS;
  int have_endpoint = 0;
  for (int i = 1; i < argc; i++) {
    char f[64];
    const char *v;
    flag_name(argv[i], f, sizeof(f), &v);
    if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) {
      fputs(usage_text, stdout);
      return 1;
    }
    if (strcmp(f, "--json") == 0 || strcmp(f, "--stacks") == 0) {
      if (v != NULL)
        return bad("%s takes no value", f);
      *(strcmp(f, "--json") == 0 ? &a->json : &a->stacks) = 1;
      continue;
    }
    if (strcmp(f, "--rdzv-endpoint") != 0 && strcmp(f, "--rdzv-id") != 0 &&
        strcmp(f, "--secret-file") != 0 && strcmp(f, "--timeout") != 0 &&
        strcmp(f, "--stacks-timeout") != 0)
      return bad("unknown option '%s'", argv[i]);
    if (v == NULL) {
      if (i + 1 >= argc)
        return bad("%s needs a value", f);
      v = argv[++i];
    }
    int rc = 0;
    if (strcmp(f, "--rdzv-endpoint") == 0) {
      rc = parse_endpoint(v, a);
      have_endpoint = 1;
    } else if (strcmp(f, "--rdzv-id") == 0) {
      if (v[0] == '\0')
        return bad("--rdzv-id must not be empty");
      a->run_id = v;
    } else if (strcmp(f, "--secret-file") == 0) {
      a->secret_file = v;
    } else if (dr_parse_seconds_ms(v, 1, strcmp(f, "--timeout") == 0
                                             ? &a->timeout_ms
                                             : &a->stacks_ms) != 0) {
      return bad("%s '%s': expected seconds, more than 0", f, v);
    }
    if (rc != 0)
      return rc;
  }
  if (!have_endpoint)
    return bad("--rdzv-endpoint HOST[:PORT] is missing");
  if (a->run_id == NULL)
    return bad("--rdzv-id ID is missing");
  return 0;
}

/* ---- the answer, decoded ------------------------------------------------ */

typedef struct {
  dr_job_status_t js;
  dr_node_rec_t *nodes;
  dr_rank_rec_t *ranks;
  dr_stack_rec_t *stacks;
  size_t n_nodes, n_ranks, n_stacks;
  int slowest; /* index into ranks, -1: none */
  double behind; /* its steps behind the fastest, at one moment */
} report_t;

/* A rank whose step has not changed for this long is not advancing: its
 * agent reports a new step at least every heartbeat interval. */
#define STALE_MS 2000u

static int alive(const dr_rank_rec_t *x) {
  return x->step != DR_NONE &&
         (x->state == DR_RS_RUNNING || x->state == DR_RS_STOPPED);
}

static int stale(const dr_rank_rec_t *x) {
  return x->state == DR_RS_STOPPED || x->step_age_ms > STALE_MS;
}

/* The step x has reached by now: the agents read the ranks at different
 * moments, so an advancing rank's last step is carried forward at its
 * rate over its age; a stale one stays where it stopped. */
static double step_now(const dr_rank_rec_t *x) {
  if (stale(x) || x->rate_milli == DR_NONE || x->step_age_ms == DR_NONE)
    return (double)x->step;
  return (double)x->step +
         (double)x->rate_milli / 1000.0 * (double)x->step_age_ms / 1000.0;
}

/* The slowest of the ranks alive: a stopped one (what the others wait for
 * in their collectives), then the one whose step is stale longest, then
 * the one with the lowest step by now. */
static int slower(const dr_rank_rec_t *x, const dr_rank_rec_t *y) {
  int xs = x->state == DR_RS_STOPPED, ys = y->state == DR_RS_STOPPED;
  if (xs != ys)
    return xs;
  if (stale(x) != stale(y))
    return stale(x);
  if (stale(x) && x->step_age_ms != y->step_age_ms)
    return x->step_age_ms > y->step_age_ms;
  return step_now(x) < step_now(y);
}

static int decode(const dr_msg_t *m, report_t *r) {
  memset(r, 0, sizeof(*r));
  if (dr_msg_job_status(m, &r->js) != 0)
    return DR_EFIELD;
  r->nodes = calloc(r->js.nodes.count + 1, sizeof(*r->nodes));
  r->ranks = calloc(r->js.ranks.count + 1, sizeof(*r->ranks));
  r->stacks = calloc(r->js.stacks.count + 1, sizeof(*r->stacks));
  if (r->nodes == NULL || r->ranks == NULL || r->stacks == NULL)
    return -ENOMEM;
  uint32_t pos = 0;
  while (dr_node_rec_next(&r->js.nodes, &pos, &r->nodes[r->n_nodes]))
    r->n_nodes++;
  pos = 0;
  while (dr_rank_rec_next(&r->js.ranks, &pos, &r->ranks[r->n_ranks]))
    r->n_ranks++;
  pos = 0;
  while (dr_stack_rec_next(&r->js.stacks, &pos, &r->stacks[r->n_stacks]))
    r->n_stacks++;
  r->slowest = -1;
  double top = 0;
  for (size_t i = 0; i < r->n_ranks; i++) {
    const dr_rank_rec_t *x = &r->ranks[i];
    if (!alive(x))
      continue;
    if (r->slowest < 0 || slower(x, &r->ranks[r->slowest]))
      r->slowest = (int)i;
    if (step_now(x) > top)
      top = step_now(x);
  }
  if (r->slowest >= 0)
    r->behind = top - step_now(&r->ranks[r->slowest]);
  return 0;
}

static void report_free(report_t *r) {
  free(r->nodes);
  free(r->ranks);
  free(r->stacks);
}

static const dr_node_rec_t *node_of(const report_t *r, uint32_t node_rank) {
  for (size_t i = 0; i < r->n_nodes; i++)
    if (r->nodes[i].node_rank == node_rank &&
        r->nodes[i].state != DR_NS_WAITING)
      return &r->nodes[i];
  return NULL;
}

/* A host for a table cell: printable, cut to fit. */
static const char *host_cell(dr_bytes_t h, char *out, size_t n) {
  size_t k = 0;
  for (uint32_t i = 0; i < h.len && k + 1 < n; i++)
    out[k++] = isprint(h.p[i]) ? (char)h.p[i] : '?';
  out[k] = '\0';
  return out;
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

/* ---- text --------------------------------------------------------------- */

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
static void put_lines(const char *indent, const void *p, size_t n_bytes) {
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

static void print_head(const args_t *a, const report_t *r) {
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

static void print_nodes(const report_t *r) {
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
           host_cell(x->host, host, sizeof(host)), x->nproc, ranks,
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

static void print_ranks(const report_t *r) {
  if (r->n_ranks == 0) {
    if (r->js.state == DR_JS_RUNNING)
      printf("ranks: none reported yet\n");
    return;
  }
  printf("  %-6s %-5s %-5s %-8s %-12s %10s %10s %9s\n", "rank", "node",
         "local", "pid", "state", "step", "last step", "steps/s");
  for (size_t i = 0; i < r->n_ranks; i++) {
    const dr_rank_rec_t *x = &r->ranks[i];
    char st[40], step[24], ago[24], rate[24];
    if (x->step == DR_NONE)
      snprintf(step, sizeof(step), "-");
    else
      snprintf(step, sizeof(step), "%llu", (unsigned long long)x->step);
    if (x->rate_milli == DR_NONE)
      snprintf(rate, sizeof(rate), "-");
    else
      snprintf(rate, sizeof(rate), "%.2f", (double)x->rate_milli / 1000.0);
    printf("  %-6u %-5u %-5u %-8u %-12s %10s %10s %9s\n", x->rank,
           x->node_rank, x->local_rank, x->pid,
           rank_state_cell(x, st, sizeof(st)), step,
           secs(x->step_age_ms, ago, sizeof(ago)), rate);
  }
  if (r->slowest < 0) {
    printf("slowest: none known (no rank reports its steps through "
           "DDPRUN_PROGRESS_FILE)\n");
    return;
  }
  const dr_rank_rec_t *s = &r->ranks[r->slowest];
  const dr_node_rec_t *n = node_of(r, s->node_rank);
  char host[64] = "?", ago[24];
  if (n != NULL)
    host_cell(n->host, host, sizeof(host));
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
  else if (stale(s))
    printf("; not advancing");
  printf("\n");
}

/* Where rank x is, from its stack's "where:" line, else why none: the
 * text's first line, found within the text's length (it is not
 * NUL-terminated: it may end where the receive buffer does). out holds
 * the server's bytes as they are; they are escaped where printed. */
static void stack_where(const dr_stack_rec_t *x, char *out, size_t n) {
  if (x->code == 0 &&
      dr_stack_text_where((const char *)x->text.p, x->text.len, out, n) == 0)
    return;
  const uint8_t *nl = x->text.len > 0 ? memchr(x->text.p, '\n', x->text.len)
                                      : NULL;
  size_t len = nl != NULL ? (size_t)(nl - x->text.p) : x->text.len;
  snprintf(out, n, "%s%.*s", x->code != 0 ? "no stack: " : "unknown: ",
           (int)len, (const char *)x->text.p); /* a record is <= 64 KiB */
}

/* The ranks grouped by where they are, over every node, then each one's
 * full stacks. */
static void print_stacks(const report_t *r) {
  if (r->n_stacks > 0) {
    dr_rank_where_t *rw = calloc(r->n_stacks, sizeof(*rw));
    char(*where)[200] = calloc(r->n_stacks, sizeof(*where));
    size_t cap = 256 * r->n_stacks + 256;
    char *groups = malloc(cap);
    if (rw != NULL && where != NULL && groups != NULL) {
      for (size_t i = 0; i < r->n_stacks; i++) {
        stack_where(&r->stacks[i], where[i], sizeof(where[i]));
        rw[i] = (dr_rank_where_t){r->stacks[i].rank, where[i]};
      }
      dr_stacks_group(rw, r->n_stacks, "\n", groups, cap);
      printf("where the ranks are:\n");
      put_lines("  ", groups, strlen(groups));
    }
    free(rw);
    free(where);
    free(groups);
  }
  for (size_t i = 0; i < r->n_stacks; i++) {
    const dr_stack_rec_t *x = &r->stacks[i];
    const dr_node_rec_t *n = node_of(r, x->node_rank);
    char host[64] = "?";
    if (n != NULL)
      host_cell(n->host, host, sizeof(host));
    printf("--- rank %u (node %u on %s, pid %u)%s\n", x->rank, x->node_rank,
           host, x->pid, x->code != 0 ? ": no stack" : "");
    if (x->text.len == 0)
      printf("\n");
    put_lines("", x->text.p, x->text.len);
  }
}

/* ---- JSON --------------------------------------------------------------- */

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

static void jrank(uint32_t v) {
  if (v == DR_NO_RANK)
    fputs("null", stdout);
  else
    printf("%u", v);
}

static void print_json(const args_t *a, const report_t *r) {
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
    printf("}");
  }
  printf("],\n \"slowest\": ");
  if (r->slowest < 0) {
    fputs("null", stdout);
  } else {
    const dr_rank_rec_t *s = &r->ranks[r->slowest];
    printf("{\"rank\": %u, \"node_rank\": %u, \"pid\": %u, \"step\": %llu, "
           "\"behind\": %.0f, \"advancing\": %s}", s->rank, s->node_rank,
           s->pid, (unsigned long long)s->step, r->behind,
           stale(s) ? "false" : "true");
  }
  if (a->stacks) {
    printf(",\n \"stacks\": [");
    for (size_t i = 0; i < r->n_stacks; i++) {
      const dr_stack_rec_t *x = &r->stacks[i];
      printf("%s\n  {\"rank\": %u, \"node_rank\": %u, \"pid\": %u, "
             "\"ok\": %s, \"where\": ", i == 0 ? "" : ",", x->rank,
             x->node_rank, x->pid, x->code == 0 ? "true" : "false");
      char where[200];
      stack_where(x, where, sizeof(where));
      jstr(dr_str(where));
      printf(", \"text\": ");
      jstr(x->text);
      printf("}");
    }
    printf("]");
  }
  printf("}\n");
}

/* ---- the request -------------------------------------------------------- */

/* The exit status for a failed open or request, with one line said.
 * answered: the server sent an ERROR (its message in detail, escaped
 * here: it is the server's text). */
static int failed(const args_t *a, int rc, int answered, const char *detail) {
  const char *raw = detail != NULL && detail[0] != '\0' ? detail
                                                        : dr_strerror(rc);
  char what[4 * 512 + 8];
  size_t n = strlen(raw);
  dr_log_sample(raw, n < 512 ? n : 512, what, sizeof(what));
  int refused = rc == DR_ENOAUTH || rc == DR_EAUTH || rc == DR_ERUNID ||
                rc == DR_EVERSION;
  if (rc == DR_ENOAUTH)
    fprintf(stderr, "ddprun status: the rendezvous server %s:%u requires "
            "the job's shared secret: pass --secret-file FILE or set "
            "DDPRUN_SECRET\n", a->host, a->port);
  else if (refused)
    fprintf(stderr, "ddprun status: the rendezvous server %s:%u refused "
            "this client: %s\n", a->host, a->port, what);
  else if (answered)
    fprintf(stderr, "ddprun status: the rendezvous server %s:%u could not "
            "answer: %s\n", a->host, a->port, what);
  else
    fprintf(stderr, "ddprun status: no answer from the rendezvous server "
            "%s:%u: %s\n", a->host, a->port, what);
  return refused ? DR_EXIT_CONFIG : DR_EXIT_COMM;
}

int dr_status_main(int argc, char **argv) {
  args_t a;
  int rc = parse(argc, argv, &a);
  if (rc != 0)
    return rc == 1 ? 0 : rc;
  uint8_t *secret = NULL;
  size_t secret_len = 0;
  rc = dr_auth_secret_load(a.secret_file, &secret, &secret_len);
  if (rc != 0) {
    fprintf(stderr, "ddprun status: cannot read the shared secret from %s "
            "(%s)\n", a.secret_file != NULL ? a.secret_file : "DDPRUN_SECRET",
            dr_strerror(rc));
    return DR_EXIT_CONFIG;
  }
  dr_client_opts_t o;
  memset(&o, 0, sizeof(o));
  o.host = a.host;
  o.port = a.port;
  o.run_id = a.run_id;
  o.secret = secret;
  o.secret_len = secret_len;
  o.connect_timeout_ms = (int)a.timeout_ms;
  o.io_timeout_ms = (int)a.timeout_ms;
  dr_client_t *c = NULL;
  char err[512];
  rc = dr_client_open(&o, &c, err, sizeof(err));
  if (secret != NULL)
    dr_auth_secret_free(&secret, secret_len);
  if (rc != 0)
    return failed(&a, rc, 0, err);
  dr_msg_t m;
  rc = dr_client_status(c, a.stacks ? DR_STATUS_STACKS : 0,
                        a.stacks ? a.stacks_ms : 0, &m);
  if (rc != 0) {
    snprintf(err, sizeof(err), "%s", dr_client_errmsg(c));
    dr_client_close(&c);
    return failed(&a, rc, err[0] != '\0', err);
  }
  report_t r;
  rc = decode(&m, &r);
  if (rc != 0) {
    report_free(&r);
    dr_client_close(&c);
    return failed(&a, rc, 1, "a malformed answer");
  }
  if (a.json) {
    print_json(&a, &r);
  } else {
    print_head(&a, &r);
    print_nodes(&r);
    print_ranks(&r);
    if (a.stacks && r.n_stacks == 0)
      printf("stacks: none (no generation runs)\n");
    print_stacks(&r);
  }
  report_free(&r);
  dr_client_close(&c);
  return 0;
}
