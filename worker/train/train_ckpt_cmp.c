/* The compression and loss-scaling part of train's checkpoints: what the
 * header records, whether a file's settings fit this run, and the state
 * (PowerSGD's Q, the same on every rank, and every rank's error
 * feedback, gathered to rank 0 for a save and scattered on a resume). */
#include "train_ckpt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The compression-state floats of this run: Q, then world x EF. */
static uint64_t state_elems(const dr_run_t *r) {
  if (r->cmp == NULL)
    return 0;
  return dr_cmp_q_elems(r->cmp) +
         (uint64_t)r->world * dr_cmp_ef_elems(r->cmp);
}

void dr__train_ckpt_cmp_header(dr_run_t *r, dr_ckpt_header_t *h) {
  h->grad_compress = (uint32_t)r->cmpc.kind;
  if (r->cmpc.kind == DR_CMP_POWERSGD) {
    h->powersgd_rank = r->cmpc.rank;
    h->powersgd_start = r->cmpc.start_step;
    h->powersgd_no_ef = !r->cmpc.error_feedback;
  }
  h->comm_elems = state_elems(r);
  h->loss_scale_mode = (uint32_t)r->ls.mode;
  h->loss_scale = r->ls.scale;
  h->ls_good = r->ls.good;
  h->ls_skipped = r->ls.skipped;
}

/* "powersgd:4 (from step 11)", "fp16", "powersgd:4 (from step 11, no
 * error feedback)" */
static const char *setting(const dr_ckpt_header_t *h, char *buf, size_t n) {
  char name[32];
  dr_cmp_name((dr_cmp_kind_t)h->grad_compress, h->powersgd_rank, name,
              sizeof(name));
  if (h->grad_compress == DR_CMP_POWERSGD)
    snprintf(buf, n, "%s (from step %" PRIu64 "%s)", name,
             h->powersgd_start + 1,
             h->powersgd_no_ef ? ", no error feedback" : "");
  else
    snprintf(buf, n, "%s", name);
  return buf;
}

static const char *ls_mode(uint32_t m) {
  return m == DR_LS_DYNAMIC ? "dynamic" : m == DR_LS_FIXED ? "fixed" : "none";
}

int dr__train_ckpt_cmp_fits(dr_run_t *r, const char *path,
                            const dr_ckpt_header_t *f, int *take_state,
                            int *take_scale) {
  dr_ckpt_header_t w;
  memset(&w, 0, sizeof(w));
  dr__train_ckpt_cmp_header(r, &w);
  char list[512] = "", a[96], b[96];
  int same = f->grad_compress == w.grad_compress &&
             f->powersgd_rank == w.powersgd_rank &&
             f->powersgd_start == w.powersgd_start &&
             f->powersgd_no_ef == w.powersgd_no_ef;
  if (!same)
    snprintf(list, sizeof(list), "--grad-compress is %s there and %s here",
             setting(f, a, sizeof(a)), setting(&w, b, sizeof(b)));
  else if (f->comm_elems != w.comm_elems)
    snprintf(list, sizeof(list), "the compression state is %" PRIu64
             " floats there and %" PRIu64 " here (PowerSGD keeps each "
             "rank's error feedback: another world size?)", f->comm_elems,
             w.comm_elems);
  int ls_same = f->loss_scale_mode == w.loss_scale_mode &&
                (f->loss_scale_mode != DR_LS_FIXED ||
                 f->loss_scale == r->ls.scale);
  if (!ls_same) {
    size_t len = strlen(list);
    snprintf(list + len, sizeof(list) - len, "%s--loss-scale is %s %g there "
             "and %s %g here", len > 0 ? ", " : "",
             ls_mode(f->loss_scale_mode), f->loss_scale,
             ls_mode(w.loss_scale_mode), r->ls.scale);
  }
  *take_state = same && f->comm_elems == w.comm_elems;
  *take_scale = ls_same;
  if (list[0] == '\0')
    return 0;
  if (r->c.allow_schedule_change) {
    fprintf(stderr, "train: rank 0: the checkpoint %s has other settings: "
            "%s; going on with this run's from step %" PRIu64 "%s "
            "(--allow-schedule-change)\n", path, list, f->step + 1,
            *take_state ? "" : ", its compression state dropped");
    return 0;
  }
  fprintf(stderr, "train: rank 0: the checkpoint %s does not fit this run: "
          "%s; resume with the settings it was written with, give "
          "--allow-schedule-change to go on with this run's, or give another "
          "--ckpt-dir (exit %d)\n", path, list, DR_TRAIN_ECONFIG);
  return DR_TRAIN_ECONFIG;
}

int dr__train_ckpt_cmp_gather(dr_run_t *r, float **out, uint64_t *n) {
  *out = NULL;
  *n = state_elems(r);
  if (*n == 0)
    return 0;
  size_t nq = dr_cmp_q_elems(r->cmp), ne = dr_cmp_ef_elems(r->cmp);
  float *buf = malloc(*n * sizeof(float));
  if (buf == NULL)
    return dr_train_nomem(r, "the ranks' compression state for a "
                          "checkpoint");
  memcpy(buf, dr_cmp_q(r->cmp), nq * sizeof(float));
  char err[256] = "";
  int rc = dr_pg_allgather_sync(r->pg, dr_cmp_ef(r->cmp), ne * sizeof(float),
                                buf + nq, err, sizeof(err));
  if (rc != 0) {
    free(buf);
    return dr_train_comm_failed(r, "error-feedback all-gather", rc, err);
  }
  *out = buf;
  return 0;
}

int dr__train_ckpt_cmp_scatter(dr_run_t *r, float *state) {
  uint64_t n = state_elems(r);
  if (n == 0)
    return 0;
  int mine = state == NULL;
  if (mine && (state = malloc(n * sizeof(float))) == NULL)
    return dr_train_nomem(r, "the compression state of a checkpoint");
  char err[256] = "";
  int rc = dr_pg_broadcast_sync(r->pg, state, n * sizeof(float), 0, err,
                                sizeof(err));
  if (rc == 0) {
    size_t nq = dr_cmp_q_elems(r->cmp), ne = dr_cmp_ef_elems(r->cmp);
    memcpy(dr_cmp_q(r->cmp), state, nq * sizeof(float));
    memcpy(dr_cmp_ef(r->cmp), state + nq + (size_t)r->rank * ne,
           ne * sizeof(float));
  }
  if (mine)
    free(state);
  if (rc != 0)
    return dr_train_comm_failed(r, "checkpoint broadcast", rc, err);
  return 0;
}
