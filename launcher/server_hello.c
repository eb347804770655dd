/* The handshake (HELLO, then AUTH where the job has a secret) and the
 * dispatch of requests to the store and the rendezvous. */
#include "server_internal.h"

#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "errors.h"
#include "log.h"

void dr__conn_count_refused(dr_conn_t *c, dr_refuse_t why) {
  if (!c->refused)
    c->srv->stats.refused[why]++;
  c->refused = 1;
}

/* A client that broke the protocol: tell it why, log a sample, drop it. */
void dr__conn_reject(dr_conn_t *c, int code, const char *what,
                     const uint8_t *bytes, size_t n_bytes) {
  char sample[160];
  dr_log_sample(bytes, n_bytes < 32 ? n_bytes : 32, sample, sizeof(sample));
  dr__conn_warn(c, DR_REFUSE_MALFORMED,
                "dropping %s: %s (%s); first bytes: \"%s\"", c->peer, what,
                dr_strerror(code), sample);
  if (c->state != DR_CONN_READY)
    dr__conn_count_refused(c, DR_REFUSE_MALFORMED);
  dr__conn_send_error(c, 0, code, "%s: %s", what, dr_strerror(code));
  dr__conn_close(c, what);
}

static void handle_hello(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_hello_t h;
  dr_msg_hello(m, &h); /* the caller checked the type */
  dr_bytes_t run_id = h.run_id;
  dr_bytes_t host = h.host;
  /* Only for messages: printable, so that a name cannot forge log lines. */
  dr_log_sample(host.p, host.len, c->host, sizeof(c->host));
  if (run_id.len != strlen(s->run_id) ||
      memcmp(run_id.p, s->run_id, run_id.len) != 0) {
    char sample[128];
    dr_log_sample(run_id.p, run_id.len, sample, sizeof(sample));
    dr__conn_warn(c, DR_REFUSE_RUN_ID,
                  "refused %s (%s): run id '%s' is not this job's '%s'",
                  c->peer, c->host, sample, s->run_id);
    dr__conn_count_refused(c, DR_REFUSE_RUN_ID);
    /* The peer has not authenticated: it learns that its run id is not
     * this job's, never what the job's is (the log names both). */
    dr__conn_send_error(c, m->req_id, DR_ERUNID,
                        "run id '%s' does not match this server's job",
                        sample);
    dr__conn_close(c, "wrong run id");
    return;
  }
  if (s->secret != NULL) {
    dr_auth_nonce(c->nonce);
    dr_bytes_t nonce = {c->nonce, DR_NONCE_LEN};
    if (dr_enc_welcome(&s->out, m->req_id, 1, nonce, dr_clock_now_us()) == 0)
      dr__conn_send(c);
    c->state = DR_CONN_AUTH;
    return;
  }
  dr_bytes_t none = {NULL, 0};
  if (dr_enc_welcome(&s->out, m->req_id, 0, none, dr_clock_now_us()) == 0)
    dr__conn_send(c);
  c->state = DR_CONN_READY;
  c->dec.authed = 1;
}

static void handle_auth(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  if (m->type != DR_MSG_AUTH) {
    dr__conn_warn(c, DR_REFUSE_NO_SECRET,
                  "refused %s (%s): no shared secret presented", c->peer,
                  c->host);
    dr__conn_count_refused(c, DR_REFUSE_NO_SECRET);
    dr__conn_send_error(c, m->req_id, DR_ENOAUTH,
                        "this job requires a shared secret (--secret-file "
                        "or DDPRUN_SECRET)");
    dr__conn_close(c, "no secret");
    return;
  }
  dr_auth_t au;
  dr_msg_auth(m, &au);
  if (dr_auth_verify(s->secret, s->cfg.secret_len, c->nonce,
                     dr_str(s->run_id), au.mac) != 0) {
    dr__conn_warn(c, DR_REFUSE_BAD_SECRET,
                  "refused %s (%s): wrong shared secret", c->peer, c->host);
    dr__conn_count_refused(c, DR_REFUSE_BAD_SECRET);
    dr__conn_send_error(c, m->req_id, DR_EAUTH,
                        "authentication failed: wrong shared secret");
    dr__conn_close(c, "wrong secret");
    return;
  }
  if (dr_enc_ok(&s->out, m->req_id) == 0)
    dr__conn_send(c);
  c->state = DR_CONN_READY;
  c->dec.authed = 1;
}

void dr__conn_dispatch(dr_conn_t *c, const dr_msg_t *m) {
  if (c->state == DR_CONN_HELLO) {
    if (m->type != DR_MSG_HELLO) {
      dr__conn_reject(c, DR_ESEQUENCE, "first message is not HELLO", NULL, 0);
      return;
    }
    handle_hello(c, m);
    return;
  }
  if (c->state == DR_CONN_AUTH) {
    handle_auth(c, m);
    return;
  }
  switch (m->type) {
  case DR_MSG_SET:
  case DR_MSG_GET:
  case DR_MSG_ADD:
  case DR_MSG_CAS:
  case DR_MSG_DELETE:
  case DR_MSG_MULTI_GET:
  case DR_MSG_CHECK:
  case DR_MSG_BARRIER:
    dr__store_handle(c, m);
    break;
  case DR_MSG_RANKS:
  case DR_MSG_STATUS:
  case DR_MSG_STACK_DUMP:
    dr__status_handle(c, m);
    break;
  case DR_MSG_JOIN:
  case DR_MSG_HEARTBEAT:
  case DR_MSG_FAILURE:
  case DR_MSG_SUCCESS:
  case DR_MSG_RESUME:
  case DR_MSG_LEAVE:
    dr__rdzv_handle(c, m);
    /* Once a node of the job, a connection is judged by its heartbeats
     * alone, also between a RESTART and its next JOIN. */
    if (c->node != NULL)
      c->agent = 1;
    break;
  default:
    dr__conn_send_error(c, m->req_id, DR_ESEQUENCE,
                        "%s is not a request a client may send",
                        dr_msg_name(m->type));
  }
}

