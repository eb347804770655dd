#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "errors.h"

enum { S_START, S_HELLO, S_AUTH, S_READY };

int dr_sess_init(dr_sess_t *s, const char *run_id, const uint8_t *secret,
                 size_t secret_len) {
  memset(s, 0, sizeof(*s));
  s->run_id = strdup(run_id != NULL ? run_id : "");
  if (s->run_id == NULL)
    return -ENOMEM;
  if (secret != NULL && secret_len > 0) {
    s->secret = malloc(secret_len);
    if (s->secret == NULL) {
      dr_sess_free(s);
      return -ENOMEM;
    }
    memcpy(s->secret, secret, secret_len);
    s->secret_len = secret_len;
  }
  return 0;
}

static void forget_secret(dr_sess_t *s) {
  if (s->secret != NULL)
    dr_auth_secret_free(&s->secret, s->secret_len);
  s->secret_len = 0;
}

void dr_sess_free(dr_sess_t *s) {
  forget_secret(s);
  free(s->run_id);
  s->run_id = NULL;
}

int dr_sess_ready(const dr_sess_t *s) { return s->state == S_READY; }

void dr_sess_set_clock(dr_sess_t *s, dr_clock_fn fn, void *ctx) {
  s->clock = fn;
  s->clock_ctx = ctx;
}

static uint64_t sess_now(const dr_sess_t *s) {
  return s->clock != NULL ? s->clock(s->clock_ctx) : dr_clock_now_us();
}

/* A server stamp, as it arrives. */
static void heard(dr_sess_t *s, uint64_t tx_us) {
  if (tx_us == 0)
    return;
  s->srv_tx_us = tx_us;
  s->srv_rx_us = sess_now(s);
}

/* The stamp of a frame about to be sent: the server's last stamp echoed
 * once (the server measures over each of its stamps once), and now. */
static dr_clock_stamp_t stamp(dr_sess_t *s) {
  dr_clock_stamp_t c;
  c.echo_us = s->srv_tx_us;
  c.echo_rx_us = s->srv_tx_us != 0 ? s->srv_rx_us : 0;
  s->srv_tx_us = s->srv_rx_us = 0;
  c.tx_us = sess_now(s);
  return c;
}

int dr_sess_hello(dr_sess_t *s, uint32_t req, const char *host,
                  dr_buf_t *out) {
  s->state = S_HELLO;
  s->hello_req = req;
  return dr_enc_hello(out, req, dr_str(s->run_id), dr_str(host));
}

int dr_sess_join(dr_sess_t *s, uint32_t req, const dr_join_t *j,
                 dr_buf_t *out) {
  if (s->state != S_READY)
    return DR_ESEQUENCE;
  s->join_req = req;
  dr_join_t x = *j;
  x.clock = stamp(s);
  return dr_enc_join(out, req, &x);
}

int dr_sess_resume(dr_sess_t *s, uint32_t req, const dr_resume_t *q,
                   dr_buf_t *out) {
  if (s->state != S_READY)
    return DR_ESEQUENCE;
  s->resume_req = req;
  dr_resume_t x = *q;
  x.clock = stamp(s);
  return dr_enc_resume(out, req, &x);
}

int dr_sess_heartbeat(dr_sess_t *s, uint32_t req, uint64_t gen,
                      dr_buf_t *out) {
  dr_clock_stamp_t c = stamp(s);
  return dr_enc_heartbeat(out, req, gen, &c);
}

