/* Server connections: their lifetime (accepted, doomed, closed), bounded
 * writes, rate-limited warnings, and the deadlines that drop slow, idle
 * or silent clients without disturbing anyone else. Reading is in
 * server_read.c, the handshake and dispatch in server_hello.c. */
#include "server_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "log.h"

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
  dr__conn_in_free(c);
  free(c);
  dr__server_handle_closed(s);
}

void dr__conn_warn(dr_conn_t *c, size_t kind, const char *fmt, ...) {
  dr_server_t *s = c->srv;
  va_list ap;
  va_start(ap, fmt);
  dr_rl_vwarn(&s->bad_rl, dr__now_ms(s), kind, 1, fmt, ap);
  va_end(ap);
}

void dr__conn_close(dr_conn_t *c, const char *why) {
  if (c->state == DR_CONN_CLOSING)
    return;
  dr_server_t *s = c->srv;
  /* Asked for the secret, it went away: a client that has none. */
  if (c->state == DR_CONN_AUTH && !s->closing)
    dr__conn_count_refused(c, DR_REFUSE_NO_SECRET);
  c->state = DR_CONN_CLOSING;
  DR_DEBUG("closing connection from %s: %s", c->rp.addr, why);
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
  dr__status_drop_conn(c);
  dr__rdzv_conn_closed(c, why);
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  dr__server_maybe_finish(s);
}

void dr__conn_doom(dr_conn_t *c, const char *why) {
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
  c->write_ms = dr__now_ms(c->srv);
  free(w);
  if (status < 0 && status != UV_ECANCELED)
    dr__conn_doom(c, "write failed");
  dr__server_maybe_finish(c->srv);
}

void dr__conn_send(dr_conn_t *c) {
  dr_server_t *s = c->srv;
  dr_buf_t *out = &s->out;
  if (c->state == DR_CONN_CLOSING || c->doomed != NULL || out->len == 0) {
    dr_buf_reset(out);
    return;
  }
  c->active_ms = dr__now_ms(s);
  size_t off = 0;
  if (c->out_pending == 0) {
    uv_buf_t b = uv_buf_init((char *)out->data, (unsigned)out->len);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n > 0)
      off = (size_t)n;
    else if (n < 0 && n != UV_EAGAIN) {
      dr_buf_reset(out);
      dr__conn_doom(c, "write failed");
      return;
    }
  }
  size_t rest = out->len - off;
  if (rest > 0) {
    if (c->out_pending + rest > DR_MAX_OUT_PENDING) {
      dr_buf_reset(out);
      s->stats.dropped[DR_DROP_SLOW_READER]++;
      dr__conn_warn(c, DR_BAD_KIND_DROP(DR_DROP_SLOW_READER),
                    "dropping %s (%s): it does not read its replies (%zu "
                    "bytes unread)",
                    c->rp.addr, c->rp.host, c->out_pending);
      dr__conn_doom(c, "output over limit");
      return;
    }
    write_req_t *w = malloc(sizeof(*w) + rest);
    if (w == NULL) {
      dr_buf_reset(out);
      dr__conn_doom(c, "out of memory");
      return;
    }
    memcpy(w->data, out->data + off, rest);
    w->conn = c;
    w->n_bytes = rest;
    uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)rest);
    if (c->out_pending == 0)
      c->write_ms = c->active_ms; /* the clock of a reply being taken */
    c->out_pending += rest;
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rc != 0) {
      c->out_pending -= rest;
      free(w);
      dr_buf_reset(out);
      dr__conn_doom(c, "write failed");
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

static void format_peer(dr_conn_t *c) {
  struct sockaddr_storage sa;
  int len = sizeof(sa);
  snprintf(c->rp.addr, sizeof(c->rp.addr), "?");
  snprintf(c->rp.ip, sizeof(c->rp.ip), "?");
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) != 0)
    return;
  int port;
  if (sa.ss_family == AF_INET) {
    uv_ip4_name((struct sockaddr_in *)&sa, c->rp.ip, sizeof(c->rp.ip));
    port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
    snprintf(c->rp.addr, sizeof(c->rp.addr), "%s:%d", c->rp.ip, port);
  } else {
    uv_ip6_name((struct sockaddr_in6 *)&sa, c->rp.ip, sizeof(c->rp.ip));
    port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
    snprintf(c->rp.addr, sizeof(c->rp.addr), "[%s]:%d", c->rp.ip, port);
  }
}

