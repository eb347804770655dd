/* The rendezvous core's libuv shell: decodes the agents' messages into the
 * core's events, carries out its orders (frames to connections, the state
 * file, the store's scope, the event log, the end of the job) and keeps
 * one timer armed at the core's next due time. The rules are all in the
 * core (rdzv_core.h). */
#include "server_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "events.h"
#include "log.h"

dr_conn_t *dr__conn_of(dr_rdzv_peer_t *p) {
  return (dr_conn_t *)((char *)p - offsetof(dr_conn_t, rp));
}

static void on_rdzv_handle_closed(uv_handle_t *h) {
  dr__server_handle_closed(h->data);
}

static void on_rdzv_timer(uv_timer_t *t);

/* The core's next due time, on the timer. */
static void arm(dr_server_t *s) {
  uint64_t due = dr_rdzv_next_due(&s->rdzv);
  if (due == 0 || s->closing) {
    uv_timer_stop(&s->rdzv_timer);
    return;
  }
  uint64_t now = dr__now_ms(s);
  uv_timer_start(&s->rdzv_timer, on_rdzv_timer, due > now ? due - now : 0,
                 0);
}

static void on_rdzv_timer(uv_timer_t *t) {
  dr_server_t *s = t->data;
  if (dr__server_stalled(s)) { /* frames may wait unread: read them first */
    uv_timer_start(t, on_rdzv_timer, s->sweep_tick_ms, 0);
    return;
  }
  dr_rdzv_tick(&s->rdzv, dr__now_ms(s));
  dr__rdzv_drain(s);
}

int dr__rdzv_init(dr_server_t *s) {
  dr_rdzv_config_t c = {s->run_id,
                        s->cfg.min_nodes,
                        s->cfg.max_nodes,
                        s->cfg.max_restarts,
                        s->cfg.heartbeat_timeout_ms,
                        s->cfg.last_call_timeout_ms,
                        s->cfg.replacement_timeout_ms,
                        s->cfg.allow_mixed_nproc,
                        s->events != NULL,
                        s->cfg.term,
                        s->cfg.failover,
                        s->cfg.standby};
  uv_timer_init(s->loop, &s->rdzv_timer);
  s->rdzv_timer.data = s;
  s->n_handles_open++;
  return dr_rdzv_init(&s->rdzv, &c, dr__now_ms(s));
}

void dr__rdzv_close(dr_server_t *s) {
  uv_close((uv_handle_t *)&s->rdzv_timer, on_rdzv_handle_closed);
}

void dr__rdzv_free(dr_server_t *s) { dr_rdzv_free(&s->rdzv); }

/* One order, carried out. */
static void carry_out(dr_server_t *s, const dr_rdzv_order_t *o) {
  dr_rdzv_t *r = &s->rdzv;
  dr_conn_t *c = o->peer != NULL ? dr__conn_of(o->peer) : NULL;
  int rc = 0;
  switch (o->kind) {
  case DR_RDZV_NONE:
    return;
  case DR_RDZV_OK:
  case DR_RDZV_RESUMED:
    rc = dr_enc_ok(&s->out, o->req);
    break;
  case DR_RDZV_ERROR:
    dr__conn_send_error(c, o->req, o->code, "%s", o->text);
    return;
  case DR_RDZV_ASSIGN: {
    dr_assign_t a = r->asg;
    dr_peer_rec_t peers[DR_PEERS_MAX];
    a.node_rank = o->node_rank;
    a.first_rank = o->first_rank;
    a.peer_recs = peers;
    a.n_peer_recs = dr_rdzv_peers(r, o->node_rank, peers, DR_PEERS_MAX);
    dr_peer_rec_t succ[DR_SUCCESSORS_MAX];
    a.succ_recs = succ;
    a.n_succ_recs = dr_rdzv_successors(r, succ, DR_SUCCESSORS_MAX);
    dr__clock_assign(c, &a);
    rc = dr_enc_assign(&s->out, o->req, &a);
    break;
  }
  case DR_RDZV_RESTART:
    rc = dr_enc_restart(&s->out, 0, o->gen, o->restart_count,
                        dr_str(o->text));
    break;
  case DR_RDZV_STOP:
    rc = dr_enc_stop(&s->out, 0, o->code, dr_str(o->text));
    break;
  case DR_RDZV_HEARTBEAT: {
    /* Stamped for each node as it goes out: the agent echoes it. */
    dr_clock_stamp_t st = {0, 0, dr_clock_now_us()};
    rc = dr_enc_heartbeat(&s->out, 0, o->gen, &st);
    break;
  }
  case DR_RDZV_CLOSE:
    dr__conn_close(c, o->text);
    return;
  case DR_RDZV_SAVE:
    dr__state_save(s);
    return;
  case DR_RDZV_REMOVE:
    dr__state_remove(s);
    return;
  case DR_RDZV_NEW_GEN:
    dr__store_new_generation(s);
    return;
  case DR_RDZV_DONE:
    dr__server_job_done(s);
    return;
  case DR_RDZV_EVENT:
    dr_events_emit(s->events, o->name, "%s", o->text);
    return;
  }
  if (rc != 0) {
    dr_buf_reset(&s->out);
    return;
  }
  dr__conn_send(c);
  if (o->kind == DR_RDZV_ASSIGN || o->kind == DR_RDZV_RESUMED) {
    c->agent = 1; /* judged by its heartbeats alone from now on */
    dr__clock_check(c); /* its rank is known now */
  }
}

