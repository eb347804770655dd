/* The rendezvous outlives its host: terms, successors, the majority rule
 * and a successor's takeover.
 *
 * A server that runs in a node's ddprun (cfg.failover) gives every node of
 * a generation of 3 or more nodes the successors: the first
 * DR_SUCCESSORS_MAX nodes by node rank, but its own, whose agents hold a
 * standby server ready. When the server is lost, the agents go to the
 * first successor that is alive, whose agent turns its standby into the
 * server of the next term (dr_rdzv_takeover), seeded with what it knows
 * of the generation; the others RESUME into it as into a restarted server.
 *
 * The rules, each of which the unit tests check without a socket:
 *   - terms order servers: a standby serves no one (DR_ESTANDBY); a server
 *     that hears of a higher term (a node's JOIN or RESUME says it has
 *     seen one) answers DR_ESUPERSEDED and steps down: its job ends for the
 *     nodes still with it, with the reason;
 *   - a server acts on a generation of 3 or more nodes (a restart order, a
 *     new round) only once a majority of its nodes have been heard since
 *     the cause: a server cut off with a minority cannot, and steps down
 *     after the heartbeat timeout; so of two servers at most one acts;
 *   - a takeover keeps the budget: it starts from the restarts used that
 *     its generation was assigned with, and the RESUMEs may raise it, never
 *     lower it; the lost server's node is lost like any other node (a new
 *     round, no restart spent), once the other places are claimed;
 *   - a generation of 1 or 2 nodes has no successors: no majority can be
 *     had without the server's node, so it behaves as before. */
#include "rdzv_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "events.h"
#include "exit_codes.h"
#include "log.h"

static uint64_t term_of(const dr_rdzv_t *r) {
  return r->cfg.term > 0 ? r->cfg.term : 1;
}

/* Failover applies to the running generation: 3 nodes or more. */
static int failover_on(const dr_rdzv_t *r) {
  return r->cfg.failover && r->asg.nnodes >= 3;
}

void dr__term_step_down(dr_rdzv_t *r, const char *why) {
  if (r->state == DR_JOB_DONE)
    return;
  r->stepped_down = 1;
  r->q_waiting = 0;
  char esc[1300];
  dr__rdzv_event(r, "step_down", ",\"term\":%" PRIu64 ",\"reason\":\"%s\"",
                 term_of(r), dr_json_escape(why, esc, sizeof(esc)));
  dr__rdzv_stop(r, DR_EXIT_COMM, why);
}

int dr__term_refuse(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                    uint64_t term) {
  if (r->cfg.standby) {
    dr__rdzv_error(r, p, req, DR_ESTANDBY, "this is a standby rendezvous "
                   "server of job '%s'; it serves the job only if the "
                   "server is lost", r->cfg.run_id);
    return 1;
  }
  if (term <= term_of(r))
    return 0;
  char why[400];
  snprintf(why, sizeof(why), "the rendezvous server of term %" PRIu64
           " steps down: node '%s' has seen term %" PRIu64 ", so another "
           "server serves the job now", term_of(r), p->host, term);
  dr__rdzv_error(r, p, req, DR_ESUPERSEDED, "%s", why);
  DR_WARN("%s", why);
  dr__term_step_down(r, why);
  return 1;
}

void dr__term_index(dr_rdzv_t *r) {
  r->n_succ = 0;
  r->server_node = DR_NO_RANK;
  for (size_t i = 0; i < r->n_round; i++) {
    const dr_node_t *n = r->round[i];
    if (n->hosts_server && r->server_node == DR_NO_RANK)
      r->server_node = (uint32_t)i;
    else if (n->standby_port != 0 && r->n_succ < DR_SUCCESSORS_MAX)
      r->succ[r->n_succ++] = (uint32_t)i;
  }
  r->asg.term = term_of(r);
  r->asg.server_node = r->server_node;
}

size_t dr_rdzv_successors(const dr_rdzv_t *r, dr_peer_rec_t *out,
                          size_t max) {
  if (!failover_on(r) || r->state != DR_JOB_RUNNING)
    return 0;
  size_t k = 0;
  for (size_t i = 0; i < r->n_succ && k < max; i++) {
    if (r->succ[i] >= r->n_round)
      continue;
    const dr_node_t *n = r->round[r->succ[i]];
    dr_peer_rec_t *o = &out[k++];
    memset(o, 0, sizeof(*o));
    o->node_rank = n->node_rank;
    o->port = n->standby_port;
    o->roles = DR_PEER_SUCCESSOR;
    o->ckpt_step = DR_NONE;
    o->addr = dr_str(n->addr);
  }
  return k;
}

/* ---- the majority rule ---------------------------------------------------- */

/* Nodes of the running generation heard since `since`. */
static uint32_t heard_since(const dr_rdzv_t *r, uint64_t since) {
  uint32_t k = 0;
  for (size_t i = 0; i < r->n_round; i++) {
    const dr_node_t *n = r->round[i];
    k += n->peer != NULL && !n->detached && n->peer->last_seen_ms >= since;
  }
  return k;
}

