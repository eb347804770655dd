/* The harness' clients: the blocking client opened on the test's server,
 * JOINs filled in, and agents driven until the server orders them (RESTART
 * or STOP). See harness.h. */
#include "harness.h"
#include "harness_internal.h"

#include <errno.h>
#include <poll.h>
#include <string.h>

int dr_h_client_open(const dr_h_server_t *s, const char *run_id,
                     const char *host, const void *secret, size_t secret_len,
                     dr_client_t **out, char *errbuf, size_t errbuf_len) {
  dr_client_opts_t o;
  memset(&o, 0, sizeof(o));
  o.host = DR_H_ADDR;
  o.port = dr_h_server_port(s);
  o.run_id = run_id != NULL ? run_id : dr_h_server_run_id(s);
  o.client_host = host;
  o.secret = secret;
  o.secret_len = secret_len;
  o.connect_timeout_ms = 5000;
  o.io_timeout_ms = 10000;
  if (errbuf != NULL && errbuf_len > 0)
    errbuf[0] = '\0';
  return dr_client_open(&o, out, errbuf, errbuf_len);
}

void dr_h_join_fill(dr_join_t *j, const char *run_id, const char *host,
                    const char *addr, uint32_t nproc, uint64_t node_rank,
                    uint32_t master_port_offer, const char *bootstrap_offer) {
  memset(j, 0, sizeof(*j));
  j->run_id = dr_str(run_id);
  j->host = dr_str(host);
  j->addr = dr_str(addr);
  j->nproc = nproc;
  j->node_rank = node_rank;
  j->master_port_offer = master_port_offer;
  j->bootstrap_offer = dr_str(bootstrap_offer);
  j->ckpt_step = DR_NONE;
}

static void copy_bytes(char *dst, size_t cap, dr_bytes_t b) {
  size_t n = b.len < cap - 1 ? b.len : cap - 1;
  memcpy(dst, b.p, n);
  dst[n] = '\0';
}

int dr_h_order_from_msg(const dr_msg_t *m, dr_h_order_t *o) {
  memset(o, 0, sizeof(*o));
  o->t_ms = dr_h_now_ms();
  if (m->type == DR_MSG_RESTART && m->n_fields == 3) {
    o->type = DR_MSG_RESTART;
    o->gen = m->f[0].u;
    o->restart_count = (uint32_t)m->f[1].u;
    copy_bytes(o->reason, sizeof(o->reason), m->f[2].b);
    return 0;
  }
  if (m->type == DR_MSG_STOP && m->n_fields == 2) {
    o->type = DR_MSG_STOP;
    o->exit_code = (int)(int64_t)m->f[0].u;
    copy_bytes(o->reason, sizeof(o->reason), m->f[1].b);
    return 0;
  }
  return DR_EUNEXPECTED;
}

/* Hands out what is queued or readable on a's client without waiting.
 * Returns 0 (with a->order filled when an order came) or an error. */
static int agent_drain(dr_h_agent_t *a) {
  for (;;) {
    dr_msg_t m;
    int rc = dr_client_recv(a->c, 0, &m);
    if (rc == -ETIMEDOUT)
      return 0;
    if (rc != 0)
      return rc;
    if (m.type == DR_MSG_HEARTBEAT) {
      a->server_hbs++;
      continue;
    }
    return dr_h_order_from_msg(&m, &a->order);
  }
}

int dr_h_agents_run(dr_h_agent_t *a, size_t n, int hb_every_ms,
                    int timeout_ms) {
  double deadline = dr_h_now_ms() + timeout_ms;
  struct pollfd p[DR_H_MAX_CLIENTS];
  if (n > DR_H_MAX_CLIENTS)
    return DR_EBADARG;
  for (;;) {
    double now = dr_h_now_ms();
    double next_hb = deadline;
    size_t n_poll = 0;
    for (size_t i = 0; i < n; i++) {
      if (a[i].silent || a[i].order.type != 0)
        continue;
      if (hb_every_ms > 0 && now - a[i].last_hb >= hb_every_ms) {
        int rc = dr_client_heartbeat(a[i].c, a[i].gen);
        if (rc != 0) {
          /* The server may have pushed an order and closed: keep it. */
          if (agent_drain(&a[i]) == 0 && a[i].order.type != 0)
            continue;
          return a[i].rc = rc;
        }
        a[i].last_hb = now;
      }
      int rc = agent_drain(&a[i]);
      if (rc != 0)
        return a[i].rc = rc;
      if (a[i].order.type != 0)
        continue;
      if (hb_every_ms > 0 && a[i].last_hb + hb_every_ms < next_hb)
        next_hb = a[i].last_hb + hb_every_ms;
      p[n_poll].fd = dr_client_fd(a[i].c);
      p[n_poll].events = POLLIN;
      p[n_poll].revents = 0;
      n_poll++;
    }
    if (n_poll == 0)
      return 0;
    if (dr__h_ms_left(deadline) == 0)
      return -ETIMEDOUT;
    int r = poll(p, n_poll, dr__h_ms_left(next_hb));
    if (r < 0 && errno != EINTR)
      return -errno;
  }
}

int dr_h_no_order(dr_client_t *c, dr_h_order_t *o) {
  const char *const keys[] = {"dr-h-probe"};
  int all = 0;
  int check_rc = dr_client_check(c, 0, keys, 1, &all);
  dr_h_agent_t a;
  memset(&a, 0, sizeof(a));
  a.c = c;
  int rc = agent_drain(&a);
  if (a.order.type != 0) {
    *o = a.order;
    return 1;
  }
  return check_rc != 0 ? check_rc : rc;
}
