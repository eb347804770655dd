/* train's --trace files (worker/train/trace.c): what the reader takes from them.
 *
 *   top level  "otherData": {"ddprun": {"source": "train", "rank": R,
 *              "world": W, "backend": "cpu"|"nccl", "clock_offset_us": X}}
 *              (X only when the agent measured it). Without otherData (an
 *              older train) the rank comes from the "process_name"
 *              metadata event, "rank N", and the world and backend stay
 *              unknown.
 *   "step N"   X, the whole optimizer step N (0-based); older files have
 *              none, and the steps then end at each "optimizer" span.
 *   "data"     X, loading a batch (on thread 0, or 2 beside a GPU).
 *   "L.fwd", "loss"   X, forward spans; "L.bwd" X, a layer's backward
 *              span, which ends when its gradients are complete: those
 *              ends are the gradients' ready times, and the spans, by
 *              name, the backward pass's ops.
 *   "forward+backward"  X, both passes in one span (train on a GPU).
 *   "optimizer"  X, the optimizer step.
 *   "allreduce bucket I (X.XX MiB)"  X on thread 1, the communication of
 *              bucket I, with "args": {"bucket": I, "bytes": B,
 *              "ready_us": T} (T absent when unknown). Older files have no
 *              args: the index then comes from the name, the size from
 *              its MiB figure, and the ready time is unknown.
 * All times are microseconds on the file's clock; server time = time +
 * clock_offset_us.
 */
#include "diag_read_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ends(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* The decimal digits at s up to end (or NUL): 0, or -1. */
static int digits(const char *s, const char *end, uint64_t *v) {
  uint64_t x = 0;
  const char *p = s;
  for (; p < end && *p >= '0' && *p <= '9'; p++) {
    if (x > (UINT64_MAX - 9) / 10)
      return -1;
    x = x * 10 + (uint64_t)(*p - '0');
  }
  if (p == s || p != end)
    return -1;
  *v = x;
  return 0;
}

static void meta(const dr__trace_t *t, dr_dg_rank_t *r) {
  json_t *dd = t->other_data ? json_object_get(t->other_data, "ddprun") : NULL;
  if (json_is_object(dd)) {
    double v;
    int64_t k;
    if (dr__json_num(json_object_get(dd, "rank"), &v) == 0 &&
        (k = dr__as_count(v, INT_MAX)) >= 0)
      r->rank = (int)k;
    if (dr__json_num(json_object_get(dd, "world"), &v) == 0 &&
        (k = dr__as_count(v, INT_MAX)) >= 0)
      r->world = (int)k;
    const char *b = json_string_value(json_object_get(dd, "backend"));
    if (b != NULL)
      snprintf(r->backend, sizeof(r->backend), "%s", b);
    if (dr__json_num(json_object_get(dd, "clock_offset_us"), &v) == 0 &&
        dr__dg_time_ok(v)) {
      r->clock_offset_us = v;
      r->have_clock_offset = 1;
    }
  }
  if (r->rank >= 0)
    return;
  for (size_t i = 0; i < t->n_ev; i++) {
    const dr__ev_t *e = &t->ev[i];
    if (e->ph != 'M' || strcmp(e->name, "process_name") != 0)
      continue;
    json_t *a = dr__ev_args(t, e);
    const char *s = a ? json_string_value(json_object_get(a, "name")) : NULL;
    uint64_t v;
    if (s != NULL && strncmp(s, "rank ", 5) == 0 &&
        digits(s + 5, s + strlen(s), &v) == 0 && v <= INT_MAX)
      r->rank = (int)v;
    json_decref(a);
    if (r->rank >= 0)
      break;
  }
}

typedef struct {
  size_t named; /* buckets read from their names */
} bucket_stats_t;