void dr__rdzv_drain(dr_server_t *s) {
  dr_rdzv_t *r = &s->rdzv;
  /* Carrying out an order may add more (a CLOSE loses a node), and feed
   * events back that drain again: the outer loop takes the outbox again
   * each time, the inner call leaves it to it. */
  if (s->rdzv_draining)
    return;
  s->rdzv_draining = 1;
  for (size_t i = 0;; i++) {
    size_t n;
    const dr_rdzv_order_t *o = dr_rdzv_orders(r, &n);
    if (i >= n)
      break;
    dr_rdzv_order_t x = o[i];
    carry_out(s, &x);
  }
  dr_rdzv_orders_clear(r);
  s->rdzv_draining = 0;
  arm(s);
}

/* ---- the agents' messages ------------------------------------------------ */

void dr__rdzv_handle(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_rdzv_t *r = &s->rdzv;
  uint64_t now = dr__now_ms(s);
  switch (m->type) {
  case DR_MSG_JOIN: {
    dr_join_t j;
    if (dr_msg_join(m, &j) != 0) {
      dr__conn_send_error(c, m->req_id, DR_EBADARG,
                          "JOIN refused: a malformed JOIN (its nproc, ports "
                          "and flags must fit their fields, its environment "
                          "summary %u bytes and NCCL_SOCKET_IFNAME %u at "
                          "most)", DR_ENV_SUMMARY_MAX, DR_SOCKET_IFNAME_MAX);
      r->joins_refused++;
      return;
    }
    dr__clock_on_stamp(c, &j.clock); /* before the round completes on it */
    dr_rdzv_join(r, &c->rp, m->req_id, &j, now);
    break;
  }
  case DR_MSG_RESUME: {
    dr_resume_t q;
    int bad = dr_msg_resume(m, &q);
    if (bad != 0) {
      dr__conn_send_error(c, m->req_id, DR_EBADARG, "RESUME refused: a "
                          "malformed RESUME (%s)", dr_strerror(bad));
      return;
    }
    dr__clock_on_stamp(c, &q.clock);
    dr_rdzv_resume(r, &c->rp, m->req_id, &q, now);
    break;
  }
  case DR_MSG_FAILURE: {
    dr_failure_t f;
    if (dr_msg_failure(m, &f) != 0)
      return;
    dr_rdzv_failure(r, &c->rp, &f, now);
    break;
  }
  case DR_MSG_SUCCESS: {
    uint64_t gen;
    if (dr_msg_success(m, &gen) != 0)
      return;
    dr_rdzv_success(r, &c->rp, gen, now);
    break;
  }
  case DR_MSG_LEAVE: {
    dr_leave_t l;
    if (dr_msg_leave(m, &l) != 0)
      return;
    dr_rdzv_leave(r, &c->rp, &l);
    break;
  }
  default: { /* HEARTBEAT: receiving it already reset the silence clock */
    dr_heartbeat_t h;
    if (dr_msg_heartbeat(m, &h) == 0)
      dr__clock_on_stamp(c, &h.clock);
    return;
  }
  }
  /* Once a node of the job, a connection is judged by its heartbeats
   * alone, also between a RESTART and its next JOIN. */
  if (c->rp.node != NULL)
    c->agent = 1;
  dr__rdzv_drain(s);
}

void dr__rdzv_conn_closed(dr_conn_t *c, const char *why) {
  dr_server_t *s = c->srv;
  if (s->closing) {
    if (c->rp.node != NULL)
      c->rp.node->peer = NULL;
    c->rp.node = NULL;
    return;
  }
  dr_rdzv_peer_closed(&s->rdzv, &c->rp, why, dr__now_ms(s));
  dr__rdzv_drain(s);
}

void dr__rdzv_sweep(dr_server_t *s, uint64_t now) {
  s->rdzv.woke_ms = s->woke_ms;
  dr_rdzv_tick(&s->rdzv, now);
  dr__rdzv_drain(s);
}
