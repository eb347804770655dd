/* Rendezvous and job state: rounds, node ranks, heartbeats, failures,
 * restarts from the job's global budget, success and stop. */
#include "server_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "errors.h"
#include "events.h"
#include "exit_codes.h"
#include "log.h"

static void on_rdzv_handle_closed(uv_handle_t *h) {
  dr__server_handle_closed(h->data);
}

void dr__rdzv_node_free(dr_node_t *n) {
  if (n->conn != NULL)
    n->conn->node = NULL;
  free(n->boot);
  free(n->ranks);
  free(n);
}

static int list_push(dr_node_t ***arr, size_t *len, size_t *cap,
                     dr_node_t *n) {
  if (*len == *cap) {
    size_t nc = *cap != 0 ? *cap * 2 : 16;
    dr_node_t **p = realloc(*arr, nc * sizeof(*p));
    if (p == NULL)
      return -ENOMEM;
    *arr = p;
    *cap = nc;
  }
  (*arr)[(*len)++] = n;
  return 0;
}

/* Removes n from arr; 1 when it was there. */
static int list_remove(dr_node_t **arr, size_t *len, dr_node_t *n) {
  for (size_t i = 0; i < *len; i++) {
    if (arr[i] == n) {
      memmove(arr + i, arr + i + 1, (*len - i - 1) * sizeof(*arr));
      (*len)--;
      return 1;
    }
  }
  return 0;
}

/* The bootstrap blob of a generation whose node 0 offered none. */
static void new_bootstrap(dr_rdzv_t *r) {
  for (size_t i = 0; i < sizeof(r->boot); i += DR_NONCE_LEN)
    dr_auth_nonce(r->boot + i);
}

int dr__rdzv_init(dr_server_t *s) {
  dr_rdzv_t *r = &s->rdzv;
  r->state = DR_JOB_FORMING;
  r->gen = 1;
  uv_timer_init(s->loop, &r->last_call);
  r->last_call.data = s;
  uv_timer_init(s->loop, &r->hold);
  r->hold.data = s;
  s->n_handles_open += 2;
  r->rank_holder = calloc(s->cfg.max_nodes, sizeof(*r->rank_holder));
  if (r->rank_holder == NULL)
    return -ENOMEM;
  new_bootstrap(r);
  return 0;
}

void dr__rdzv_close(dr_server_t *s) {
  uv_close((uv_handle_t *)&s->rdzv.last_call, on_rdzv_handle_closed);
  uv_close((uv_handle_t *)&s->rdzv.hold, on_rdzv_handle_closed);
}

void dr__rdzv_free(dr_server_t *s) {
  dr_rdzv_t *r = &s->rdzv;
  for (size_t i = 0; i < r->n_round; i++)
    dr__rdzv_node_free(r->round[i]);
  for (size_t i = 0; i < r->n_waiting; i++)
    dr__rdzv_node_free(r->waiting[i]);
  free(r->round);
  free(r->waiting);
  free(r->rank_holder);
}

static const char *node_peer(const dr_node_t *n) {
  return n->conn != NULL ? n->conn->peer : "gone";
}

/* ---- stopping ---------------------------------------------------------- */

static void stop_job(dr_server_t *s, int code, const char *reason) {
  dr_rdzv_t *r = &s->rdzv;
  r->state = DR_JOB_DONE;
  r->state_ms = dr__now_ms(s);
  r->exit_code = code;
  dr__status_round_changed(s);
  dr__state_remove(s);
  uv_timer_stop(&r->hold);
  r->holding = 0;
  snprintf(r->stop_reason, sizeof(r->stop_reason), "%s", reason);
  uv_timer_stop(&r->last_call);
  dr__resume_end_claims(s, DR_ESTOPPED, reason);
  char esc[1100];
  dr_events_emit(s->events, "stop", ",\"exit_code\":%d,\"reason\":\"%s\"",
                 code, dr_json_escape(reason, esc, sizeof(esc)));
  if (code == 0)
    DR_INFO("job '%s': %s", s->run_id, reason);
  else if (code > 128 && code < 128 + 65)
    /* A node left on a signal (its ddprun was told to stop): an end the
     * operator asked for, not a failure. */
    DR_WARN("job '%s' ended with exit code %d: %s", s->run_id, code, reason);
  else
    DR_ERROR("job '%s' stopped with exit code %d: %s", s->run_id, code,
             reason);
  dr_node_t **lists[2] = {r->round, r->waiting};
  size_t lens[2] = {r->n_round, r->n_waiting};
  for (int l = 0; l < 2; l++) {
    for (size_t i = 0; i < lens[l]; i++) {
      dr_node_t *n = lists[l][i];
      if (n->conn == NULL)
        continue;
      if (dr_enc_stop(&s->out, 0, code, dr_str(reason)) == 0)
        dr__conn_send(n->conn);
      /* A node still waiting for its assignment also gets an answer. */
      if (n->join_req != 0)
        dr__conn_send_error(n->conn, n->join_req, DR_ESTOPPED,
                            "job stopped (exit code %d): %s", code, reason);
    }
  }
  dr__server_job_done(s);
}

