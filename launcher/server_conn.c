/* Server connections: reading and decoding frames, the handshake (HELLO,
 * optional AUTH), dispatch to the store and rendezvous, bounded writes, and
 * dropping bad or idle clients without disturbing anyone else. */
#include "server_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "errors.h"
#include "log.h"

/* Read in chunks of at least this much. */
#define DR_READ_CHUNK (64u * 1024u)
/* A client that lets this much output pile up is too slow: drop it. */
#define DR_MAX_OUT_PENDING (256u << 20)

typedef struct {
  uv_write_t req;
  dr_conn_t *conn;
  size_t n_bytes;
  uint8_t data[];
} write_req_t;

static void on_conn_closed(uv_handle_t *h) {
  dr_conn_t *c = h->data;
  dr_server_t *s = c->srv;
  free(c->in);
  free(c);
  dr__server_handle_closed(s);
}

static void count_refused(dr_conn_t *c, dr_refuse_t why) {
  if (!c->refused)
    c->srv->stats.refused[why]++;
  c->refused = 1;
}

void dr__conn_close(dr_conn_t *c, const char *why) {
  if (c->state == DR_CONN_CLOSING)
    return;
  dr_server_t *s = c->srv;
  /* Asked for the secret, it went away: a client that has none. */
  if (c->state == DR_CONN_AUTH && !s->closing)
    count_refused(c, DR_REFUSE_NO_SECRET);
  c->state = DR_CONN_CLOSING;
  DR_DEBUG("closing connection from %s: %s", c->peer, why);
  if (c->doomed != NULL) {
    dr_conn_t **pp = &s->doomed;
    while (*pp != NULL && *pp != c)
      pp = &(*pp)->doomed_next;
    if (*pp == c)
      *pp = c->doomed_next;
  }
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  c->prev = c->next = NULL;
  s->n_conns--;
  dr__store_drop_conn(c);
  if (c->node != NULL) {
    dr_node_t *n = c->node;
    c->node = NULL;
    n->conn = NULL;
    if (!s->closing)
      dr__rdzv_node_lost(s, n, why);
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  dr__server_maybe_finish(s);
}

/* Marks c to be closed in the check phase; safe inside any loop. */
static void conn_doom(dr_conn_t *c, const char *why) {
  if (c->doomed != NULL || c->state == DR_CONN_CLOSING)
    return;
  dr_server_t *s = c->srv;
  c->doomed = why;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->doomed_next = s->doomed;
  s->doomed = c;
  uv_check_start(&s->reaper, dr__conn_reap);
}

void dr__conn_reap(uv_check_t *h) {
  dr_server_t *s = h->data;
  uv_check_stop(&s->reaper);
  while (s->doomed != NULL) {
    dr_conn_t *c = s->doomed;
    s->doomed = c->doomed_next;
    dr__conn_close(c, c->doomed);
  }
}

static void on_write(uv_write_t *req, int status) {
  write_req_t *w = (write_req_t *)req;
  dr_conn_t *c = w->conn;
  c->out_pending -= w->n_bytes;
  free(w);
  if (status < 0 && status != UV_ECANCELED)
    conn_doom(c, "write failed");
  dr__server_maybe_finish(c->srv);
}

void dr__conn_send(dr_conn_t *c) {
  dr_server_t *s = c->srv;
  dr_buf_t *out = &s->out;
  if (c->state == DR_CONN_CLOSING || c->doomed != NULL || out->len == 0) {
    dr_buf_reset(out);
    return;
  }
  size_t off = 0;
  if (c->out_pending == 0) {
    uv_buf_t b = uv_buf_init((char *)out->data, (unsigned)out->len);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n > 0)
      off = (size_t)n;
    else if (n < 0 && n != UV_EAGAIN) {
      dr_buf_reset(out);
      conn_doom(c, "write failed");
      return;
    }
  }
  size_t rest = out->len - off;
  if (rest > 0) {
    if (c->out_pending + rest > DR_MAX_OUT_PENDING) {
      dr_buf_reset(out);
      DR_WARN("dropping %s (%s): it does not read its replies", c->peer,
              c->host);
      conn_doom(c, "output over limit");
      return;
    }
    write_req_t *w = malloc(sizeof(*w) + rest);
    if (w == NULL) {
      dr_buf_reset(out);
      conn_doom(c, "out of memory");
      return;
    }
    memcpy(w->data, out->data + off, rest);
    w->conn = c;
    w->n_bytes = rest;
    uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)rest);
    c->out_pending += rest;
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rc != 0) {
      c->out_pending -= rest;
      free(w);
      dr_buf_reset(out);
      conn_doom(c, "write failed");
      return;
    }
  }
  dr_buf_reset(out);
}

void dr__conn_send_error(dr_conn_t *c, uint32_t req, int code,
                         const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (dr_enc_error(&c->srv->out, req, code, dr_str(msg)) == 0)
    dr__conn_send(c);
}

