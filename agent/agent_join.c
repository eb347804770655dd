/* Joining a round: JOIN, with a free port held for this node's
 * MASTER_PORT offer; the join timeout, whose message says what was
 * missing; and the forming round's status. While a round forms, the
 * server says who is in and what it still needs (ROUND_STATUS); the agent
 * says so too, on every change and every 10 s, and its join timeout names
 * them. */
#include "agent_internal.h"

#include "log.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "events.h"
#include "exit_codes.h"

/* An unchanged round status is said again after this long. */
#define ROUND_SAY_EVERY_MS 10000u

/* Holds a free port for MASTER_PORT: bound (SO_REUSEADDR), not listening,
 * so no other job gets it, while rank 0 can still bind it once released. */
static int reserve_port(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  socklen_t len = sizeof(sa);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

void dr__agent_release_port(dr_agent_t *ag) {
  if (ag->port_fd >= 0)
    close(ag->port_fd);
  ag->port_fd = -1;
}

void dr__agent_send_join(dr_agent_t *ag) {
  ag->state = DR_AG_JOINING;
  ag->round_said[0] = '\0'; /* of the round before, if any */
  ag->round_said_ms = 0;
  if (ag->cfg->master_port == 0 && ag->port_fd < 0) {
    int fd = reserve_port(&ag->port_offer);
    if (fd >= 0)
      ag->port_fd = fd;
  }
  uv_timer_start(&ag->join_timer, dr__agent_on_join_timeout,
                 ag->o->join_timeout_ms, 0);
  if (ag->arz == NULL || !ag->arz_ready)
    return; /* sent once the connection is back (on_ready) */
  dr_join_t j;
  memset(&j, 0, sizeof(j));
  j.run_id = dr_str(ag->o->rdzv_id);
  j.host = dr_str(ag->cfg->hostname);
  j.addr = dr_str(ag->o->local_addr);
  j.nproc = ag->nproc;
  j.node_rank = ag->o->node_rank >= 0 ? (uint64_t)ag->o->node_rank : DR_NONE;
  j.master_port_offer =
      ag->cfg->master_port != 0 ? ag->cfg->master_port : ag->port_offer;
  dr__ckpt_join(ag, &j); /* 0 and DR_NONE without --ckpt-dir */
  j.standby_port = ag->took_over ? 0 : ag->cfg->standby_port;
  j.term = ag->term_seen;
  j.hosts_server = ag->cfg->server_in_process || ag->took_over;
  dr__agent_env_join(ag, &j);
  dr_arz_join(ag->arz, &j);
  dr_events_emit(ag->events, "join", ",\"nproc\":%u", ag->nproc);
}

void dr__agent_on_join_timeout(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->state != DR_AG_JOINING)
    return;
  int err = ag->arz != NULL ? dr_arz_last_error(ag->arz) : 0;
  if (ag->arz != NULL && dr_arz_resolve_error(ag->arz) != NULL)
    DR_SAY(DR_LOG_ERROR, "cannot resolve the rendezvous endpoint '%s' "
            "(%s); gave up after join_timeout=%.3g s; check the host name of "
            "--rdzv-endpoint", ag->srv_host,
            dr_arz_resolve_error(ag->arz),
            ag->o->join_timeout_ms / 1000.0);
  else if (ag->reconnecting && ag->last_loss[0] != '\0')
    DR_SAY(DR_LOG_ERROR, "gave up joining %s:%u after join_timeout=%.3g "
            "s; %u more attempts ended as the one said above",
            ag->srv_host, ag->srv_port,
            ag->o->join_timeout_ms / 1000.0, ag->n_same_loss);
  else if (ag->arz != NULL && !dr_arz_connected(ag->arz))
    DR_SAY(DR_LOG_ERROR, "connect() to %s:%u failed while joining (%d: "
            "%s); gave up after join_timeout=%.3g s", ag->srv_host,
            ag->srv_port, -err, err != 0 ? uv_strerror(err) : "no "
            "answer", ag->o->join_timeout_ms / 1000.0);
  else if (ag->round_said[0] != '\0')
    DR_SAY(DR_LOG_ERROR, "the rendezvous at %s:%u did not complete within "
            "join_timeout=%.3g s: %s; are the other nodes started, with the "
            "same --rdzv-id, --nnodes and --rdzv-endpoint?",
            ag->srv_host, ag->srv_port,
            ag->o->join_timeout_ms / 1000.0, ag->round_said);
  else
    DR_SAY(DR_LOG_ERROR, "the rendezvous at %s:%u did not complete within "
            "join_timeout=%.3g s; are the other nodes started with the same "
            "--rdzv-id and --nnodes?", ag->srv_host,
            ag->srv_port, ag->o->join_timeout_ms / 1000.0);
  dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
  dr__agent_finish(ag);
}

