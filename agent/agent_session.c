/* The agent's session with the rendezvous server: join, heartbeats, the
 * server's orders, and what happens when the server goes away.
 *
 * The server is the control plane only. When its connection breaks (the
 * server crashed or was restarted) the workers keep running: the agent
 * connects again, with backoff, and sends RESUME for the generation its
 * workers run; the server takes it back (OK) or tells it to restart. The
 * reports the server may have lost with its connection (failures, this
 * node's success) are sent again once it is back. A server that is only
 * silent (stopped, a paused VM) keeps its connection: the agent waits for
 * it, and the heartbeats it queued meanwhile tell the server on waking that
 * nothing was lost. The reconnection is bounded by join_timeout only while
 * no workers run (joining, or waiting for the server's order).
 *
 * While a round forms, the server says who is in and what it still needs
 * (ROUND_STATUS); the agent says so too, on every change and every 10 s,
 * and its join timeout names them. While workers run, it reports them
 * (RANKS: pid, state, last progress step and step rate) when they change,
 * at most once per heartbeat, and collects their stacks when asked
 * (STACKS), off the loop: what `ddprun status` shows. */
#include "agent_internal.h"

#include "log.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"
#include "events.h"
#include "exit_codes.h"
#include "progress.h"
#include "stacks.h"

/* An unchanged round status is said again after this long. */
#define ROUND_SAY_EVERY_MS 10000u
/* Unchanged ranks are reported again after this long. */
#define RANKS_REFRESH_MS 5000u
/* The most one rank's stack may take in a STACK_DUMP (a record must fit
 * the server's blob cap with its header), and all of them (well within
 * the server's frame cap). */
#define STACK_TEXT_MAX (60u * 1024u)
/* How long the workers' stacks for one STACKS request may take, in all:
 * below the server's default wait for them (10 s). */
#define STACKS_BUDGET_MS 5000
#define STACK_DUMP_MAX (32u << 20)

void dr__agent_send(dr_agent_t *ag, dr_buf_t *b) {
  if (ag->arz != NULL && ag->arz_ready)
    dr_arz_send(ag->arz, b);
  dr_buf_free(b);
}

/* Holds a free port for MASTER_PORT: bound (SO_REUSEADDR), not listening,
 * so no other job gets it, while rank 0 can still bind it once released. */
static int reserve_port(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  socklen_t len = sizeof(sa);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

void dr__agent_release_port(dr_agent_t *ag) {
  if (ag->port_fd >= 0)
    close(ag->port_fd);
  ag->port_fd = -1;
}

static void on_join_timeout(uv_timer_t *t);

void dr__agent_send_join(dr_agent_t *ag) {
  ag->state = DR_AG_JOINING;
  ag->round_said[0] = '\0'; /* of the round before, if any */
  ag->round_said_ms = 0;
  if (ag->cfg->master_port == 0 && ag->port_fd < 0) {
    int fd = reserve_port(&ag->port_offer);
    if (fd >= 0)
      ag->port_fd = fd;
  }
  uv_timer_start(&ag->join_timer, on_join_timeout, ag->o->join_timeout_ms, 0);
  if (ag->arz == NULL || !ag->arz_ready)
    return; /* sent once the connection is back (on_ready) */
  dr_join_t j;
  memset(&j, 0, sizeof(j));
  j.run_id = dr_str(ag->o->rdzv_id);
  j.host = dr_str(ag->cfg->hostname);
  j.addr = dr_str(ag->o->local_addr);
  j.nproc = ag->nproc;
  j.node_rank = ag->o->node_rank >= 0 ? (uint64_t)ag->o->node_rank : DR_NONE;
  j.master_port_offer =
      ag->cfg->master_port != 0 ? ag->cfg->master_port : ag->port_offer;
  dr_arz_join(ag->arz, &j);
  dr_events_emit(ag->events, "join", ",\"nproc\":%u", ag->nproc);
}

static void on_join_timeout(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->state != DR_AG_JOINING)
    return;
  int err = ag->arz != NULL ? dr_arz_last_error(ag->arz) : 0;
  if (ag->arz != NULL && dr_arz_resolve_error(ag->arz) != NULL)
    DR_SAY(DR_LOG_ERROR, "cannot resolve the rendezvous endpoint '%s' "
            "(%s); gave up after join_timeout=%.3g s; check the host name of "
            "--rdzv-endpoint", ag->cfg->server_host,
            dr_arz_resolve_error(ag->arz),
            ag->o->join_timeout_ms / 1000.0);
  else if (ag->reconnecting && ag->last_loss[0] != '\0')
    DR_SAY(DR_LOG_ERROR, "gave up joining %s:%u after join_timeout=%.3g "
            "s; %u more attempts ended as the one said above",
            ag->cfg->server_host, ag->cfg->server_port,
            ag->o->join_timeout_ms / 1000.0, ag->n_same_loss);
  else if (ag->arz != NULL && !dr_arz_connected(ag->arz))
    DR_SAY(DR_LOG_ERROR, "connect() to %s:%u failed while joining (%d: "
            "%s); gave up after join_timeout=%.3g s", ag->cfg->server_host,
            ag->cfg->server_port, -err, err != 0 ? uv_strerror(err) : "no "
            "answer", ag->o->join_timeout_ms / 1000.0);
  else if (ag->round_said[0] != '\0')
    DR_SAY(DR_LOG_ERROR, "the rendezvous at %s:%u did not complete within "
            "join_timeout=%.3g s: %s; are the other nodes started, with the "
            "same --rdzv-id, --nnodes and --rdzv-endpoint?",
            ag->cfg->server_host, ag->cfg->server_port,
            ag->o->join_timeout_ms / 1000.0, ag->round_said);
  else
    DR_SAY(DR_LOG_ERROR, "the rendezvous at %s:%u did not complete within "
            "join_timeout=%.3g s; are the other nodes started with the same "
            "--rdzv-id and --nnodes?", ag->cfg->server_host,
            ag->cfg->server_port, ag->o->join_timeout_ms / 1000.0);
  dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
  dr__agent_finish(ag);
}