/* "allreduce bucket I (X.XX MiB)". */
static int bucket(const dr__trace_t *t, const dr__ev_t *e, dr__build_t *b,
                  bucket_stats_t *st) {
  dr_dg_coll_t c = {DR_DG_ALLREDUCE, 0, -1, -1, e->ts, e->ts + e->dur};
  json_t *a = dr__ev_args(t, e);
  double v;
  int64_t k;
  if (a != NULL && json_object_get(a, "bytes") != NULL) {
    if (dr__json_num(json_object_get(a, "bucket"), &v) == 0 &&
        (k = dr__as_count(v, INT_MAX)) >= 0)
      c.bucket = (int)k;
    if (dr__json_num(json_object_get(a, "bytes"), &v) == 0 &&
        (k = dr__as_count(v, INT64_MAX)) >= 0)
      c.n_bytes = (uint64_t)k;
    if (dr__json_num(json_object_get(a, "ready_us"), &v) == 0 && v >= 0 &&
        dr__dg_time_ok(v))
      c.ready_us = v;
  } else {
    const char *s = e->name + strlen("allreduce bucket ");
    const char *sp = strchr(s, ' ');
    uint64_t i;
    if (sp != NULL && digits(s, sp, &i) == 0 && i <= INT_MAX)
      c.bucket = (int)i;
    /* Approximate: the name rounds the size to 0.01 MiB (about 10 KB). An
     * older train writes nothing better. */
    double mib;
    if (sp != NULL && sscanf(sp, " (%lf MiB)", &mib) == 1 && mib >= 0 &&
        mib < 1e9)
      c.n_bytes = (uint64_t)llround(mib * 1048576.0);
    st->named++;
  }
  json_decref(a);
  return dr__build_coll(b, &c);
}

int dr__read_train(const dr__trace_t *t, dr_dg_rank_t *r, char *err,
                   size_t errlen) {
  snprintf(r->source, sizeof(r->source), "train");
  meta(t, r);
  dr__build_t b;
  memset(&b, 0, sizeof(b));
  bucket_stats_t st = {0};
  int rc = 0;
  for (size_t i = 0; i < t->n_ev && rc == 0; i++) {
    const dr__ev_t *e = &t->ev[i];
    if (e->ph != 'X')
      continue;
    const char *n = e->name;
    double t0 = e->ts, t1 = e->ts + e->dur;
    uint64_t step;
    if (strncmp(n, "step ", 5) == 0) {
      if (digits(n + 5, n + strlen(n), &step) == 0)
        rc = dr__build_span(&b, DR__SP_STEP, t0, e->dur, step);
    } else if (strcmp(n, "data") == 0) {
      rc = dr__build_span(&b, DR__SP_DATA, t0, e->dur, 0);
    } else if (ends(n, ".fwd") || strcmp(n, "loss") == 0) {
      rc = dr__build_span(&b, DR__SP_FWD, t0, e->dur, 0);
    } else if (ends(n, ".bwd")) {
      rc = dr__build_bwd(&b, t0, e->dur, e->tid, n);
      if (rc == 0)
        rc = dr__build_span(&b, DR__SP_GRAD, t1, 0, 0);
    } else if (strcmp(n, "forward+backward") == 0) {
      rc = dr__build_span(&b, DR__SP_FWDBWD, t0, e->dur, 0);
    } else if (strcmp(n, "optimizer") == 0) {
      rc = dr__build_span(&b, DR__SP_OPT, t0, e->dur, 0);
    } else if (strncmp(n, "allreduce bucket ", 17) == 0) {
      rc = bucket(t, e, &b, &st);
    }
  }
  if (rc != 0) {
    dr__build_free(&b);
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  if (st.named > 0)
    dr__dg_note(r, "an older train's trace: bucket sizes from their names "
                   "(to 0.01 MiB), ready times unknown");
  if (r->rank < 0)
    dr__dg_note(r, "rank unknown");
  if ((rc = dr__build_steps(&b, r)) != 0)
    snprintf(err, errlen, "out of memory");
  return rc;
}
