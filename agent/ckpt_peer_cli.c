/* The client side of the checkpoint peers: the handshake through the
 * rendezvous' session (proto/session.h), a push and a fetch
 * (ckpt_peer.h). */
#include "ckpt_peer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ckpt_io.h"
#include "ckpt_stream.h"
#include "errors.h"
#include "session.h"

#define REQ 1u

/* "the peer said: ..." from an ERROR frame, into why; its code. */
static int refused(const dr_msg_t *m, char *why, size_t why_len) {
  dr_error_t e;
  if (dr_msg_error(m, &e) != 0) {
    snprintf(why, why_len, "it answered %s", dr_msg_name(m->type));
    return DR_EUNEXPECTED;
  }
  snprintf(why, why_len, "%.*s", (int)e.message.len,
           (const char *)e.message.p);
  return e.code != 0 ? e.code : DR_EREMOTE;
}

/* Connects and passes the handshake: 0 and *c ready, or a code and why. */
static int open_peer(const dr_ckpt_ctx_t *ctx, const char *host,
                     uint16_t port, dr_ckpt_conn_t *c, char *why,
                     size_t why_len) {
  int rc = dr_ckpt_connect(host, port, ctx->stop_fd, ctx->timeout_ms, c);
  if (rc != 0) {
    snprintf(why, why_len, "connect() failed (%s)", dr_strerror(rc));
    return rc;
  }
  dr_sess_t sess;
  if ((rc = dr_sess_init(&sess, ctx->run_id, ctx->secret,
                         ctx->secret_len)) != 0) {
    snprintf(why, why_len, "out of memory");
    dr_ckpt_conn_close(c);
    return rc;
  }
  rc = dr_sess_hello(&sess, REQ, ctx->host, &c->out);
  while (rc == 0) {
    if ((rc = dr_ckpt_send(c)) != 0)
      break;
    dr_msg_t m;
    dr_sess_event_t ev;
    if ((rc = dr_ckpt_recv(c, &m)) != 0 ||
        (rc = dr_sess_on_frame(&sess, &m, REQ, &c->out, &ev)) != 0)
      break;
    if (ev.type == DR_SESS_READY)
      break;
    if (ev.type == DR_SESS_REFUSED) {
      rc = refused(&m, why, why_len);
      break;
    }
  }
  if (rc == 0) {
    c->dec.authed = 1; /* frames of a whole chunk from now on */
  } else if (why[0] == '\0') {
    snprintf(why, why_len, "the handshake failed (%s%s%s)", dr_strerror(rc),
             sess.errmsg[0] != '\0' ? ": " : "", sess.errmsg);
  }
  dr_sess_free(&sess);
  if (rc != 0)
    dr_ckpt_conn_close(c);
  return rc;
}

/* The peer's answer: OK, or its ERROR (code and why). */
static int answer(dr_ckpt_conn_t *c, char *why, size_t why_len) {
  dr_msg_t m;
  int rc = dr_ckpt_recv(c, &m);
  if (rc != 0) {
    snprintf(why, why_len, "no answer (%s)", dr_strerror(rc));
    return rc;
  }
  return m.type == DR_MSG_OK ? 0 : refused(&m, why, why_len);
}

int dr_ckpt_push(const dr_ckpt_ctx_t *ctx, const char *host, uint16_t port,
                 const char *name, uint32_t origin, dr_tbucket_t *pace,
                 dr_ckpt_moved_t *moved, char *why, size_t why_len) {
  memset(moved, 0, sizeof(*moved));
  snprintf(moved->name, sizeof(moved->name), "%s", name);
  why[0] = '\0';
  uint64_t step = 0;
  dr_ckpt_name_step(name, &step);
  dr_ckpt_src_t src;
  int rc = dr_ckpt_src_open(ctx->store, name, &src, why, why_len);
  if (rc != 0) {
    if (why[0] == '\0')
      snprintf(why, why_len, "cannot read it (%s)", dr_strerror(rc));
    return rc;
  }
  moved->bytes = src.total;
  dr_ckpt_conn_t c;
  if ((rc = open_peer(ctx, host, port, &c, why, why_len)) != 0)
    goto out;
  dr_ckpt_put_t put = {dr_str(ctx->run_id), dr_str(name),
                       src.is_dir ? DR_CKPT_DIR : DR_CKPT_FILE, src.total,
                       step, origin};
  if ((rc = dr_enc_ckpt_put(&c.out, REQ, &put)) == 0 &&
      (rc = dr_ckpt_send(&c)) == 0)
    rc = answer(&c, why, why_len);
  if (rc == -EEXIST) {
    moved->had_it = 1;
    rc = 0;
  } else if (rc == 0) {
    rc = dr_ckpt_stream_out(&c, &src, pace, REQ, why, why_len);
    if (rc == 0)
      rc = answer(&c, why, why_len);
  }
  dr_ckpt_conn_close(&c);
out:
  dr_ckpt_src_close(&src);
  return rc;
}

int dr_ckpt_fetch(const dr_ckpt_ctx_t *ctx, const char *host, uint16_t port,
                  uint64_t step, dr_ckpt_moved_t *moved, char *why,
                  size_t why_len) {
  memset(moved, 0, sizeof(*moved));
  why[0] = '\0';
  dr_ckpt_conn_t c;
  int rc = open_peer(ctx, host, port, &c, why, why_len);
  if (rc != 0)
    return rc;
  dr_ckpt_get_t get = {dr_str(ctx->run_id), dr_str(""), step};
  dr_msg_t m;
  dr_ckpt_put_t put;
  uint64_t named;
  if ((rc = dr_enc_ckpt_get(&c.out, REQ, &get)) != 0 ||
      (rc = dr_ckpt_send(&c)) != 0 || (rc = dr_ckpt_recv(&c, &m)) != 0) {
    snprintf(why, why_len, "no answer (%s)", dr_strerror(rc));
    goto out;
  }
  if (m.type != DR_MSG_CKPT_PUT) {
    rc = refused(&m, why, why_len);
    goto out;
  }
  /* The answer is checked as a push would be: the peer names the file. */
  if (dr_msg_ckpt_put(&m, &put) != 0 ||
      !dr_ckpt_wire_name(put.name.p, put.name.len, &named) ||
      named != step || put.run_id.len != strlen(ctx->run_id) ||
      memcmp(put.run_id.p, ctx->run_id, put.run_id.len) != 0) {
    snprintf(why, why_len, "it answered with a checkpoint that is not the "
             "one asked for");
    rc = DR_EBADARG;
    goto out;
  }
  memcpy(moved->name, put.name.p, put.name.len);
  moved->name[put.name.len] = '\0';
  moved->bytes = put.total_bytes;
  uint64_t room;
  if (dr_ckpt_store_room(ctx->store, &room) == 0 &&
      room < put.total_bytes) {
    snprintf(why, why_len, "%llu bytes do not fit in the %llu free here",
             (unsigned long long)put.total_bytes, (unsigned long long)room);
    rc = -ENOSPC;
    goto out;
  }
  /* The put's view borrows from the connection's buffer, which the
   * stream reads on: a copy of it, name already copied. */
  dr_ckpt_put_t own = put;
  own.run_id = dr_str(ctx->run_id);
  own.name = dr_str(moved->name);
  rc = dr_ckpt_stream_in(&c, ctx->store, &own, moved->name, why, why_len);
out:
  dr_ckpt_conn_close(&c);
  return rc;
}
