/* The metrics endpoint: a small HTTP/1.1 responder on the server's loop.
 * GET /metrics and GET /healthz only; one request per connection
 * (Connection: close). A request head is capped at DR_HTTP_MAX_HEAD bytes
 * and must arrive within the handshake timeout; a client over either limit
 * is answered (431, 408) and dropped. At most DR_HTTP_MAX_CONNS
 * connections at a time, so that clients cannot hold memory without
 * bound; when they are all taken, a new one takes the slot of the oldest
 * that has been answered, else of the oldest that has not sent a whole
 * head: slow clients cannot lock a real scrape out for the head deadline.
 * Nothing here can block the loop. */
#include "server_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "log.h"

#define DR_HTTP_MAX_HEAD 4096u
#define DR_HTTP_MAX_CONNS 64u
/* After the answer, what the client still sends is read and dropped for at
 * most this long, so that closing never resets an unread answer. */
#define DR_HTTP_LINGER_MS 2000u

typedef struct http_conn http_conn_t;

struct dr_metrics {
  dr_server_t *srv;
  uv_tcp_t listener;
  uv_timer_t sweep;
  uint16_t port;
  int closing;
  http_conn_t *conns;
  size_t n_conns;
  uint64_t counts[DR_METRICS_N_CODES]; /* answers by dr__metrics_codes */
  dr_buf_t body;                       /* scratch for /metrics */
  char drain[4096];                    /* where lingering reads go */
};

struct http_conn {
  uv_tcp_t tcp;
  uv_shutdown_t shutdown;
  dr_metrics_t *m;
  uint64_t deadline_ms; /* the head must arrive by then; then the linger */
  int answered;         /* the answer is queued; reads are dropped */
  int written;          /* the answer is out: closing loses nothing */
  int closing;
  size_t len;
  char head[DR_HTTP_MAX_HEAD];
  http_conn_t *prev, *next;
};

typedef struct {
  uv_write_t req;
  http_conn_t *conn;
  char data[];
} http_write_t;

static void on_handle_closed(uv_handle_t *h) {
  dr_metrics_t *m = h->data;
  dr__server_handle_closed(m->srv);
}

static void on_conn_closed(uv_handle_t *h) {
  http_conn_t *c = h->data;
  dr_server_t *s = c->m->srv;
  free(c);
  dr__server_handle_closed(s);
}

static void conn_close(http_conn_t *c) {
  if (c->closing)
    return;
  dr_metrics_t *m = c->m;
  c->closing = 1;
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    m->conns = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  m->n_conns--;
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static const char *reason_phrase(int code) {
  switch (code) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 431: return "Request Header Fields Too Large";
  default: return "Service Unavailable";
  }
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)req;
  (void)status; /* the linger deadline closes it in any case */
}

static void on_write(uv_write_t *req, int status) {
  http_write_t *w = (http_write_t *)req;
  http_conn_t *c = w->conn;
  free(w);
  if (c->closing)
    return;
  c->written = status == 0;
  if (status < 0 ||
      uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
    conn_close(c);
}

/* Queues the answer; the connection then lingers until the client closes
 * or DR_HTTP_LINGER_MS pass. */
static void respond(http_conn_t *c, int code, const char *type,
                    const void *body, size_t body_len) {
  dr_metrics_t *m = c->m;
  for (int i = 0; i < DR_METRICS_N_CODES; i++)
    if (dr__metrics_codes[i] == code)
      m->counts[i]++;
  c->answered = 1;
  c->deadline_ms = dr__now_ms(m->srv) + DR_HTTP_LINGER_MS;
  char head[256];
  int hn = snprintf(head, sizeof(head),
                    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
                    "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
                    code, reason_phrase(code), type, body_len,
                    code == 405 ? "Allow: GET\r\n" : "");
  http_write_t *w = malloc(sizeof(*w) + (size_t)hn + body_len);
  if (w == NULL) {
    conn_close(c);
    return;
  }
  memcpy(w->data, head, (size_t)hn);
  if (body_len > 0)
    memcpy(w->data + hn, body, body_len);
  w->conn = c;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)((size_t)hn + body_len));
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
    free(w);
    conn_close(c);
  }
}