/* A client that broke the protocol: tell it why, log a sample, drop it. */
static void conn_reject(dr_conn_t *c, int code, const char *what,
                        const uint8_t *bytes, size_t n_bytes) {
  char sample[160];
  dr_log_sample(bytes, n_bytes < 32 ? n_bytes : 32, sample, sizeof(sample));
  DR_WARN("dropping %s: %s (%s); first bytes: \"%s\"", c->peer, what,
          dr_strerror(code), sample);
  if (c->state != DR_CONN_READY)
    count_refused(c, DR_REFUSE_MALFORMED);
  dr__conn_send_error(c, 0, code, "%s: %s", what, dr_strerror(code));
  dr__conn_close(c, what);
}

static void handle_hello(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_bytes_t run_id = m->f[0].b;
  dr_bytes_t host = m->f[1].b;
  size_t hn = host.len < sizeof(c->host) - 1 ? host.len : sizeof(c->host) - 1;
  memcpy(c->host, host.p, hn);
  c->host[hn] = '\0';
  if (run_id.len != strlen(s->run_id) ||
      memcmp(run_id.p, s->run_id, run_id.len) != 0) {
    char sample[128];
    dr_log_sample(run_id.p, run_id.len, sample, sizeof(sample));
    DR_WARN("refused %s (%s): run id '%s' is not this job's '%s'", c->peer,
            c->host, sample, s->run_id);
    count_refused(c, DR_REFUSE_RUN_ID);
    dr__conn_send_error(c, m->req_id, DR_ERUNID,
                        "run id '%s' does not match this server's job '%s'",
                        sample, s->run_id);
    dr__conn_close(c, "wrong run id");
    return;
  }
  if (s->secret != NULL) {
    dr_auth_nonce(c->nonce);
    dr_bytes_t nonce = {c->nonce, DR_NONCE_LEN};
    if (dr_enc_welcome(&s->out, m->req_id, 1, nonce) == 0)
      dr__conn_send(c);
    c->state = DR_CONN_AUTH;
    return;
  }
  dr_bytes_t none = {NULL, 0};
  if (dr_enc_welcome(&s->out, m->req_id, 0, none) == 0)
    dr__conn_send(c);
  c->state = DR_CONN_READY;
  c->dec.authed = 1;
}

