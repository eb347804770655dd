/* The agent's session with the rendezvous server: the connection, its
 * heartbeats, and what happens when the server goes away. What travels on
 * it has files of its own: joining and the forming round (agent_join.c),
 * RESUME (agent_resume.c), the server's messages and orders
 * (agent_orders.c), the workers as `ddprun status` shows them
 * (agent_ranks.c) and their stacks (agent_stacks.c).
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "events.h"
#include "exit_codes.h"

void dr__agent_send(dr_agent_t *ag, dr_buf_t *b) {
  if (ag->arz != NULL && ag->arz_ready)
    dr_arz_send(ag->arz, b);
  dr_buf_free(b);
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
    /* Last heard: a connection that timed out was silent before it was
     * lost (agent_failover.c counts from then). */
    uint64_t idle = ag->arz != NULL ? dr_arz_idle_ms(ag->arz) : 0;
    ag->heard_ms = ag->lost_ms - (idle < ag->lost_ms ? idle : ag->lost_ms);
    ag->n_same_loss = 0;
    snprintf(ag->last_loss, sizeof(ag->last_loss), "%s", why);
    if (ag->have_asg && ag->n_alive > 0)
      DR_SAY(DR_LOG_WARN, "%s; the workers keep running; reconnecting to "
              "%s:%u", why, ag->srv_host, ag->srv_port);
    else
      DR_SAY(DR_LOG_WARN, "%s; reconnecting to %s:%u for up to %.0f s "
              "(join_timeout)", why, ag->srv_host,
              ag->srv_port, ag->o->join_timeout_ms / 1000.0);
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
  if (!config && dr__failover_on_lost(ag, code)) {
    /* The next place of the rendezvous (agent_failover.c). */
    dr_arz_close(&ag->arz);
    uv_timer_start(&ag->retry_timer, on_retry_reconnect, 50, 0);
    return;
  }
  if (reconnect_expired(ag)) {
    DR_SAY(DR_LOG_ERROR, "gave up reconnecting to the rendezvous server "
            "%s:%u after join_timeout=%.3g s", ag->srv_host,
            ag->srv_port, ag->o->join_timeout_ms / 1000.0);
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
  dr__agent_env_check_addr(ag);
  if (ag->reconnecting && ag->n_same_loss > 0)
    DR_SAY(DR_LOG_WARN, "(%u more attempts ended the same way)",
            ag->n_same_loss);
  ag->reconnecting = 0;
  ag->n_same_loss = 0;
  if (ag->state == DR_AG_JOINING || !ag->have_asg)
    dr__agent_send_join(ag);
  else if (ag->stop.next != DR_NEXT_REJOIN && ag->stop.next != DR_NEXT_EXIT)
    dr__agent_send_resume(ag); /* workers of ag->asg.gen run, or wait for
                                  an order */
  /* else: stopping to rejoin; the JOIN follows the stop */
}

uint32_t dr__agent_user_timeout_ms(const dr_agent_t *ag) {
  uint32_t hb4 = 4 * ag->o->heartbeat_timeout_ms;
  return dr__failover_user_timeout_ms(ag, hb4 < 10000 ? 10000 : hb4);
}

static int start_arz(dr_agent_t *ag) {
  dr_arz_opts_t ao;
  memset(&ao, 0, sizeof(ao));
  ao.host = ag->srv_host;
  ao.port = ag->srv_port;
  ao.run_id = ag->o->rdzv_id;
  ao.client_host = ag->cfg->hostname;
  ao.secret = ag->cfg->secret;
  ao.secret_len = ag->cfg->secret_len;
  /* Where the rendezvous may move, the lost server is tried for the
   * heartbeat timeout, then each place for as long (agent_failover.c). */
  ao.connect_timeout_ms = dr__failover_connect_ms(ag, ag->o->join_timeout_ms);
  /* A server host that vanished without a FIN: its unacknowledged
   * heartbeats end the connection after this, and the agent reconnects. A
   * stopped server process still acknowledges (its kernel does). */
  ao.user_timeout_ms = dr__agent_user_timeout_ms(ag);
  ao.limits = dr_limits_default();
  ao.clock_skew_us = ag->clock_skew_us;
  dr_arz_cb_t cb = {on_ready, dr__agent_on_event, on_lost, ag};
  ag->arz_ready = 0;
  int rc = dr_arz_start(&ag->loop, &ao, &cb, &ag->arz);
  if (rc != 0)
    DR_SAY(DR_LOG_ERROR, "cannot start the rendezvous client for '%s' "
            "(%s)", ag->srv_host, dr_strerror(rc));
  return rc;
}

void dr__agent_reconnect_soon(dr_agent_t *ag) {
  ag->arz_ready = 0;
  ag->resume_pending = 0;
  if (!ag->reconnecting) { /* lost now, and heard until now */
    ag->lost_ms = ag->heard_ms = uv_now(&ag->loop);
    ag->n_same_loss = 0;
    ag->last_loss[0] = '\0';
  }
  ag->reconnecting = 1;
  uv_timer_start(&ag->retry_timer, on_retry_reconnect, 50, 0);
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
            ag->srv_host, ag->srv_port, idle / 1000.0);
    ag->silent_warned = 1;
  }
  if (ag->state == DR_AG_WAITING && idle > ag->o->join_timeout_ms) {
    /* Workers done, their report sent, and no order for join_timeout. */
    DR_SAY(DR_LOG_ERROR, "the rendezvous server %s:%u has been silent "
            "for %.0f s while this node waits for its order; giving up",
            ag->srv_host, ag->srv_port, idle / 1000.0);
    dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_COMM);
    dr__agent_finish(ag);
    return;
  }
  dr_arz_heartbeat(ag->arz, ag->asg.gen);
  dr__agent_report_ranks(ag);
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
  uv_timer_start(&ag->join_timer, dr__agent_on_join_timeout,
                 ag->o->join_timeout_ms, 0);
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
