/* A running generation: failures and the echo hold, the restart budget,
 * success, nodes that leave or fall silent, and the core's clock (its
 * ticks and the heartbeats it pushes). Rounds and losses are in
 * rdzv_core.c. */
#include "rdzv_internal.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "events.h"
#include "exit_codes.h"
#include "log.h"

/* ---- failures ---------------------------------------------------------- */

static void describe_failure(const dr_node_t *n, const dr_failure_t *f,
                             char *out, size_t len) {
  char what[96]; /* DR_RDZV_FAILURE_TEXT_LEN counts on this size */
  if (f->signal != 0) {
    const char *name = sigabbrev_np(f->signal);
    snprintf(what, sizeof(what), "was killed by signal SIG%s",
             name != NULL ? name : "?");
  } else {
    snprintf(what, sizeof(what), "exited with code %d", f->exit_code);
  }
  snprintf(out, len, "rank %u (local rank %u, pid %u) on node %u (%s) %s%s%.*s",
           f->rank, f->local_rank, f->pid, n->node_rank, n->host, what,
           f->message.len > 0 ? ": " : "", (int)f->message.len,
           (const char *)f->message.p);
}

/* Restart from the budget, or stop: the job's answer to its root cause,
 * by the exit-code table's policy. */
static void decide_failure(dr_rdzv_t *r, int code, int exit_code, int signal,
                           const char *what) {
  char reason[1200];
  if (dr_exit_policy(exit_code, signal) == DR_EXIT_STOP) {
    /* A worker that SIGUSR1 killed (a program without a handler) was asked
     * to leave: a restart would only be preempted again. */
    const dr_exit_info_t *e =
        dr_exit_info(signal != 0 ? DR_EXIT_PREEMPTED : exit_code);
    snprintf(reason, sizeof(reason), "%s, not restarted: %s",
             signal != 0 ? "preempted (SIGUSR1, which the worker does not "
                           "handle)"
             : e != NULL ? e->brief
                         : "stopped",
             what);
    dr__rdzv_stop(r, signal != 0 ? DR_EXIT_PREEMPTED : exit_code, reason);
  } else if (r->restarts_used < r->cfg.max_restarts) {
    r->restarts_used++;
    snprintf(reason, sizeof(reason), "restart %u of %u: %s", r->restarts_used,
             r->cfg.max_restarts, what);
    dr__rdzv_restart_all(r, reason);
  } else {
    snprintf(reason, sizeof(reason), "restart budget of %u spent; root "
             "cause: %s", r->cfg.max_restarts, what);
    dr__rdzv_stop(r, code != 0 ? code : 1, reason);
  }
}

/* The hold's time is up (or a node it waited for is lost first). */
static void hold_due(dr_rdzv_t *r, uint64_t now) {
  dr__resume_tick(r, now); /* a node lost at the deadline comes first */
  if (!r->holding)
    return;
  if (r->resuming && now < r->resume_deadline) {
    /* A node that has not resumed yet may bring the root cause, or be
     * declared lost at the deadline. */
    r->hold_at = r->resume_deadline + 1;
    return;
  }
  r->holding = 0;
  if (r->state == DR_JOB_RUNNING)
    decide_failure(r, r->held_code, r->held_exit, r->held_signal,
                   r->held_what);
}

