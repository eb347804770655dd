/* The stall rule and the choice of the culprit; see stall.h. */
#include "stall.h"

#include <string.h>

uint64_t dr_stall_allowance(const dr_stall_cfg_t *c) {
  uint64_t a = (uint64_t)c->timeout_ms * (uint64_t)c->hz / 100000u;
  return a < 2 ? 2 : a;
}

void dr_stall_start(dr_stall_t *s, uint64_t now_ms) {
  memset(s, 0, sizeof(*s));
  s->start_ms = s->now_ms = now_ms;
}

/* The ring keeps a sample every S/32 at most, so that 64 of them reach
 * back past S whatever the polling period. */
static void push(dr_stall_t *s, const dr_stall_cfg_t *c) {
  uint64_t slot = c->timeout_ms / 32 > 0 ? c->timeout_ms / 32 : 1;
  if (s->n > 0) {
    unsigned last = (s->head + DR_STALL_RING - 1) % DR_STALL_RING;
    if (s->now_ms - s->t_ms[last] < slot)
      return;
  }
  s->t_ms[s->head] = s->now_ms;
  s->act[s->head] = s->act_now;
  s->head = (s->head + 1) % DR_STALL_RING;
  if (s->n < DR_STALL_RING)
    s->n++;
}

void dr_stall_sample(dr_stall_t *s, const dr_stall_cfg_t *c, uint64_t now_ms,
                     const dr_pgstat_t *g, int gpu_busy) {
  if (s->have_prev) {
    int same = g->n_members == s->prev_members && g->members_id == s->prev_id &&
               g->cpu_ticks >= s->prev_ticks;
    s->act_now += same ? g->cpu_ticks - s->prev_ticks : dr_stall_allowance(c);
  }
  s->have_prev = 1;
  s->prev_ticks = g->cpu_ticks;
  s->prev_members = g->n_members;
  s->prev_id = g->members_id;
  s->stopped = g->stopped;
  s->disk_wait = g->disk_wait;
  s->leader_state = g->leader_state;
  s->now_ms = now_ms;
  if (gpu_busy)
    s->gpu_busy_ms = now_ms;
  push(s, c);
}

uint64_t dr_stall_quiet_ms(const dr_stall_t *s, const dr_stall_cfg_t *c) {
  uint64_t a = dr_stall_allowance(c);
  /* The newest sample i with the allowance used since: the use came after
   * it, so the rank is quiet at most since the sample after i (the lower
   * bound: never judged early). */
  uint64_t since = s->start_ms, after = s->now_ms;
  for (unsigned k = 0; k < s->n; k++) {
    unsigned i = (s->head + DR_STALL_RING - 1 - k) % DR_STALL_RING;
    if (s->act_now - s->act[i] >= a) {
      since = after;
      break;
    }
    after = s->t_ms[i];
    if (k + 1 == s->n && s->n == DR_STALL_RING)
      since = s->t_ms[i]; /* at least as long as the ring reaches */
  }
  if (s->gpu_busy_ms > since)
    since = s->gpu_busy_ms;
  return s->now_ms > since ? s->now_ms - since : 0;
}

unsigned dr_stall_cpu_pct(const dr_stall_t *s, const dr_stall_cfg_t *c,
                          uint64_t over_ms) {
  if (s->n == 0 || c->hz <= 0)
    return 0;
  unsigned pick = (s->head + DR_STALL_RING - s->n) % DR_STALL_RING; /* oldest */
  for (unsigned k = 0; k < s->n; k++) {
    unsigned i = (s->head + DR_STALL_RING - 1 - k) % DR_STALL_RING;
    if (s->now_ms - s->t_ms[i] >= over_ms) {
      pick = i;
      break;
    }
  }
  uint64_t dt = s->now_ms - s->t_ms[pick];
  if (dt == 0)
    return 0;
  uint64_t used_ms = (s->act_now - s->act[pick]) * 1000u / (uint64_t)c->hz;
  return (unsigned)(used_ms * 100u / dt);
}

/* ---- the verdict -------------------------------------------------------- */