int dr__term_may_act(dr_rdzv_t *r, const char *reason) {
  if (r->q_granted) { /* quorum_tick heard the majority: act now */
    r->q_granted = 0;
    return 1;
  }
  if (!failover_on(r) || r->state != DR_JOB_RUNNING)
    return 1;
  if (r->q_waiting)
    return 0; /* the first cause waits already; it is the one acted on */
  if (2u * heard_since(r, r->now) > r->asg.nnodes)
    return 1;
  r->q_waiting = 1;
  r->q_since = r->now;
  r->q_due = r->now + r->cfg.heartbeat_timeout_ms;
  snprintf(r->q_reason, sizeof(r->q_reason), "%s", reason);
  DR_INFO("generation %" PRIu64 ": waiting to hear a majority of its %u "
          "nodes before acting on: %s", r->gen, r->asg.nnodes, reason);
  return 0;
}

static void quorum_tick(dr_rdzv_t *r, uint64_t now) {
  if (!r->q_waiting)
    return;
  if (r->state != DR_JOB_RUNNING) {
    r->q_waiting = 0;
    return;
  }
  uint32_t heard = heard_since(r, r->q_since);
  if (2u * heard > r->asg.nnodes) {
    r->q_waiting = 0;
    char reason[sizeof(r->q_reason)];
    memcpy(reason, r->q_reason, sizeof(reason));
    r->q_granted = 1;
    dr__rdzv_restart_all(r, reason);
    r->q_granted = 0;
    return;
  }
  if (now < r->q_due)
    return;
  char why[1500];
  snprintf(why, sizeof(why), "the rendezvous server of term %" PRIu64
           " heard only %u of generation %" PRIu64 "'s %u nodes within "
           "%.1f s (a majority is needed to act): it steps down, the job "
           "goes on with the majority if it has a server; what it was to "
           "act on: %s", term_of(r), heard, r->gen, r->asg.nnodes,
           r->cfg.heartbeat_timeout_ms / 1000.0, r->q_reason);
  DR_WARN("%s", why);
  dr__term_step_down(r, why);
}

/* ---- a successor's takeover ------------------------------------------------ */

static void lose_moved(dr_rdzv_t *r) {
  uint32_t k = r->moved_lost;
  r->moved_lost = DR_NO_RANK;
  for (size_t i = 0; i < r->n_round; i++) {
    dr_node_t *n = r->round[i];
    if (n->node_rank == k && n->detached) {
      dr__rdzv_node_lost(r, n, r->moved_text);
      return;
    }
  }
}

void dr__term_tick(dr_rdzv_t *r, uint64_t now) {
  if (r->moved_lost != DR_NO_RANK) {
    int others = 1;
    for (size_t i = 0; i < r->n_round; i++)
      if (r->round[i]->detached && r->round[i]->node_rank != r->moved_lost)
        others = 0;
    if (r->state != DR_JOB_RUNNING || !r->resuming)
      r->moved_lost = DR_NO_RANK;
    else if (others || now > r->resume_deadline)
      lose_moved(r);
  }
  quorum_tick(r, now);
}

int dr_rdzv_takeover(dr_rdzv_t *r, const dr_rdzv_takeover_t *t,
                     uint64_t now) {
  r->now = now;
  r->cfg.standby = 0;
  r->cfg.term = t->term;
  r->state_loaded = 1;
  r->restarts_used = t->restarts_used;
  if (dr__resume_expect(r, t->gen, t->nnodes, t->world, t->token) != 0)
    return -ENOMEM;
  r->asg.nnodes = t->nnodes;
  r->asg.gen = t->gen;
  for (uint32_t i = 0; i < t->nnodes; i++)
    if (t->hosts != NULL && t->hosts[i] != NULL && t->hosts[i][0] != '\0')
      snprintf(r->round[i]->host, sizeof(r->round[i]->host), "%s",
               t->hosts[i]);
  r->moved_lost = t->lost_node < t->nnodes ? t->lost_node : DR_NO_RANK;
  if (r->moved_lost != DR_NO_RANK &&
      strcmp(r->round[r->moved_lost]->host, "unknown host") == 0)
    snprintf(r->round[r->moved_lost]->host,
             sizeof(r->round[r->moved_lost]->host), "%s", t->lost_host);
  snprintf(r->moved_text, sizeof(r->moved_text), "the rendezvous moved from "
           "%s to %s (%s lost)", t->lost_host, t->self_host, t->lost_host);
  char a[300], b[300];
  dr__rdzv_event(r, "moved",
                 ",\"term\":%" PRIu64 ",\"gen\":%" PRIu64 ",\"from\":\"%s\","
                 "\"to\":\"%s\",\"restarts_used\":%u", t->term, t->gen,
                 dr_json_escape(t->lost_host, a, sizeof(a)),
                 dr_json_escape(t->self_host, b, sizeof(b)),
                 t->restarts_used);
  DR_WARN("job '%s': %s; this server (term %" PRIu64 ") takes generation %"
          PRIu64 " over (%u nodes, restarts used %u of %u) and waits up to "
          "%" PRIu64 " ms for its nodes to resume", r->cfg.run_id,
          r->moved_text, t->term, t->gen, t->nnodes, t->restarts_used,
          r->cfg.max_restarts, dr_rdzv_resume_window_ms(r));
  return 0;
}
