/* train's checkpoints: resuming at start, and what resuming and writing
 * share (exit codes, advice, the payload's spans). Rank 0 alone touches
 * --ckpt-dir; the other ranks receive what it loaded through the process
 * group. The writing is in train_ckpt_save.c. */
#include "train.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "gpu_train.h"
#include "train_ckpt.h"

/* What rank 0 tells the others at start. */
typedef struct {
  int64_t code; /* an exit code of train; 0 = go on */
  uint64_t step;
  uint64_t found; /* 1 when a checkpoint is broadcast next */
  uint64_t cmp_taken; /* 1 when its compression state follows */
  uint64_t ls_taken;  /* 1 when the loss scaler's state is here */
  double ls_scale;
  uint64_t ls_good, ls_skipped;
  uint64_t sched_steps; /* the schedule's total_steps from here */
} verdict_t;

int dr__train_ckpt_exit_code(int rc) {
  switch (dr_ckpt_fail_kind(rc)) {
  case DR_CKPT_FAIL_STORAGE:
    return DR_TRAIN_ESTORAGE;
  case DR_CKPT_FAIL_NOMEM:
    return DR_TRAIN_ENOMEM;
  default:
    return DR_TRAIN_EFAIL;
  }
}

const char *dr__train_ckpt_advice(char *buf, size_t n, int rc,
                                  const char *dir) {
  switch (-rc) {
  case ENOSPC:
    snprintf(buf, n, "free space in %s", dir);
    break;
  case EDQUOT:
  case EFBIG:
    snprintf(buf, n, "raise the quota or the file size limit of %s, or free "
             "space there", dir);
    break;
  case EROFS:
    snprintf(buf, n, "make %s writable (remount it read-write)", dir);
    break;
  case EACCES:
  case EPERM:
    snprintf(buf, n, "give this user permission to read and write in %s",
             dir);
    break;
  default:
    snprintf(buf, n, "check the disk of %s (dmesg)", dir);
    break;
  }
  return buf;
}

const char *dr__train_ckpt_exit_note(int code, char *buf, size_t n) {
  const dr_exit_info_t *e = dr_exit_info(code);
  snprintf(buf, n, " (exit %d: %s%s)", code,
           e != NULL ? e->brief : "a crash to ddprun: it may restart",
           e != NULL && e->policy == DR_EXIT_STOP ? ", not restarted" : "");
  return buf;
}

dr_ckpt_span_t *dr__train_ckpt_spans(dr_run_t *r, float *cmp,
                                     uint64_t cmp_elems, size_t *n) {
  size_t np = dr_model_n_params(r->model);
  dr_ckpt_span_t *s = calloc(np + 2, sizeof(*s));
  if (s == NULL)
    return NULL;
  for (size_t i = 0; i < np; i++) {
    dr_param_t *p = dr_model_param(r->model, i);
    s[i].p = p->w;
    s[i].n_elems = p->n_elems;
  }
  s[np].p = dr_optim_state(r->opt);
  s[np].n_elems = dr_optim_state_elems(r->opt);
  s[np + 1].p = cmp;
  s[np + 1].n_elems = (size_t)cmp_elems;
  *n = np + 2;
  return s;
}

/* The first newer checkpoint that could not be read because the storage
 * refused (not because the file is damaged). */
typedef struct {
  int code;
  char path[4096];
  char why[512];
} unreadable_t;

/* A damaged newer file, or what is named like a newer checkpoint but is
 * not one (a directory, a FIFO, a file of an older step), is passed over,
 * said once; one that the storage will not give up is a failure of its
 * own (falling back to an older one would silently undo training). */
static void report_skip(void *arg, const char *path, int code,
                        const char *why) {
  unreadable_t *u = arg;
  if (dr_ckpt_fail_kind(code) == DR_CKPT_FAIL_STORAGE) {
    if (u->code == 0) {
      u->code = code;
      snprintf(u->path, sizeof(u->path), "%s", path);
      snprintf(u->why, sizeof(u->why), "%s",
               why[0] != '\0' ? why : dr_strerror(code));
    }
    return;
  }
  /* What is not a file, or a file named for another step: why says it
   * all. */
  int plain = code == -EISDIR || code == DR_ENOTREG || code == DR_CKPT_ESTEP;
  fprintf(stderr, "train: rank 0: skipping the checkpoint %s: %s%s%s%s\n",
          path, why[0] != '\0' ? why : dr_strerror(code),
          plain ? "" : " (", plain ? "" : dr_strerror(code), plain ? "" : ")");
}

