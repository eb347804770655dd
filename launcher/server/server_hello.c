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
                "dropping %s: %s (%s); first bytes: \"%s\"", c->rp.addr, what,
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
  dr_log_sample(host.p, host.len, c->rp.host, sizeof(c->rp.host));
  if (run_id.len != strlen(s->run_id) ||
      memcmp(run_id.p, s->run_id, run_id.len) != 0) {
    char sample[128];
    dr_log_sample(run_id.p, run_id.len, sample, sizeof(sample));
    dr__conn_warn(c, DR_REFUSE_RUN_ID,
                  "refused %s (%s): run id '%s' is not this job's '%s'",
                  c->rp.addr, c->rp.host, sample, s->run_id);
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
                  "refused %s (%s): no shared secret presented", c->rp.addr,
                  c->rp.host);
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
                  "refused %s (%s): wrong shared secret", c->rp.addr, c->rp.host);
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

/* Who may send a message type: the connection's handshake state it is
 * handled in, and whether it comes from a node's agent only (a client that
 * is not one sends it to no effect: these are unanswered reports). */
typedef enum {
  FROM_HELLO,  /* the first frame of a connection */
  FROM_AUTH,   /* answering the WELCOME's challenge */
  FROM_CLIENT, /* any client past the handshake */
  FROM_AGENT   /* a node's agent (joined or resuming) */
} from_t;

typedef struct {
  from_t from;
  void (*handle)(dr_conn_t *c, const dr_msg_t *m);
} command_t;

/* Every message a peer may send, as redis keeps its commands: the rest
 * (the server's own messages) is refused as out of sequence. */
static const command_t commands[DR__MSG_MAX] = {
    [DR_MSG_HELLO] = {FROM_HELLO, handle_hello},
    [DR_MSG_AUTH] = {FROM_AUTH, handle_auth},
    [DR_MSG_SET] = {FROM_CLIENT, dr__store_handle},
    [DR_MSG_GET] = {FROM_CLIENT, dr__store_handle},
    [DR_MSG_ADD] = {FROM_CLIENT, dr__store_handle},
    [DR_MSG_CAS] = {FROM_CLIENT, dr__store_handle},
    [DR_MSG_DELETE] = {FROM_CLIENT, dr__store_handle},
    [DR_MSG_MULTI_GET] = {FROM_CLIENT, dr__store_handle},
    [DR_MSG_CHECK] = {FROM_CLIENT, dr__store_handle},
    [DR_MSG_BARRIER] = {FROM_CLIENT, dr__store_handle},
    [DR_MSG_STATUS] = {FROM_CLIENT, dr__status_handle},
    [DR_MSG_JOIN] = {FROM_CLIENT, dr__rdzv_handle},
    [DR_MSG_RESUME] = {FROM_CLIENT, dr__rdzv_handle},
    [DR_MSG_HEARTBEAT] = {FROM_AGENT, dr__rdzv_handle},
    [DR_MSG_FAILURE] = {FROM_AGENT, dr__rdzv_handle},
    [DR_MSG_SUCCESS] = {FROM_AGENT, dr__rdzv_handle},
    [DR_MSG_LEAVE] = {FROM_AGENT, dr__rdzv_handle},
    [DR_MSG_RANKS] = {FROM_AGENT, dr__status_handle},
    [DR_MSG_STACK_DUMP] = {FROM_AGENT, dr__status_handle},
};

static const command_t *command(uint8_t type) {
  return type < DR__MSG_MAX && commands[type].handle != NULL ? &commands[type]
                                                             : NULL;
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
    handle_auth(c, m); /* anything but AUTH is refused there */
    return;
  }
  const command_t *cmd = command(m->type);
  if (cmd == NULL || cmd->from == FROM_HELLO || cmd->from == FROM_AUTH) {
    dr__conn_send_error(c, m->req_id, DR_ESEQUENCE,
                        "%s is not a request a client may send",
                        dr_msg_name(m->type));
    return;
  }
  if (cmd->from == FROM_AGENT && !c->agent && c->rp.node == NULL &&
      !c->rp.claiming) {
    DR_DEBUG("ignoring %s from %s, which is not a node of the job",
             dr_msg_name(m->type), c->rp.addr);
    return;
  }
  cmd->handle(c, m);
}