static void handle_auth(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  if (m->type != DR_MSG_AUTH) {
    DR_WARN("refused %s (%s): no shared secret presented", c->peer, c->host);
    count_refused(c, DR_REFUSE_NO_SECRET);
    dr__conn_send_error(c, m->req_id, DR_ENOAUTH,
                        "this job requires a shared secret (--secret-file "
                        "or DDPRUN_SECRET)");
    dr__conn_close(c, "no secret");
    return;
  }
  if (dr_auth_verify(s->secret, s->cfg.secret_len, c->nonce,
                     dr_str(s->run_id), m->f[0].b) != 0) {
    DR_WARN("refused %s (%s): wrong shared secret", c->peer, c->host);
    count_refused(c, DR_REFUSE_BAD_SECRET);
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

static void dispatch(dr_conn_t *c, const dr_msg_t *m) {
  if (c->state == DR_CONN_HELLO) {
    if (m->type != DR_MSG_HELLO) {
      conn_reject(c, DR_ESEQUENCE, "first message is not HELLO", NULL, 0);
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
  case DR_MSG_JOIN:
  case DR_MSG_HEARTBEAT:
  case DR_MSG_FAILURE:
  case DR_MSG_SUCCESS:
  case DR_MSG_RESUME:
  case DR_MSG_LEAVE:
    dr__rdzv_handle(c, m);
    break;
  default:
    dr__conn_send_error(c, m->req_id, DR_ESEQUENCE,
                        "%s is not a request a client may send",
                        dr_msg_name(m->type));
  }
}

/* With nothing pending, a connection reads into the loop's shared buffer
 * (libuv calls alloc and read back to back for one stream), so an idle
 * connection holds no read memory; only a partial frame is copied out. */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  dr_conn_t *c = h->data;
  if (c->in_len == 0) {
    buf->base = (char *)c->srv->rbuf;
    buf->len = sizeof(c->srv->rbuf);
    return;
  }
  /* need was capped by the decoder before it was reported. */
  size_t want = c->in_len + DR_READ_CHUNK;
  if (c->need > want)
    want = c->need;
  if (want > c->in_cap) {
    uint8_t *p = realloc(c->in, want);
    if (p == NULL) {
      buf->base = NULL;
      buf->len = 0;
      return;
    }
    c->in = p;
    c->in_cap = want;
  }
  buf->base = (char *)c->in + c->in_len;
  buf->len = c->in_cap - c->in_len;
}

/* Keeps the undecoded tail of data for the next read. */
static int keep_tail(dr_conn_t *c, const uint8_t *data, size_t n, int shared) {
  if (!shared) {
    if (n > 0 && data != c->in)
      memmove(c->in, data, n);
    c->in_len = n;
    if (n == 0) {
      free(c->in);
      c->in = NULL;
      c->in_cap = 0;
    }
    return 0;
  }
  if (n == 0)
    return 0;
  size_t cap = n + DR_READ_CHUNK;
  uint8_t *p = realloc(c->in, cap);
  if (p == NULL)
    return -ENOMEM;
  memcpy(p, data, n);
  c->in = p;
  c->in_cap = cap;
  c->in_len = n;
  return 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  dr_conn_t *c = st->data;
  if (nread == UV_ENOBUFS) {
    dr__conn_close(c, "out of memory");
    return;
  }
  if (nread < 0) {
    dr__conn_close(c, nread == UV_EOF ? "connection closed by peer"
                                      : uv_strerror((int)nread));
    return;
  }
  if (nread == 0 || c->state == DR_CONN_CLOSING)
    return;
  int shared = buf->base == (char *)c->srv->rbuf;
  const uint8_t *data;
  size_t len;
  if (shared) {
    data = c->srv->rbuf;
    len = (size_t)nread;
  } else {
    c->in_len += (size_t)nread;
    data = c->in;
    len = c->in_len;
  }
  c->last_seen_ms = dr__now_ms(c->srv);

  size_t off = 0;
  while (c->state != DR_CONN_CLOSING) {
    dr_msg_t m;
    size_t used, need;
    int err;
    dr_decode_status_t rc =
        dr_decode(&c->dec, data + off, len - off, &m, &used, &need, &err);
    if (rc == DR_DECODE_NEED_MORE) {
      c->need = need;
      break;
    }
    if (rc == DR_DECODE_ERROR) {
      if (err == DR_EVERSION) {
        DR_WARN("refused %s: protocol version %u (this server speaks %u)",
                c->peer, m.version, DR_PROTO_VERSION);
        count_refused(c, DR_REFUSE_VERSION);
        dr__conn_send_error(c, m.req_id, DR_EVERSION,
                            "protocol version %u is not supported; this "
                            "server speaks version %u",
                            m.version, DR_PROTO_VERSION);
        dr__conn_close(c, "protocol version mismatch");
      } else {
        conn_reject(c, err, "malformed frame", data + off, len - off);
      }
      return;
    }
    c->need = 0;
    dispatch(c, &m);
    off += used;
  }
  if (c->state == DR_CONN_CLOSING)
    return;
  if (keep_tail(c, data + off, len - off, shared) != 0)
    dr__conn_close(c, "out of memory");
}

static void format_peer(dr_conn_t *c) {
  struct sockaddr_storage sa;
  int len = sizeof(sa);
  snprintf(c->peer, sizeof(c->peer), "?");
  snprintf(c->peer_ip, sizeof(c->peer_ip), "?");
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) != 0)
    return;
  int port;
  if (sa.ss_family == AF_INET) {
    uv_ip4_name((struct sockaddr_in *)&sa, c->peer_ip, sizeof(c->peer_ip));
    port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
    snprintf(c->peer, sizeof(c->peer), "%s:%d", c->peer_ip, port);
  } else {
    uv_ip6_name((struct sockaddr_in6 *)&sa, c->peer_ip, sizeof(c->peer_ip));
    port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
    snprintf(c->peer, sizeof(c->peer), "[%s]:%d", c->peer_ip, port);
  }
}

void dr__conn_accept(dr_server_t *s) {
  dr_conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return;
  c->srv = s;
  c->prev_rank = -1;
  s->stats.accepted++;
  uv_tcp_init(s->loop, &c->tcp);
  c->tcp.data = c;
  s->n_handles_open++;
  if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp) != 0) {
    c->state = DR_CONN_CLOSING;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  format_peer(c);
  dr_decoder_init(&c->dec, &s->cfg.limits);
  c->state = DR_CONN_HELLO;
  c->accepted_ms = c->last_seen_ms = dr__now_ms(s);
  c->next = s->conns;
  if (s->conns != NULL)
    s->conns->prev = c;
  s->conns = c;
  s->n_conns++;
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (rc != 0)
    dr__conn_close(c, uv_strerror(rc));
}

void dr__conn_sweep(dr_server_t *s, uint64_t now) {
  dr_conn_t *next;
  for (dr_conn_t *c = s->conns; c != NULL; c = next) {
    next = c->next;
    if ((c->state == DR_CONN_HELLO || c->state == DR_CONN_AUTH) &&
        now - c->accepted_ms > s->cfg.handshake_timeout_ms) {
      DR_WARN("dropping %s: no handshake within %u ms", c->peer,
              s->cfg.handshake_timeout_ms);
      count_refused(c, DR_REFUSE_TIMEOUT);
      dr__conn_close(c, "handshake timeout");
    }
  }
}