int dr_assignment_copy(const dr_assign_t *a, dr_assignment_t *out) {
  memset(out, 0, sizeof(*out));
  out->master_addr = malloc((size_t)a->master_addr.len + 1);
  out->bootstrap = malloc((size_t)a->bootstrap.len + 1);
  out->peers = calloc(a->peers.count > 0 ? a->peers.count : 1,
                      sizeof(*out->peers));
  out->successors = calloc(a->successors.count > 0 ? a->successors.count : 1,
                           sizeof(*out->successors));
  if (out->master_addr == NULL || out->bootstrap == NULL ||
      out->peers == NULL || out->successors == NULL) {
    dr_assignment_free(out);
    return -ENOMEM;
  }
  memcpy(out->master_addr, a->master_addr.p, a->master_addr.len);
  out->master_addr[a->master_addr.len] = '\0';
  if (a->bootstrap.len > 0)
    memcpy(out->bootstrap, a->bootstrap.p, a->bootstrap.len);
  out->bootstrap[a->bootstrap.len] = '\0';
  out->bootstrap_len = a->bootstrap.len;
  out->gen = a->gen;
  out->node_rank = a->node_rank;
  out->nnodes = a->nnodes;
  out->world_size = a->world_size;
  out->first_rank = a->first_rank;
  out->master_port = a->master_port;
  out->restart_count = a->restart_count;
  out->max_restarts = a->max_restarts;
  out->clock_offset_us = a->clock_offset_us;
  out->clock_uncertainty_us = a->clock_uncertainty_us;
  memcpy(out->resume_token, a->resume_token, sizeof(out->resume_token));
  out->ckpt_step = a->ckpt_step;
  out->term = a->term;
  out->server_node = a->server_node;
  const dr_list_t *lists[2] = {&a->peers, &a->successors};
  for (int l = 0; l < 2; l++) {
    uint32_t pos = 0;
    dr_peer_rec_t p;
    while (dr_peer_rec_next(lists[l], &pos, &p)) { /* checked by the view */
      dr_peer_t *q = l == 0 ? &out->peers[out->n_peers++]
                            : &out->successors[out->n_successors++];
      q->node_rank = p.node_rank;
      q->port = p.port;
      q->roles = p.roles;
      q->ckpt_step = p.ckpt_step;
      memcpy(q->addr, p.addr.p, p.addr.len);
      q->addr[p.addr.len] = '\0';
    }
  }
  return 0;
}

static int broke(dr_sess_t *s, int code, const char *what,
                 const dr_msg_t *m) {
  snprintf(s->errmsg, sizeof(s->errmsg), "%s%s", what,
           m != NULL ? dr_msg_name(m->type) : "");
  return code;
}

/* WELCOME: done, or AUTH to send. */
static int on_welcome(dr_sess_t *s, const dr_msg_t *m, uint32_t reply_req,
                      dr_buf_t *out, dr_sess_event_t *ev) {
  dr_welcome_t w;
  if (dr_msg_welcome(m, &w) != 0)
    return broke(s, DR_EFIELD, "a malformed WELCOME", NULL);
  heard(s, w.tx_us);
  if (!w.auth_required) {
    s->state = S_READY;
    forget_secret(s);
    ev->type = DR_SESS_READY;
    return 0;
  }
  if (s->secret == NULL)
    return broke(s, DR_ENOAUTH, "the server requires a shared secret: pass "
                 "--secret-file or set DDPRUN_SECRET", NULL);
  if (w.nonce.len != DR_NONCE_LEN) {
    snprintf(s->errmsg, sizeof(s->errmsg), "the server sent a nonce of %u "
             "bytes instead of %u", (unsigned)w.nonce.len, DR_NONCE_LEN);
    return DR_EFIELD;
  }
  uint8_t mac[DR_MAC_LEN];
  dr_auth_mac(s->secret, s->secret_len, w.nonce.p, dr_str(s->run_id), mac);
  dr_bytes_t b = {mac, DR_MAC_LEN};
  s->state = S_AUTH;
  return dr_enc_auth(out, reply_req, b);
}

/* An ERROR answers the request it names (or, with id 0, whatever was in
 * flight). */