/* ---- rounds ------------------------------------------------------------ */

/* Nodes that held a rank before keep their order (their ranks, and so the
 * checkpoints they keep, stay put across restarts); then host, arrival. */
static int cmp_node(const void *a, const void *b) {
  const dr_node_t *x = *(dr_node_t *const *)a, *y = *(dr_node_t *const *)b;
  if ((x->prev_rank >= 0) != (y->prev_rank >= 0))
    return x->prev_rank >= 0 ? -1 : 1;
  if (x->prev_rank != y->prev_rank)
    return x->prev_rank < y->prev_rank ? -1 : 1;
  int c = strcmp(x->host, y->host);
  if (c != 0)
    return c;
  return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

/* Completes the round when it may: max nodes, or min after the last call,
 * and requested node ranks dense in [0, n). */
static void try_complete(dr_server_t *s) {
  dr_rdzv_t *r = &s->rdzv;
  size_t n = r->n_round;
  if (r->state != DR_JOB_FORMING || n == 0)
    return;
  if (n < s->cfg.max_nodes && (n < s->cfg.min_nodes || !r->last_call_expired))
    return;
  for (size_t i = 0; i < n; i++)
    if (r->round[i]->req_rank != DR_NONE && r->round[i]->req_rank >= n)
      return; /* a static rank beyond the round: wait for the others */

  dr_node_t **slots = calloc(n, sizeof(*slots));
  dr_node_t **rest = calloc(n, sizeof(*rest));
  if (slots == NULL || rest == NULL) {
    free(slots);
    free(rest);
    DR_ERROR("out of memory completing round %" PRIu64, r->gen);
    return;
  }
  size_t n_rest = 0;
  for (size_t i = 0; i < n; i++) {
    dr_node_t *x = r->round[i];
    if (x->req_rank != DR_NONE)
      slots[x->req_rank] = x;
    else
      rest[n_rest++] = x;
  }
  qsort(rest, n_rest, sizeof(*rest), cmp_node);
  for (size_t i = 0, j = 0; i < n; i++)
    if (slots[i] == NULL)
      slots[i] = rest[j++];
  free(rest);
  memcpy(r->round, slots, n * sizeof(*slots));
  free(slots);

  uint32_t world = 0;
  for (size_t i = 0; i < n; i++)
    world += r->round[i]->nproc;
  dr_node_t *master = r->round[0];
  dr_assign_t a;
  memset(&a, 0, sizeof(a));
  a.gen = r->gen;
  a.nnodes = (uint32_t)n;
  a.world_size = world;
  a.master_addr = dr_str(master->addr);
  a.master_port = master->port_offer;
  a.bootstrap.p = master->boot_len > 0 ? master->boot : r->boot;
  a.bootstrap.len = master->boot_len > 0 ? master->boot_len : (uint32_t)sizeof(r->boot);
  a.restart_count = r->restarts_used;
  a.max_restarts = s->cfg.max_restarts;
  /* A token of the generation's own, for its nodes' RESUMEs. */
  uint8_t nonce[DR_NONCE_LEN];
  dr_auth_nonce(nonce);
  memcpy(r->token, nonce, sizeof(r->token));
  memcpy(a.resume_token, r->token, sizeof(a.resume_token));
  r->token_known = 1;

  r->state = DR_JOB_RUNNING;
  dr__state_save(s);
  r->rounds_completed++;
  uv_timer_stop(&r->last_call);
  uint64_t now = dr__now_ms(s);
  r->state_ms = now;
  dr__status_round_changed(s);
  uint32_t first = 0;
  for (size_t i = 0; i < n; i++) {
    dr_node_t *x = r->round[i];
    x->node_rank = (uint32_t)i;
    a.node_rank = (uint32_t)i;
    a.first_rank = first;
    first += x->nproc;
    uint32_t req = x->join_req;
    x->join_req = 0;
    if (x->conn == NULL)
      continue;
    x->conn->last_seen_ms = now; /* the heartbeat clock starts now */
    dr__clock_assign(x->conn, &a);
    if (dr_enc_assign(&s->out, req, &a) == 0)
      dr__conn_send(x->conn);
    dr__clock_check(x->conn);
  }
  dr_events_emit(s->events, "round_complete",
                 ",\"gen\":%" PRIu64 ",\"nnodes\":%zu,\"world_size\":%u", r->gen,
                 n, world);
  DR_INFO("round %" PRIu64 " complete: %zu nodes, world size %u, master "
          "%s:%u, restarts used %u of %u",
          r->gen, n, world, master->addr, master->port_offer,
          r->restarts_used, s->cfg.max_restarts);
}

static void on_last_call(uv_timer_t *t) {
  dr_server_t *s = t->data;
  if (dr__server_stalled(s)) { /* JOINs may wait unread: read them first */
    uv_timer_start(t, on_last_call, s->sweep_tick_ms, 0);
    return;
  }
  s->rdzv.last_call_expired = 1;
  try_complete(s);
}

/* Arms or disarms the last call as the round crosses min. */
static void update_last_call(dr_server_t *s) {
  dr_rdzv_t *r = &s->rdzv;
  if (r->state != DR_JOB_FORMING)
    return;
  if (r->n_round < s->cfg.min_nodes) {
    uv_timer_stop(&r->last_call);
    r->last_call_expired = 0;
  } else if (!r->last_call_expired && !uv_is_active((uv_handle_t *)&r->last_call)) {
    uv_timer_start(&r->last_call, on_last_call, s->cfg.last_call_timeout_ms, 0);
  }
}

/* Ends the running generation: every assigned node is told to restart and
 * rejoin; nodes that were waiting join the new round directly. */
static void open_generation(dr_server_t *s, const char *reason) {
  dr_rdzv_t *r = &s->rdzv;
  uv_timer_stop(&r->hold);
  r->holding = 0;
  r->gen++;
  r->state = DR_JOB_FORMING;
  r->resuming = 0;
  dr__resume_end_claims(s, DR_ESTALE, reason);
  dr__state_save(s);
  r->last_call_expired = 0;
  uv_timer_stop(&r->last_call);
  dr__store_new_generation(s);
  new_bootstrap(r);
  DR_WARN("opening generation %" PRIu64 " (restarts used %u of %u): %s",
          r->gen, r->restarts_used, s->cfg.max_restarts, reason);
  char esc[1100];
  dr_events_emit(s->events, "restart",
                 ",\"gen\":%" PRIu64 ",\"restart_count\":%u,\"reason\":\"%s\"",
                 r->gen, r->restarts_used, dr_json_escape(reason, esc, sizeof(esc)));
  for (size_t i = 0; i < r->n_round; i++) {
    dr_node_t *n = r->round[i];
    if (n->conn != NULL) {
      n->conn->prev_rank = n->node_rank;
      if (dr_enc_restart(&s->out, 0, r->gen, r->restarts_used,
                         dr_str(reason)) == 0)
        dr__conn_send(n->conn);
    }
    dr__rdzv_node_free(n);
  }
  r->n_round = 0;
  memset(r->rank_holder, 0, s->cfg.max_nodes * sizeof(*r->rank_holder));
  for (size_t i = 0; i < r->n_waiting; i++) {
    dr_node_t *n = r->waiting[i];
    list_push(&r->round, &r->n_round, &r->cap_round, n);
    if (n->req_rank != DR_NONE)
      r->rank_holder[n->req_rank] = n;
  }
  r->n_waiting = 0;
  dr__status_round_changed(s);
  update_last_call(s);
  try_complete(s);
}

void dr__rdzv_restart_all(dr_server_t *s, const char *reason) {
  open_generation(s, reason);
}

void dr__rdzv_take_waiting(dr_server_t *s) {
  dr_rdzv_t *r = &s->rdzv;
  while (r->n_waiting > 0 && r->n_round + r->n_waiting > s->cfg.max_nodes) {
    dr_node_t *n = r->waiting[--r->n_waiting];
    if (n->conn != NULL && n->join_req != 0)
      dr__conn_send_error(n->conn, n->join_req, DR_EFULL,
                          "job '%s' already has its maximum of %u nodes; "
                          "node '%s' is not needed",
                          s->run_id, s->cfg.max_nodes, n->host);
    dr__rdzv_node_free(n);
  }
  if (r->n_waiting == 0 || r->state != DR_JOB_RUNNING)
    return;
  char reason[512];
  snprintf(reason, sizeof(reason), "node '%s' (%s) joined; restarting to "
           "take it in", r->waiting[0]->host, node_peer(r->waiting[0]));
  open_generation(s, reason);
}

void dr__rdzv_stop(dr_server_t *s, int code, const char *reason) {
  stop_job(s, code, reason);
}

int dr__rdzv_round_push(dr_server_t *s, dr_node_t *n) {
  dr_rdzv_t *r = &s->rdzv;
  return list_push(&r->round, &r->n_round, &r->cap_round, n);
}

size_t dr__rdzv_alive(const dr_server_t *s) {
  const dr_rdzv_t *r = &s->rdzv;
  size_t alive = r->n_waiting;
  for (size_t i = 0; i < r->n_round; i++)
    alive += !r->round[i]->detached;
  return alive;
}

/* ---- requests ---------------------------------------------------------- */

static dr_node_t *holder_of(dr_server_t *s, uint64_t rank) {
  dr_rdzv_t *r = &s->rdzv;
  if (r->state == DR_JOB_FORMING)
    return r->rank_holder[rank];
  for (size_t i = 0; i < r->n_round; i++)
    if (r->round[i]->req_rank == rank)
      return r->round[i];
  for (size_t i = 0; i < r->n_waiting; i++)
    if (r->waiting[i]->req_rank == rank)
      return r->waiting[i];
  return NULL;
}

static dr_node_t *node_new(dr_conn_t *c, const dr_join_t *j, uint32_t req) {
  dr_node_t *n = calloc(1, sizeof(*n));
  if (n == NULL)
    return NULL;
  if (j->bootstrap_offer.len > 0) {
    n->boot = malloc(j->bootstrap_offer.len);
    if (n->boot == NULL) {
      free(n);
      return NULL;
    }
    memcpy(n->boot, j->bootstrap_offer.p, j->bootstrap_offer.len);
    n->boot_len = j->bootstrap_offer.len;
  }
  n->conn = c;
  n->prev_rank = c->prev_rank;
  n->join_req = req;
  n->arrival = ++c->srv->rdzv.arrivals;
  snprintf(n->host, sizeof(n->host), "%.*s", (int)j->host.len,
           (const char *)j->host.p);
  if (j->addr.len > 0)
    snprintf(n->addr, sizeof(n->addr), "%.*s", (int)j->addr.len,
             (const char *)j->addr.p);
  else
    snprintf(n->addr, sizeof(n->addr), "%s", c->peer_ip);
  n->nproc = j->nproc;
  n->req_rank = j->node_rank;
  n->port_offer = j->master_port_offer;
  return n;
}

int dr__rdzv_refuse_if_done(dr_conn_t *c, uint32_t req) {
  const dr_server_t *s = c->srv;
  const dr_rdzv_t *r = &s->rdzv;
  if (r->state != DR_JOB_DONE)
    return 0;
  dr__conn_send_error(c, req, DR_ESTOPPED, "job '%s' has ended (exit code "
                      "%d): %s", s->run_id, r->exit_code, r->stop_reason);
  return 1;
}

int dr__rdzv_is_run(const dr_server_t *s, dr_bytes_t run_id) {
  return run_id.len == strlen(s->run_id) &&
         memcmp(run_id.p, s->run_id, run_id.len) == 0;
}

static void handle_join(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_rdzv_t *r = &s->rdzv;
  dr_join_t j;
  int bad = dr_msg_join(m, &j);
  if (bad == 0) /* before the round can complete on it, refused or not */
    dr__clock_on_stamp(c, &j.clock);
  if (bad != 0 || j.nproc == 0 || j.master_port_offer > 65535) {
    dr__conn_send_error(c, m->req_id, DR_EBADARG,
                        "JOIN needs nproc >= 1 and a port offer <= 65535");
    return;
  }
  char host[256];
  snprintf(host, sizeof(host), "%.*s", (int)j.host.len, (const char *)j.host.p);
  if (j.nproc > DR_MAX_NPROC) {
    dr__conn_send_error(c, m->req_id, DR_EBADARG,
                        "node '%s' asked for nproc %u; at most %u workers "
                        "per node",
                        host, j.nproc, DR_MAX_NPROC);
    return;
  }
  if (dr__rdzv_refuse_if_done(c, m->req_id))
    return;
  if (!dr__rdzv_is_run(s, j.run_id)) {
    dr__conn_send_error(c, m->req_id, DR_ERUNID,
                        "node '%s' joined with run id '%.*s'; this job is '%s'",
                        host, (int)j.run_id.len, (const char *)j.run_id.p,
                        s->run_id);
    return;
  }
  if (c->node != NULL) {
    dr__conn_send_error(c, m->req_id, DR_ESEQUENCE,
                        "this connection already joined generation %" PRIu64,
                        r->gen);
    return;
  }
  if (j.node_rank != DR_NONE && j.node_rank >= s->cfg.max_nodes) {
    dr__conn_send_error(c, m->req_id, DR_EBADRANK,
                        "node '%s' asked for node rank %" PRIu64
                        ", but the job has at most %u nodes (ranks 0..%u)",
                        host, j.node_rank, s->cfg.max_nodes,
                        s->cfg.max_nodes - 1);
    return;
  }
  if (!s->cfg.allow_mixed_nproc && r->job_nproc != 0 &&
      j.nproc != r->job_nproc) {
    dr__conn_send_error(c, m->req_id, DR_ENPROC,
                        "node '%s' has nproc-per-node %u; the job's other "
                        "nodes have %u",
                        host, j.nproc, r->job_nproc);
    return;
  }
  if (j.node_rank != DR_NONE) {
    dr_node_t *h = holder_of(s, j.node_rank);
    if (h != NULL) {
      dr__conn_send_error(c, m->req_id, DR_EDUPRANK,
                          "node rank %" PRIu64 " requested by '%s' is "
                          "already held by '%s' (%s)",
                          j.node_rank, host, h->host, node_peer(h));
      return;
    }
  }
  size_t members = r->n_round + r->n_waiting;
  if (members >= s->cfg.max_nodes) {
    dr__conn_send_error(c, m->req_id, DR_EFULL,
                        "job '%s' already has its maximum of %u nodes; "
                        "node '%s' is not needed",
                        s->run_id, s->cfg.max_nodes, host);
    return;
  }
  uint64_t world = j.nproc;
  for (size_t i = 0; i < r->n_round; i++)
    world += r->round[i]->nproc;
  for (size_t i = 0; i < r->n_waiting; i++)
    world += r->waiting[i]->nproc;
  if (world > DR_MAX_WORLD) {
    dr__conn_send_error(c, m->req_id, DR_EFULL,
                        "node '%s' with nproc %u would make the job's world "
                        "size %" PRIu64 ", over the bound of %u ranks",
                        host, j.nproc, world, DR_MAX_WORLD);
    return;
  }
  dr_node_t *n = node_new(c, &j, m->req_id);
  int rc = n == NULL ? -ENOMEM
           : r->state == DR_JOB_FORMING
               ? list_push(&r->round, &r->n_round, &r->cap_round, n)
               : list_push(&r->waiting, &r->n_waiting, &r->cap_waiting, n);
  if (rc != 0) {
    if (n != NULL)
      dr__rdzv_node_free(n);
    dr__conn_send_error(c, m->req_id, -ENOMEM, "out of memory");
    return;
  }
  c->node = n;
  if (r->job_nproc == 0)
    r->job_nproc = j.nproc;
  char ehost[300];
  dr_events_emit(s->events,
                 r->state == DR_JOB_FORMING ? "join" : "node_joined",
                 ",\"gen\":%" PRIu64 ",\"node_host\":\"%s\",\"peer\":\"%s\","
                 "\"nproc\":%u",
                 r->gen, dr_json_escape(n->host, ehost, sizeof(ehost)), c->peer,
                 n->nproc);
  if (r->state == DR_JOB_FORMING) {
    if (n->req_rank != DR_NONE)
      r->rank_holder[n->req_rank] = n;
    DR_DEBUG("node '%s' (%s) joined round %" PRIu64 " (%zu of %u)", n->host,
             c->peer, r->gen, r->n_round, s->cfg.max_nodes);
    dr__status_round_changed(s);
    update_last_call(s);
    try_complete(s);
    return;
  }
  if (r->claiming)
    return; /* taken in once the claims are decided (rdzv_resume.c) */
  char reason[512];
  snprintf(reason, sizeof(reason),
           "node '%s' (%s) joined; restarting to take it in", n->host,
           c->peer);
  open_generation(s, reason);
}

static void describe_failure(const dr_node_t *n, const dr_failure_t *f,
                             char *out, size_t len) {
  char what[96];
  if (f->signal != 0) {
    const char *name = sigabbrev_np(f->signal);
    snprintf(what, sizeof(what), "was killed by signal SIG%s",
             name != NULL ? name : "?");
  } else {
    snprintf(what, sizeof(what), "exited with code %d", f->exit_code);
  }
  snprintf(out, len, "rank %u (local rank %u, pid %u) on node %u (%s) %s%s%.*s",
           f->rank, f->local_rank, f->pid, n->node_rank, n->host, what,
           f->message.len > 0 ? ": " : "", (int)f->message.len,
           (const char *)f->message.p);
}


/* Restart from the budget, or stop: the job's answer to its root cause,
 * by the exit-code table's policy. */
static void decide_failure(dr_server_t *s, int code, int exit_code,
                           int signal, const char *what) {
  dr_rdzv_t *r = &s->rdzv;
  char reason[1200];
  if (dr_exit_policy(exit_code, signal) == DR_EXIT_STOP) {
    /* A worker that SIGUSR1 killed (a program without a handler) was asked
     * to leave: a restart would only be preempted again. */
    const dr_exit_info_t *e =
        dr_exit_info(signal != 0 ? DR_EXIT_PREEMPTED : exit_code);
    snprintf(reason, sizeof(reason), "%s, not restarted: %s",
             signal != 0 ? "preempted (SIGUSR1, which the worker does not "
                           "handle)"
             : e != NULL ? e->brief
                         : "stopped",
             what);
    stop_job(s, signal != 0 ? DR_EXIT_PREEMPTED : exit_code, reason);
  } else if (r->restarts_used < s->cfg.max_restarts) {
    r->restarts_used++;
    snprintf(reason, sizeof(reason), "restart %u of %u: %s", r->restarts_used,
             s->cfg.max_restarts, what);
    open_generation(s, reason);
  } else {
    snprintf(reason, sizeof(reason), "restart budget of %u spent; root cause: %s",
             s->cfg.max_restarts, what);
    stop_job(s, code != 0 ? code : 1, reason);
  }
}

static void on_hold(uv_timer_t *t) {
  dr_server_t *s = t->data;
  dr_rdzv_t *r = &s->rdzv;
  if (!r->holding)
    return;
  if (dr__server_stalled(s)) { /* the root cause may wait unread */
    uv_timer_start(t, on_hold, s->sweep_tick_ms, 0);
    return;
  }
  uint64_t now = dr__now_ms(s);
  dr__resume_sweep(s, now); /* a node lost at the deadline comes first */
  if (!r->holding)
    return;
  if (r->resuming && now < r->resume_deadline) {
    /* A node that has not resumed yet may bring the root cause, or be
     * declared lost at the deadline. */
    uv_timer_start(t, on_hold, r->resume_deadline - now + 1, 0);
    return;
  }
  r->holding = 0;
  if (r->state == DR_JOB_RUNNING)
    decide_failure(s, r->held_code, r->held_exit, r->held_signal,
                   r->held_what);
}

static void handle_failure(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_rdzv_t *r = &s->rdzv;
  dr_failure_t f;
  if (dr_msg_failure(m, &f) != 0)
    return;
  if (r->state != DR_JOB_RUNNING || f.gen != r->gen || c->node == NULL) {
    DR_DEBUG("ignoring a failure report of generation %" PRIu64
             " from %s (current %" PRIu64 ")",
             f.gen, c->peer, r->gen);
    return;
  }
  char what[1024], esc[1100];
  s->stats.failures++;
  describe_failure(c->node, &f, what, sizeof(what));
  dr_events_emit(s->events, "failure",
                 ",\"gen\":%" PRIu64 ",\"rank\":%u,\"exit_code\":%d,\"signal\":%d,"
                 "\"kind\":\"%s\",\"what\":\"%s\"",
                 f.gen, f.rank, f.exit_code, f.signal, dr_fail_kind_name(f.kind),
                 dr_json_escape(what, esc, sizeof(esc)));
  int code = f.signal != 0 ? 128 + f.signal : f.exit_code;
  /* A worker's own communication failure may echo another failure, and
   * so may a verdict on a rank that only waited (the culprit may be on
   * another node, whose agent names it); an agent's verdict that names a
   * stopped, sleeping or busy worker is a root cause itself. */
  int echo = (f.kind == DR_FAIL_EXIT && dr_exit_is_echo(f.exit_code, f.signal)) ||
             f.kind == DR_FAIL_HANG_WAIT;
  if (r->holding) {
    if (echo)
      return; /* the first echo is already held */
    uv_timer_stop(&r->hold);
    r->holding = 0;
  } else if (echo) {
    r->holding = 1;
    r->held_code = code;
    r->held_exit = f.exit_code;
    r->held_signal = f.signal;
    snprintf(r->held_what, sizeof(r->held_what), "%s", what);
    /* Held for at most the heartbeat timeout: by then the node of the
     * failure it echoes has reported it, or is declared lost. */
    uv_timer_start(&r->hold, on_hold, s->cfg.heartbeat_timeout_ms, 0);
    return;
  }
  decide_failure(s, code, f.exit_code, f.signal, what);
}

static void handle_success(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_rdzv_t *r = &s->rdzv;
  uint64_t gen;
  if (dr_msg_success(m, &gen) != 0 || r->state != DR_JOB_RUNNING ||
      gen != r->gen || c->node == NULL)
    return;
  c->node->succeeded = 1;
  for (size_t i = 0; i < r->n_round; i++)
    if (!r->round[i]->succeeded)
      return;
  char reason[128];
  snprintf(reason, sizeof(reason), "job complete: all %zu nodes succeeded",
           r->n_round);
  stop_job(s, 0, reason);
}

/* The node's agent says it is leaving (its ddprun got a signal): its
 * connection's close, which follows, is judged by that, not as a loss of
 * unknown cause. */
static void handle_leave(dr_conn_t *c, const dr_msg_t *m) {
  dr_leave_t l;
  if (c->node == NULL || dr_msg_leave(m, &l) != 0)
    return;
  dr_node_t *n = c->node;
  n->leave_signal = l.signal > 0 && l.signal < 65 ? (int)l.signal : 0;
  snprintf(n->leave_reason, sizeof(n->leave_reason), "%.*s",
           (int)l.reason.len, (const char *)l.reason.p);
  DR_INFO("node '%s' (%s) is leaving: %s", n->host, c->peer, n->leave_reason);
}

void dr__rdzv_handle(dr_conn_t *c, const dr_msg_t *m) {
  switch (m->type) {
  case DR_MSG_RESUME:
    dr__resume_handle(c, m);
    break;
  case DR_MSG_LEAVE:
    handle_leave(c, m);
    break;
  case DR_MSG_JOIN: {
    /* Refused: no node after it, or a second JOIN on a node's connection. */
    int was_node = c->node != NULL;
    handle_join(c, m);
    if (was_node || c->node == NULL)
      c->srv->stats.joins_refused++;
    break;
  }
  case DR_MSG_FAILURE:
    handle_failure(c, m);
    break;
  case DR_MSG_SUCCESS:
    handle_success(c, m);
    break;
  default: { /* HEARTBEAT: receiving it already reset the silence clock */
    dr_heartbeat_t h;
    if (dr_msg_heartbeat(m, &h) == 0)
      dr__clock_on_stamp(c, &h.clock);
    break;
  }
  }
}

void dr__rdzv_node_lost(dr_server_t *s, dr_node_t *n, const char *why) {
  dr_rdzv_t *r = &s->rdzv;
  if (r->state == DR_JOB_DONE) {
    return; /* freed with the rest in dr__rdzv_free */
  }
  if (list_remove(r->waiting, &r->n_waiting, n)) {
    dr__rdzv_node_free(n);
    return;
  }
  if (!list_remove(r->round, &r->n_round, n))
    return;
  s->stats.nodes_lost++;
  if (r->state == DR_JOB_FORMING) {
    if (n->req_rank != DR_NONE)
      r->rank_holder[n->req_rank] = NULL;
    DR_INFO("node '%s' left round %" PRIu64 " before it completed: %s",
            n->host, r->gen, why);
    dr__rdzv_node_free(n);
    dr__status_round_changed(s);
    update_last_call(s);
    try_complete(s);
    return;
  }
  char reason[900], ehost[300], ewhy[300];
  size_t alive = dr__rdzv_alive(s);
  if (n->leave_reason[0] != '\0')
    why = n->leave_reason;
  dr_events_emit(s->events, "node_lost",
                 ",\"gen\":%" PRIu64 ",\"node_rank\":%u,\"node_host\":\"%s\","
                 "\"reason\":\"%s\"",
                 r->gen, n->node_rank, dr_json_escape(n->host, ehost, sizeof(ehost)),
                 dr_json_escape(why, ewhy, sizeof(ewhy)));
  if (alive >= s->cfg.min_nodes) {
    snprintf(reason, sizeof(reason), "node %u ('%s') %s: %s", n->node_rank,
             n->host, n->leave_signal != 0 ? "left" : "lost", why);
    dr__rdzv_node_free(n);
    open_generation(s, reason);
    return;
  }
  snprintf(reason, sizeof(reason),
           "node %u ('%s') %s (%s); %zu nodes remain and the job needs at "
           "least %u",
           n->node_rank, n->host, n->leave_signal != 0 ? "left" : "lost", why,
           alive, s->cfg.min_nodes);
  int code = n->leave_signal != 0 ? 128 + n->leave_signal : DR_EXIT_COMM;
  dr__rdzv_node_free(n);
  stop_job(s, code, reason);
}

void dr__rdzv_sweep(dr_server_t *s, uint64_t now) {
  dr_rdzv_t *r = &s->rdzv;
  uint32_t timeout = s->cfg.heartbeat_timeout_ms;
  /* One loss reshapes the round, so look again after each. */
  dr__resume_sweep(s, now);
  /* Silence counts from the loop's last wake-up from a stall at the
   * earliest: heartbeats that arrived while it was stopped are no less on
   * time for being read late. */
  for (int found = 1; found && r->state == DR_JOB_RUNNING;) {
    found = 0;
    for (size_t i = 0; i < r->n_round; i++) {
      dr_conn_t *c = r->round[i]->conn;
      uint64_t seen = c == NULL ? 0
                      : c->last_seen_ms > s->woke_ms ? c->last_seen_ms
                                                     : s->woke_ms;
      if (c != NULL && now - seen > timeout) {
        char why[96];
        snprintf(why, sizeof(why), "no heartbeat for %" PRIu64 " ms",
                 now - c->last_seen_ms);
        DR_WARN("node %u ('%s', %s): %s", r->round[i]->node_rank,
                r->round[i]->host, c->peer, why);
        dr__conn_close(c, why);
        found = 1;
        break;
      }
    }
  }
  if (r->state != DR_JOB_RUNNING || now - s->last_hb_push_ms < timeout / 3)
    return;
  s->last_hb_push_ms = now;
  for (size_t i = 0; i < r->n_round; i++) {
    dr_conn_t *c = r->round[i]->conn;
    if (c == NULL)
      continue;
    /* Stamped for each node as it goes out: the agent echoes it. */
    dr_clock_stamp_t st = {0, 0, dr_clock_now_us()};
    if (dr_enc_heartbeat(&s->out, 0, r->gen, &st) == 0)
      dr__conn_send(c);
  }
  /* Held claims hear from the server too: their agents must not take the
   * wait for their answer for a silent server. */
  for (size_t i = 0; i < r->n_claims; i++) {
    dr_clock_stamp_t st = {0, 0, dr_clock_now_us()};
    if (dr_enc_heartbeat(&s->out, 0, r->claims[i].gen, &st) == 0)
      dr__conn_send(r->claims[i].conn);
  }
}