/* mkdir -p. 0 or -errno. */
static int make_dirs(const char *dir) {
  char p[4096];
  if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p))
    return -ENAMETOOLONG;
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s != '\0')
      continue;
    char c = *s;
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
      return -errno;
    *s = c;
    if (c == '\0')
      break;
  }
  struct stat st;
  if (stat(dir, &st) != 0)
    return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* The exit code of a --ckpt-dir that cannot be created or listed: the
 * storage's codes, else a configuration error. */
static int dir_failed(const char *what, const char *dir, int rc) {
  char note[96], advice[4200] = "";
  int code = dr_ckpt_fail_kind(rc) == DR_CKPT_FAIL_OTHER
                 ? DR_TRAIN_ECONFIG
                 : dr__train_ckpt_exit_code(rc);
  if (code == DR_TRAIN_ESTORAGE)
    dr__train_ckpt_advice(advice, sizeof(advice), rc, dir);
  fprintf(stderr, "train: rank 0: cannot %s --ckpt-dir %s (%s)%s%s%s\n",
          what, dir, strerror(-rc), advice[0] != '\0' ? "; " : "", advice,
          dr__train_ckpt_exit_note(code, note, sizeof(note)));
  return code;
}

/* Rank 0's part of the start: the verdict, and the state loaded. */
static verdict_t pick(dr_run_t *r, float **cmp_state) {
  const dr_train_config_t *c = &r->c;
  verdict_t v;
  memset(&v, 0, sizeof(v));
  char err[4400] = "", note[96];
  /* Also without --ckpt-every: a preemption (SIGUSR1) writes one. */
  int made = make_dirs(c->ckpt_dir);
  if (made != 0) {
    v.code = dir_failed("create", c->ckpt_dir, made);
    return v;
  }
  dr_ckpt_header_t h;
  char path[4096];
  unreadable_t unreadable;
  memset(&unreadable, 0, sizeof(unreadable));
  int found = dr_ckpt_find_latest(c->ckpt_dir, &h, path, sizeof(path),
                                  report_skip, &unreadable);
  if (found < 0) {
    v.code = dir_failed("read", c->ckpt_dir, found);
    return v;
  }
  if (unreadable.code != 0) {
    char advice[4200];
    fprintf(stderr, "train: rank 0: cannot read the checkpoint %s: %s; %s, "
            "or move the file away to resume from an older one%s\n",
            unreadable.path, unreadable.why,
            dr__train_ckpt_advice(advice, sizeof(advice), unreadable.code,
                           c->ckpt_dir),
            dr__train_ckpt_exit_note(DR_TRAIN_ESTORAGE, note, sizeof(note)));
    v.code = DR_TRAIN_ESTORAGE;
    return v;
  }
  int removed = dr_ckpt_remove_temp(c->ckpt_dir, err, sizeof(err));
  if (removed > 0)
    fprintf(stderr, "train: rank 0: removed %d unfinished checkpoint "
            "file(s) from %s\n", removed, c->ckpt_dir);
  else if (removed < 0)
    fprintf(stderr, "train: rank 0: %s\n", err);
  if (found == 0) {
    fprintf(stderr, "train: rank 0: no checkpoint in %s; starting at step "
            "0\n", c->ckpt_dir);
    return v;
  }
  v.code = dr__train_ckpt_fits(r, path, &h, &v.sched_steps);
  int take_state = 0, take_scale = 0;
  if (v.code == 0)
    v.code = dr__train_ckpt_cmp_fits(r, path, &h, &take_state, &take_scale);
  if (v.code != 0)
    return v;
  size_t n;
  float *cs = h.comm_elems > 0 ? malloc(h.comm_elems * sizeof(float)) : NULL;
  dr_ckpt_span_t *spans = dr__train_ckpt_spans(r, cs, h.comm_elems, &n);
  if (spans == NULL || (h.comm_elems > 0 && cs == NULL)) {
    free(cs);
    free(spans);
    v.code = dr_train_nomem(r, "the list of a checkpoint's tensors");
    return v;
  }
  int rc = dr_ckpt_read(path, &h, spans, n, err, sizeof(err));
  free(spans);
  if (rc == 0 && take_state && cs != NULL) {
    *cmp_state = cs;
    v.cmp_taken = 1;
  } else {
    free(cs);
  }
  if (take_scale && h.version >= 3) {
    v.ls_taken = 1;
    v.ls_scale = h.loss_scale;
    v.ls_good = h.ls_good;
    v.ls_skipped = h.ls_skipped;
  }
  if (rc != 0) {
    char advice[4200] = "";
    v.code = dr__train_ckpt_exit_code(rc);
    if (v.code == DR_TRAIN_ESTORAGE)
      dr__train_ckpt_advice(advice, sizeof(advice), rc, c->ckpt_dir);
    fprintf(stderr, "train: rank 0: cannot load the checkpoint %s: %s%s%s"
            "%s\n", path, err, advice[0] != '\0' ? "; " : "", advice,
            dr__train_ckpt_exit_note((int)v.code, note, sizeof(note)));
    return v;
  }
  fprintf(stderr, "train: rank 0: resuming at step %" PRIu64 " of %" PRIu64
          " (epoch %" PRIu64 ", position %" PRIu64 " of %" PRIu64 ") from "
          "%s\n", h.step, r->total_steps, h.epoch, h.epoch_pos,
          h.steps_per_epoch, path);
  v.step = h.step;
  v.found = 1;
  return v;
}