static void respond_text(http_conn_t *c, int code, const char *text) {
  respond(c, code, "text/plain; charset=utf-8", text, strlen(text));
}

static void serve(http_conn_t *c, dr_http_target_t target) {
  dr_metrics_t *m = c->m;
  if (target == DR_HTTP_HEALTHZ) {
    char text[1200];
    int code = dr__metrics_health(m->srv, text, sizeof(text));
    respond_text(c, code, text);
    return;
  }
  dr_buf_reset(&m->body);
  /* The 200 being written is counted in its own answer. */
  m->counts[0]++;
  int rc = dr__metrics_render(m->srv, &m->body, m->counts);
  m->counts[0]--;
  if (rc != 0) {
    respond_text(c, 503, "out of memory\n");
    return;
  }
  respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", m->body.data,
          m->body.len);
}

/* What a complete or broken head asks for; see server_internal.h. */
static void examine(http_conn_t *c) {
  dr_http_target_t target;
  int code = dr__http_classify(c->head, c->len, sizeof(c->head), &target);
  if (code == 0)
    return;
  if (code == 200) {
    serve(c, target);
    return;
  }
  char sample[96];
  dr_log_sample(c->head, c->len < 40 ? c->len : 40, sample, sizeof(sample));
  DR_DEBUG("metrics endpoint: answering %d to \"%s\"", code, sample);
  const char *text;
  switch (code) {
  case 404: text = "not found: try /metrics or /healthz\n"; break;
  case 405: text = "method not allowed: only GET\n"; break;
  case 431: text = "request head too large (over 4 KiB)\n"; break;
  default:
    text = "bad request: expected GET /metrics or GET /healthz over "
           "HTTP/1.x\n";
  }
  respond_text(c, code, text);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  http_conn_t *c = h->data;
  if (c->answered) {
    buf->base = c->m->drain;
    buf->len = sizeof(c->m->drain);
    return;
  }
  /* examine() answers once the head is full, so room is never 0 here. */
  buf->base = c->head + c->len;
  buf->len = sizeof(c->head) - c->len;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  http_conn_t *c = st->data;
  if (c->closing)
    return;
  if (nread < 0) {
    conn_close(c); /* EOF, or an error: nothing more to say */
    return;
  }
  if (c->answered || nread == 0)
    return;
  c->len += (size_t)nread;
  examine(c);
}

/* Frees a slot for a new client: the oldest connection whose answer is
 * written (it only lingers), else the oldest still sending its head (a
 * scraper sends its head at once). 1 when one was closed. */
static int evict(dr_metrics_t *m) {
  http_conn_t *victim = NULL;
  for (int pass = 0; pass < 2 && victim == NULL; pass++)
    for (http_conn_t *c = m->conns; c != NULL; c = c->next)
      if ((pass == 0 ? c->written : !c->answered) &&
          (victim == NULL || c->deadline_ms <= victim->deadline_ms))
        victim = c;
  if (victim == NULL)
    return 0;
  DR_DEBUG("metrics endpoint: %zu connections open; closing the oldest %s",
           m->n_conns,
           victim->answered ? "answered one" : "incomplete request");
  conn_close(victim);
  return 1;
}

