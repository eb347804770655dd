/* The agent's session with the rendezvous server: join, heartbeats, the
 * server's orders, and what happens when the server goes away.
 *
 * The server is the control plane only. When its connection breaks (the
 * server crashed or was restarted) the workers keep running: the agent
 * connects again, with backoff, and sends RESUME for the generation its
 * workers run; the server takes it back (OK) or tells it to restart. The
 * reports the server may have lost with its connection (failures, this
 * node's success) are sent again once it is back. A server that is only
 * silent (stopped, a paused VM) keeps its connection: the agent waits for
 * it, and the heartbeats it queued meanwhile tell the server on waking that
 * nothing was lost. The reconnection is bounded by join_timeout only while
 * no workers run (joining, or waiting for the server's order). */
#include "agent_internal.h"

#include "log.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"
#include "events.h"
#include "exit_codes.h"

void dr__agent_send(dr_agent_t *ag, dr_buf_t *b) {
  if (ag->arz != NULL && ag->arz_ready)
    dr_arz_send(ag->arz, b);
  dr_buf_free(b);
}

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

static void on_join_timeout(uv_timer_t *t);

void dr__agent_send_join(dr_agent_t *ag) {
  ag->state = DR_AG_JOINING;
  if (ag->cfg->master_port == 0 && ag->port_fd < 0) {
    int fd = reserve_port(&ag->port_offer);
    if (fd >= 0)
      ag->port_fd = fd;
  }
  uv_timer_start(&ag->join_timer, on_join_timeout, ag->o->join_timeout_ms, 0);
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
  dr_arz_join(ag->arz, &j);
  dr_events_emit(ag->events, "join", ",\"nproc\":%u", ag->nproc);
}

static void on_join_timeout(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->state != DR_AG_JOINING)
    return;
  int err = ag->arz != NULL ? dr_arz_last_error(ag->arz) : 0;
  if (ag->arz != NULL && dr_arz_resolve_error(ag->arz) != NULL)
    DR_SAY(DR_LOG_ERROR, "cannot resolve the rendezvous endpoint '%s' "
            "(%s); gave up after join_timeout=%.3g s; check the host name of "
            "--rdzv-endpoint", ag->cfg->server_host,
            dr_arz_resolve_error(ag->arz),
            ag->o->join_timeout_ms / 1000.0);
  else if (ag->reconnecting && ag->last_loss[0] != '\0')
    DR_SAY(DR_LOG_ERROR, "gave up joining %s:%u after join_timeout=%.3g "
            "s; %u more attempts ended as the one said above",
            ag->cfg->server_host, ag->cfg->server_port,
            ag->o->join_timeout_ms / 1000.0, ag->n_same_loss);
  else if (ag->arz != NULL && !dr_arz_connected(ag->arz))
    DR_SAY(DR_LOG_ERROR, "connect() to %s:%u failed while joining (%d: "
            "%s); gave up after join_timeout=%.3g s", ag->cfg->server_host,
            ag->cfg->server_port, -err, err != 0 ? uv_strerror(err) : "no "
            "answer", ag->o->join_timeout_ms / 1000.0);
  else
    DR_SAY(DR_LOG_ERROR, "the rendezvous at %s:%u did not complete within "
            "join_timeout=%.3g s; are the other nodes started with the same "
            "--rdzv-id and --nnodes?", ag->cfg->server_host,
            ag->cfg->server_port, ag->o->join_timeout_ms / 1000.0);
  dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
  dr__agent_finish(ag);
}

/* ---- resuming after a reconnection -------------------------------------- */

static void send_resume(dr_agent_t *ag) {
  dr_resume_t q;
  memset(&q, 0, sizeof(q));
  q.run_id = dr_str(ag->o->rdzv_id);
  q.host = dr_str(ag->cfg->hostname);
  q.gen = ag->asg.gen;
  q.node_rank = ag->asg.node_rank;
  q.nnodes = ag->asg.nnodes;
  q.world_size = ag->asg.world_size;
  q.nproc = ag->nproc;
  q.restart_count = ag->asg.restart_count;
  if (dr_arz_resume(ag->arz, &q) == 0)
    ag->resume_pending = 1;
}

/* The server took this node back: what it may have missed follows. */
static void on_resumed(dr_agent_t *ag) {
  ag->resume_pending = 0;
  double away = (uv_now(&ag->loop) - ag->lost_ms) / 1000.0;
  DR_SAY(DR_LOG_INFO, "back in generation %llu as node %u after %.1f s "
          "without the rendezvous server; the workers kept running",
          (unsigned long long)ag->asg.gen, ag->asg.node_rank, away);
  dr_events_emit(ag->events, "resumed", ",\"gen\":%llu,\"away_ms\":%llu",
                 (unsigned long long)ag->asg.gen,
                 (unsigned long long)(uv_now(&ag->loop) - ag->lost_ms));
  for (size_t i = 0; i < ag->n_fails; i++)
    dr__agent_report_failure(ag, &ag->fails[i]);
  if (ag->state == DR_AG_WAITING && ag->n_fails == 0 && ag->n_alive == 0) {
    dr_buf_t b;
    dr_buf_init(&b);
    dr_enc_success(&b, 0, ag->asg.gen);
    dr__agent_send(ag, &b);
  }
}

