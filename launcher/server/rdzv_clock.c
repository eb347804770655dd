/* The nodes' clock offsets, so that traces taken on different hosts merge
 * on one clock: the server's.
 *
 * No message of its own: the WELCOME and the server's HEARTBEATs carry its
 * clock; an agent's JOIN, RESUME and HEARTBEAT echo the last of those with
 * the time it arrived and the time they leave (wire.h, "Clocks"). With the
 * time each is read here, that is one NTP exchange per server stamp
 * (clock_offset.h); the connection keeps the last few, and the one with
 * the smallest round trip is the estimate. Each ASSIGN gives the node the
 * estimate of that moment, for its workers' environment
 * (DDPRUN_CLOCK_OFFSET_US); /metrics shows the current one. */
#include "server_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "errors.h"
#include "log.h"

/* Past this a node's clock is worth a warning: traces merged by wall
 * clock would misplace its events by more than most steps take. */
#define WARN_US 100000
/* A node warned about is said to be back once within this. */
#define BACK_US 50000

void dr__clock_on_stamp(dr_conn_t *c, const dr_clock_stamp_t *st) {
  dr_clock_sample_t x;
  if (st->echo_us == 0 ||
      dr_clock_sample(st->echo_us, st->echo_rx_us, st->tx_us, c->rx_us, &x) !=
          0)
    return; /* nothing echoed, or a stamp no measurement can be made of */
  dr_clock_filter_add(&c->clock, &x);
  dr__clock_check(c);
}

int dr__clock_estimate(const dr_conn_t *c, dr_clock_sample_t *out) {
  return dr_clock_filter_best(&c->clock, out);
}

void dr__clock_assign(const dr_conn_t *c, dr_assign_t *a) {
  dr_clock_sample_t x;
  if (c == NULL || dr__clock_estimate(c, &x) != 0) {
    a->clock_offset_us = 0;
    a->clock_uncertainty_us = DR_NONE;
    return;
  }
  a->clock_offset_us = x.offset_us;
  a->clock_uncertainty_us = dr_clock_uncertainty_us(&x);
}

/* Microseconds as milliseconds, with the digits that mean something. */
static const char *ms(uint64_t us, char *out, size_t n) {
  double v = (double)us / 1000.0;
  snprintf(out, n, v >= 100 ? "%.0f" : v >= 1 ? "%.1f" : "%.3f", v);
  return out;
}

void dr__clock_check(dr_conn_t *c) {
  const dr_node_t *n = c->rp.node;
  dr_clock_sample_t x;
  /* Only a node with its rank (assigned, or resumed) is named. */
  if (n == NULL || n->join_req != 0 || n->detached ||
      c->srv->rdzv.state != DR_JOB_RUNNING || dr__clock_estimate(c, &x) != 0)
    return;
  uint64_t off = (uint64_t)llabs(x.offset_us);
  char a[32], b[32];
  if (off > WARN_US) {
    uint64_t moved = (uint64_t)llabs(x.offset_us - c->clock_warned_us);
    if (c->clock_warned && moved < WARN_US)
      return;
    c->clock_warned = 1;
    c->clock_warned_us = x.offset_us;
    /* offset = server - node: a positive one is a node behind. */
    DR_WARN("node %u ('%s') clock is %s ms %s the server's (\u00b1%s ms); "
            "traces will be aligned by it; check NTP on that host",
            n->node_rank, n->host, ms(off, a, sizeof(a)),
            x.offset_us > 0 ? "behind" : "ahead of",
            ms(dr_clock_uncertainty_us(&x), b, sizeof(b)));
    return;
  }
  if (c->clock_warned && off < BACK_US) {
    c->clock_warned = 0;
    DR_INFO("node %u ('%s') clock is back within %d ms of the server's "
            "(%s ms %s)", n->node_rank, n->host, BACK_US / 1000,
            ms(off, a, sizeof(a)), x.offset_us > 0 ? "behind" : "ahead");
  }
}
