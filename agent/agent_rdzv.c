/* The agent's connection to the rendezvous server, on libuv: connect with
 * retry and backoff until a deadline, then the frames of the protocol's
 * session (proto/session.h: the handshake, JOIN, RESUME, the orders) in
 * both directions. */
#include "agent_internal.h"

#include "log.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "errors.h"
#include "session.h"

/* HANDSHAKE: connected, HELLO sent, not yet ready (the session knows
 * where in the handshake it is). */
typedef enum { ARZ_CONNECTING, ARZ_HANDSHAKE, ARZ_READY, ARZ_DEAD } arz_state_t;

struct dr_arz {
  uv_loop_t *loop;
  uv_tcp_t tcp;
  uv_timer_t retry;
  uv_connect_t conn_req;
  dr_arz_cb_t cb;
  arz_state_t state;
  char *host;
  char *client_host;
  dr_sess_t sess;  /* the protocol; this file only carries its frames */
  int64_t clock_skew_us;
  uint32_t next_req;
  uint16_t port;
  uint32_t user_timeout_ms;
  struct sockaddr_storage addr;
  uint64_t deadline;
  uint32_t connect_ms;   /* the attempts' bound, for messages */
  uint64_t backoff_ms;
  uint64_t last_heard;
  int tcp_open;
  int closing;
  int handles; /* open handles; the struct is freed when none remain */
  dr_decoder_t dec;
  uint8_t *in;
  size_t in_len, in_cap, need;
  int last_err;
  int unresolved; /* the last attempt could not resolve the name */
  int gai_err;    /* getaddrinfo's code of that attempt */
  int ever_connected;
  int warned_resolve; /* said once that the name does not resolve yet */
};

typedef struct {
  uv_write_t req;
  dr_arz_t *a;
  uint8_t data[];
} arz_write_t;

static void arz_free_if_done(dr_arz_t *a) {
  if (a->closing && a->handles == 0) {
    free(a->in);
    free(a->host);
    free(a->client_host);
    dr_sess_free(&a->sess);
    free(a);
  }
}

static void on_handle_closed(uv_handle_t *h) {
  dr_arz_t *a = h->data;
  a->handles--;
  arz_free_if_done(a);
}