/* ---- resuming after a reconnection -------------------------------------- */

static void send_resume(dr_agent_t *ag) {
  dr_resume_t q;
  memset(&q, 0, sizeof(q));
  q.run_id = dr_str(ag->o->rdzv_id);
  q.host = dr_str(ag->cfg->hostname);
  q.gen = ag->asg.gen;
  q.node_rank = ag->asg.node_rank;
  q.nnodes = ag->asg.nnodes;
  q.world_size = ag->asg.world_size;
  q.nproc = ag->nproc;
  q.restart_count = ag->asg.restart_count;
  memcpy(q.resume_token, ag->asg.resume_token, sizeof(q.resume_token));
  if (dr_arz_resume(ag->arz, &q) == 0)
    ag->resume_pending = 1;
}

/* The server took this node back: what it may have missed follows. */
static void on_resumed(dr_agent_t *ag) {
  ag->resume_pending = 0;
  double away = (uv_now(&ag->loop) - ag->lost_ms) / 1000.0;
  DR_SAY(DR_LOG_INFO, "back in generation %llu as node %u after %.1f s "
          "without the rendezvous server; the workers kept running",
          (unsigned long long)ag->asg.gen, ag->asg.node_rank, away);
  dr_events_emit(ag->events, "resumed", ",\"gen\":%llu,\"away_ms\":%llu",
                 (unsigned long long)ag->asg.gen,
                 (unsigned long long)(uv_now(&ag->loop) - ag->lost_ms));
  for (size_t i = 0; i < ag->n_fails; i++)
    dr__agent_report_failure(ag, &ag->fails[i]);
  ag->ranks_sent_ms = 0; /* the workers again, at the next heartbeat */
  if (ag->state == DR_AG_WAITING && ag->n_fails == 0 && ag->n_alive == 0) {
    dr_buf_t b;
    dr_buf_init(&b);
    dr_enc_success(&b, 0, ag->asg.gen);
    dr__agent_send(ag, &b);
  }
}

/* ---- the round this node waits in --------------------------------------- */