/* ---- the server's messages --------------------------------------------- */

static void on_restart_order(dr_agent_t *ag, uint64_t gen,
                             unsigned long long count, dr_bytes_t reason) {
  ag->resume_pending = 0;
  DR_SAY(DR_LOG_WARN, "restarting the workers (generation %llu, "
          "restart %llu of %u): %.*s", (unsigned long long)gen, count,
          ag->o->max_restarts, (int)reason.len, (const char *)reason.p);
  snprintf(ag->server_reason, sizeof(ag->server_reason), "%.*s",
           (int)reason.len, (const char *)reason.p);
  char esc[2500];
  dr_events_emit(ag->events, "restart",
                 ",\"gen\":%llu,\"restart_count\":%llu,\"reason\":\"%s\"",
                 (unsigned long long)gen, count,
                 dr_json_escape(ag->server_reason, esc, sizeof(esc)));
  dr__agent_stop_local(ag, SIGTERM, DR_NEXT_REJOIN);
}

static void on_refused(dr_agent_t *ag, const dr_sess_event_t *ev) {
  if (ev->to == DR_MSG_RESUME && ev->code == DR_ESTALE) {
    /* The server cannot take this node back: a restart, as after a
     * failure, but not one from the budget. */
    on_restart_order(ag, ag->asg.gen + 1, ag->asg.restart_count, ev->text);
    return;
  }
  if (ag->state == DR_AG_JOINING || ag->resume_pending ||
      ev->code != DR_ESTOPPED)
    DR_SAY(DR_LOG_ERROR, "the rendezvous server refused this node: %.*s",
            (int)ev->text.len, (const char *)ev->text.p);
  dr__agent_end(ag, DR_END_LOCAL, ev->code == DR_ESTOPPED ? 1 : DR_EXIT_CONFIG);
  dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
}

static void on_event(void *arg, const dr_sess_event_t *ev) {
  dr_agent_t *ag = arg;
  if (ag->silent_warned) {
    DR_SAY(DR_LOG_INFO, "the rendezvous server %s:%u answers again",
            ag->cfg->server_host, ag->cfg->server_port);
    ag->silent_warned = 0;
  }
  switch (ev->type) {
  case DR_SESS_ASSIGNED: {
    dr_assignment_t a = ev->asg;
    if (ag->state != DR_AG_JOINING) {
      dr_assignment_free(&a);
      break;
    }
    uv_timer_stop(&ag->join_timer);
    if (a.clock_uncertainty_us != DR_NONE)
      DR_SAY(DR_LOG_DEBUG, "generation %llu: the rendezvous server's clock "
              "minus this host's is %+.3f ms (\u00b1%.3f ms)",
              (unsigned long long)a.gen, a.clock_offset_us / 1000.0,
              a.clock_uncertainty_us / 1000.0);
    dr__agent_on_assign(ag, &a);
    break;
  }
  case DR_SESS_RESUMED:
    if (ag->resume_pending)
      on_resumed(ag);
    break;
  case DR_SESS_RESTART:
    on_restart_order(ag, ev->gen, ev->restart_count, ev->text);
    break;
  case DR_SESS_STOP:
    dr__agent_end(ag, DR_END_SERVER, ev->exit_code);
    snprintf(ag->server_reason, sizeof(ag->server_reason), "%.*s",
             (int)ev->text.len, (const char *)ev->text.p);
    {
      char esc[2500];
      dr_events_emit(ag->events, "stop", ",\"exit_code\":%d,\"reason\":\"%s\"",
                     ev->exit_code,
                     dr_json_escape(ag->server_reason, esc, sizeof(esc)));
    }
    dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
    break;
  case DR_SESS_REFUSED:
    on_refused(ag, ev);
    break;
  default: /* HEARTBEAT: hearing it is enough */
    break;
  }
}

/* ---- losing the server and finding it again ---------------------------- */

static void reconnect(dr_agent_t *ag);
static void on_retry_reconnect(uv_timer_t *t) { reconnect(t->data); }

/* The reconnection gives up at its deadline only while no workers run:
 * running workers lose nothing by the wait. */