void dr_rdzv_failure(dr_rdzv_t *r, dr_rdzv_peer_t *p, const dr_failure_t *f,
                     uint64_t now) {
  r->now = now;
  if (r->state != DR_JOB_RUNNING || f->gen != r->gen || p->node == NULL) {
    DR_DEBUG("ignoring a failure report of generation %" PRIu64 " from %s "
             "(current %" PRIu64 ")", f->gen, p->addr, r->gen);
    return;
  }
  char what[DR_RDZV_FAILURE_TEXT_LEN], esc[2 * DR_RDZV_FAILURE_TEXT_LEN];
  r->failures++;
  describe_failure(p->node, f, what, sizeof(what));
  dr__rdzv_event(r, "failure",
                 ",\"gen\":%" PRIu64 ",\"rank\":%u,\"exit_code\":%d,"
                 "\"signal\":%d,\"kind\":\"%s\",\"what\":\"%s\"",
                 f->gen, f->rank, f->exit_code, f->signal,
                 dr_fail_kind_name(f->kind),
                 dr_json_escape(what, esc, sizeof(esc)));
  if (r->q_waiting)
    return; /* acting on an earlier cause once a majority is heard */
  int code = f->signal != 0 ? 128 + f->signal : f->exit_code;
  /* A worker's own communication failure may echo another failure, and
   * so may a verdict on a rank that only waited (the culprit may be on
   * another node, whose agent names it); an agent's verdict that names a
   * stopped, sleeping or busy worker is a root cause itself. */
  int echo =
      (f->kind == DR_FAIL_EXIT &&
       dr_failure_is_echo(f->exit_code, f->signal,
                          (const char *)f->message.p, f->message.len)) ||
      f->kind == DR_FAIL_HANG_WAIT;
  if (r->holding) {
    if (echo)
      return; /* the first echo is already held */
    r->holding = 0;
  } else if (echo) {
    r->holding = 1;
    r->held_code = code;
    r->held_exit = f->exit_code;
    r->held_signal = f->signal;
    snprintf(r->held_what, sizeof(r->held_what), "%s", what);
    /* Held for the heartbeat timeout: by then the node of the failure it
     * echoes has reported it, or is declared lost, which takes silence
     * over the timeout (so one more millisecond), and the tick looks for
     * silent nodes before it ends the hold. */
    r->hold_at = now + r->cfg.heartbeat_timeout_ms + 1;
    return;
  }
  decide_failure(r, code, f->exit_code, f->signal, what);
}

void dr_rdzv_success(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint64_t gen,
                     uint64_t now) {
  r->now = now;
  if (r->state != DR_JOB_RUNNING || gen != r->gen || p->node == NULL)
    return;
  p->node->succeeded = 1;
  for (size_t i = 0; i < r->n_round; i++)
    if (!r->round[i]->succeeded)
      return;
  char reason[128];
  snprintf(reason, sizeof(reason), "job complete: all %zu nodes succeeded",
           r->n_round);
  dr__rdzv_stop(r, 0, reason);
}

/* The node's agent says it is leaving (its ddprun got a signal): its
 * connection's close, which follows, is judged by that, not as a loss of
 * unknown cause. */
void dr_rdzv_leave(dr_rdzv_t *r, dr_rdzv_peer_t *p, const dr_leave_t *l) {
  dr_node_t *n = p->node;
  if (n == NULL)
    return;
  n->leave_signal = l->signal > 0 && l->signal < 65 ? (int)l->signal : 0;
  snprintf(n->leave_reason, sizeof(n->leave_reason), "%.*s",
           (int)l->reason.len, (const char *)l->reason.p);
  DR_INFO("node '%s' (%s) is leaving: %s", n->host, p->addr,
          n->leave_reason);
}

/* ---- time ---------------------------------------------------------------- */

uint64_t dr_rdzv_resume_window_ms(const dr_rdzv_t *r) {
  return 2ull * r->cfg.heartbeat_timeout_ms + 1000;
}

/* One silent node: it is lost at once (the caller closes its connection
 * after); 1 when there was one, as the round has changed then. */
static int one_silent(dr_rdzv_t *r, uint64_t now) {
  for (size_t i = 0; i < r->n_round; i++) {
    dr_node_t *n = r->round[i];
    dr_rdzv_peer_t *p = n->peer;
    if (p == NULL)
      continue;
    /* Silence counts from the loop's last wake-up from a stall at the
     * earliest: heartbeats that arrived while it was stopped are no less
     * on time for being read late. */
    uint64_t seen = p->last_seen_ms > r->woke_ms ? p->last_seen_ms
                                                 : r->woke_ms;
    if (now - seen <= r->cfg.heartbeat_timeout_ms)
      continue;
    char why[96];
    snprintf(why, sizeof(why), "no heartbeat for %" PRIu64 " ms",
             now - p->last_seen_ms);
    DR_WARN("node %u ('%s', %s): %s", n->node_rank, n->host, p->addr, why);
    dr_rdzv_peer_closed(r, p, why, now);
    dr__rdzv_order_text(r, DR_RDZV_CLOSE, p, "%s", why);
    return 1;
  }
  return 0;
}