/* Appends to out[*len..n), keeping it NUL-terminated when it is full. */
static void add(char *out, size_t n, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(char *out, size_t n, size_t *len, const char *fmt, ...) {
  if (*len >= n)
    return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(out + *len, n - *len, fmt, ap);
  va_end(ap);
  if (k > 0)
    *len = *len + (size_t)k < n ? *len + (size_t)k : n - 1;
}

/* What the round has and needs, without its times, so that an unchanged
 * round reads the same: "2 of 3 nodes joined (node-a, node-b); 1 more
 * needed", or with static ranks "...; missing node rank 2". */
static void round_text(const dr_round_status_t *st, char *out, size_t n) {
  size_t len = 0;
  out[0] = '\0';
  if (st->min_nodes == st->max_nodes)
    add(out, n, &len, "%u of %u node%s joined", st->joined, st->max_nodes,
        st->max_nodes == 1 ? "" : "s");
  else
    add(out, n, &len, "%u of %u:%u nodes joined", st->joined, st->min_nodes,
        st->max_nodes);
  uint32_t pos = 0, listed = 0;
  dr_node_rec_t x;
  while (dr_node_rec_next(&st->nodes, &pos, &x)) {
    add(out, n, &len, "%s%.*s", listed == 0 ? " (" : ", ", (int)x.host.len,
        (const char *)x.host.p);
    if (x.node_rank != DR_NO_RANK)
      add(out, n, &len, " as node %u", x.node_rank);
    listed++;
  }
  if (listed > 0 && listed < st->joined)
    add(out, n, &len, " and %u more", st->joined - listed);
  if (listed > 0)
    add(out, n, &len, ")");
  if (st->n_missing > 0) {
    add(out, n, &len, "; missing node rank%s", st->n_missing == 1 ? "" : "s");
    uint32_t k, i = 0;
    pos = 0;
    while (dr_rank_u32_next(&st->missing, &pos, &k))
      add(out, n, &len, "%s %u", i++ == 0 ? "" : ",", k);
    if (i < st->n_missing)
      add(out, n, &len, " and %u more", st->n_missing - i);
  } else if (st->needed > 0) {
    add(out, n, &len, "; %u more needed", st->needed);
  } else if (st->last_call_ms != DR_NONE) {
    add(out, n, &len, "; it completes at the last call unless more join");
  }
}

/* Said when it changes, and every ROUND_SAY_EVERY_MS while it does not. */
static void on_round_status(dr_agent_t *ag, const dr_round_status_t *st) {
  if (ag->state != DR_AG_JOINING)
    return;
  char text[sizeof(ag->round_said)];
  round_text(st, text, sizeof(text));
  uint64_t now = uv_now(&ag->loop);
  if (strcmp(text, ag->round_said) == 0 && ag->round_said_ms != 0 &&
      now - ag->round_said_ms < ROUND_SAY_EVERY_MS)
    return;
  snprintf(ag->round_said, sizeof(ag->round_said), "%s", text);
  ag->round_said_ms = now;
  char when[64] = "";
  if (st->needed == 0 && st->last_call_ms != DR_NONE)
    snprintf(when, sizeof(when), "; last call in %.1f s",
             st->last_call_ms / 1000.0);
  DR_SAY(DR_LOG_INFO, "waiting %.1f s for the rendezvous at %s:%u (round "
          "%llu): %s%s", st->waited_ms / 1000.0, ag->cfg->server_host,
          ag->cfg->server_port, (unsigned long long)st->gen, text, when);
}

/* ---- the workers, as `ddprun status` shows them ------------------------- */

/* 1 when pid is stopped (a signal, a debugger): state T or t. */
static int is_stopped(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the name may hold spaces */
  return p != NULL && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

static uint32_t rank_state(const dr_agent_t *ag, const dr_worker_t *w) {
  if (w->pid <= 0)
    return DR_RS_STARTING;
  if (!w->alive)
    return w->signal != 0 ? DR_RS_KILLED : DR_RS_EXITED;
  if (ag->state == DR_AG_STOPPING)
    return DR_RS_STOPPING;
  return is_stopped(w->pid) ? DR_RS_STOPPED : DR_RS_RUNNING;
}

/* Reads w's progress slot: its step, when it changed, its rate. */
static void track(dr_agent_t *ag, dr_worker_t *w, uint64_t now) {
  dr_progress_sample_t smp = dr_progress_read(ag->progress, w->local_rank);
  if (smp.seq == 0 || w->pid <= 0)
    return; /* no report yet (the slot is reset as the worker starts) */
  if (smp.seq != w->st_seq) {
    if (w->st_change_ms == 0 || smp.step != w->st_step)
      w->st_change_ms = now;
    w->st_seq = smp.seq;
    w->st_step = smp.step;
  }
  if (w->st_rate_ms == 0) {
    w->st_rate_ms = now;
    w->st_rate_step = smp.step;
    w->st_rate = -1;
  } else if (now - w->st_rate_ms >= 500) {
    uint64_t d = smp.step >= w->st_rate_step ? smp.step - w->st_rate_step : 0;
    double inst = (double)d * 1000.0 / (double)(now - w->st_rate_ms);
    w->st_rate = w->st_rate < 0 ? inst : 0.5 * inst + 0.5 * w->st_rate;
    w->st_rate_ms = now;
    w->st_rate_step = smp.step;
  }
}

static uint64_t fnv(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

/* RANKS when the workers changed (pid, state, step), at most once per
 * heartbeat, and every RANKS_REFRESH_MS while they do not. */
static void report_ranks(dr_agent_t *ag) {
  if (!ag->have_asg || ag->w == NULL || !ag->arz_ready ||
      (ag->state != DR_AG_RUNNING && ag->state != DR_AG_STOPPING &&
       ag->state != DR_AG_WAITING))
    return;
  uint64_t now = uv_now(&ag->loop);
  dr_rank_rec_t *recs = calloc(ag->nproc, sizeof(*recs));
  if (recs == NULL)
    return;
  uint64_t h = 1469598103934665603ull ^ ag->asg.gen;
  for (uint32_t i = 0; i < ag->nproc; i++) {
    dr_worker_t *w = &ag->w[i];
    dr_rank_rec_t *x = &recs[i];
    track(ag, w, now);
    x->rank = ag->asg.first_rank + i;
    x->local_rank = i;
    x->node_rank = ag->asg.node_rank;
    x->pid = w->pid > 0 ? (uint32_t)w->pid : 0;
    x->state = rank_state(ag, w);
    x->exit_code = x->state == DR_RS_EXITED ? w->exit_code : 0;
    x->signal = x->state == DR_RS_KILLED ? (uint32_t)w->signal : 0;
    x->step = w->st_change_ms != 0 ? w->st_step : DR_NONE;
    x->step_age_ms = w->st_change_ms != 0 ? now - w->st_change_ms : DR_NONE;
    x->rate_milli = w->alive && w->st_rate >= 0
                        ? (uint64_t)(w->st_rate * 1000.0 + 0.5)
                        : DR_NONE;
    h = fnv(fnv(fnv(h, x->pid), x->state), x->step);
    h = fnv(fnv(h, (uint32_t)x->exit_code), x->signal);
  }
  if (h != ag->ranks_digest || ag->ranks_sent_ms == 0 ||
      now - ag->ranks_sent_ms >= RANKS_REFRESH_MS) {
    dr_buf_t b;
    dr_buf_init(&b);
    if (dr_enc_ranks(&b, 0, ag->asg.gen, recs, ag->nproc) == 0) {
      ag->ranks_digest = h;
      ag->ranks_sent_ms = now;
    }
    dr__agent_send(ag, &b);
  }
  free(recs);
}

/* ---- the workers' stacks ----------------------------------------------- */

/* One STACKS request: its workers' pids, collected off the loop. */
typedef struct {
  uv_work_t req;
  dr_agent_t *ag;
  uint64_t id;
  uint32_t n;
  struct {
    dr_stack_rec_t rec;
    int collect;   /* alive: its stack is collected */
    char *text;    /* STACK_TEXT_MAX bytes, or NULL */
    char why[300]; /* when it is not collected */
  } r[];
} stacks_work_t;

static void stacks_work(uv_work_t *req) {
  stacks_work_t *sw = req->data;
  dr_stack_req_t *reqs = calloc(sw->n + 1, sizeof(*reqs));
  dr_stack_t *out = calloc(sw->n + 1, sizeof(*out));
  if (reqs == NULL || out == NULL) {
    for (uint32_t i = 0; i < sw->n; i++)
      if (sw->r[i].collect) {
        sw->r[i].rec.code = ENOMEM;
        snprintf(sw->r[i].why, sizeof(sw->r[i].why), "out of memory");
      }
    free(reqs);
    free(out);
    return;
  }
  /* Every live worker's at once: the tools run side by side. */
  for (uint32_t i = 0; i < sw->n; i++)
    reqs[i] = (dr_stack_req_t){sw->r[i].collect ? (pid_t)sw->r[i].rec.pid
                                                : 0, -1};
  dr_stacks_collect_all(reqs, sw->n, STACKS_BUDGET_MS, out);
  for (uint32_t i = 0; i < sw->n; i++) {
    if (!sw->r[i].collect)
      continue;
    if (out[i].tool[0] == '\0' && out[i].text == NULL) {
      sw->r[i].rec.code = out[i].missing[0] != '\0' ? ENODATA : ESRCH;
      snprintf(sw->r[i].why, sizeof(sw->r[i].why), "%s",
               out[i].missing[0] != '\0' ? out[i].missing
                                         : "the process is gone");
      continue;
    }
    sw->r[i].text = malloc(STACK_TEXT_MAX);
    if (sw->r[i].text == NULL) {
      sw->r[i].rec.code = ENOMEM;
      snprintf(sw->r[i].why, sizeof(sw->r[i].why), "out of memory");
      continue;
    }
    dr_stack_format(&out[i], NULL, sw->r[i].text, STACK_TEXT_MAX);
  }
  for (uint32_t i = 0; i < sw->n; i++)
    dr_stack_free(&out[i]);
  free(reqs);
  free(out);
}

static void stacks_done(uv_work_t *req, int status) {
  stacks_work_t *sw = req->data;
  dr_stack_rec_t *recs = calloc(sw->n > 0 ? sw->n : 1, sizeof(*recs));
  if (recs != NULL && status == 0) {
    size_t share = STACK_DUMP_MAX / (sw->n > 0 ? sw->n : 1);
    for (uint32_t i = 0; i < sw->n; i++) {
      recs[i] = sw->r[i].rec;
      recs[i].text = dr_str(sw->r[i].text != NULL ? sw->r[i].text
                                                  : sw->r[i].why);
      if (recs[i].text.len > share) /* the innermost frames come first */
        recs[i].text.len = (uint32_t)share;
    }
    dr_buf_t b;
    dr_buf_init(&b);
    dr_enc_stack_dump(&b, 0, sw->id, recs, sw->n);
    dr__agent_send(sw->ag, &b);
  }
  free(recs);
  for (uint32_t i = 0; i < sw->n; i++)
    free(sw->r[i].text);
  free(sw);
}

/* The server asks for the workers' stacks: collected on libuv's pool, so
 * that the heartbeats go on meanwhile; answered with STACK_DUMP id. */
static void on_stacks_request(dr_agent_t *ag, uint64_t id) {
  uint32_t n = ag->w != NULL && ag->have_asg ? ag->nproc : 0;
  stacks_work_t *sw = calloc(1, sizeof(*sw) + n * sizeof(sw->r[0]));
  if (sw == NULL)
    return; /* the server's deadline answers for this node */
  sw->ag = ag;
  sw->id = id;
  sw->n = n;
  sw->req.data = sw;
  DR_SAY(DR_LOG_DEBUG, "collecting the stacks of %u ranks for the server "
          "(request %llu)", n, (unsigned long long)id);
  for (uint32_t i = 0; i < n; i++) {
    dr_worker_t *w = &ag->w[i];
    sw->r[i].rec.rank = ag->asg.first_rank + i;
    sw->r[i].rec.node_rank = ag->asg.node_rank;
    sw->r[i].rec.pid = w->pid > 0 ? (uint32_t)w->pid : 0;
    sw->r[i].collect = w->pid > 0 && w->alive;
    if (!sw->r[i].collect) {
      sw->r[i].rec.code = ESRCH;
      snprintf(sw->r[i].why, sizeof(sw->r[i].why), "rank %u is not "
               "running (%s)", sw->r[i].rec.rank,
               dr_rank_state_name(rank_state(ag, w)));
    }
  }
  if (uv_queue_work(&ag->loop, &sw->req, stacks_work, stacks_done) != 0) {
    for (uint32_t i = 0; i < n; i++)
      if (sw->r[i].collect) {
        sw->r[i].collect = 0;
        sw->r[i].rec.code = EAGAIN;
        snprintf(sw->r[i].why, sizeof(sw->r[i].why), "cannot start the "
                 "collection");
      }
    stacks_done(&sw->req, 0);
  }
}

/* ---- the server's messages --------------------------------------------- */

static void on_restart_order(dr_agent_t *ag, uint64_t gen,
                             unsigned long long count, dr_bytes_t reason) {
  ag->resume_pending = 0;
  DR_SAY(DR_LOG_WARN, "restarting the workers (generation %llu, "
          "restart %llu of %u): %.*s", (unsigned long long)gen, count,
          ag->o->max_restarts, (int)reason.len, (const char *)reason.p);
  snprintf(ag->server_reason, sizeof(ag->server_reason), "%.*s",
           (int)reason.len, (const char *)reason.p);
  dr__hang_tell(ag);
  char esc[2500];
  dr_events_emit(ag->events, "restart",
                 ",\"gen\":%llu,\"restart_count\":%llu,\"reason\":\"%s\"",
                 (unsigned long long)gen, count,
                 dr_json_escape(ag->server_reason, esc, sizeof(esc)));
  dr__agent_stop_local(ag, SIGTERM, DR_NEXT_REJOIN);
}

static void on_refused(dr_agent_t *ag, const dr_sess_event_t *ev) {
  if (ev->to == DR_MSG_RESUME && ev->code == DR_ESTALE) {
    /* The server cannot take this node back: a restart, as after a
     * failure, but not one from the budget. */
    on_restart_order(ag, ag->asg.gen + 1, ag->asg.restart_count, ev->text);
    return;
  }
  if (ag->state == DR_AG_JOINING || ag->resume_pending ||
      ev->code != DR_ESTOPPED)
    DR_SAY(DR_LOG_ERROR, "the rendezvous server refused this node: %.*s",
            (int)ev->text.len, (const char *)ev->text.p);
  dr__agent_end(ag, DR_END_LOCAL, ev->code == DR_ESTOPPED ? 1 : DR_EXIT_CONFIG);
  dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
}

static void on_event(void *arg, const dr_sess_event_t *ev) {
  dr_agent_t *ag = arg;
  if (ag->silent_warned) {
    DR_SAY(DR_LOG_INFO, "the rendezvous server %s:%u answers again",
            ag->cfg->server_host, ag->cfg->server_port);
    ag->silent_warned = 0;
  }
  switch (ev->type) {
  case DR_SESS_ASSIGNED: {
    dr_assignment_t a = ev->asg;
    if (ag->state != DR_AG_JOINING) {
      dr_assignment_free(&a);
      break;
    }
    uv_timer_stop(&ag->join_timer);
    if (a.clock_uncertainty_us != DR_NONE)
      DR_SAY(DR_LOG_DEBUG, "generation %llu: the rendezvous server's clock "
              "minus this host's is %+.3f ms (\u00b1%.3f ms)",
              (unsigned long long)a.gen, a.clock_offset_us / 1000.0,
              a.clock_uncertainty_us / 1000.0);
    dr__agent_on_assign(ag, &a);
    break;
  }
  case DR_SESS_RESUMED:
    if (ag->resume_pending)
      on_resumed(ag);
    break;
  case DR_SESS_RESTART:
    on_restart_order(ag, ev->gen, ev->restart_count, ev->text);
    break;
  case DR_SESS_STOP:
    dr__hang_tell(ag);
    dr__agent_end(ag, DR_END_SERVER, ev->exit_code);
    snprintf(ag->server_reason, sizeof(ag->server_reason), "%.*s",
             (int)ev->text.len, (const char *)ev->text.p);
    {
      char esc[2500];
      dr_events_emit(ag->events, "stop", ",\"exit_code\":%d,\"reason\":\"%s\"",
                     ev->exit_code,
                     dr_json_escape(ag->server_reason, esc, sizeof(esc)));
    }
    dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
    break;
  case DR_SESS_REFUSED:
    on_refused(ag, ev);
    break;
  case DR_SESS_ROUND:
    on_round_status(ag, &ev->round);
    break;
  case DR_SESS_STACKS:
    on_stacks_request(ag, ev->id);
    break;
  default: /* HEARTBEAT: hearing it is enough */
    break;
  }
}

/* ---- losing the server and finding it again ---------------------------- */

static void reconnect(dr_agent_t *ag);
static void on_retry_reconnect(uv_timer_t *t) { reconnect(t->data); }

/* The reconnection gives up at its deadline only while no workers run:
 * running workers lose nothing by the wait. */
static int reconnect_expired(dr_agent_t *ag) {
  if (ag->state == DR_AG_RUNNING || ag->state == DR_AG_STOPPING)
    return 0;
  uint64_t from = ag->lost_ms > ag->workers_done_ms ? ag->lost_ms
                                                    : ag->workers_done_ms;
  if (!ag->have_asg)
    from = ag->start_ms; /* the first join: join_timeout from the start */
  return uv_now(&ag->loop) >= from + ag->o->join_timeout_ms;
}

static int is_config_refusal(int code) {
  return code == DR_ERUNID || code == DR_ENOAUTH || code == DR_EAUTH ||
         code == DR_EVERSION || code == DR_EDUPRANK || code == DR_EBADRANK ||
         code == DR_ENPROC || code == DR_EFULL;
}

static void on_lost(void *arg, int code, const char *why) {
  dr_agent_t *ag = arg;
  if (ag->stop.next == DR_NEXT_EXIT || ag->state == DR_AG_EXITING)
    return; /* a STOP came first; the server then closed */
  ag->arz_ready = 0;
  ag->resume_pending = 0;
  char esc[1100];
  dr_events_emit(ag->events, "server_lost", ",\"reason\":\"%s\"",
                 dr_json_escape(why, esc, sizeof(esc)));
  int config = is_config_refusal(code);
  if (config || (ag->cfg->server_in_process && ag->have_asg)) {
    /* A refusal is final; a server in this process does not come back. */
    DR_SAY(DR_LOG_ERROR, "%s", why);
    dr__agent_end(ag, DR_END_LOCAL, config ? DR_EXIT_CONFIG : DR_EXIT_COMM);
    dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
    return;
  }
  if (!ag->reconnecting) {
    ag->reconnecting = 1;
    ag->lost_ms = uv_now(&ag->loop);
    ag->n_same_loss = 0;
    snprintf(ag->last_loss, sizeof(ag->last_loss), "%s", why);
    if (ag->have_asg && ag->n_alive > 0)
      DR_SAY(DR_LOG_WARN, "%s; the workers keep running; reconnecting to "
              "%s:%u", why, ag->cfg->server_host, ag->cfg->server_port);
    else
      DR_SAY(DR_LOG_WARN, "%s; reconnecting to %s:%u for up to %.0f s "
              "(join_timeout)", why, ag->cfg->server_host,
              ag->cfg->server_port, ag->o->join_timeout_ms / 1000.0);
  } else if (strcmp(why, ag->last_loss) != 0) {
    if (ag->n_same_loss > 0)
      DR_SAY(DR_LOG_WARN, "(%u more attempts ended the same way)",
              ag->n_same_loss);
    ag->n_same_loss = 0;
    snprintf(ag->last_loss, sizeof(ag->last_loss), "%s", why);
    DR_SAY(DR_LOG_WARN, "%s", why);
  } else {
    ag->n_same_loss++; /* said once: a flood of the same line helps nobody */
  }
  if (reconnect_expired(ag)) {
    DR_SAY(DR_LOG_ERROR, "gave up reconnecting to the rendezvous server "
            "%s:%u after join_timeout=%.3g s", ag->cfg->server_host,
            ag->cfg->server_port, ag->o->join_timeout_ms / 1000.0);
    dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
    dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
    return;
  }
  dr_arz_close(&ag->arz);
  uv_timer_start(&ag->retry_timer, on_retry_reconnect, 100, 0);
}

static void on_ready(void *arg) {
  dr_agent_t *ag = arg;
  ag->arz_ready = 1;
  if (ag->reconnecting && ag->n_same_loss > 0)
    DR_SAY(DR_LOG_WARN, "(%u more attempts ended the same way)",
            ag->n_same_loss);
  ag->reconnecting = 0;
  ag->n_same_loss = 0;
  if (ag->state == DR_AG_JOINING || !ag->have_asg)
    dr__agent_send_join(ag);
  else if (ag->stop.next != DR_NEXT_REJOIN && ag->stop.next != DR_NEXT_EXIT)
    send_resume(ag); /* workers of ag->asg.gen run, or wait for an order */
  /* else: stopping to rejoin; the JOIN follows the stop */
}

static int start_arz(dr_agent_t *ag) {
  dr_arz_opts_t ao;
  memset(&ao, 0, sizeof(ao));
  ao.host = ag->cfg->server_host;
  ao.port = ag->cfg->server_port;
  ao.run_id = ag->o->rdzv_id;
  ao.client_host = ag->cfg->hostname;
  ao.secret = ag->cfg->secret;
  ao.secret_len = ag->cfg->secret_len;
  ao.connect_timeout_ms = ag->o->join_timeout_ms;
  /* A server host that vanished without a FIN: its unacknowledged
   * heartbeats end the connection after this, and the agent reconnects. A
   * stopped server process still acknowledges (its kernel does). */
  ao.user_timeout_ms = 4 * ag->o->heartbeat_timeout_ms < 10000
                           ? 10000
                           : 4 * ag->o->heartbeat_timeout_ms;
  ao.limits = dr_limits_default();
  ao.clock_skew_us = ag->clock_skew_us;
  dr_arz_cb_t cb = {on_ready, on_event, on_lost, ag};
  ag->arz_ready = 0;
  int rc = dr_arz_start(&ag->loop, &ao, &cb, &ag->arz);
  if (rc != 0)
    DR_SAY(DR_LOG_ERROR, "cannot start the rendezvous client for '%s' "
            "(%s)", ag->cfg->server_host, dr_strerror(rc));
  return rc;
}

static void reconnect(dr_agent_t *ag) {
  dr_arz_close(&ag->arz);
  if (start_arz(ag) != 0) {
    dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
    dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
  }
}

/* Heartbeats to the server; a silent server is waited for, not left. */
static void on_heartbeat(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->arz == NULL || ag->state == DR_AG_EXITING || !ag->arz_ready)
    return;
  uint64_t idle = dr_arz_idle_ms(ag->arz);
  /* The server pushes heartbeats to running nodes only. */
  if (ag->state == DR_AG_RUNNING && !ag->silent_warned &&
      idle > 2ull * ag->o->heartbeat_timeout_ms) {
    DR_SAY(DR_LOG_WARN, "the rendezvous server %s:%u has been silent for "
            "%.1f s (stopped or paused?); the workers keep running",
            ag->cfg->server_host, ag->cfg->server_port, idle / 1000.0);
    ag->silent_warned = 1;
  }
  if (ag->state == DR_AG_WAITING && idle > ag->o->join_timeout_ms) {
    /* Workers done, their report sent, and no order for join_timeout. */
    DR_SAY(DR_LOG_ERROR, "the rendezvous server %s:%u has been silent "
            "for %.0f s while this node waits for its order; giving up",
            ag->cfg->server_host, ag->cfg->server_port, idle / 1000.0);
    dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
    dr__agent_finish(ag);
    return;
  }
  dr_arz_heartbeat(ag->arz, ag->asg.gen);
  report_ranks(ag);
}

/* Fault injection for tests: DDPRUN_TEST_CLOCK_SKEW_MS=N (signed
 * milliseconds, at most a day either way) adds N ms to every clock reading
 * this agent stamps the rendezvous protocol with (JOIN, RESUME, HEARTBEAT),
 * so that the server measures this host's clock N ms ahead of its own
 * (negative: behind) while the host's clock stays as it is. Only the agent
 * reads it: the server's clock is the real one, also when it runs in this
 * process; nothing else of the agent's (logs, events) is skewed. */
static int64_t test_clock_skew_us(void) {
  const char *v = getenv("DDPRUN_TEST_CLOCK_SKEW_MS");
  if (v == NULL || v[0] == '\0')
    return 0;
  char *end = NULL;
  errno = 0;
  long long ms = strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || ms < -86400000LL ||
      ms > 86400000LL) {
    DR_SAY(DR_LOG_WARN, "ignoring DDPRUN_TEST_CLOCK_SKEW_MS='%s': not a "
            "number of milliseconds within a day", v);
    return 0;
  }
  if (ms != 0)
    DR_SAY(DR_LOG_WARN, "DDPRUN_TEST_CLOCK_SKEW_MS=%lld: this node's clock "
            "stamps to the rendezvous server are skewed by %lld ms (fault "
            "injection for tests)", ms, ms);
  return (int64_t)ms * 1000;
}

int dr__agent_session_start(dr_agent_t *ag) {
  ag->clock_skew_us = test_clock_skew_us();
  if (start_arz(ag) != 0)
    return -1;
  uv_timer_start(&ag->join_timer, on_join_timeout, ag->o->join_timeout_ms, 0);
  uint64_t hb = ag->o->heartbeat_timeout_ms / 3;
  uv_timer_start(&ag->hb_timer, on_heartbeat, hb > 0 ? hb : 1, hb > 0 ? hb : 1);
  return 0;
}

void dr__agent_leave(dr_agent_t *ag, int sig) {
  if (!ag->have_asg)
    return;
  char reason[400];
  snprintf(reason, sizeof(reason), "ddprun on '%s' received SIG%s",
           ag->cfg->hostname, sigabbrev_np(sig));
  dr_leave_t l = {ag->asg.gen, (uint32_t)sig, dr_str(reason)};
  dr_buf_t b;
  dr_buf_init(&b);
  dr_enc_leave(&b, 0, &l);
  dr__agent_send(ag, &b);
}
