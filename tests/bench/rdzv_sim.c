/* The simulated agents of rdzv_scale; see rdzv_sim.h. */
#include "rdzv_sim.h"

#include "bench_server.h"
#include "errors.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_REQ 1u
#define JOIN_REQ 2u
#define MASTER_PORT_OFFER 29500u
#define BACKOFF_MIN_NS 1000000
#define BACKOFF_MAX_NS 100000000

typedef enum {
  ST_IDLE,
  ST_BACKOFF,
  ST_CONNECTING,
  ST_HELLO, /* HELLO sent, WELCOME awaited */
  ST_JOIN,  /* JOIN sent, ASSIGN awaited */
  ST_DONE
} conn_state_t;

typedef struct {
  int fd;
  uint8_t state; /* conn_state_t */
  uint8_t out_armed;
  uint16_t attempts;
  int64_t retry_at_ns;
  uint8_t *pend; /* bytes a write() did not take */
  uint32_t pend_off, pend_len;
  dr_buf_t in;
} conn_t;

typedef struct {
  const rdzv_sim_opts_t *o;
  struct sockaddr_in addr;
  uint32_t lo, n; /* agents lo .. lo+n-1 */
  conn_t *c;
  uint32_t *node_rank;
  uint32_t *backoff; /* local indices waiting to retry connect() */
  uint32_t n_backoff;
  int ep;
  uint32_t next;      /* next local index to start */
  uint32_t in_window; /* started, not yet welcomed */
  dr_decoder_t dec_pre, dec_post;
  dr_buf_t out;
  int64_t deadline_ns;
  rdzv_sim_report_t r;
} sim_t;

static const char *state_name(uint8_t st) {
  static const char *names[] = {"idle",    "backoff", "connecting",
                                "welcome", "assign",  "done"};
  return st <= ST_DONE ? names[st] : "?";
}

static void sim_fail(sim_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void sim_fail(sim_t *s, const char *fmt, ...) {
  if (s->r.status != RDZV_SIM_OK)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->r.msg, sizeof(s->r.msg), fmt, ap);
  va_end(ap);
  s->r.status = RDZV_SIM_ERROR;
}

static int retryable_connect(int err) {
  return err == ECONNREFUSED || err == EAGAIN || err == EADDRNOTAVAIL ||
         err == ETIMEDOUT;
}

static int conn_watch(sim_t *s, uint32_t i, uint32_t events, int op) {
  struct epoll_event ev;
  ev.events = events;
  ev.data.u32 = i;
  if (epoll_ctl(s->ep, op, s->c[i].fd, &ev) != 0) {
    sim_fail(s, "epoll_ctl() failed for agent %u (%d: %s)", s->lo + i, errno,
             strerror(errno));
    return -1;
  }
  return 0;
}

static void conn_backoff(sim_t *s, uint32_t i) {
  conn_t *c = &s->c[i];
  int64_t delay = BACKOFF_MIN_NS;
  for (uint16_t k = 0; k < c->attempts && delay < BACKOFF_MAX_NS; k++)
    delay *= 2;
  if (delay > BACKOFF_MAX_NS)
    delay = BACKOFF_MAX_NS;
  if (c->fd >= 0)
    close(c->fd); /* also leaves the epoll set */
  c->fd = -1;
  c->attempts++;
  c->state = ST_BACKOFF;
  c->retry_at_ns = bench_now_ns() + delay;
  s->backoff[s->n_backoff++] = i;
}

/* Writes p[0..len) until done or the socket is full: how many bytes went,
 * or -1 after sim_fail. */
static ssize_t conn_write(sim_t *s, uint32_t i, const uint8_t *p, size_t len) {
  conn_t *c = &s->c[i];
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(c->fd, p + done, len - done);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    sim_fail(s, "write() to the server failed for agent %u in state %s "
                "(%d: %s)",
             s->lo + i, state_name(c->state), errno, strerror(errno));
    return -1;
  }
  return (ssize_t)done;
}