void dr_rdzv_tick(dr_rdzv_t *r, uint64_t now) {
  r->now = now;
  dr__term_tick(r, now); /* a takeover's lost place before the window's */
  dr__resume_tick(r, now);
  if (r->last_call_at != 0 && now >= r->last_call_at &&
      r->state == DR_JOB_FORMING)
    dr__rdzv_last_call_due(r);
  if (r->replace_at != 0 && now >= r->replace_at &&
      r->state == DR_JOB_FORMING) {
    char reason[1100];
    snprintf(reason, sizeof(reason), "%s, and no replacement joined within "
             "%.0f s", r->replace_why,
             r->cfg.replacement_timeout_ms / 1000.0);
    r->replace_at = 0;
    dr__rdzv_stop(r, r->replace_code, reason);
  }
  /* Silent nodes first: a node lost by now is the root cause of the echo
   * held, which its loss ends. */
  while (r->state == DR_JOB_RUNNING && one_silent(r, now)) {
  }
  if (r->holding && now >= r->hold_at)
    hold_due(r, now);
  uint64_t every = r->cfg.heartbeat_timeout_ms / 3;
  if (r->state != DR_JOB_RUNNING || now - r->last_hb_ms < every)
    return;
  r->last_hb_ms = now;
  for (size_t i = 0; i < r->n_round; i++)
    if (r->round[i]->peer != NULL)
      dr__rdzv_order(r, DR_RDZV_HEARTBEAT, r->round[i]->peer)->gen = r->gen;
  /* Held claims hear from the server too: their agents must not take the
   * wait for their answer for a silent server. */
  for (size_t i = 0; i < r->n_claims; i++)
    dr__rdzv_order(r, DR_RDZV_HEARTBEAT, r->claims[i].peer)->gen =
        r->claims[i].gen;
}

uint64_t dr_rdzv_next_due(const dr_rdzv_t *r) {
  uint64_t due = 0;
  uint64_t at[5] = {r->state == DR_JOB_FORMING ? r->last_call_at : 0,
                    r->holding ? r->hold_at : 0,
                    r->resuming || r->claiming ? r->resume_deadline + 1 : 0,
                    r->state == DR_JOB_FORMING ? r->replace_at : 0,
                    r->q_waiting ? r->q_due : 0};
  for (int i = 0; i < 5; i++)
    if (at[i] != 0 && (due == 0 || at[i] < due))
      due = at[i];
  return due;
}

void dr_rdzv_round_figures(const dr_rdzv_t *r, uint64_t now,
                           dr_round_fig_t *f) {
  memset(f, 0, sizeof(*f));
  f->last_call_ms = DR_NONE;
  if (r->state != DR_JOB_FORMING)
    return;
  size_t n = r->n_round;
  uint64_t need_to = r->cfg.min_nodes, top = 0;
  int all_static = n > 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t q = r->round[i]->req_rank;
    if (q == DR_NONE)
      all_static = 0;
    else if (q + 1 > top)
      top = q + 1;
  }
  /* A node rank beyond the round holds it until the ranks below fill. */
  if (top > need_to)
    need_to = top;
  f->joined = (uint32_t)n;
  f->need_to = (uint32_t)need_to;
  f->needed = need_to > n ? (uint32_t)(need_to - n) : 0;
  f->is_static = all_static;
  for (uint64_t k = 0; all_static && k < need_to; k++)
    f->n_missing += r->rank_holder[k] == NULL;
  f->waited_ms = r->forming_ms != 0 && now > r->forming_ms
                     ? now - r->forming_ms
                     : 0;
  if (r->last_call_at != 0)
    f->last_call_ms = r->last_call_at > now ? r->last_call_at - now : 0;
}