static int reconnect_expired(dr_agent_t *ag) {
  if (ag->state == DR_AG_RUNNING || ag->state == DR_AG_STOPPING)
    return 0;
  uint64_t from = ag->lost_ms > ag->workers_done_ms ? ag->lost_ms
                                                    : ag->workers_done_ms;
  if (!ag->have_asg)
    from = ag->start_ms; /* the first join: join_timeout from the start */
  return uv_now(&ag->loop) >= from + ag->o->join_timeout_ms;
}

static int is_config_refusal(int code) {
  return code == DR_ERUNID || code == DR_ENOAUTH || code == DR_EAUTH ||
         code == DR_EVERSION || code == DR_EDUPRANK || code == DR_EBADRANK ||
         code == DR_ENPROC || code == DR_EFULL;
}

static void on_lost(void *arg, int code, const char *why) {
  dr_agent_t *ag = arg;
  if (ag->stop.next == DR_NEXT_EXIT || ag->state == DR_AG_EXITING)
    return; /* a STOP came first; the server then closed */
  ag->arz_ready = 0;
  ag->resume_pending = 0;
  char esc[1100];
  dr_events_emit(ag->events, "server_lost", ",\"reason\":\"%s\"",
                 dr_json_escape(why, esc, sizeof(esc)));
  int config = is_config_refusal(code);
  if (config || (ag->cfg->server_in_process && ag->have_asg)) {
    /* A refusal is final; a server in this process does not come back. */
    DR_SAY(DR_LOG_ERROR, "%s", why);
    dr__agent_end(ag, DR_END_LOCAL, config ? DR_EXIT_CONFIG : DR_EXIT_COMM);
    dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
    return;
  }
  if (!ag->reconnecting) {
    ag->reconnecting = 1;
    ag->lost_ms = uv_now(&ag->loop);
    ag->n_same_loss = 0;
    snprintf(ag->last_loss, sizeof(ag->last_loss), "%s", why);
    if (ag->have_asg && ag->n_alive > 0)
      DR_SAY(DR_LOG_WARN, "%s; the workers keep running; reconnecting to "
              "%s:%u", why, ag->cfg->server_host, ag->cfg->server_port);
    else
      DR_SAY(DR_LOG_WARN, "%s; reconnecting to %s:%u for up to %.0f s "
              "(join_timeout)", why, ag->cfg->server_host,
              ag->cfg->server_port, ag->o->join_timeout_ms / 1000.0);
  } else if (strcmp(why, ag->last_loss) != 0) {
    if (ag->n_same_loss > 0)
      DR_SAY(DR_LOG_WARN, "(%u more attempts ended the same way)",
              ag->n_same_loss);
    ag->n_same_loss = 0;
    snprintf(ag->last_loss, sizeof(ag->last_loss), "%s", why);
    DR_SAY(DR_LOG_WARN, "%s", why);
  } else {
    ag->n_same_loss++; /* said once: a flood of the same line helps nobody */
  }
  if (reconnect_expired(ag)) {
    DR_SAY(DR_LOG_ERROR, "gave up reconnecting to the rendezvous server "
            "%s:%u after join_timeout=%.3g s", ag->cfg->server_host,
            ag->cfg->server_port, ag->o->join_timeout_ms / 1000.0);
    dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
    dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
    return;
  }
  dr_arz_close(&ag->arz);
  uv_timer_start(&ag->retry_timer, on_retry_reconnect, 100, 0);
}

static void on_ready(void *arg) {
  dr_agent_t *ag = arg;
  ag->arz_ready = 1;
  if (ag->reconnecting && ag->n_same_loss > 0)
    DR_SAY(DR_LOG_WARN, "(%u more attempts ended the same way)",
            ag->n_same_loss);
  ag->reconnecting = 0;
  ag->n_same_loss = 0;
  if (ag->state == DR_AG_JOINING || !ag->have_asg)
    dr__agent_send_join(ag);
  else if (ag->stop.next != DR_NEXT_REJOIN && ag->stop.next != DR_NEXT_EXIT)
    send_resume(ag); /* workers of ag->asg.gen run, or wait for an order */
  /* else: stopping to rejoin; the JOIN follows the stop */
}