int dr_train_resume(dr_run_t *r, uint64_t *start) {
  *start = 0;
  if (r->c.ckpt_dir == NULL)
    return 0;
  verdict_t v;
  memset(&v, 0, sizeof(v));
  float *cmp_state = NULL;
  if (r->rank == 0)
    v = pick(r, &cmp_state);
  else
    dr_train_hold_stop();
  char err[256] = "";
  int rc = dr_pg_broadcast_sync(r->pg, &v, sizeof(v), 0, err, sizeof(err));
  if (r->rank != 0 && rc == 0 && v.code != 0)
    return dr_train_peer_failed(r, "rank 0 could not resume from its "
                                "checkpoint");
  if (r->rank != 0)
    dr_train_release_stop();
  if (rc != 0 || v.code != 0 || !v.found)
    free(cmp_state);
  if (rc != 0)
    return dr_train_comm_failed(r, "checkpoint broadcast", rc, err);
  if (v.code != 0)
    return (int)v.code;
  if (!v.found)
    return 0;
  /* Every rank takes rank 0's bytes: identical state wherever the file
   * is, and no other rank needs to see --ckpt-dir. */
  size_t n;
  dr_ckpt_span_t *spans = dr__train_ckpt_spans(r, NULL, 0, &n);
  if (spans == NULL) {
    free(cmp_state);
    return dr_train_nomem(r, "the list of a checkpoint's tensors");
  }
  for (size_t i = 0; i < n && rc == 0; i++)
    if (spans[i].n_elems > 0)
      rc = dr_pg_broadcast_sync(r->pg, spans[i].p,
                                spans[i].n_elems * sizeof(float), 0, err,
                                sizeof(err));
  free(spans);
  if (rc != 0) {
    free(cmp_state);
    return dr_train_comm_failed(r, "checkpoint broadcast", rc, err);
  }
  if (v.cmp_taken) {
    int code = dr__train_ckpt_cmp_scatter(r, cmp_state);
    free(cmp_state);
    if (code != 0)
      return code;
  }
  /* The schedule every rank follows from here: the checkpoint's when an
   * extension holds it (and then in every checkpoint this run writes, so
   * that a resume of the extended run follows it too). */
  r->sched_steps = v.sched_steps;
  dr_optim_set_total_steps(r->opt, v.sched_steps);
  /* The file's: dr__train_ckpt_fits let it through only equal to ours. */
  r->ckpt_global_batch = r->global_batch;
  if (v.ls_taken) {
    r->ls.scale = v.ls_scale;
    r->ls.good = v.ls_good;
    r->ls.skipped = v.ls_skipped;
  }
  /* The host copy is the checkpoint's: whichever device wrote it. */
  if (r->gpu != NULL && (rc = dr_gpu_train_from_host(r)) != 0)
    return rc;
  *start = v.step;
  return 0;
}