/* lenient: a busy rank is at work, whatever its reports say. */
static int stalled(const dr_rank_view_t *v, uint64_t timeout_ms,
                   int lenient) {
  return v->alive && v->quiet_ms >= timeout_ms && v->quiet_ms > 0 &&
         !(lenient && v->busy);
}

/* The rule (1 strongest, 0 none) that makes rank i a culprit. */
static dr_stall_why_t rule(const dr_rank_view_t *v, size_t n, size_t i,
                           uint64_t timeout_ms, int lenient) {
  const dr_rank_view_t *r = &v[i];
  int peer_collective = 0, peer_idle_stalled = 0;
  for (size_t k = 0; k < n; k++) {
    if (k == i || !v[k].alive)
      continue;
    peer_collective |= v[k].place == DR_PLACE_COLLECTIVE;
    peer_idle_stalled |= stalled(&v[k], timeout_ms, lenient) && !v[k].busy &&
                         !v[k].stopped;
  }
  if (!stalled(r, timeout_ms, lenient)) {
    if (!lenient && r->alive && !r->reports && r->busy &&
        r->place != DR_PLACE_COLLECTIVE && peer_idle_stalled)
      return DR_WHY_BUSY_PEERS_WAIT;
    return DR_WHY_NONE;
  }
  if (r->stopped)
    return DR_WHY_STOPPED;
  if (r->place == DR_PLACE_SLEEP)
    return DR_WHY_SLEEPING;
  if (r->place == DR_PLACE_IO ||
      (r->disk_wait && r->place != DR_PLACE_COLLECTIVE))
    return DR_WHY_DISK;
  if (!lenient && r->busy && r->place != DR_PLACE_COLLECTIVE)
    return DR_WHY_BUSY;
  if (r->place != DR_PLACE_COLLECTIVE && r->place != DR_PLACE_UNKNOWN &&
      peer_collective)
    return DR_WHY_OFF_COLLECTIVE;
  return DR_WHY_NONE;
}

dr_verdict_t dr_stall_judge(const dr_rank_view_t *v, size_t n,
                            uint64_t timeout_ms, uint64_t wait_ms,
                            int lenient) {
  dr_verdict_t out = {0, -1, DR_WHY_NONE};
  size_t alive = 0;
  for (size_t i = 0; i < n; i++) {
    out.stalled += stalled(&v[i], timeout_ms, lenient);
    alive += v[i].alive != 0;
  }
  if (out.stalled == 0)
    return out;
  /* The strongest rule wins; among equals the rank quiet longest, then the
   * lowest. Rules are numbered strongest first (DR_WHY_STOPPED = 1). */
  for (size_t i = 0; i < n; i++) {
    dr_stall_why_t w = rule(v, n, i, timeout_ms, lenient);
    if (w == DR_WHY_NONE)
      continue;
    if (out.named < 0 || w < out.why ||
        (w == out.why && v[i].quiet_ms > v[out.named].quiet_ms)) {
      out.named = (int)i;
      out.why = w;
    }
  }
  if (out.named >= 0 || (lenient && (size_t)out.stalled < alive))
    return out; /* lenient: a rank at work is what the others wait for */
  for (size_t i = 0; i < n; i++)
    if (stalled(&v[i], timeout_ms, lenient) && v[i].quiet_ms >= wait_ms &&
        (out.named < 0 || v[i].quiet_ms > v[out.named].quiet_ms)) {
      out.named = (int)i;
      out.why = DR_WHY_WAITED;
    }
  return out;
}

const char *dr_stall_why_text(dr_stall_why_t why) {
  switch (why) {
  case DR_WHY_STOPPED:
    return "its processes are stopped (SIGSTOP or a debugger)";
  case DR_WHY_SLEEPING: return "it sleeps";
  case DR_WHY_DISK: return "it is in disk I/O";
  case DR_WHY_BUSY: return "it is busy on the CPU";
  case DR_WHY_OFF_COLLECTIVE:
    return "it is not in the collective its peers wait in";
  case DR_WHY_BUSY_PEERS_WAIT:
    return "it is busy on the CPU while its peers wait";
  case DR_WHY_WAITED:
    return "it waits, and no rank of this node is stopped, busy or elsewhere";
  default: return "";
  }
}