/* Writes what it can; keeps the rest and asks epoll for writability. */
static void conn_send(sim_t *s, uint32_t i, const uint8_t *p, size_t len) {
  conn_t *c = &s->c[i];
  size_t done = 0;
  if (c->pend_len == 0) {
    ssize_t n = conn_write(s, i, p, len);
    if (n < 0 || (size_t)n == len)
      return;
    done = (size_t)n;
  }
  size_t rest = len - done;
  uint8_t *np = realloc(c->pend, c->pend_len + rest);
  if (np == NULL) {
    sim_fail(s, "out of memory buffering output for agent %u", s->lo + i);
    return;
  }
  memcpy(np + c->pend_len, p + done, rest);
  c->pend = np;
  c->pend_len += (uint32_t)rest;
  if (!c->out_armed) {
    c->out_armed = 1;
    conn_watch(s, i, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
  }
}

static void conn_flush(sim_t *s, uint32_t i) {
  conn_t *c = &s->c[i];
  ssize_t n =
      conn_write(s, i, c->pend + c->pend_off, c->pend_len - c->pend_off);
  if (n < 0)
    return;
  c->pend_off += (uint32_t)n;
  if (c->pend_off < c->pend_len)
    return;
  free(c->pend);
  c->pend = NULL;
  c->pend_off = c->pend_len = 0;
  c->out_armed = 0;
  conn_watch(s, i, EPOLLIN, EPOLL_CTL_MOD);
}

static void conn_connected(sim_t *s, uint32_t i) {
  conn_t *c = &s->c[i];
  char host[32];
  int one = 1;

  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  s->r.n_connected++;
  c->state = ST_HELLO;
  c->out_armed = 0;
  if (conn_watch(s, i, EPOLLIN, EPOLL_CTL_MOD) != 0)
    return;
  snprintf(host, sizeof(host), "sim%06u", s->lo + i);
  dr_buf_reset(&s->out);
  int rc = dr_enc_hello(&s->out, HELLO_REQ, dr_str("bench"), dr_str(host));
  if (rc != 0) {
    sim_fail(s, "encoding HELLO failed (%s)", dr_strerror(rc));
    return;
  }
  conn_send(s, i, s->out.data, s->out.len);
}

static void conn_start(sim_t *s, uint32_t i) {
  conn_t *c = &s->c[i];
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    sim_fail(s, "socket() failed for agent %u (%d: %s)", s->lo + i, errno,
             strerror(errno));
    return;
  }
  c->fd = fd;
  if (s->r.first_connect_ns == 0)
    s->r.first_connect_ns = bench_now_ns();
  if (connect(fd, (const struct sockaddr *)&s->addr, sizeof(s->addr)) == 0) {
    c->state = ST_CONNECTING;
    if (conn_watch(s, i, EPOLLIN, EPOLL_CTL_ADD) == 0)
      conn_connected(s, i);
    return;
  }
  if (errno == EINPROGRESS) {
    c->state = ST_CONNECTING;
    conn_watch(s, i, EPOLLOUT, EPOLL_CTL_ADD);
    return;
  }
  if (retryable_connect(errno)) {
    conn_backoff(s, i);
    return;
  }
  sim_fail(s, "connect() to 127.0.0.1:%u failed for agent %u (%d: %s)",
           (unsigned)ntohs(s->addr.sin_port), s->lo + i, errno,
           strerror(errno));
}

static void conn_on_connect_done(sim_t *s, uint32_t i) {
  conn_t *c = &s->c[i];
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    err = errno;
  if (err == 0) {
    conn_connected(s, i);
    return;
  }
  if (retryable_connect(err)) {
    conn_backoff(s, i);
    return;
  }
  sim_fail(s, "connect() to 127.0.0.1:%u failed for agent %u (%d: %s)",
           (unsigned)ntohs(s->addr.sin_port), s->lo + i, err, strerror(err));
}

/* An environment summary of n bytes, as a node of 8 GPUs writes one:
 * lines of GPUs, bindings and variables, cut at n. */
