#include "ratelimit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

void dr_rl_init(dr_ratelimit_t *rl, const char *what,
                const char *const *kinds, size_t n_kinds, uint32_t burst,
                uint32_t interval_ms) {
  memset(rl, 0, sizeof(*rl));
  rl->what = what;
  rl->kinds = kinds;
  rl->n_kinds = n_kinds < DR_RL_MAX_KINDS ? n_kinds : DR_RL_MAX_KINDS;
  rl->burst = burst;
  rl->interval_ms = interval_ms > 0 ? interval_ms : 1;
}

/* Logs the held events as one line and closes the window. */
static void summarise(dr_ratelimit_t *rl, uint64_t now_ms) {
  if (rl->n_held > 0) {
    char line[1800];
    size_t o = 0;
    int n = snprintf(line, sizeof(line),
                     "%" PRIu64 " more %s in the last %.1f s:", rl->n_held,
                     rl->what, (double)(now_ms - rl->start_ms) / 1000.0);
    o = n > 0 ? (size_t)n : 0;
    const char *sep = " ";
    for (size_t k = 0; k < rl->n_kinds && o < sizeof(line); k++) {
      if (rl->held[k] == 0)
        continue;
      n = snprintf(line + o, sizeof(line) - o, "%s%" PRIu64 " %s (first: %s)",
                   sep, rl->held[k], rl->kinds[k], rl->sample[k]);
      o += n > 0 ? (size_t)n : 0;
      sep = ", ";
    }
    DR_WARN("%s", line);
    /* The flood is on: the next window logs nothing in full unless a
     * whole interval passes quietly first. */
    rl->quiet_from_ms = now_ms + rl->interval_ms;
  }
  rl->open = 0;
  rl->n_held = 0;
  memset(rl->held, 0, sizeof(rl->held));
}

void dr_rl_tick(dr_ratelimit_t *rl, uint64_t now_ms) {
  if (rl->open && now_ms - rl->start_ms >= rl->interval_ms)
    summarise(rl, now_ms);
}

void dr_rl_flush(dr_ratelimit_t *rl, uint64_t now_ms) {
  if (rl->open)
    summarise(rl, now_ms);
}

void dr_rl_vwarn(dr_ratelimit_t *rl, uint64_t now_ms, size_t kind,
                 uint64_t n, const char *fmt, va_list ap) {
  if (DR_LOG_WARN > dr_log_level)
    return;
  dr_rl_tick(rl, now_ms);
  if (!rl->open) {
    rl->open = 1;
    rl->start_ms = now_ms;
    rl->logged = 0;
    rl->allowed = now_ms >= rl->quiet_from_ms ? rl->burst : 0;
  }
  if (rl->logged < rl->allowed) {
    rl->logged++;
    char line[1024];
    vsnprintf(line, sizeof(line), fmt, ap);
    DR_WARN("%s", line);
    return;
  }
  if (kind >= rl->n_kinds)
    kind = rl->n_kinds > 0 ? rl->n_kinds - 1 : 0;
  if (rl->held[kind] == 0)
    vsnprintf(rl->sample[kind], sizeof(rl->sample[kind]), fmt, ap);
  rl->held[kind] += n;
  rl->n_held += n;
}

void dr_rl_warn(dr_ratelimit_t *rl, uint64_t now_ms, size_t kind, uint64_t n,
                const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dr_rl_vwarn(rl, now_ms, kind, n, fmt, ap);
  va_end(ap);
}