/* ---- the round this node waits in --------------------------------------- */

/* Appends to out[*len..n), keeping it NUL-terminated when it is full. */
static void add(char *out, size_t n, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(char *out, size_t n, size_t *len, const char *fmt, ...) {
  if (*len >= n)
    return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(out + *len, n - *len, fmt, ap);
  va_end(ap);
  if (k > 0)
    *len = *len + (size_t)k < n ? *len + (size_t)k : n - 1;
}

/* What the round has and needs, without its times, so that an unchanged
 * round reads the same: "2 of 3 nodes joined (node-a, node-b); 1 more
 * needed", or with static ranks "...; missing node rank 2". */
static void round_text(const dr_round_status_t *st, char *out, size_t n) {
  size_t len = 0;
  out[0] = '\0';
  if (st->min_nodes == st->max_nodes)
    add(out, n, &len, "%u of %u node%s joined", st->joined, st->max_nodes,
        st->max_nodes == 1 ? "" : "s");
  else
    add(out, n, &len, "%u of %u:%u nodes joined", st->joined, st->min_nodes,
        st->max_nodes);
  uint32_t pos = 0, listed = 0;
  dr_node_rec_t x;
  while (dr_node_rec_next(&st->nodes, &pos, &x)) {
    add(out, n, &len, "%s%.*s", listed == 0 ? " (" : ", ", (int)x.host.len,
        (const char *)x.host.p);
    if (x.node_rank != DR_NO_RANK)
      add(out, n, &len, " as node %u", x.node_rank);
    listed++;
  }
  if (listed > 0 && listed < st->joined)
    add(out, n, &len, " and %u more", st->joined - listed);
  if (listed > 0)
    add(out, n, &len, ")");
  if (st->n_missing > 0) {
    add(out, n, &len, "; missing node rank%s", st->n_missing == 1 ? "" : "s");
    uint32_t k, i = 0;
    pos = 0;
    while (dr_rank_u32_next(&st->missing, &pos, &k))
      add(out, n, &len, "%s %u", i++ == 0 ? "" : ",", k);
    if (i < st->n_missing)
      add(out, n, &len, " and %u more", st->n_missing - i);
  } else if (st->needed > 0) {
    add(out, n, &len, "; %u more needed", st->needed);
  } else if (st->last_call_ms != DR_NONE) {
    add(out, n, &len, "; it completes at the last call unless more join");
  }
}

/* Said when it changes, and every ROUND_SAY_EVERY_MS while it does not. */
void dr__agent_on_round_status(dr_agent_t *ag, const dr_round_status_t *st) {
  if (ag->state != DR_AG_JOINING)
    return;
  char text[sizeof(ag->round_said)];
  round_text(st, text, sizeof(text));
  uint64_t now = uv_now(&ag->loop);
  if (strcmp(text, ag->round_said) == 0 && ag->round_said_ms != 0 &&
      now - ag->round_said_ms < ROUND_SAY_EVERY_MS)
    return;
  snprintf(ag->round_said, sizeof(ag->round_said), "%s", text);
  ag->round_said_ms = now;
  char when[64] = "";
  if (st->needed == 0 && st->last_call_ms != DR_NONE)
    snprintf(when, sizeof(when), "; last call in %.1f s",
             st->last_call_ms / 1000.0);
  DR_SAY(DR_LOG_INFO, "waiting %.1f s for the rendezvous at %s:%u (round "
          "%llu): %s%s", st->waited_ms / 1000.0, ag->srv_host,
          ag->srv_port, (unsigned long long)st->gen, text, when);
}
