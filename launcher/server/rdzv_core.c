/* The rendezvous core's rounds: their completion and node ranks, a new
 * generation, a node lost, the job's stop. JOIN is in rdzv_core_join.c,
 * failures, the hold, success and time in rdzv_core_live.c, RESUME in
 * rdzv_core_resume.c, the outbox in rdzv_orders.c. */
#include "rdzv_internal.h"

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
#include "grow.h"

void dr__rdzv_node_free(dr_node_t *n) {
  if (n->peer != NULL)
    n->peer->node = NULL;
  free(n->boot);
  free(n->ranks);
  free(n->env);
  free(n);
}

int dr__rdzv_list_push(dr_node_t ***arr, size_t *len, size_t *cap,
                        dr_node_t *n) {
  dr_node_t **p = dr_grow(*arr, cap, *len + 1, sizeof(*p), 16);
  if (p == NULL)
    return -ENOMEM;
  *arr = p;
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

int dr_rdzv_init(dr_rdzv_t *r, const dr_rdzv_config_t *cfg, uint64_t now) {
  memset(r, 0, sizeof(*r));
  r->cfg = *cfg;
  r->state = DR_JOB_FORMING;
  r->gen = 1;
  r->now = now;
  r->server_node = DR_NO_RANK;
  r->moved_lost = DR_NO_RANK;
  r->rank_holder = calloc(cfg->max_nodes, sizeof(*r->rank_holder));
  if (r->rank_holder == NULL)
    return -ENOMEM;
  new_bootstrap(r);
  return 0;
}

void dr_rdzv_free(dr_rdzv_t *r) {
  for (size_t i = 0; i < r->n_round; i++)
    dr__rdzv_node_free(r->round[i]);
  for (size_t i = 0; i < r->n_waiting; i++)
    dr__rdzv_node_free(r->waiting[i]);
  free(r->round);
  free(r->waiting);
  free(r->rank_holder);
  dr__resume_free(r);
  dr__rdzv_peers_free(r);
  dr__rdzv_orders_free(r);
  memset(r, 0, sizeof(*r));
}

const char *dr__rdzv_node_peer(const dr_node_t *n) {
  return n->peer != NULL ? n->peer->addr : "gone";
}

/* The forming round changed its members, or the state changed. */
void dr__rdzv_round_changed(dr_rdzv_t *r) {
  if (r->state == DR_JOB_FORMING && r->n_round > 0) {
    if (r->forming_ms == 0)
      r->forming_ms = r->now;
  } else {
    r->forming_ms = 0;
  }
  r->round_seq++;
}

/* ---- stopping ---------------------------------------------------------- */

static void stop_job(dr_rdzv_t *r, int code, const char *reason) {
  r->state = DR_JOB_DONE;
  r->state_ms = r->now;
  r->exit_code = code;
  dr__rdzv_round_changed(r);
  dr__rdzv_order(r, DR_RDZV_REMOVE, NULL);
  r->holding = 0;
  r->last_call_at = 0;
  snprintf(r->stop_reason, sizeof(r->stop_reason), "%s", reason);
  dr__resume_end_claims(r, DR_ESTOPPED, reason);
  char esc[1100];
  dr__rdzv_event(r, "stop", ",\"exit_code\":%d,\"reason\":\"%s\"", code,
                 dr_json_escape(reason, esc, sizeof(esc)));
  if (code == 0)
    DR_INFO("job '%s': %s", r->cfg.run_id, reason);
  else if (code > 128 && code < 128 + 65)
    /* A node left on a signal (its ddprun was told to stop): an end the
     * operator asked for, not a failure. */
    DR_WARN("job '%s' ended with exit code %d: %s", r->cfg.run_id, code,
            reason);
  else
    DR_ERROR("job '%s' stopped with exit code %d: %s", r->cfg.run_id, code,
             reason);
  dr_node_t **lists[2] = {r->round, r->waiting};
  size_t lens[2] = {r->n_round, r->n_waiting};
  for (int l = 0; l < 2; l++) {
    for (size_t i = 0; i < lens[l]; i++) {
      dr_node_t *n = lists[l][i];
      if (n->peer == NULL)
        continue;
      dr_rdzv_order_t *o = dr__rdzv_order(r, DR_RDZV_STOP, n->peer);
      o->code = code;
      o->text = r->stop_reason;
      /* A node still waiting for its assignment also gets an answer. */
      if (n->join_req != 0)
        dr__rdzv_error(r, n->peer, n->join_req, DR_ESTOPPED,
                       "job stopped (exit code %d): %s", code, reason);
    }
  }
  dr_rdzv_order_t *o = dr__rdzv_order(r, DR_RDZV_DONE, NULL);
  o->code = code;
  o->text = r->stop_reason;
}

void dr__rdzv_stop(dr_rdzv_t *r, int code, const char *reason) {
  stop_job(r, code, reason);
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

/* Orders the round: requested node ranks in their places, the others by
 * cmp_node in the gaps. 0 or -ENOMEM. */
static int order_round(dr_rdzv_t *r) {
  size_t n = r->n_round;
  dr_node_t **slots = calloc(n, sizeof(*slots));
  dr_node_t **rest = calloc(n, sizeof(*rest));
  if (slots == NULL || rest == NULL) {
    free(slots);
    free(rest);
    return -ENOMEM;
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
  return 0;
}

/* Completes the round when it may: max nodes, or min after the last call,
 * and requested node ranks dense in [0, n). */
void dr__rdzv_try_complete(dr_rdzv_t *r) {
  size_t n = r->n_round;
  if (r->state != DR_JOB_FORMING || n == 0)
    return;
  if (n < r->cfg.max_nodes &&
      (n < r->cfg.min_nodes || !r->last_call_expired))
    return;
  for (size_t i = 0; i < n; i++)
    if (r->round[i]->req_rank != DR_NONE && r->round[i]->req_rank >= n)
      return; /* a static rank beyond the round: wait for the others */
  if (order_round(r) != 0) {
    DR_ERROR("out of memory completing round %" PRIu64, r->gen);
    return;
  }
  uint32_t world = 0;
  for (size_t i = 0; i < n; i++)
    world += r->round[i]->nproc;
  dr_node_t *master = r->round[0];
  dr_assign_t *a = &r->asg;
  memset(a, 0, sizeof(*a));
  a->gen = r->gen;
  a->nnodes = (uint32_t)n;
  a->world_size = world;
  a->master_addr = dr_str(master->addr);
  a->master_port = master->port_offer;
  a->bootstrap.p = master->boot_len > 0 ? master->boot : r->boot;
  a->bootstrap.len =
      master->boot_len > 0 ? master->boot_len : (uint32_t)sizeof(r->boot);
  a->restart_count = r->restarts_used;
  a->max_restarts = r->cfg.max_restarts;
  a->ckpt_step = DR_NONE; /* the newest checkpoint any node holds */
  for (size_t i = 0; i < n; i++) {
    uint64_t st = r->round[i]->ckpt_step;
    if (st != DR_NONE && (a->ckpt_step == DR_NONE || st > a->ckpt_step))
      a->ckpt_step = st;
  }
  dr__rdzv_peers_index(r);
  dr__term_index(r);
  /* A token of the generation's own, for its nodes' RESUMEs. */
  uint8_t nonce[DR_NONCE_LEN];
  dr_auth_nonce(nonce);
  memcpy(r->token, nonce, sizeof(r->token));
  memcpy(a->resume_token, r->token, sizeof(a->resume_token));
  r->token_known = 1;

  r->state = DR_JOB_RUNNING;
  dr__rdzv_order(r, DR_RDZV_SAVE, NULL);
  r->rounds_completed++;
  r->replace_at = 0; /* a replacement came */
  r->last_call_at = 0;
  r->state_ms = r->now;
  dr__rdzv_round_changed(r);
  uint32_t first = 0;
  for (size_t i = 0; i < n; i++) {
    dr_node_t *x = r->round[i];
    x->node_rank = (uint32_t)i;
    uint32_t req = x->join_req;
    x->join_req = 0;
    if (x->peer != NULL) {
      x->peer->last_seen_ms = r->now; /* the heartbeat clock starts now */
      dr_rdzv_order_t *o = dr__rdzv_order(r, DR_RDZV_ASSIGN, x->peer);
      o->req = req;
      o->node_rank = (uint32_t)i;
      o->first_rank = first;
    }
    first += x->nproc;
  }
  dr__rdzv_event(r, "round_complete",
                 ",\"gen\":%" PRIu64 ",\"nnodes\":%zu,\"world_size\":%u",
                 r->gen, n, world);
  DR_INFO("round %" PRIu64 " complete: %zu nodes, world size %u, master "
          "%s:%u, restarts used %u of %u",
          r->gen, n, world, master->addr, master->port_offer,
          r->restarts_used, r->cfg.max_restarts);
  dr__rdzv_ifname_check(r);
}

/* Arms or disarms the last call as the round crosses min. */
void dr__rdzv_update_last_call(dr_rdzv_t *r) {
  if (r->state != DR_JOB_FORMING)
    return;
  if (r->n_round < r->cfg.min_nodes) {
    r->last_call_at = 0;
    r->last_call_expired = 0;
  } else if (!r->last_call_expired && r->last_call_at == 0) {
    r->last_call_at = r->now + r->cfg.last_call_timeout_ms;
    if (r->last_call_at == 0)
      r->last_call_at = 1;
  }
}

/* Ends the running generation: every assigned node is told to restart and
 * rejoin; nodes that were waiting join the new round directly. */
static void open_generation(dr_rdzv_t *r, const char *reason) {
  if (!dr__term_may_act(r, reason))
    return; /* a majority first (rdzv_core_term.c) */
  r->holding = 0;
  r->gen++;
  r->state = DR_JOB_FORMING;
  r->resuming = 0;
  dr__resume_end_claims(r, DR_ESTALE, reason);
  dr__rdzv_order(r, DR_RDZV_SAVE, NULL);
  r->last_call_expired = 0;
  r->last_call_at = 0;
  dr__rdzv_order(r, DR_RDZV_NEW_GEN, NULL)->gen = r->gen;
  new_bootstrap(r);
  DR_WARN("opening generation %" PRIu64 " (restarts used %u of %u): %s",
          r->gen, r->restarts_used, r->cfg.max_restarts, reason);
  char esc[1100];
  dr__rdzv_event(r, "restart",
                 ",\"gen\":%" PRIu64 ",\"restart_count\":%u,\"reason\":\"%s\"",
                 r->gen, r->restarts_used,
                 dr_json_escape(reason, esc, sizeof(esc)));
  const char *text = NULL;
  for (size_t i = 0; i < r->n_round; i++) {
    dr_node_t *n = r->round[i];
    if (n->peer != NULL) {
      n->peer->prev_rank = n->node_rank;
      dr_rdzv_order_t *o = dr__rdzv_order(r, DR_RDZV_RESTART, n->peer);
      o->gen = r->gen;
      o->restart_count = r->restarts_used;
      if (text == NULL) /* one copy for every node */
        text = dr__rdzv_text(r, "%s", reason);
      o->text = text;
    }
    dr__rdzv_node_free(n);
  }
  r->n_round = 0;
  memset(r->rank_holder, 0, r->cfg.max_nodes * sizeof(*r->rank_holder));
  for (size_t i = 0; i < r->n_waiting; i++) {
    dr_node_t *n = r->waiting[i];
    dr__rdzv_list_push(&r->round, &r->n_round, &r->cap_round, n);
    if (n->req_rank != DR_NONE)
      r->rank_holder[n->req_rank] = n;
  }
  r->n_waiting = 0;
  dr__rdzv_round_changed(r);
  dr__rdzv_update_last_call(r);
  dr__rdzv_try_complete(r);
}

void dr__rdzv_restart_all(dr_rdzv_t *r, const char *reason) {
  open_generation(r, reason);
}

void dr__rdzv_take_waiting(dr_rdzv_t *r) {
  while (r->n_waiting > 0 && r->n_round + r->n_waiting > r->cfg.max_nodes) {
    dr_node_t *n = r->waiting[--r->n_waiting];
    if (n->peer != NULL && n->join_req != 0)
      dr__rdzv_error(r, n->peer, n->join_req, DR_EFULL,
                     "job '%s' already has its maximum of %u nodes; node "
                     "'%s' is not needed",
                     r->cfg.run_id, r->cfg.max_nodes, n->host);
    dr__rdzv_node_free(n);
  }
  if (r->n_waiting == 0 || r->state != DR_JOB_RUNNING)
    return;
  char reason[512];
  snprintf(reason, sizeof(reason), "node '%s' (%s) joined; restarting to "
           "take it in", r->waiting[0]->host, dr__rdzv_node_peer(r->waiting[0]));
  open_generation(r, reason);
}

int dr__rdzv_round_push(dr_rdzv_t *r, dr_node_t *n) {
  return dr__rdzv_list_push(&r->round, &r->n_round, &r->cap_round, n);
}

size_t dr_rdzv_alive(const dr_rdzv_t *r) {
  size_t alive = r->n_waiting;
  for (size_t i = 0; i < r->n_round; i++)
    alive += !r->round[i]->detached;
  return alive;
}

/* ---- losses ------------------------------------------------------------ */

void dr__rdzv_node_lost(dr_rdzv_t *r, dr_node_t *n, const char *why) {
  if (r->state == DR_JOB_DONE)
    return; /* freed with the rest in dr_rdzv_free */
  if (list_remove(r->waiting, &r->n_waiting, n)) {
    dr__rdzv_node_free(n);
    return;
  }
  if (!list_remove(r->round, &r->n_round, n))
    return;
  r->nodes_lost++;
  if (r->state == DR_JOB_FORMING) {
    if (n->req_rank != DR_NONE)
      r->rank_holder[n->req_rank] = NULL;
    DR_INFO("node '%s' left round %" PRIu64 " before it completed: %s",
            n->host, r->gen, why);
    dr__rdzv_node_free(n);
    if (r->n_round == 0 && r->n_waiting == 0)
      r->job_nproc = 0; /* no node is left to say what the job has */
    dr__rdzv_round_changed(r);
    dr__rdzv_update_last_call(r);
    dr__rdzv_try_complete(r);
    return;
  }
  char reason[900], ehost[300], ewhy[300];
  size_t alive = dr_rdzv_alive(r);
  if (n->leave_reason[0] != '\0')
    why = n->leave_reason;
  dr__rdzv_event(r, "node_lost",
                 ",\"gen\":%" PRIu64 ",\"node_rank\":%u,\"node_host\":\"%s\","
                 "\"reason\":\"%s\"", r->gen, n->node_rank,
                 dr_json_escape(n->host, ehost, sizeof(ehost)),
                 dr_json_escape(why, ewhy, sizeof(ewhy)));
  if (alive >= r->cfg.min_nodes) {
    snprintf(reason, sizeof(reason), "node %u ('%s') %s: %s", n->node_rank,
             n->host, n->leave_signal != 0 ? "left" : "lost", why);
    dr__rdzv_node_free(n);
    open_generation(r, reason);
    return;
  }
  snprintf(reason, sizeof(reason), "node %u ('%s') %s (%s); %zu nodes "
           "remain and the job needs at least %u", n->node_rank, n->host,
           n->leave_signal != 0 ? "left" : "lost", why, alive,
           r->cfg.min_nodes);
  int code = n->leave_signal != 0 ? 128 + n->leave_signal : DR_EXIT_COMM;
  dr__rdzv_node_free(n);
  if (r->cfg.min_nodes == r->cfg.max_nodes &&
      r->cfg.replacement_timeout_ms > 0 && alive > 0) {
    /* A job of fixed size waits for a replacement (a pod that Kubernetes
     * starts again, a node an operator brings back) before it stops, as
     * long as a node of it is left to wait. */
    r->replace_at = r->now + r->cfg.replacement_timeout_ms;
    r->replace_code = code;
    snprintf(r->replace_why, sizeof(r->replace_why), "%s", reason);
    char wait[1100];
    snprintf(wait, sizeof(wait), "%s; waiting up to %.0f s for a "
             "replacement", reason, r->cfg.replacement_timeout_ms / 1000.0);
    open_generation(r, wait);
    return;
  }
  stop_job(r, code, reason);
}

void dr_rdzv_peer_closed(dr_rdzv_t *r, dr_rdzv_peer_t *p, const char *why,
                         uint64_t now) {
  r->now = now;
  dr__resume_drop_peer(r, p);
  /* No order names p from now on. */
  for (size_t i = 0; i < r->n_out; i++)
    if (r->out[i].peer == p) {
      r->out[i].kind = DR_RDZV_NONE;
      r->out[i].peer = NULL;
    }
  dr_node_t *n = p->node;
  if (n == NULL)
    return;
  p->node = NULL;
  n->peer = NULL;
  dr__rdzv_node_lost(r, n, why);
}

/* ---- time ----------------------------------------------------------------- */

void dr__rdzv_last_call_due(dr_rdzv_t *r) {
  r->last_call_at = 0;
  r->last_call_expired = 1;
  dr__rdzv_try_complete(r);
}