static void on_error(dr_sess_t *s, const dr_msg_t *m, dr_sess_event_t *ev) {
  dr_error_t e;
  dr_msg_error(m, &e);
  ev->type = DR_SESS_REFUSED;
  ev->code = e.code;
  ev->text = e.message;
  if (s->state != S_READY)
    ev->to = s->state == S_AUTH ? DR_MSG_AUTH : DR_MSG_HELLO;
  else if (m->req_id != 0 && m->req_id == s->join_req)
    ev->to = DR_MSG_JOIN;
  else if (m->req_id != 0 && m->req_id == s->resume_req)
    ev->to = DR_MSG_RESUME;
  else
    ev->to = 0;
}

int dr_sess_on_frame(dr_sess_t *s, const dr_msg_t *m, uint32_t reply_req,
                     dr_buf_t *out, dr_sess_event_t *ev) {
  memset(ev, 0, sizeof(*ev));
  s->errmsg[0] = '\0';
  if (m->type == DR_MSG_ERROR) {
    on_error(s, m, ev);
    return 0;
  }
  switch (s->state) {
  case S_HELLO:
    if (m->type != DR_MSG_WELCOME)
      return broke(s, DR_EUNEXPECTED, "unexpected during the handshake: ", m);
    return on_welcome(s, m, reply_req, out, ev);
  case S_AUTH:
    if (m->type != DR_MSG_OK)
      return broke(s, DR_EUNEXPECTED, "unexpected during the handshake: ", m);
    s->state = S_READY;
    forget_secret(s);
    ev->type = DR_SESS_READY;
    return 0;
  case S_READY:
    break;
  default:
    return broke(s, DR_ESEQUENCE, "a frame before HELLO: ", m);
  }
  switch (m->type) {
  case DR_MSG_ASSIGN: {
    dr_assign_t a;
    if (m->req_id != s->join_req || dr_msg_assign(m, &a) != 0)
      return broke(s, DR_EUNEXPECTED, "an ASSIGN that answers no JOIN", NULL);
    int rc = dr_assignment_copy(&a, &ev->asg);
    if (rc != 0)
      return broke(s, rc, "out of memory copying the assignment", NULL);
    s->join_req = 0;
    ev->type = DR_SESS_ASSIGNED;
    return 0;
  }
  case DR_MSG_OK:
    if (m->req_id != 0 && m->req_id == s->resume_req) {
      s->resume_req = 0;
      ev->type = DR_SESS_RESUMED;
      return 0;
    }
    ev->type = DR_SESS_OTHER;
    return 0;
  case DR_MSG_RESTART: {
    dr_restart_t r;
    if (dr_msg_restart(m, &r) != 0)
      return broke(s, DR_EFIELD, "a malformed RESTART", NULL);
    ev->type = DR_SESS_RESTART;
    ev->gen = r.gen;
    ev->restart_count = r.restart_count;
    ev->text = r.reason;
    return 0;
  }
  case DR_MSG_STOP: {
    dr_stop_t t;
    if (dr_msg_stop(m, &t) != 0)
      return broke(s, DR_EFIELD, "a malformed STOP", NULL);
    ev->type = DR_SESS_STOP;
    ev->exit_code = t.exit_code;
    ev->text = t.reason;
    return 0;
  }
  case DR_MSG_ROUND_STATUS:
    if (dr_msg_round_status(m, &ev->round) != 0)
      return broke(s, DR_EFIELD, "a malformed ROUND_STATUS", NULL);
    ev->type = DR_SESS_ROUND;
    return 0;
  case DR_MSG_STACKS: {
    dr_stacks_req_t q;
    dr_msg_stacks(m, &q);
    ev->type = DR_SESS_STACKS;
    ev->id = q.id;
    ev->gen = q.gen;
    return 0;
  }
  case DR_MSG_HEARTBEAT: {
    dr_heartbeat_t h;
    dr_msg_heartbeat(m, &h);
    heard(s, h.clock.tx_us);
    ev->gen = h.gen;
    ev->type = DR_SESS_HEARTBEAT;
    return 0;
  }
  default:
    ev->type = DR_SESS_OTHER;
    return 0;
  }
}
