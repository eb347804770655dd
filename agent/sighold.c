/* Forwarding a signal that is not a stop (--signals-to-handle: SIGUSR1
 * for preemption, ...) to workers that may not be ready for it.
 *
 * A worker that has not yet installed its handler (train within its first
 * milliseconds, a Python script while it imports torch) would take the
 * signal's default action and die, and its death would count as a crash.
 * So the agent sends such a signal to a worker's process group only once
 * the worker catches or ignores it (/proc/PID/status: SigCgt, SigIgn) or
 * has kept it blocked (SigBlk: sigwait, signalfd) for BLOCKED_NS at every
 * look: a shell and posix_spawn block every signal for a moment around a
 * fork, and a signal sent then takes its default action as soon as the
 * mask is restored. Or when --signal-hold has passed since the worker
 * started (a program that never handles it gets it as it would without
 * ddprun). A signal that arrives while the agent has no running workers
 * (between generations) goes to the next generation the same way. */
#include "agent_internal.h"

#include "log.h"
#include "sigstate.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOLD_POLL_MS 20
/* How long a signal must stay blocked before it counts as taken in
 * (DDPRUN_SIGHOLD_TEST_BLOCKED_MS sets it for a test that needs a block
 * never to count). */
#define BLOCKED_NS (200 * 1000 * 1000ull)
static uint64_t blocked_ns = BLOCKED_NS;
/* A worker is looked at only this long after its start: the parent learns
 * that the exec succeeded when the kernel closes the close-on-exec
 * descriptors, before it resets the signal handlers, and until then /proc
 * can show ddprun's (spawn.c resets them before exec, but a sanitizer's
 * runtime in ddprun may keep its own installed: seen under TSan). */
#define EXEC_SETTLE_NS (20 * 1000 * 1000ull)

/* Sends what worker W holds that it is ready for (or all once its hold
 * has passed); 1 while it still holds something. NOW: uv_hrtime(). */
static int deliver(dr_agent_t *ag, dr_worker_t *w, uint64_t now) {
  if (w->held == 0)
    return 0;
  if (w->pid <= 0 || !w->alive || w->group_gone) {
    w->held = 0;
    return 0;
  }
  uint64_t age = now - w->start_ns;
  if (age < EXEC_SETTLE_NS)
    return 1;
  int late = age >= (uint64_t)ag->o->signal_hold_ms * 1000000ull;
  for (int sig = 1; sig < 64; sig++) {
    uint64_t bit = 1ull << (sig - 1);
    if ((w->held & bit) == 0)
      continue;
    int ready = dr_proc_sig_ready(w->pid, sig);
    if (ready < 0)
      ready = DR_SIG_HANDLED; /* cannot look: sent as without a hold */
    if (ready == DR_SIG_BLOCKED) {
      if ((w->held_blocked & bit) == 0) {
        w->held_blocked |= bit;
        w->held_blocked_ns = now; /* the newest such bit restarts it */
      }
      if (now - w->held_blocked_ns >= blocked_ns)
        ready = DR_SIG_HANDLED;
    } else {
      w->held_blocked &= ~bit;
    }
    if (ready != DR_SIG_HANDLED && !late)
      continue;
    if (ready == DR_SIG_DEFAULT)
      DR_SAY(DR_LOG_WARN, "local rank %u does not handle SIG%s %.1f s "
              "after its start (--signal-hold): sent anyway", w->local_rank,
              sigabbrev_np(sig), (double)age / 1e9);
    kill(-w->pid, sig);
    w->held &= ~bit;
    w->held_blocked &= ~bit;
  }
  return w->held != 0;
}

static void on_hold_timer(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  int holding = 0;
  uint64_t now = uv_hrtime();
  for (uint32_t i = 0; ag->w != NULL && i < ag->nproc; i++) {
    dr_worker_t *w = &ag->w[i];
    holding |= deliver(ag, w, now);
    uint64_t news = w->held & ~w->held_said;
    w->held_said = w->held;
    for (int sig = 1; sig < 64; sig++)
      if (news & (1ull << (sig - 1)))
        DR_SAY(DR_LOG_INFO, "SIG%s held for local rank %u until it handles "
                "it (at most %.1f s after its start, --signal-hold)",
                sigabbrev_np(sig), w->local_rank,
                (double)ag->o->signal_hold_ms / 1000.0);
  }
  if (!holding)
    uv_timer_stop(t);
}

/* Marks sig for worker W; the timer delivers it within this turn of the
 * loop. A signal costs the agent a bit, whatever the rate it arrives at: a
 * storm of them (a Slurm script that resends SIGUSR1) coalesces, and the
 * loop goes on reaping workers and sending heartbeats between them. */
static void hold(dr_agent_t *ag, dr_worker_t *w, int sig) {
  uint64_t bit = 1ull << (sig - 1);
  if (w->held & bit)
    return; /* still on its way: a resend adds nothing */
  w->held |= bit;
  w->held_said &= ~bit;
  if (uv_timer_get_due_in(&ag->hold_timer) > 0 ||
      !uv_is_active((uv_handle_t *)&ag->hold_timer))
    uv_timer_start(&ag->hold_timer, on_hold_timer, 0, HOLD_POLL_MS);
}

void dr__sighold_init(dr_agent_t *ag) {
  const char *t = getenv("DDPRUN_SIGHOLD_TEST_BLOCKED_MS");
  if (t != NULL && t[0] >= '0' && t[0] <= '9')
    blocked_ns = strtoull(t, NULL, 10) * 1000000ull;
  uv_timer_init(&ag->loop, &ag->hold_timer);
  ag->hold_timer.data = ag;
}

void dr__sighold_forward(dr_agent_t *ag, int sig) {
  if (!dr_sig_default_ends(sig) || ag->o->signal_hold_ms == 0) {
    dr__workers_signal(ag, sig);
    return;
  }
  if (ag->state != DR_AG_RUNNING || ag->w == NULL) {
    uint64_t bit = 1ull << (sig - 1);
    if ((ag->held_next & bit) == 0)
      DR_SAY(DR_LOG_INFO, "SIG%s arrived while no workers run: the next "
              "ones get it once they handle it", sigabbrev_np(sig));
    ag->held_next |= bit;
    return;
  }
  for (uint32_t i = 0; i < ag->nproc; i++)
    hold(ag, &ag->w[i], sig);
}

void dr__sighold_started(dr_agent_t *ag, dr_worker_t *w) {
  w->start_ns = uv_hrtime();
  w->held = 0;
  w->held_said = 0;
  w->held_blocked = 0;
  if (ag->held_next == 0)
    return;
  for (int sig = 1; sig < 64; sig++)
    if (ag->held_next & (1ull << (sig - 1)))
      hold(ag, w, sig);
}

void dr__sighold_generation_started(dr_agent_t *ag) { ag->held_next = 0; }

void dr__sighold_close(dr_agent_t *ag) {
  uv_close((uv_handle_t *)&ag->hold_timer, NULL);
}