static dr_bytes_t env_text(uint32_t n) {
  static uint8_t text[DR_ENV_SUMMARY_MAX];
  static uint32_t made;
  if (n > sizeof(text))
    n = sizeof(text);
  if (made != n) {
    uint32_t k = 0;
    for (unsigned line = 0; k < n; line++) {
      char l[160];
      int w = snprintf(l, sizeof(l),
                       "env: GPU %u: NVIDIA H100 80GB HBM3, 81559 MiB, "
                       "0000:%02x:00.0, NUMA %u; local rank %u: cpus "
                       "%u-%u (NUMA %u), gpu %u\n",
                       line % 8, 0x18 + line % 8, line % 8 / 4, line % 8,
                       line % 8 * 12, line % 8 * 12 + 11, line % 8 / 4,
                       line % 8);
      for (int c = 0; c < w && k < n; c++)
        text[k++] = (uint8_t)l[c];
    }
    made = n;
  }
  dr_bytes_t b = {text, n};
  return b;
}

static void on_welcome(sim_t *s, uint32_t i, const dr_msg_t *m) {
  conn_t *c = &s->c[i];
  char host[32];
  if (m->f[0].u != 0) {
    sim_fail(s, "the server requires a shared secret (agent %u); run the "
                "benchmark without one",
             s->lo + i);
    return;
  }
  s->r.n_welcomed++;
  s->in_window--;
  c->state = ST_JOIN;

  snprintf(host, sizeof(host), "sim%06u", s->lo + i);
  dr_join_t j;
  memset(&j, 0, sizeof(j));
  j.run_id = dr_str("bench");
  j.host = dr_str(host);
  j.addr = dr_str("127.0.0.1");
  j.nproc = s->o->nproc;
  j.node_rank = DR_NONE;
  j.master_port_offer = MASTER_PORT_OFFER;
  j.bootstrap_offer = dr_str("rdzv_scale-bootstrap");
  j.ckpt_step = DR_NONE;
  j.env = env_text(s->o->env_bytes);
  dr_buf_reset(&s->out);
  int rc = dr_enc_join(&s->out, JOIN_REQ, &j);
  if (rc != 0) {
    sim_fail(s, "encoding JOIN failed (%s)", dr_strerror(rc));
    return;
  }
  conn_send(s, i, s->out.data, s->out.len);
}

static void on_assign(sim_t *s, uint32_t i, const dr_msg_t *m) {
  conn_t *c = &s->c[i];
  dr_assign_t a;
  uint32_t agent = s->lo + i;
  int rc = dr_msg_assign(m, &a);
  if (rc != 0) {
    sim_fail(s, "ASSIGN for agent %u does not decode (%s)", agent,
             dr_strerror(rc));
    return;
  }
  uint32_t n = s->o->n_agents, np = s->o->nproc;
  if (a.nnodes != n || a.world_size != n * np || a.node_rank >= n ||
      a.first_rank != a.node_rank * np) {
    sim_fail(s,
             "bad ASSIGN for agent %u: node_rank=%u nnodes=%u world_size=%u "
             "first_rank=%u (want nnodes=%u world_size=%u first_rank="
             "node_rank*%u)",
             agent, a.node_rank, a.nnodes, a.world_size, a.first_rank, n,
             n * np, np);
    return;
  }
  if (s->r.n_assigned > 0 && a.gen != s->r.gen) {
    sim_fail(s, "agent %u was assigned generation %llu, others %llu", agent,
             (unsigned long long)a.gen, (unsigned long long)s->r.gen);
    return;
  }
  s->r.gen = a.gen;
  s->node_rank[i] = a.node_rank;
  s->r.n_assigned++;
  s->r.last_assign_ns = bench_now_ns();
  c->state = ST_DONE;
  /* The connection stays open until the parent has every report: a node
   * that leaves could make the server open a new round. */
  epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
  dr_buf_free(&c->in);
}