/* The connection is over: tell the owner once. */
static void arz_lost(dr_arz_t *a, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void arz_lost(dr_arz_t *a, int code, const char *fmt, ...) {
  if (a->state == ARZ_DEAD)
    return;
  a->state = ARZ_DEAD;
  uv_timer_stop(&a->retry);
  if (a->tcp_open)
    uv_read_stop((uv_stream_t *)&a->tcp);
  char why[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  if (a->cb.on_lost != NULL)
    a->cb.on_lost(a->cb.arg, code, why);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void consume(dr_arz_t *a, size_t nread);

/* A write failed: the server closed. What it sent before, a STOP and its
 * reason, may still wait unread in the socket; it is read and handled
 * first, so that the connection's end is judged by it. */
static void drain_unread(dr_arz_t *a) {
  uv_os_fd_t fd;
  if (!a->tcp_open || uv_fileno((const uv_handle_t *)&a->tcp, &fd) != 0)
    return;
  while (a->state != ARZ_DEAD && !a->closing) {
    uv_buf_t b;
    on_alloc((uv_handle_t *)&a->tcp, 0, &b);
    if (b.base == NULL || b.len == 0)
      return;
    ssize_t n = recv(fd, b.base, b.len, MSG_DONTWAIT);
    if (n <= 0)
      return;
    consume(a, (size_t)n);
  }
}

static void write_failed(dr_arz_t *a, int status) {
  drain_unread(a);
  if (a->closing)
    return;
  arz_lost(a, status, "write to the rendezvous server %s:%u failed (%s)",
           a->host, a->port, uv_strerror(status));
}

static void on_write(uv_write_t *req, int status) {
  arz_write_t *w = (arz_write_t *)req;
  dr_arz_t *a = w->a;
  free(w);
  if (status < 0 && status != UV_ECANCELED && !a->closing)
    write_failed(a, status);
}

void dr_arz_send(dr_arz_t *a, const dr_buf_t *b) {
  if (a->state == ARZ_DEAD || a->closing || !a->tcp_open || b->len == 0)
    return;
  arz_write_t *w = malloc(sizeof(*w) + b->len);
  if (w == NULL) {
    arz_lost(a, -ENOMEM, "out of memory");
    return;
  }
  w->a = a;
  memcpy(w->data, b->data, b->len);
  uv_buf_t ub = uv_buf_init((char *)w->data, (unsigned)b->len);
  int rc = uv_write(&w->req, (uv_stream_t *)&a->tcp, &ub, 1, on_write);
  if (rc != 0) {
    free(w);
    write_failed(a, rc);
  }
}

/* Every frame the server sends goes through the session, which answers
 * the handshake and turns the rest into typed events. */
static void handle_frame(dr_arz_t *a, const dr_msg_t *m) {
  dr_buf_t out;
  dr_buf_init(&out);
  dr_sess_event_t ev;
  int was_ready = dr_sess_ready(&a->sess);
  int rc = dr_sess_on_frame(&a->sess, m, ++a->next_req, &out, &ev);
  if (rc == 0 && out.len > 0)
    dr_arz_send(a, &out);
  dr_buf_free(&out);
  if (rc != 0) {
    arz_lost(a, rc, "the rendezvous server %s:%u: %s", a->host, a->port,
             a->sess.errmsg);
    return;
  }
  if (ev.type == DR_SESS_REFUSED && !was_ready) {
    arz_lost(a, ev.code, "the rendezvous server %s:%u refused this node: %.*s",
             a->host, a->port, (int)ev.text.len, (const char *)ev.text.p);
    return;
  }
  if (ev.type == DR_SESS_READY) {
    a->state = ARZ_READY;
    uv_timer_stop(&a->retry); /* the attempt's deadline (try_connect) */
    a->dec.authed = 1;
    a->cb.on_ready(a->cb.arg);
    return;
  }
  if (ev.type != DR_SESS_NONE && ev.type != DR_SESS_OTHER)
    a->cb.on_event(a->cb.arg, &ev);
  else
    dr_assignment_free(&ev.asg);
}

int dr_arz_join(dr_arz_t *a, const dr_join_t *j) {
  dr_buf_t b;
  dr_buf_init(&b);
  int rc = dr_sess_join(&a->sess, ++a->next_req, j, &b);
  if (rc == 0)
    dr_arz_send(a, &b);
  dr_buf_free(&b);
  return rc;
}

int dr_arz_heartbeat(dr_arz_t *a, uint64_t gen) {
  dr_buf_t b;
  dr_buf_init(&b);
  int rc = dr_sess_heartbeat(&a->sess, 0, gen, &b);
  if (rc == 0)
    dr_arz_send(a, &b);
  dr_buf_free(&b);
  return rc;
}

int dr_arz_resume(dr_arz_t *a, const dr_resume_t *q) {
  dr_buf_t b;
  dr_buf_init(&b);
  int rc = dr_sess_resume(&a->sess, ++a->next_req, q, &b);
  if (rc == 0)
    dr_arz_send(a, &b);
  dr_buf_free(&b);
  return rc;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  dr_arz_t *a = h->data;
  size_t want = a->in_len + 16384;
  if (a->need > want)
    want = a->need;
  if (want > a->in_cap) {
    uint8_t *p = realloc(a->in, want);
    if (p == NULL) {
      buf->base = NULL;
      buf->len = 0;
      return;
    }
    a->in = p;
    a->in_cap = want;
  }
  buf->base = (char *)a->in + a->in_len;
  buf->len = a->in_cap - a->in_len;
}

static void consume(dr_arz_t *a, size_t nread);

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  dr_arz_t *a = s->data;
  if (nread < 0 && a->state == ARZ_HANDSHAKE) {
    /* Accepted by the kernel, then closed unanswered: what a server at its
     * open-files limit does to the connections it cannot take. */
    arz_lost(a, nread == UV_EOF ? DR_ECLOSED : (int)nread,
             "the rendezvous server %s:%u refused the connection (closed it "
             "before answering HELLO): too many open files on the server?",
             a->host, a->port);
    return;
  }
  if (nread < 0) {
    arz_lost(a, nread == UV_EOF ? DR_ECLOSED : (int)nread,
             "the rendezvous server %s:%u closed the connection (%s)", a->host,
             a->port, nread == UV_EOF ? "end of stream" : uv_strerror((int)nread));
    return;
  }
  consume(a, (size_t)nread);
}

/* The nread bytes just added at a->in + a->in_len: every whole frame in
 * the buffer is handled. */
static void consume(dr_arz_t *a, size_t nread) {
  a->in_len += nread;
  a->last_heard = uv_now(a->loop);
  size_t off = 0;
  while (a->state != ARZ_DEAD && !a->closing) {
    dr_msg_t m;
    size_t used, need;
    int err;
    dr_decode_status_t st =
        dr_decode(&a->dec, a->in + off, a->in_len - off, &m, &used, &need, &err);
    if (st == DR_DECODE_NEED_MORE) {
      a->need = need;
      break;
    }
    if (st == DR_DECODE_ERROR) {
      arz_lost(a, err, "bad frame from the rendezvous server %s:%u (%s)",
               a->host, a->port, dr_strerror(err));
      return;
    }
    a->need = 0;
    handle_frame(a, &m);
    off += used;
  }
  if (off > 0 && !a->closing) {
    memmove(a->in, a->in + off, a->in_len - off);
    a->in_len -= off;
  }
}

static void try_connect(dr_arz_t *a);

static void on_retry(uv_timer_t *t) { try_connect(t->data); }

/* An attempt that neither connects nor fails (a host that is gone drops
 * the SYN; a peer that never answers the HELLO) ends at the deadline. */
static void on_attempt_deadline(uv_timer_t *t) {
  dr_arz_t *a = t->data;
  if (a->closing || (a->state != ARZ_CONNECTING && a->state != ARZ_HANDSHAKE))
    return;
  a->last_err = UV_ETIMEDOUT;
  arz_lost(a, UV_ETIMEDOUT, "no answer from %s:%u within %.1f s", a->host,
           a->port, a->connect_ms / 1000.0);
}

static void schedule_retry(dr_arz_t *a) {
  uint64_t now = uv_now(a->loop);
  uint64_t delay = a->backoff_ms;
  if (now + delay > a->deadline)
    delay = a->deadline > now ? a->deadline - now : 0;
  a->backoff_ms = a->backoff_ms * 2 > 1000 ? 1000 : a->backoff_ms * 2;
  uv_timer_start(&a->retry, on_retry, delay, 0);
}

static void on_tcp_closed_for_retry(uv_handle_t *h) {
  dr_arz_t *a = h->data;
  a->handles--;
  a->tcp_open = 0;
  if (a->closing) {
    arz_free_if_done(a);
    return;
  }
  schedule_retry(a);
}

static void on_connect(uv_connect_t *req, int status) {
  dr_arz_t *a = req->data;
  if (a->closing)
    return;
  if (status == 0) {
    a->ever_connected = 1;
    uv_tcp_nodelay(&a->tcp, 1);
    uv_os_fd_t fd;
    unsigned ut = a->user_timeout_ms;
    if (ut > 0 && uv_fileno((uv_handle_t *)&a->tcp, &fd) == 0)
      setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
    a->state = ARZ_HANDSHAKE;
    a->last_heard = uv_now(a->loop);
    int rc = uv_read_start((uv_stream_t *)&a->tcp, on_alloc, on_read);
    if (rc != 0) {
      arz_lost(a, rc, "cannot read from %s:%u (%s)", a->host, a->port,
               uv_strerror(rc));
      return;
    }
    dr_buf_t b;
    dr_buf_init(&b);
    if (dr_sess_hello(&a->sess, ++a->next_req, a->client_host, &b) == 0)
      dr_arz_send(a, &b);
    dr_buf_free(&b);
    return;
  }
  a->last_err = status;
  if (uv_now(a->loop) >= a->deadline) {
    arz_lost(a, status, "connect() to %s:%u failed (%d: %s); gave up after "
             "%.1f s", a->host, a->port, -status, uv_strerror(status),
             a->connect_ms / 1000.0);
    return;
  }
  /* Retry on a fresh socket once this one has closed. */
  uv_close((uv_handle_t *)&a->tcp, on_tcp_closed_for_retry);
}

static int resolve(const char *host, uint16_t port,
                   struct sockaddr_storage *out, int *gai_err);

static void try_connect(dr_arz_t *a) {
  if (a->closing || a->state == ARZ_DEAD)
    return;
  /* Resolved on every attempt: a Kubernetes pod's name exists only once
   * the pod does, and names a new address when the pod is recreated. */
  int rc = resolve(a->host, a->port, &a->addr, &a->gai_err);
  a->unresolved = rc != 0;
  if (rc != 0) {
    a->last_err = rc;
    if (uv_now(a->loop) >= a->deadline) {
      arz_lost(a, rc, "cannot resolve the rendezvous endpoint '%s' (%s); "
               "gave up after %.1f s", a->host, dr_arz_resolve_error(a),
               a->connect_ms / 1000.0);
      return;
    }
    if (!a->warned_resolve)
      DR_SAY(DR_LOG_WARN, "cannot resolve the rendezvous endpoint '%s' "
              "yet (%s); retrying until the join timeout", a->host,
              dr_arz_resolve_error(a));
    a->warned_resolve = 1;
    schedule_retry(a);
    return;
  }
  uv_tcp_init(a->loop, &a->tcp);
  a->tcp.data = a;
  a->handles++;
  a->tcp_open = 1;
  a->conn_req.data = a;
  rc = uv_tcp_connect(&a->conn_req, &a->tcp,
                      (const struct sockaddr *)&a->addr, on_connect);
  if (rc != 0) {
    on_connect(&a->conn_req, rc);
    return;
  }
  uint64_t now = uv_now(a->loop);
  uv_timer_start(&a->retry, on_attempt_deadline,
                 a->deadline > now ? a->deadline - now : 1, 0);
}

static int resolve(const char *host, uint16_t port,
                   struct sockaddr_storage *out, int *gai_err) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  char ps[8];
  snprintf(ps, sizeof(ps), "%u", port);
  int rc = getaddrinfo(host, ps, &hints, &res);
  *gai_err = rc;
  if (rc != 0)
    return rc == EAI_SYSTEM ? -errno : -ENOENT;
  memcpy(out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return 0;
}

/* The session's clock: the real one, skewed when a test asks for it. */
static uint64_t arz_clock(void *ctx) {
  const dr_arz_t *a = ctx;
  uint64_t now = dr_clock_now_us();
  if (now == 0 || (a->clock_skew_us < 0 && now <= (uint64_t)-a->clock_skew_us))
    return 0;
  return now + (uint64_t)a->clock_skew_us;
}

int dr_arz_start(uv_loop_t *loop, const dr_arz_opts_t *o, const dr_arz_cb_t *cb,
                 dr_arz_t **out) {
  dr_arz_t *a = calloc(1, sizeof(*a));
  if (a == NULL)
    return -ENOMEM;
  a->loop = loop;
  a->cb = *cb;
  a->port = o->port;
  a->user_timeout_ms = o->user_timeout_ms;
  a->host = strdup(o->host);
  a->client_host = strdup(o->client_host);
  int src = dr_sess_init(&a->sess, o->run_id, o->secret, o->secret_len);
  if (a->host == NULL || a->client_host == NULL || src != 0) {
    a->closing = 1;
    arz_free_if_done(a);
    return -ENOMEM;
  }
  a->clock_skew_us = o->clock_skew_us;
  if (a->clock_skew_us != 0)
    dr_sess_set_clock(&a->sess, arz_clock, a);
  dr_decoder_init(&a->dec, &o->limits);
  a->backoff_ms = 10;
  a->deadline = uv_now(loop) + o->connect_timeout_ms;
  a->connect_ms = o->connect_timeout_ms;
  uv_timer_init(loop, &a->retry);
  a->retry.data = a;
  a->handles = 1;
  *out = a;
  try_connect(a);
  return 0;
}

int dr_arz_connected(const dr_arz_t *a) { return a->ever_connected; }

int dr_arz_local_addr(const dr_arz_t *a, struct sockaddr_storage *out) {
  int len = (int)sizeof(*out);
  return uv_tcp_getsockname(&a->tcp, (struct sockaddr *)out, &len);
}

int dr_arz_last_error(const dr_arz_t *a) { return a->last_err; }

const char *dr_arz_resolve_error(const dr_arz_t *a) {
  if (!a->unresolved)
    return NULL;
  return a->gai_err == EAI_SYSTEM ? dr_strerror(a->last_err)
                                  : gai_strerror(a->gai_err);
}

void dr_arz_set_user_timeout(dr_arz_t *a, uint32_t ms) {
  if (a == NULL || a->user_timeout_ms == ms)
    return;
  a->user_timeout_ms = ms;
  uv_os_fd_t fd;
  unsigned ut = ms;
  if (a->tcp_open && a->state != ARZ_CONNECTING &&
      uv_fileno((uv_handle_t *)&a->tcp, &fd) == 0)
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
}

uint64_t dr_arz_idle_ms(const dr_arz_t *a) {
  return uv_now(a->loop) - a->last_heard;
}

void dr_arz_close(dr_arz_t **ap) {
  dr_arz_t *a = *ap;
  *ap = NULL;
  if (a == NULL || a->closing)
    return;
  a->closing = 1;
  a->state = ARZ_DEAD;
  uv_close((uv_handle_t *)&a->retry, on_handle_closed);
  if (a->tcp_open && !uv_is_closing((uv_handle_t *)&a->tcp))
    uv_close((uv_handle_t *)&a->tcp, on_handle_closed);
}
