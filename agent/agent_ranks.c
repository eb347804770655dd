/* The workers as `ddprun status` shows them: while workers run, the agent
 * reports them to the server (RANKS: pid, state, last progress step and
 * step rate) when they change, at most once per heartbeat. */
#include "agent_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"

/* Unchanged ranks are reported again after this long. */
#define RANKS_REFRESH_MS 5000u

/* 1 when pid is stopped (a signal, a debugger): state T or t. */
static int is_stopped(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the name may hold spaces */
  return p != NULL && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

uint32_t dr__agent_rank_state(const dr_agent_t *ag, const dr_worker_t *w) {
  if (w->pid <= 0)
    return DR_RS_STARTING;
  if (!w->alive)
    return w->signal != 0 ? DR_RS_KILLED : DR_RS_EXITED;
  if (ag->state == DR_AG_STOPPING)
    return DR_RS_STOPPING;
  return is_stopped(w->pid) ? DR_RS_STOPPED : DR_RS_RUNNING;
}

/* Reads w's progress slot: its step, when it changed, its rate. */
static void track(dr_agent_t *ag, dr_worker_t *w, uint64_t now) {
  dr_progress_sample_t smp = dr_progress_read(ag->progress, w->local_rank);
  if (smp.seq == 0 || w->pid <= 0)
    return; /* no report yet (the slot is reset as the worker starts) */
  if (smp.seq != w->st_seq) {
    if (w->st_change_ms == 0 || smp.step != w->st_step)
      w->st_change_ms = now;
    w->st_seq = smp.seq;
    w->st_step = smp.step;
  }
  if (w->st_rate_ms == 0) {
    w->st_rate_ms = now;
    w->st_rate_step = smp.step;
    w->st_rate = -1;
  } else if (now - w->st_rate_ms >= 500) {
    uint64_t d = smp.step >= w->st_rate_step ? smp.step - w->st_rate_step : 0;
    double inst = (double)d * 1000.0 / (double)(now - w->st_rate_ms);
    w->st_rate = w->st_rate < 0 ? inst : 0.5 * inst + 0.5 * w->st_rate;
    w->st_rate_ms = now;
    w->st_rate_step = smp.step;
  }
}

static uint64_t fnv(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

/* RANKS when the workers changed (pid, state, step), at most once per
 * heartbeat, and every RANKS_REFRESH_MS while they do not. */
void dr__agent_report_ranks(dr_agent_t *ag) {
  if (!ag->have_asg || ag->w == NULL || !ag->arz_ready ||
      (ag->state != DR_AG_RUNNING && ag->state != DR_AG_STOPPING &&
       ag->state != DR_AG_WAITING))
    return;
  uint64_t now = uv_now(&ag->loop);
  dr_rank_rec_t *recs = calloc(ag->nproc, sizeof(*recs));
  if (recs == NULL)
    return;
  uint64_t h = 1469598103934665603ull ^ ag->asg.gen;
  for (uint32_t i = 0; i < ag->nproc; i++) {
    dr_worker_t *w = &ag->w[i];
    dr_rank_rec_t *x = &recs[i];
    track(ag, w, now);
    x->rank = ag->asg.first_rank + i;
    x->local_rank = i;
    x->node_rank = ag->asg.node_rank;
    x->pid = w->pid > 0 ? (uint32_t)w->pid : 0;
    x->state = dr__agent_rank_state(ag, w);
    x->exit_code = x->state == DR_RS_EXITED ? w->exit_code : 0;
    x->signal = x->state == DR_RS_KILLED ? (uint32_t)w->signal : 0;
    x->step = w->st_change_ms != 0 ? w->st_step : DR_NONE;
    x->step_age_ms = w->st_change_ms != 0 ? now - w->st_change_ms : DR_NONE;
    x->rate_milli = w->alive && w->st_rate >= 0
                        ? (uint64_t)(w->st_rate * 1000.0 + 0.5)
                        : DR_NONE;
    h = fnv(fnv(fnv(h, x->pid), x->state), x->step);
    h = fnv(fnv(h, (uint32_t)x->exit_code), x->signal);
  }
  if (h != ag->ranks_digest || ag->ranks_sent_ms == 0 ||
      now - ag->ranks_sent_ms >= RANKS_REFRESH_MS) {
    dr_buf_t b;
    dr_buf_init(&b);
    if (dr_enc_ranks(&b, 0, ag->asg.gen, recs, ag->nproc) == 0) {
      ag->ranks_digest = h;
      ag->ranks_sent_ms = now;
    }
    dr__agent_send(ag, &b);
  }
  free(recs);
}