static void on_message(sim_t *s, uint32_t i, const dr_msg_t *m) {
  conn_t *c = &s->c[i];
  uint32_t agent = s->lo + i;
  if (m->type == DR_MSG_ERROR) {
    sim_fail(s, "server refused agent %u in state %s: %.*s (%s)", agent,
             state_name(c->state), (int)m->f[1].b.len,
             (const char *)m->f[1].b.p,
             dr_strerror(m->f[0].u <= INT32_MAX ? -(int)m->f[0].u : 0));
    return;
  }
  if (c->state == ST_HELLO && m->type == DR_MSG_WELCOME) {
    on_welcome(s, i, m);
    return;
  }
  if (c->state == ST_JOIN && m->type == DR_MSG_ASSIGN &&
      m->req_id == JOIN_REQ) {
    on_assign(s, i, m);
    return;
  }
  if (m->req_id == 0 && c->state == ST_JOIN)
    return; /* a push (HEARTBEAT) while the round assembles */
  sim_fail(s, "unexpected %s (request id %u) for agent %u in state %s",
           dr_msg_name(m->type), m->req_id, agent, state_name(c->state));
}

static void conn_read(sim_t *s, uint32_t i) {
  conn_t *c = &s->c[i];
  if (dr_buf_reserve(&c->in, 512) != 0) {
    sim_fail(s, "out of memory reading for agent %u", s->lo + i);
    return;
  }
  ssize_t n = read(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR)
      return;
    sim_fail(s, "read() from the server failed for agent %u in state %s "
                "(%d: %s)",
             s->lo + i, state_name(c->state), errno, strerror(errno));
    return;
  }
  if (n == 0) {
    sim_fail(s, "the server closed the connection of agent %u in state %s",
             s->lo + i, state_name(c->state));
    return;
  }
  c->in.len += (size_t)n;

  size_t off = 0;
  while (c->state != ST_DONE && s->r.status == RDZV_SIM_OK && off < c->in.len) {
    dr_msg_t m;
    size_t consumed = 0, need = 0;
    int err = 0;
    const dr_decoder_t *d = c->state == ST_HELLO ? &s->dec_pre : &s->dec_post;
    dr_decode_status_t st =
        dr_decode(d, c->in.data + off, c->in.len - off, &m, &consumed, &need,
                  &err);
    if (st == DR_DECODE_NEED_MORE) {
      if (dr_buf_reserve(&c->in, need) != 0)
        sim_fail(s, "out of memory reading for agent %u", s->lo + i);
      break;
    }
    if (st == DR_DECODE_ERROR) {
      sim_fail(s, "bad frame from the server for agent %u in state %s (%s)",
               s->lo + i, state_name(c->state), dr_strerror(err));
      return;
    }
    on_message(s, i, &m);
    off += consumed;
  }
  if (c->state != ST_DONE && off > 0) {
    memmove(c->in.data, c->in.data + off, c->in.len - off);
    c->in.len -= off;
  }
}

static void sim_on_event(sim_t *s, uint32_t i, uint32_t events) {
  conn_t *c = &s->c[i];
  if (c->state == ST_IDLE || c->state == ST_BACKOFF || c->state == ST_DONE)
    return; /* left the epoll set earlier in this batch */
  if (c->state == ST_CONNECTING) {
    conn_on_connect_done(s, i);
    return;
  }
  if ((events & EPOLLOUT) && c->pend_len > 0)
    conn_flush(s, i);
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
    conn_read(s, i);
}

/* Starts due retries and new connections while the window has room;
 * returns the earliest pending retry time, or INT64_MAX. */
static int64_t sim_start_more(sim_t *s, int64_t now) {
  int64_t next_retry = INT64_MAX;
  for (uint32_t k = 0; k < s->n_backoff && s->r.status == RDZV_SIM_OK;) {
    uint32_t i = s->backoff[k];
    if (s->c[i].retry_at_ns <= now) {
      s->backoff[k] = s->backoff[--s->n_backoff];
      conn_start(s, i);
      continue;
    }
    if (s->c[i].retry_at_ns < next_retry)
      next_retry = s->c[i].retry_at_ns;
    k++;
  }
  while (s->in_window < s->o->window && s->next < s->n &&
         s->r.status == RDZV_SIM_OK) {
    s->in_window++;
    s->r.n_started++;
    conn_start(s, s->next++);
  }
  return next_retry;
}