static int start_arz(dr_agent_t *ag) {
  dr_arz_opts_t ao;
  memset(&ao, 0, sizeof(ao));
  ao.host = ag->cfg->server_host;
  ao.port = ag->cfg->server_port;
  ao.run_id = ag->o->rdzv_id;
  ao.client_host = ag->cfg->hostname;
  ao.secret = ag->cfg->secret;
  ao.secret_len = ag->cfg->secret_len;
  ao.connect_timeout_ms = ag->o->join_timeout_ms;
  /* A server host that vanished without a FIN: its unacknowledged
   * heartbeats end the connection after this, and the agent reconnects. A
   * stopped server process still acknowledges (its kernel does). */
  ao.user_timeout_ms = 4 * ag->o->heartbeat_timeout_ms < 10000
                           ? 10000
                           : 4 * ag->o->heartbeat_timeout_ms;
  ao.limits = dr_limits_default();
  ao.clock_skew_us = ag->clock_skew_us;
  dr_arz_cb_t cb = {on_ready, on_event, on_lost, ag};
  ag->arz_ready = 0;
  int rc = dr_arz_start(&ag->loop, &ao, &cb, &ag->arz);
  if (rc != 0)
    DR_SAY(DR_LOG_ERROR, "cannot start the rendezvous client for '%s' "
            "(%s)", ag->cfg->server_host, dr_strerror(rc));
  return rc;
}

static void reconnect(dr_agent_t *ag) {
  dr_arz_close(&ag->arz);
  if (start_arz(ag) != 0) {
    dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
    dr__agent_stop_local(ag, SIGTERM, DR_NEXT_EXIT);
  }
}

/* Heartbeats to the server; a silent server is waited for, not left. */
static void on_heartbeat(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->arz == NULL || ag->state == DR_AG_EXITING || !ag->arz_ready)
    return;
  uint64_t idle = dr_arz_idle_ms(ag->arz);
  /* The server pushes heartbeats to running nodes only. */
  if (ag->state == DR_AG_RUNNING && !ag->silent_warned &&
      idle > 2ull * ag->o->heartbeat_timeout_ms) {
    DR_SAY(DR_LOG_WARN, "the rendezvous server %s:%u has been silent for "
            "%.1f s (stopped or paused?); the workers keep running",
            ag->cfg->server_host, ag->cfg->server_port, idle / 1000.0);
    ag->silent_warned = 1;
  }
  if (ag->state == DR_AG_WAITING && idle > ag->o->join_timeout_ms) {
    /* Workers done, their report sent, and no order for join_timeout. */
    DR_SAY(DR_LOG_ERROR, "the rendezvous server %s:%u has been silent "
            "for %.0f s while this node waits for its order; giving up",
            ag->cfg->server_host, ag->cfg->server_port, idle / 1000.0);
    dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
    dr__agent_finish(ag);
    return;
  }
  dr_arz_heartbeat(ag->arz, ag->asg.gen);
}

/* Fault injection for tests: DDPRUN_TEST_CLOCK_SKEW_MS=N (signed
 * milliseconds, at most a day either way) adds N ms to every clock reading
 * this agent stamps the rendezvous protocol with (JOIN, RESUME, HEARTBEAT),
 * so that the server measures this host's clock N ms ahead of its own
 * (negative: behind) while the host's clock stays as it is. Only the agent
 * reads it: the server's clock is the real one, also when it runs in this
 * process; nothing else of the agent's (logs, events) is skewed. */
static int64_t test_clock_skew_us(void) {
  const char *v = getenv("DDPRUN_TEST_CLOCK_SKEW_MS");
  if (v == NULL || v[0] == '\0')
    return 0;
  char *end = NULL;
  errno = 0;
  long long ms = strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || ms < -86400000LL ||
      ms > 86400000LL) {
    DR_SAY(DR_LOG_WARN, "ignoring DDPRUN_TEST_CLOCK_SKEW_MS='%s': not a "
            "number of milliseconds within a day", v);
    return 0;
  }
  if (ms != 0)
    DR_SAY(DR_LOG_WARN, "DDPRUN_TEST_CLOCK_SKEW_MS=%lld: this node's clock "
            "stamps to the rendezvous server are skewed by %lld ms (fault "
            "injection for tests)", ms, ms);
  return (int64_t)ms * 1000;
}

int dr__agent_session_start(dr_agent_t *ag) {
  ag->clock_skew_us = test_clock_skew_us();
  if (start_arz(ag) != 0)
    return -1;
  uv_timer_start(&ag->join_timer, on_join_timeout, ag->o->join_timeout_ms, 0);
  uint64_t hb = ag->o->heartbeat_timeout_ms / 3;
  uv_timer_start(&ag->hb_timer, on_heartbeat, hb > 0 ? hb : 1, hb > 0 ? hb : 1);
  return 0;
}

void dr__agent_leave(dr_agent_t *ag, int sig) {
  if (!ag->have_asg)
    return;
  char reason[400];
  snprintf(reason, sizeof(reason), "ddprun on '%s' received SIG%s",
           ag->cfg->hostname, sigabbrev_np(sig));
  dr_leave_t l = {ag->asg.gen, (uint32_t)sig, dr_str(reason)};
  dr_buf_t b;
  dr_buf_init(&b);
  dr_enc_leave(&b, 0, &l);
  dr__agent_send(ag, &b);
}