static void on_connection(uv_stream_t *l, int status) {
  dr_metrics_t *m = l->data;
  if (status < 0) {
    DR_WARN("metrics endpoint: accept failed (%s)", uv_strerror(status));
    return;
  }
  http_conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return;
  c->m = m;
  uv_tcp_init(m->srv->loop, &c->tcp);
  c->tcp.data = c;
  m->srv->n_handles_open++;
  c->closing = 1; /* not linked yet; conn_close() links out otherwise */
  if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0 ||
      (m->n_conns >= DR_HTTP_MAX_CONNS && !evict(m))) {
    if (m->n_conns >= DR_HTTP_MAX_CONNS)
      DR_DEBUG("metrics endpoint: %zu answers being written; closing a new "
               "connection",
               m->n_conns);
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    return;
  }
  c->closing = 0;
  c->deadline_ms = dr__now_ms(m->srv) + m->srv->cfg.handshake_timeout_ms;
  c->next = m->conns;
  if (m->conns != NULL)
    m->conns->prev = c;
  m->conns = c;
  m->n_conns++;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
    conn_close(c);
}

static void on_sweep(uv_timer_t *t) {
  dr_metrics_t *m = t->data;
  uint64_t now = dr__now_ms(m->srv);
  http_conn_t *next;
  for (http_conn_t *c = m->conns; c != NULL; c = next) {
    next = c->next;
    if (now < c->deadline_ms)
      continue;
    if (c->answered)
      conn_close(c);
    else
      respond_text(c, 408, "request timeout: no complete request head\n");
  }
}

int dr__metrics_start(dr_server_t *s, const dr_server_config_t *cfg,
                      char *err, size_t errlen) {
  const char *host = cfg->metrics_host != NULL ? cfg->metrics_host : cfg->host;
  if (cfg->metrics_port > 65535) {
    snprintf(err, errlen, "metrics port %d is not a port number (0-65535)",
             (int)cfg->metrics_port);
    return DR_EBADARG;
  }
  struct sockaddr_storage addr;
  int rc = uv_ip4_addr(host, cfg->metrics_port, (struct sockaddr_in *)&addr);
  if (rc != 0)
    rc = uv_ip6_addr(host, cfg->metrics_port, (struct sockaddr_in6 *)&addr);
  if (rc != 0) {
    snprintf(err, errlen,
             "metrics endpoint: '%s' is not an IPv4 or IPv6 address to bind",
             host);
    return DR_EBADARG;
  }
  dr_metrics_t *m = calloc(1, sizeof(*m));
  if (m == NULL) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  m->srv = s;
  s->metrics = m;
  uv_tcp_init(s->loop, &m->listener);
  m->listener.data = m;
  uv_timer_init(s->loop, &m->sweep);
  m->sweep.data = m;
  s->n_handles_open += 2;
  rc = uv_tcp_bind(&m->listener, (const struct sockaddr *)&addr, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&m->listener, 128, on_connection);
  if (rc != 0) {
    /* A configuration error, not the rendezvous port being taken (which
     * a ddprun takes as another ddprun serving the job). */
    snprintf(err, errlen, "metrics endpoint: bind() to %s:%d failed (%d: %s)",
             host, (int)cfg->metrics_port, -rc, uv_strerror(rc));
    return DR_EBADARG;
  }
  int namelen = sizeof(addr);
  uv_tcp_getsockname(&m->listener, (struct sockaddr *)&addr, &namelen);
  m->port = ntohs(addr.ss_family == AF_INET
                      ? ((struct sockaddr_in *)&addr)->sin_port
                      : ((struct sockaddr_in6 *)&addr)->sin6_port);
  uv_timer_start(&m->sweep, on_sweep, 100, 100);
  return 0;
}

uint16_t dr__metrics_port(const dr_metrics_t *m) { return m->port; }

void dr__metrics_close(dr_metrics_t *m) {
  if (m->closing)
    return;
  m->closing = 1;
  while (m->conns != NULL)
    conn_close(m->conns);
  uv_close((uv_handle_t *)&m->listener, on_handle_closed);
  uv_close((uv_handle_t *)&m->sweep, on_handle_closed);
}

void dr__metrics_free(dr_metrics_t **mp) {
  dr_metrics_t *m = *mp;
  *mp = NULL;
  if (m == NULL)
    return;
  dr_buf_free(&m->body);
  free(m);
}
