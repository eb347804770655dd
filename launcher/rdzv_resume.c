/* Taking a running generation back after the server restarted, so that a
 * crash or restart of the control plane costs no training step.
 *
 * An agent that loses its connection while its workers run keeps them
 * running, connects again and sends RESUME: its generation, node rank,
 * nnodes, world size and restart count. A server that knows that
 * generation to be running (its --state-file says so) has kept a place for
 * every node of it; a server without a record of the job (started afresh)
 * takes the generation from the first RESUME. Either way each node claims
 * its place and is answered OK; once all have, the generation runs on as
 * if the server had never left. A node that has not claimed its place by
 * the deadline is lost, as a silent node would be. A RESUME that does not
 * fit (another generation, a place taken or out of range, another shape)
 * is answered DR_ESTALE: that node stops its workers and joins the next
 * round, as every node does after a failure. */
#include "server_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "events.h"
#include "log.h"

/* The nodes' agents retry a connection at least once a second: every
 * node still alive is back well within two heartbeat timeouts and that
 * second. */
static uint64_t resume_window_ms(const dr_server_t *s) {
  return 2ull * s->cfg.heartbeat_timeout_ms + 1000;
}

int dr__resume_expect(dr_server_t *s, uint64_t gen, uint32_t nnodes,
                      uint32_t world) {
  dr_rdzv_t *r = &s->rdzv;
  for (uint32_t i = 0; i < nnodes; i++) {
    dr_node_t *n = calloc(1, sizeof(*n));
    if (n == NULL || dr__rdzv_round_push(s, n) != 0) {
      free(n);
      return -ENOMEM;
    }
    n->detached = 1;
    n->node_rank = i;
    n->prev_rank = i;
    n->req_rank = DR_NONE;
    snprintf(n->host, sizeof(n->host), "unknown host");
  }
  r->gen = gen;
  r->state = DR_JOB_RUNNING;
  r->state_ms = dr__now_ms(s);
  r->resuming = 1;
  r->resume_world = world;
  r->resume_deadline = dr__now_ms(s) + resume_window_ms(s);
  return 0;
}

/* The answer that sends the node to the next round: DR_ESTALE, its
 * generation is not one this server can go on with. */
