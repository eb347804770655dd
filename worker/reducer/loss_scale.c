/* The loss scaler's state machine. See loss_scale.h. */
#include "loss_scale.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

int dr_loss_scale_parse(const char *v, dr_loss_scale_t *s, char *err,
                        size_t n) {
  memset(s, 0, sizeof(*s));
  s->last_rank = -2;
  s->scale = 1.0;
  if (strcmp(v, "none") == 0)
    return 0;
  const char *num = v;
  s->mode = DR_LS_FIXED;
  if (strncmp(v, "dynamic", 7) == 0 && (v[7] == '\0' || v[7] == ':')) {
    s->mode = DR_LS_DYNAMIC;
    s->scale = DR_LS_INIT;
    if (v[7] == '\0')
      return 0;
    num = v + 8;
  }
  char *end;
  errno = 0;
  double d = strtod(num, &end);
  if (errno != 0 || end == num || *end != '\0' || !isfinite(d) ||
      d < DR_LS_FLOOR || d > 1e30) {
    snprintf(err, n, "--loss-scale '%s': expected dynamic, dynamic:INIT, "
             "none, or a fixed scale from 1 to 1e30", v);
    return DR_EBADARG;
  }
  s->scale = d;
  return 0;
}

int dr_loss_scale_update(dr_loss_scale_t *s, int overflow, int64_t rank,
                         uint64_t step) {
  if (s->mode == DR_LS_NONE)
    return 0;
  if (!overflow) {
    if (s->mode == DR_LS_DYNAMIC &&
        ++s->good >= DR_LS_GROWTH_INTERVAL) {
      s->scale *= 2.0;
      s->good = 0;
    }
    return 0;
  }
  s->skipped++;
  s->good = 0;
  s->last_rank = rank;
  s->last_step = step;
  if (s->scale <= DR_LS_FLOOR)
    return DR_LS_EFLOOR;
  if (s->mode == DR_LS_DYNAMIC) {
    s->scale *= 0.5;
    if (s->scale < DR_LS_FLOOR)
      s->scale = DR_LS_FLOOR;
  }
  return DR_LS_SKIP;
}

const char *dr_loss_scale_describe(const dr_loss_scale_t *s, char *buf,
                                   size_t n) {
  if (s->mode == DR_LS_NONE)
    snprintf(buf, n, "none");
  else
    snprintf(buf, n, "%s %g", s->mode == DR_LS_DYNAMIC ? "dynamic" : "fixed",
             s->scale);
  return buf;
}