void dr__conn_accept(dr_server_t *s, int fd) {
  dr_conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    close(fd);
    return;
  }
  c->srv = s;
  c->rp.prev_rank = -1;
  s->stats.accepted++;
  uv_tcp_init(s->loop, &c->tcp);
  c->tcp.data = c;
  s->n_handles_open++;
  if (uv_tcp_open(&c->tcp, fd) != 0) {
    close(fd);
    c->state = DR_CONN_CLOSING;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  format_peer(c);
  dr_decoder_init(&c->dec, &s->cfg.limits);
  c->state = DR_CONN_HELLO;
  c->accepted_ms = c->rp.last_seen_ms = c->active_ms = dr__now_ms(s);
  c->next = s->conns;
  if (s->conns != NULL)
    s->conns->prev = c;
  s->conns = c;
  s->n_conns++;
  int rc = dr__conn_read_start(c);
  if (rc != 0)
    dr__conn_close(c, uv_strerror(rc));
}

/* Drops c, a client past its handshake that is not a node, for holding
 * what it does not use: a rate-limited warning, a last ERROR (a client
 * library reports it as the answer to what it has in flight), closed. */
static void conn_drop(dr_conn_t *c, dr_drop_t why, int code,
                      const char *close_why, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void conn_drop(dr_conn_t *c, dr_drop_t why, int code,
                      const char *close_why, const char *fmt, ...) {
  dr_server_t *s = c->srv;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  s->stats.dropped[why]++;
  dr__conn_warn(c, DR_BAD_KIND_DROP(why), "dropping %s (%s): %s", c->rp.addr,
                c->rp.host, msg);
  if (why != DR_DROP_SLOW_READER)
    dr__conn_send_error(c, 0, code, "closed by the server: %s", msg);
  dr__conn_close(c, close_why);
}

/* The deadlines past the handshake of a client that is not a node. A
 * connection is idle when it has nothing in flight either way: no partial
 * frame (the frame deadline covers it), no reply being written, no store
 * request blocked on it (a GET or BARRIER may wait legitimately) and no
 * STATUS collecting stacks for it. */
/* A deadline counts from t, or from the loop's wake-up after a stall when
 * that is later: time the server did not run is no client's fault. */
static uint64_t since(const dr_server_t *s, uint64_t t) {
  return t > s->woke_ms ? t : s->woke_ms;
}

static void check_client(dr_conn_t *c, uint64_t now) {
  const dr_server_t *s = c->srv;
  const dr_server_config_t *cfg = &s->cfg;
  if (c->in_len > 0 && now - since(s, c->frame_ms) > cfg->frame_timeout_ms) {
    conn_drop(c, DR_DROP_SLOW_FRAME, -ETIMEDOUT, "frame timeout",
              "a frame still incomplete after %" PRIu64 " ms (%zu bytes "
              "of it received; --frame-timeout %.3g s)",
              now - c->frame_ms, c->in_len, cfg->frame_timeout_ms / 1000.0);
  } else if (c->out_pending > 0 &&
             now - since(s, c->write_ms) > cfg->frame_timeout_ms) {
    conn_drop(c, DR_DROP_SLOW_READER, 0, "reply not taken",
              "%zu bytes of replies not taken for %" PRIu64 " ms "
              "(--frame-timeout %.3g s)",
              c->out_pending, now - c->write_ms,
              cfg->frame_timeout_ms / 1000.0);
  } else if (cfg->idle_timeout_ms > 0 && c->in_len == 0 &&
             c->out_pending == 0 && c->waiters == NULL &&
             c->status_waiting == 0 &&
             now - since(s, c->active_ms) > cfg->idle_timeout_ms) {
    conn_drop(c, DR_DROP_IDLE, -ETIMEDOUT, "idle",
              "idle for %" PRIu64 " ms (--idle-timeout %.3g s)",
              now - c->active_ms, cfg->idle_timeout_ms / 1000.0);
  }
}

void dr__conn_sweep(dr_server_t *s, uint64_t now) {
  dr_conn_t *next;
  for (dr_conn_t *c = s->conns; c != NULL; c = next) {
    next = c->next;
    if (c->doomed != NULL)
      continue;
    if ((c->state == DR_CONN_HELLO || c->state == DR_CONN_AUTH) &&
        now - since(s, c->accepted_ms) > s->cfg.handshake_timeout_ms) {
      dr__conn_warn(c, DR_REFUSE_TIMEOUT,
                    "dropping %s: no handshake within %u ms", c->rp.addr,
                    s->cfg.handshake_timeout_ms);
      dr__conn_count_refused(c, DR_REFUSE_TIMEOUT);
      dr__conn_close(c, "handshake timeout");
    } else if (c->state == DR_CONN_READY && !c->agent && c->rp.node == NULL) {
      check_client(c, now);
    }
  }
}
