/* The rendezvous server's messages to this node, as the session decodes
 * them (agent_rdzv.c): an assignment, RESUME's answer, a restart or a stop,
 * a refusal, the forming round's status, a request for the stacks. The
 * orders are carried out here; the rest is handed to the file that owns
 * it. */
#include "agent_internal.h"

#include "log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>

#include "errors.h"
#include "events.h"
#include "exit_codes.h"

static void on_restart_order(dr_agent_t *ag, uint64_t gen,
                             unsigned long long count, dr_bytes_t reason) {
  ag->resume_pending = 0;
  DR_SAY(DR_LOG_WARN, "restarting the workers (generation %llu, "
          "restart %llu of %u): %.*s", (unsigned long long)gen, count,
          ag->o->max_restarts, (int)reason.len, (const char *)reason.p);
  snprintf(ag->server_reason, sizeof(ag->server_reason), "%.*s",
           (int)reason.len, (const char *)reason.p);
  dr__hang_tell(ag);
  char esc[2500];
  dr_events_emit(ag->events, "restart",
                 ",\"gen\":%llu,\"restart_count\":%llu,\"reason\":\"%s\"",
                 (unsigned long long)gen, count,
                 dr_json_escape(ag->server_reason, esc, sizeof(esc)));
  dr__agent_stop_local(ag, SIGTERM, DR_NEXT_REJOIN);
}

static void on_refused(dr_agent_t *ag, const dr_sess_event_t *ev) {
  if (dr__failover_on_refused(ag, ev->code)) {
    /* A standby, or a replaced server: the next place of the rendezvous
     * (agent_failover.c). */
    dr__agent_reconnect_soon(ag);
    return;
  }
  if (ev->code == ETIMEDOUT || ev->code == -ETIMEDOUT ||
      (ev->code == 0 && ev->to == 0)) {
    /* The server dropped a connection it found idle or slow (this ddprun
     * stalled before its JOIN, or took its replies late): no refusal of
     * the node, which connects again. */
    DR_SAY(DR_LOG_WARN, "the rendezvous server %s:%u closed this node's "
            "connection (%.*s); connecting again", ag->srv_host,
            ag->srv_port, (int)ev->text.len, (const char *)ev->text.p);
    dr__agent_reconnect_soon(ag);
    return;
  }
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

void dr__agent_on_event(void *arg, const dr_sess_event_t *ev) {
  dr_agent_t *ag = arg;
  if (ag->silent_warned) {
    DR_SAY(DR_LOG_INFO, "the rendezvous server %s:%u answers again",
            ag->srv_host, ag->srv_port);
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
      dr__agent_on_resumed(ag);
    break;
  case DR_SESS_RESTART:
    on_restart_order(ag, ev->gen, ev->restart_count, ev->text);
    break;
  case DR_SESS_STOP:
    dr__hang_tell(ag);
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
  case DR_SESS_ROUND:
    dr__agent_on_round_status(ag, &ev->round);
    break;
  case DR_SESS_STACKS:
    dr__agent_on_stacks_request(ag, ev->id);
    break;
  default: /* HEARTBEAT: hearing it is enough */
    break;
  }
}
