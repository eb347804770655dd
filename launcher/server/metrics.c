/* What GET /metrics and GET /healthz say: the server's state and counters
 * in the Prometheus text exposition format, version 0.0.4. Every metric is
 * always present (with HELP and TYPE), so that a dashboard or an alert
 * never sees a series appear only once something has gone wrong. */
#include "server_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const int dr__metrics_codes[DR_METRICS_N_CODES] = {200, 400, 404, 405,
                                                   408, 431, 503};

__attribute__((format(printf, 2, 3))) static void put(dr_buf_t *b,
                                                      const char *fmt, ...) {
  if (b->err != 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof(small), fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n < sizeof(small)) {
    dr_buf_append(b, small, (size_t)n);
    return;
  }
  if (dr_buf_reserve(b, (size_t)n + 1) != 0)
    return;
  va_start(ap, fmt);
  vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* HELP and TYPE of one metric family. */
static void family(dr_buf_t *b, const char *name, const char *type,
                   const char *help) {
  put(b, "# HELP ddprun_rdzv_%s %s\n# TYPE ddprun_rdzv_%s %s\n", name, help,
      name, type);
}

static void gauge(dr_buf_t *b, const char *name, const char *help,
                  double v) {
  family(b, name, "gauge", help);
  put(b, "ddprun_rdzv_%s %.15g\n", name, v);
}

static void counter(dr_buf_t *b, const char *name, const char *help,
                    uint64_t v) {
  family(b, name, "counter", help);
  put(b, "ddprun_rdzv_%s %" PRIu64 "\n", name, v);
}

/* A label value as the format wants it: \\, \" and \n escaped. */
static const char *label_escape(const char *in, char *out, size_t n) {
  size_t j = 0;
  for (; *in != '\0' && j + 3 < n; in++) {
    if (*in == '\\' || *in == '"') {
      out[j++] = '\\';
      out[j++] = *in;
    } else if (*in == '\n') {
      out[j++] = '\\';
      out[j++] = 'n';
    } else {
      out[j++] = *in;
    }
  }
  out[j] = '\0';
  return out;
}

static uint64_t unix_ms(void) {
  uv_timeval64_t tv;
  if (uv_gettimeofday(&tv) != 0)
    return 0;
  return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

static void render_job(dr_server_t *s, dr_buf_t *b) {
  const dr_rdzv_t *r = &s->rdzv;
  char esc[600];
  family(b, "job_info", "gauge", "Always 1; the job's run id as a label.");
  put(b, "ddprun_rdzv_job_info{run_id=\"%s\"} 1\n",
      label_escape(s->run_id, esc, sizeof(esc)));
  gauge(b, "start_time_seconds",
        "When this server started, in seconds since the Unix epoch.",
        (double)s->start_unix_ms / 1000.0);
  family(b, "job_state", "gauge",
         "1 for the job's current state: forming (collecting nodes for a "
         "round), running, or done (ended; see job_exit_code).");
  static const char *const names[] = {"forming", "running", "done"};
  for (int i = 0; i < 3; i++)
    put(b, "ddprun_rdzv_job_state{state=\"%s\"} %d\n", names[i],
        (int)r->state == i);
  gauge(b, "job_exit_code",
        "The job's exit code once it is done (0: every node succeeded); -1 "
        "before.",
        r->state == DR_JOB_DONE ? r->exit_code : -1);
  gauge(b, "generation",
        "The current generation (round); the first is 1, each restart and "
        "each node taken in opens the next.",
        (double)r->gen);
  counter(b, "rounds_completed_total",
          "Rounds that completed and were assigned to their nodes.",
          r->rounds_completed);
  counter(b, "restarts_total",
          "Restarts taken from the job's budget after a failure.",
          r->restarts_used);
  gauge(b, "max_restarts", "The job's restart budget (--max-restarts).",
        s->cfg.max_restarts);
  counter(b, "worker_failures_total",
          "Worker failures that agents reported for the running "
          "generation.",
          s->rdzv.failures);
  counter(b, "nodes_lost_total",
          "Nodes dropped from the job: connection closed or heartbeat "
          "silent.",
          s->rdzv.nodes_lost);
}

static void render_nodes(dr_server_t *s, dr_buf_t *b) {
  const dr_rdzv_t *r = &s->rdzv;
  size_t alive = 0;
  uint32_t world = 0;
  uint64_t age_max = 0, now = dr__now_ms(s);
  for (size_t i = 0; i < r->n_round; i++) {
    const dr_rdzv_peer_t *c = r->round[i]->peer;
    if (c == NULL)
      continue;
    alive++;
    if (r->state == DR_JOB_RUNNING) {
      world += r->round[i]->nproc;
      if (now - c->last_seen_ms > age_max)
        age_max = now - c->last_seen_ms;
    }
  }
  for (size_t i = 0; i < r->n_waiting; i++)
    alive += r->waiting[i]->peer != NULL;
  if (r->state == DR_JOB_DONE)
    alive = 0;
  gauge(b, "nodes_alive",
        "Nodes connected and in the job: in the current round, or waiting "
        "to be taken into the next.",
        (double)alive);
  gauge(b, "nodes_waiting",
        "Nodes that joined while a round runs, waiting for the next.",
        r->state == DR_JOB_DONE ? 0 : (double)r->n_waiting);
  gauge(b, "nodes_min", "The fewest nodes the job runs with (--nnodes MIN).",
        s->cfg.min_nodes);
  gauge(b, "nodes_max", "The most nodes the job takes (--nnodes MAX).",
        s->cfg.max_nodes);
  gauge(b, "world_size",
        "Workers in the running round (sum of nproc-per-node); 0 while no "
        "round runs.",
        world);
  gauge(b, "heartbeat_age_max_seconds",
        "The longest time since any node of the running round was last "
        "heard from; a node is declared dead past heartbeat_timeout_seconds.",
        (double)age_max / 1000.0);
  gauge(b, "heartbeat_timeout_seconds",
        "Silence after which a node is declared dead.",
        s->cfg.heartbeat_timeout_ms / 1000.0);
}

/* Per node of the running round, labelled by node rank and host: the
 * series exist while their nodes do (the families always). uncertainty 0:
 * the offsets, 1: their bounds. */
static void render_clock_series(dr_server_t *s, dr_buf_t *b, int uncertainty) {
  const dr_rdzv_t *r = &s->rdzv;
  char esc[600];
  for (size_t i = 0; r->state == DR_JOB_RUNNING && i < r->n_round; i++) {
    const dr_node_t *x = r->round[i];
    dr_clock_sample_t est;
    if (x->peer == NULL || x->detached ||
        dr__clock_estimate(dr__conn_of(x->peer), &est) != 0)
      continue;
    /* The estimate is the server's minus the node's; shown the other way
     * round, as the node's clock reads. */
    double v = uncertainty ? (double)dr_clock_uncertainty_us(&est) / 1e6
                           : (double)-est.offset_us / 1e6;
    put(b, "ddprun_rdzv_node_clock_%s_seconds{node=\"%u\",host=\"%s\"} "
           "%.6f\n",
        uncertainty ? "uncertainty" : "offset", x->node_rank,
        label_escape(x->host, esc, sizeof(esc)), v);
  }
}

static void render_clocks(dr_server_t *s, dr_buf_t *b) {
  family(b, "node_clock_offset_seconds", "gauge",
         "How far each node's clock is from the server's: the node's "
         "CLOCK_REALTIME minus the server's (negative: behind), from the "
         "sample of its last 8 (its join, its heartbeats) with the smallest "
         "round trip.");
  render_clock_series(s, b, 0);
  family(b, "node_clock_uncertainty_seconds", "gauge",
         "The bound on node_clock_offset_seconds' error: half the round "
         "trip it was measured over.");
  render_clock_series(s, b, 1);
}

/* The forming round: who is in, what it still needs. The per-node and
 * per-rank series exist while a round forms (the families always). */
static void render_round(dr_server_t *s, dr_buf_t *b) {
  const dr_rdzv_t *r = &s->rdzv;
  uint64_t now = dr__now_ms(s);
  dr_round_fig_t fig;
  dr_rdzv_round_figures(&s->rdzv, now, &fig);
  gauge(b, "round_nodes_joined",
        "Nodes that joined the forming round; 0 while no round forms.",
        fig.joined);
  gauge(b, "round_nodes_needed",
        "More nodes the forming round needs before it can complete (to "
        "--nnodes MIN, and to every node rank asked for); 0 while a round "
        "runs or the job is done.",
        fig.needed);
  gauge(b, "round_waiting_seconds",
        "How long the forming round has waited since its first node "
        "joined; 0 while no round forms.",
        (double)fig.waited_ms / 1000.0);
  family(b, "round_node_info", "gauge",
         "Always 1: one series per node in the forming round, with the node "
         "rank it asked for (any: none), its host and the address it "
         "connected from.");
  char esc[600];
  for (size_t i = 0; r->state == DR_JOB_FORMING && i < r->n_round; i++) {
    const dr_node_t *x = r->round[i];
    char rank[24];
    if (x->req_rank != DR_NONE)
      snprintf(rank, sizeof(rank), "%" PRIu64, x->req_rank);
    else
      snprintf(rank, sizeof(rank), "any");
    /* The peer keeps two nodes of one host apart. */
    put(b, "ddprun_rdzv_round_node_info{node=\"%s\",host=\"%s\",peer=\"%s\"} "
           "1\n",
        rank, label_escape(x->host, esc, sizeof(esc)),
        x->peer != NULL ? x->peer->addr : "gone");
  }
  family(b, "round_rank_missing", "gauge",
         "Always 1: one series per node rank that the forming round needs "
         "and no node holds, when every node in it asked for its rank.");
  for (uint32_t k = 0; fig.is_static && k < fig.need_to; k++)
    if (r->rank_holder[k] == NULL)
      put(b, "ddprun_rdzv_round_rank_missing{node=\"%u\"} 1\n", k);
}

/* Per rank of the running round, from its agent's last report: the
 * series of a rank exist while its figure is known (the families always).
 * Labelled by global rank, node rank, local rank and host. */
enum { RK_RSS, RK_RSS_PEAK, RK_CPU, RK_GPU_MEM, RK_GPU_UTIL, RK_N };

/* Figure k of rank x as a gauge's value: 0 and *v, or -1 unknown. */
static int rank_figure(const dr_rank_rec_t *x, int k, double *v) {
  switch (k) {
  case RK_RSS:
    *v = (double)x->rss_bytes;
    return x->rss_bytes != DR_NONE ? 0 : -1;
  case RK_RSS_PEAK:
    *v = (double)x->rss_peak_bytes;
    return x->rss_peak_bytes != DR_NONE ? 0 : -1;
  case RK_CPU:
    *v = (double)x->cpu_milli / 1000.0;
    return x->cpu_milli != DR_NO_U32 ? 0 : -1;
  case RK_GPU_MEM:
    *v = (double)x->gpu_mem_bytes;
    return x->gpu_mem_bytes != DR_NONE ? 0 : -1;
  default:
    *v = (double)x->gpu_util / 100.0;
    return x->gpu_util != DR_NO_U32 ? 0 : -1;
  }
}

static void render_ranks(dr_server_t *s, dr_buf_t *b) {
  static const struct {
    const char *name, *help;
  } fam[RK_N] = {
      {"rank_rss_bytes",
       "Resident memory of each rank's processes (the rank and the "
       "children in its process group, e.g. DataLoader workers; shared "
       "pages count once per process), as its agent last sampled it."},
      {"rank_rss_peak_bytes",
       "The most resident memory each rank's processes held at any "
       "sample since the rank started."},
      {"rank_cpu_ratio",
       "CPU use of each rank's processes over the last seconds, in CPUs "
       "(1: one CPU busy all the time)."},
      {"rank_gpu_memory_bytes",
       "GPU memory used by each rank's processes (NVML), where the node "
       "has NVML and the rank holds a GPU context."},
      {"rank_gpu_utilization_ratio",
       "Utilisation of the GPU each rank runs on (NVML), 0 to 1."}};
  const dr_rdzv_t *r = &s->rdzv;
  char esc[600];
  for (int k = 0; k < RK_N; k++) {
    family(b, fam[k].name, "gauge", fam[k].help);
    for (size_t i = 0; r->state == DR_JOB_RUNNING && i < r->n_round; i++) {
      const dr_node_t *n = r->round[i];
      if (n->n_ranks == 0)
        continue;
      label_escape(n->host, esc, sizeof(esc));
      for (uint32_t q = 0; q < n->n_ranks; q++) {
        const dr_rank_rec_t *x = &n->ranks[q];
        double v;
        if (rank_figure(x, k, &v) != 0)
          continue;
        put(b, "ddprun_rdzv_%s{rank=\"%u\",node=\"%u\",local_rank=\"%u\","
               "host=\"%s\"} %.15g\n",
            fam[k].name, x->rank, n->node_rank, x->local_rank, esc, v);
      }
    }
  }
}

static void render_store(dr_server_t *s, dr_buf_t *b) {
  dr_store_stats_t st;
  dr__store_stats(s->store, &st);
  family(b, "store_keys", "gauge",
         "Keys in the store, by scope: the job's, and the current "
         "generation's (cleared at each new generation).");
  put(b, "ddprun_rdzv_store_keys{scope=\"job\"} %zu\n", st.keys_job);
  put(b, "ddprun_rdzv_store_keys{scope=\"generation\"} %zu\n", st.keys_gen);
  family(b, "store_operations_total", "counter",
         "Store requests handled, by operation.");
  static const struct {
    int type;
    const char *op;
  } ops[] = {{DR_MSG_SET, "set"},         {DR_MSG_GET, "get"},
             {DR_MSG_MULTI_GET, "multi_get"}, {DR_MSG_ADD, "add"},
             {DR_MSG_CAS, "cas"},         {DR_MSG_DELETE, "delete"},
             {DR_MSG_CHECK, "check"},     {DR_MSG_BARRIER, "barrier"}};
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
    put(b, "ddprun_rdzv_store_operations_total{op=\"%s\"} %" PRIu64 "\n",
        ops[i].op, st.ops[ops[i].type]);
  counter(b, "store_stale_requests_total",
          "Store requests refused because their generation had ended.",
          st.stale);
  gauge(b, "store_waiters",
        "Blocking store requests (GET, MULTI_GET, BARRIER) still waiting.",
        (double)st.waiters);
}

static void render_conns(dr_server_t *s, dr_buf_t *b,
                         const uint64_t *http_counts) {
  gauge(b, "connections",
        "Open client connections (agents, workers, tools), handshake "
        "included.",
        (double)s->n_conns);
  counter(b, "connections_accepted_total",
          "Client connections accepted since the server started.",
          s->stats.accepted);
  family(b, "handshakes_refused_total", "counter",
         "Connections refused before they became clients of the job, by "
         "reason.");
  static const char *const why[DR__REFUSE_N] = {
      "run_id", "no_secret", "bad_secret", "version", "malformed", "timeout"};
  for (int i = 0; i < DR__REFUSE_N; i++)
    put(b, "ddprun_rdzv_handshakes_refused_total{reason=\"%s\"} %" PRIu64
           "\n",
        why[i], s->stats.refused[i]);
  family(b, "connections_dropped_total", "counter",
         "Connections the server closed for holding what others need, by "
         "reason: idle, slow_frame, frame_memory, slow_reader (clients "
         "that are not nodes), fd_limit (closed unserved at the "
         "file-descriptor limit).");
  static const char *const dropped[DR__DROP_N] = {
      "idle", "slow_frame", "frame_memory", "slow_reader", "fd_limit"};
  for (int i = 0; i < DR__DROP_N; i++)
    put(b, "ddprun_rdzv_connections_dropped_total{reason=\"%s\"} %" PRIu64
           "\n",
        dropped[i], s->stats.dropped[i]);
  counter(b, "joins_refused_total",
          "JOIN requests refused: duplicate or out-of-range node rank, "
          "different nproc, nproc or world size over its bound, job full "
          "or ended.",
          s->rdzv.joins_refused);
  family(b, "http_responses_total", "counter",
         "Answers of this HTTP endpoint, by status code.");
  for (int i = 0; i < DR_METRICS_N_CODES; i++)
    put(b, "ddprun_rdzv_http_responses_total{code=\"%d\"} %" PRIu64 "\n",
        dr__metrics_codes[i], http_counts[i]);
}

int dr__metrics_render(dr_server_t *s, dr_buf_t *out,
                       const uint64_t *http_counts) {
  render_job(s, out);
  render_nodes(s, out);
  render_round(s, out);
  render_clocks(s, out);
  render_ranks(s, out);
  render_store(s, out);
  render_conns(s, out, http_counts);
  gauge(out, "uptime_seconds", "Seconds since this server started.",
        s->start_unix_ms != 0 ? (double)(unix_ms() - s->start_unix_ms) / 1000.0
                              : 0.0);
  return out->err;
}

int dr__metrics_health(const dr_server_t *s, char *out, size_t n) {
  const dr_rdzv_t *r = &s->rdzv;
  switch (r->state) {
  case DR_JOB_FORMING:
    snprintf(out, n, "ok: job '%s' forming generation %" PRIu64 "\n",
             s->run_id, r->gen);
    return 200;
  case DR_JOB_RUNNING:
    snprintf(out, n, "ok: job '%s' running generation %" PRIu64 "\n",
             s->run_id, r->gen);
    return 200;
  default:
    snprintf(out, n, "done: job '%s' ended with exit code %d: %s\n",
             s->run_id, r->exit_code, r->stop_reason);
    return 503;
  }
}