static void send_restart(dr_conn_t *c, uint32_t req, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void send_restart(dr_conn_t *c, uint32_t req, const char *fmt, ...) {
  char reason[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  DR_INFO("%s (%s): %s", c->host, c->peer, reason);
  dr__conn_send_error(c, req, DR_ESTALE, "%s", reason);
}

/* 1 when every place of the resuming generation is claimed. */
static int all_claimed(const dr_rdzv_t *r) {
  for (size_t i = 0; i < r->n_round; i++)
    if (r->round[i]->detached)
      return 0;
  return 1;
}

static void claim(dr_conn_t *c, dr_node_t *n, const dr_resume_t *q,
                  uint32_t req) {
  dr_server_t *s = c->srv;
  dr_rdzv_t *r = &s->rdzv;
  n->conn = c;
  n->detached = 0;
  n->nproc = q->nproc;
  n->arrival = ++r->arrivals;
  snprintf(n->host, sizeof(n->host), "%.*s", (int)q->host.len,
           (const char *)q->host.p);
  snprintf(n->addr, sizeof(n->addr), "%s", c->peer_ip);
  c->node = n;
  c->last_seen_ms = dr__now_ms(s);
  if (r->job_nproc == 0)
    r->job_nproc = q->nproc;
  if (dr_enc_ok(&s->out, req) == 0)
    dr__conn_send(c);
  dr__clock_check(c); /* its rank is known now */
  char ehost[300];
  dr_events_emit(s->events, "resume",
                 ",\"gen\":%" PRIu64 ",\"node_rank\":%u,\"node_host\":\"%s\"",
                 r->gen, n->node_rank,
                 dr_json_escape(n->host, ehost, sizeof(ehost)));
  if (!all_claimed(r))
    return;
  uint32_t world = 0;
  for (size_t i = 0; i < r->n_round; i++)
    world += r->round[i]->nproc;
  r->resuming = 0;
  if (world != r->resume_world) {
    char reason[200];
    snprintf(reason, sizeof(reason), "the resumed nodes add up to %u "
             "workers, not the generation's %u", world, r->resume_world);
    dr__rdzv_restart_all(s, reason);
    return;
  }
  dr__state_save(s);
  dr_events_emit(s->events, "resumed",
                 ",\"gen\":%" PRIu64 ",\"nnodes\":%zu,\"world_size\":%u",
                 r->gen, r->n_round, world);
  DR_INFO("generation %" PRIu64 " taken back: all %zu nodes still run it "
          "(world size %u); no restart", r->gen, r->n_round, world);
}

void dr__resume_handle(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_rdzv_t *r = &s->rdzv;
  dr_resume_t q;
  int bad = dr_msg_resume(m, &q);
  if (bad == 0)
    dr__clock_on_stamp(c, &q.clock);
  if (bad != 0 || q.nproc == 0 || q.nnodes == 0 ||
      q.node_rank >= q.nnodes || q.gen == 0) {
    dr__conn_send_error(c, m->req_id, DR_EBADARG,
                        "RESUME needs gen >= 1, nproc >= 1 and node_rank < "
                        "nnodes");
    return;
  }
  if (dr__rdzv_refuse_if_done(c, m->req_id))
    return;
  if (!dr__rdzv_is_run(s, q.run_id)) {
    dr__conn_send_error(c, m->req_id, DR_ERUNID,
                        "node '%s' resumed with another run id than this "
                        "job's", c->host);
    return;
  }
  if (c->node != NULL) {
    dr__conn_send_error(c, m->req_id, DR_ESEQUENCE,
                        "this connection is already a node of generation %"
                        PRIu64, r->gen);
    return;
  }
  /* A server that has no record of the job takes the generation the
   * first node reports, if it fits the job. */
  if (r->state == DR_JOB_FORMING && r->n_round == 0 && r->n_waiting == 0 &&
      r->rounds_completed == 0 && !s->state_loaded &&
      q.nnodes >= s->cfg.min_nodes && q.nnodes <= s->cfg.max_nodes) {
    if (dr__resume_expect(s, q.gen, q.nnodes, q.world_size) != 0) {
      dr__conn_send_error(c, m->req_id, -ENOMEM, "out of memory");
      return;
    }
    if (q.restart_count > r->restarts_used)
      r->restarts_used = q.restart_count;
    DR_WARN("job '%s': taking back generation %" PRIu64 " from node %u "
            "('%s'): %u nodes, world size %u, restarts used %u of %u; the "
            "others have %" PRIu64 " ms to resume", s->run_id, q.gen,
            q.node_rank, c->host, q.nnodes, q.world_size, r->restarts_used,
            s->cfg.max_restarts, resume_window_ms(s));
  }
  if (r->state != DR_JOB_RUNNING || !r->resuming || q.gen != r->gen) {
    send_restart(c, m->req_id, "generation %" PRIu64 " is not running on "
                 "this server (it is at generation %" PRIu64 "%s); stop the "
                 "workers and join", q.gen, r->gen,
                 r->state == DR_JOB_FORMING ? ", forming" : "");
    return;
  }
  if (q.nnodes != r->n_round || q.world_size != r->resume_world) {
    send_restart(c, m->req_id, "node %u reports %u nodes and world size %u; "
                 "generation %" PRIu64 " has %zu and %u", q.node_rank,
                 q.nnodes, q.world_size, r->gen, r->n_round, r->resume_world);
    return;
  }
  dr_node_t *n = r->round[q.node_rank];
  if (!n->detached) {
    send_restart(c, m->req_id, "node rank %u of generation %" PRIu64 " is "
                 "already held by '%s'", q.node_rank, r->gen, n->host);
    return;
  }
  if (n->nproc != 0 && n->nproc != q.nproc) {
    send_restart(c, m->req_id, "node rank %u of generation %" PRIu64 " had "
                 "%u workers, not %u", q.node_rank, r->gen, n->nproc, q.nproc);
    return;
  }
  claim(c, n, &q, m->req_id);
}

void dr__resume_sweep(dr_server_t *s, uint64_t now) {
  dr_rdzv_t *r = &s->rdzv;
  /* The deadline counts from the loop's wake-up after a stall too. */
  uint64_t deadline = r->resume_deadline;
  if (s->woke_ms + resume_window_ms(s) > deadline)
    deadline = s->woke_ms + resume_window_ms(s);
  while (r->state == DR_JOB_RUNNING && r->resuming && now > deadline) {
    dr_node_t *gone = NULL;
    for (size_t i = 0; i < r->n_round && gone == NULL; i++)
      if (r->round[i]->detached)
        gone = r->round[i];
    if (gone == NULL) {
      r->resuming = 0;
      break;
    }
    char why[160];
    snprintf(why, sizeof(why), "did not resume within %" PRIu64 " ms of "
             "the server's restart", resume_window_ms(s));
    DR_WARN("node %u of generation %" PRIu64 " %s", gone->node_rank, r->gen,
            why);
    dr__rdzv_node_lost(s, gone, why);
  }
}