static void sim_run(sim_t *s) {
  struct epoll_event evs[512];
  for (;;) {
    if (s->r.status != RDZV_SIM_OK || s->r.n_assigned == s->n)
      return;
    int64_t now = bench_now_ns();
    if (now >= s->deadline_ns) {
      s->r.status = RDZV_SIM_TIMEOUT;
      snprintf(s->r.msg, sizeof(s->r.msg), "deadline reached");
      return;
    }
    int64_t wake = sim_start_more(s, now);
    if (s->r.status != RDZV_SIM_OK)
      return;
    if (wake > s->deadline_ns)
      wake = s->deadline_ns;
    int64_t wait_ns = wake - now;
    int tmo = wait_ns <= 0 ? 0 : (int)((wait_ns + 999999) / 1000000);
    if (tmo > 1000)
      tmo = 1000;
    int n = epoll_wait(s->ep, evs, (int)(sizeof(evs) / sizeof(evs[0])), tmo);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      sim_fail(s, "epoll_wait() failed (%d: %s)", errno, strerror(errno));
      return;
    }
    for (int k = 0; k < n && s->r.status == RDZV_SIM_OK; k++)
      sim_on_event(s, evs[k].data.u32, evs[k].events);
  }
}

static int write_all(int fd, const void *p, size_t len) {
  const uint8_t *b = p;
  while (len > 0) {
    ssize_t n = write(fd, b, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    b += n;
    len -= (size_t)n;
  }
  return 0;
}

int rdzv_sim_main(const rdzv_sim_opts_t *o, uint16_t port, uint32_t lo,
                  uint32_t n, int64_t deadline_ns, int go_fd, int quit_fd,
                  int rep_fd) {
  sim_t s;
  char buf[1];
  ssize_t got;

  memset(&s, 0, sizeof(s));
  s.o = o;
  s.lo = lo;
  s.n = n;
  s.deadline_ns = deadline_ns;
  s.r.n_agents = n;
  s.addr.sin_family = AF_INET;
  s.addr.sin_port = htons(port);
  s.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  dr_decoder_init(&s.dec_pre, NULL);
  dr_decoder_init(&s.dec_post, NULL);
  s.dec_post.authed = 1;
  dr_buf_init(&s.out);

  int rc = bench_raise_nofile(NULL);
  if (rc != 0)
    sim_fail(&s, "raising RLIMIT_NOFILE failed (%s)", dr_strerror(rc));
  s.c = calloc(n, sizeof(*s.c));
  s.node_rank = malloc((size_t)n * sizeof(*s.node_rank));
  s.backoff = malloc((size_t)n * sizeof(*s.backoff));
  s.ep = epoll_create1(EPOLL_CLOEXEC);
  if (s.c == NULL || s.node_rank == NULL || s.backoff == NULL)
    sim_fail(&s, "out of memory for %u agents", n);
  else if (s.ep < 0)
    sim_fail(&s, "epoll_create1() failed (%d: %s)", errno, strerror(errno));
  if (s.node_rank != NULL)
    for (uint32_t i = 0; i < n; i++)
      s.node_rank[i] = RDZV_SIM_NO_RANK;
  if (s.c != NULL)
    for (uint32_t i = 0; i < n; i++)
      s.c[i].fd = -1;

  do
    got = read(go_fd, buf, sizeof(buf));
  while (got < 0 && errno == EINTR);
  close(go_fd);

  if (s.r.status == RDZV_SIM_OK)
    sim_run(&s);

  int wrc = write_all(rep_fd, &s.r, sizeof(s.r));
  if (wrc == 0 && s.node_rank != NULL)
    wrc = write_all(rep_fd, s.node_rank, (size_t)n * sizeof(*s.node_rank));
  close(rep_fd);

  do
    got = read(quit_fd, buf, sizeof(buf));
  while (got < 0 && errno == EINTR);
  /* Exit closes every socket; nothing else is worth freeing. */
  return wrc == 0 && s.r.status == RDZV_SIM_OK ? 0 : 1;
}
