/* train's checkpoints: resuming at start and saving every --ckpt-every
 * steps. Rank 0 alone touches --ckpt-dir; the other ranks receive what it
 * loaded, and wait for each save, through the process group. */
#include "train.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ckpt.h"
#include "gpu_train.h"
#include "progress.h"

/* What rank 0 tells the others at start and after each save. */
typedef struct {
  int64_t code; /* an exit code of train; 0 = go on */
  uint64_t step;
  uint64_t found; /* start: 1 when a checkpoint is broadcast next */
} verdict_t;

/* The header this run would write at step. */
static void run_header(dr_run_t *r, uint64_t step, dr_ckpt_header_t *h) {
  const dr_model_config_t *mc = dr_model_config(r->model);
  memset(h, 0, sizeof(*h));
  h->rng_version = DR_CKPT_RNG_XOSHIRO;
  h->step = step;
  h->total_steps = r->total_steps;
  h->steps_per_epoch = r->steps_per_epoch;
  h->epoch = step / r->steps_per_epoch;
  h->epoch_pos = step % r->steps_per_epoch;
  h->seed = r->c.seed;
  h->train_samples = dr_data_len(r->data, DR_SPLIT_TRAIN);
  h->global_batch = r->global_batch;
  h->optimizer = strcmp(r->c.optimizer, "adamw") == 0 ? DR_OPT_ADAMW
                                                       : DR_OPT_SGD;
  h->layers = mc->layers;
  h->width = mc->width;
  h->input_dim = mc->input_dim;
  h->classes = mc->classes;
  h->context = mc->context;
  h->embed_dim = mc->embed_dim;
  h->param_elems = dr_model_n_elems(r->model);
  h->optim_elems = dr_optim_state_elems(r->opt);
}

/* The model's parameters in registration order, then the optimizer state:
 * the payload's spans. Caller frees. */
static dr_ckpt_span_t *run_spans(dr_run_t *r, size_t *n) {
  size_t np = dr_model_n_params(r->model);
  dr_ckpt_span_t *s = calloc(np + 1, sizeof(*s));
  if (s == NULL)
    return NULL;
  for (size_t i = 0; i < np; i++) {
    dr_param_t *p = dr_model_param(r->model, i);
    s[i].p = p->w;
    s[i].n_elems = p->n_elems;
  }
  s[np].p = dr_optim_state(r->opt);
  s[np].n_elems = dr_optim_state_elems(r->opt);
  *n = np + 1;
  return s;
}

/* A checkpoint that does not fit this run is a configuration error: the
 * run must not silently start over or diverge. Names the first field
 * that differs. */
static int check_fits(dr_run_t *r, const char *path,
                      const dr_ckpt_header_t *f) {
  dr_ckpt_header_t w;
  run_header(r, f->step, &w);
  static const struct {
    size_t off;
    int wide;
    const char *what;
  } fields[] = {
#define F32(f, what) {offsetof(dr_ckpt_header_t, f), 0, what}
#define F64(f, what) {offsetof(dr_ckpt_header_t, f), 1, what}
      F32(rng_version, "RNG version"),
      F64(total_steps, "--steps (the learning-rate schedule's length)"),
      F64(seed, "--seed"),
      F64(train_samples, "training samples (--samples or the text file)"),
      F64(global_batch, "global batch (--batch x world x --grad-accum; "
                        "--global-batch keeps it across world sizes)"),
      F64(steps_per_epoch, "steps per epoch"),
      F32(optimizer, "--optimizer (0 sgd, 1 adamw)"),
      F32(layers, "--layers"),
      F32(width, "--width"),
      F32(input_dim, "--input-dim"),
      F32(classes, "--classes"),
      F32(context, "--context"),
      F32(embed_dim, "--embed-dim"),
      F64(param_elems, "parameter count"),
      F64(optim_elems, "optimizer-state floats (--optimizer, --momentum)"),
      F64(epoch, "epoch of the step"),
      F64(epoch_pos, "position of the step in its epoch"),
#undef F32
#undef F64
  };
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    uint64_t a, b;
    if (fields[i].wide) {
      memcpy(&a, (const char *)f + fields[i].off, 8);
      memcpy(&b, (const char *)&w + fields[i].off, 8);
    } else {
      uint32_t x, y;
      memcpy(&x, (const char *)f + fields[i].off, 4);
      memcpy(&y, (const char *)&w + fields[i].off, 4);
      a = x;
      b = y;
    }
    if (a != b) {
      fprintf(stderr, "train: rank 0: the checkpoint %s does not fit this "
              "run: %s is %" PRIu64 " there and %" PRIu64 " here; resume "
              "with the settings it was written with, or give another "
              "--ckpt-dir (exit %d)\n", path, fields[i].what, a, b,
              DR_TRAIN_ECONFIG);
      return DR_TRAIN_ECONFIG;
    }
  }
  if (f->step > r->total_steps) {
    fprintf(stderr, "train: rank 0: the checkpoint %s is of step %" PRIu64
            ", past the run's %" PRIu64 " steps (exit %d)\n", path, f->step,
            r->total_steps, DR_TRAIN_ECONFIG);
    return DR_TRAIN_ECONFIG;
  }
  return 0;
}

static void report_skip(void *arg, const char *path, int code,
                        const char *why) {
  (void)arg;
  fprintf(stderr, "train: rank 0: skipping the checkpoint %s: %s (%s)\n",
          path, why[0] != '\0' ? why : dr_ckpt_strerror(code),
          dr_ckpt_strerror(code));
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

/* Rank 0's part of the start: the verdict, and the state loaded. */
static verdict_t pick(dr_run_t *r) {
  const dr_train_config_t *c = &r->c;
  verdict_t v = {0, 0, 0};
  char err[4400] = "";
  /* Also without --ckpt-every: a preemption (SIGUSR1) writes one. */
  int made = make_dirs(c->ckpt_dir);
  if (made != 0) {
    fprintf(stderr, "train: rank 0: cannot create --ckpt-dir %s (%s) "
            "(exit %d)\n", c->ckpt_dir, strerror(-made), DR_TRAIN_ECONFIG);
    v.code = DR_TRAIN_ECONFIG;
    return v;
  }
  dr_ckpt_header_t h;
  char path[4096];
  int found = dr_ckpt_find_latest(c->ckpt_dir, &h, path, sizeof(path),
                                  report_skip, NULL);
  if (found < 0) {
    fprintf(stderr, "train: rank 0: cannot read --ckpt-dir %s (%s) (exit "
            "%d)\n", c->ckpt_dir, strerror(-found), DR_TRAIN_ECONFIG);
    v.code = DR_TRAIN_ECONFIG;
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
  v.code = check_fits(r, path, &h);
  if (v.code != 0)
    return v;
  size_t n;
  dr_ckpt_span_t *spans = run_spans(r, &n);
  int rc = spans == NULL ? -ENOMEM
                         : dr_ckpt_read(path, &h, spans, n, err, sizeof(err));
  free(spans);
  if (rc != 0) {
    fprintf(stderr, "train: rank 0: cannot load the checkpoint %s: %s "
            "(exit %d)\n", path, rc == -ENOMEM ? "out of memory" : err,
            DR_TRAIN_ECOMM);
    v.code = DR_TRAIN_ECOMM;
    return v;
  }
  fprintf(stderr, "train: rank 0: resuming at step %" PRIu64 " of %" PRIu64
          " (epoch %" PRIu64 ", position %" PRIu64 " of %" PRIu64 ") from "
          "%s\n", h.step, h.total_steps, h.epoch, h.epoch_pos,
          h.steps_per_epoch, path);
  v.step = h.step;
  v.found = 1;
  return v;
}

int dr_train_resume(dr_run_t *r, uint64_t *start) {
  *start = 0;
  if (r->c.ckpt_dir == NULL)
    return 0;
  verdict_t v = {0, 0, 0};
  if (r->rank == 0)
    v = pick(r);
  char err[256] = "";
  int rc = dr_pg_broadcast_sync(r->pg, &v, sizeof(v), 0, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "checkpoint broadcast", rc, err);
  if (v.code != 0) {
    if (r->rank != 0)
      fprintf(stderr, "train: rank %u: rank 0 could not resume from its "
              "checkpoint; stopping (exit %d)\n", r->rank, (int)v.code);
    return (int)v.code;
  }
  if (!v.found)
    return 0;
  /* Every rank takes rank 0's bytes: identical state wherever the file
   * is, and no other rank needs to see --ckpt-dir. */
  size_t n;
  dr_ckpt_span_t *spans = run_spans(r, &n);
  if (spans == NULL)
    return DR_TRAIN_ECOMM;
  for (size_t i = 0; i < n && rc == 0; i++)
    if (spans[i].n_elems > 0)
      rc = dr_pg_broadcast_sync(r->pg, spans[i].p,
                                spans[i].n_elems * sizeof(float), 0, err,
                                sizeof(err));
  free(spans);
  if (rc != 0)
    return dr_train_comm_failed(r, "checkpoint broadcast", rc, err);
  /* The host copy is the checkpoint's: whichever device wrote it. */
  if (r->gpu != NULL && (rc = dr_gpu_train_from_host(r)) != 0)
    return rc;
  *start = v.step;
  return 0;
}

/* DDPRUN_CKPT_TEST_DELAY_MS=MS[@STEP]: a test hook that holds the
 * finished temporary file MS ms before the rename (of every checkpoint, or
 * of those from STEP on), so that a test can kill the writer in the middle
 * of a checkpoint. ARG: the step's number. */
static void test_delay(void *arg, const char *tmp_path) {
  const char *s = getenv("DDPRUN_CKPT_TEST_DELAY_MS");
  char *end = NULL;
  long ms = s != NULL ? strtol(s, &end, 10) : 0;
  if (ms <= 0)
    return;
  if (*end == '@' && *(const uint64_t *)arg < strtoull(end + 1, NULL, 10))
    return;
  fprintf(stderr, "train: rank 0: test hook: %s is written; waiting %ld ms "
          "before the rename\n", tmp_path, ms);
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* Rank 0: writes the checkpoint of step done and prunes; an exit code. */
static int save(dr_run_t *r, uint64_t done) {
  const dr_train_config_t *c = &r->c;
  dr_ckpt_header_t h;
  run_header(r, done, &h);
  /* A GPU run saves the host copy of its device state: the same file as
   * a CPU run's, so either resumes the other's. */
  if (r->gpu != NULL) {
    int g = dr_gpu_train_to_host(r, 1);
    if (g != 0)
      return g;
  }
  size_t n;
  dr_ckpt_span_t *spans = run_spans(r, &n);
  if (spans == NULL)
    return DR_TRAIN_ECOMM;
  char path[4096], err[4400] = "";
  uint64_t t0 = dr_now_us();
  int rc = dr_ckpt_write(c->ckpt_dir, &h, spans, n, test_delay, &done, path,
                         sizeof(path), err, sizeof(err));
  free(spans);
  if (rc != 0) {
    fprintf(stderr, "train: rank 0: cannot write the checkpoint of step %"
            PRIu64 ": %s (exit %d)\n", done, err, DR_TRAIN_ECOMM);
    return DR_TRAIN_ECOMM;
  }
  double ms = (dr_now_us() - t0) / 1e3;
  if (dr_ckpt_prune(c->ckpt_dir, done, c->ckpt_keep, err, sizeof(err)) < 0)
    fprintf(stderr, "train: rank 0: pruning old checkpoints: %s\n", err);
  fprintf(stdout, "checkpoint step %" PRIu64 " %s (%.1f MiB in %.0f ms)\n",
          done, path, (DR_CKPT_HEADER_BYTES + 4.0 * (h.param_elems +
          h.optim_elems)) / 1048576.0, ms);
  return 0;
}

/* DDPRUN_CKPT_TEST_KILL_AT=STEP[:RANK]: a test hook that SIGKILLs the
 * worker (every rank, or RANK) once STEP steps are done, after that
 * step's checkpoint, on the first attempt of the job only
 * (TORCHELASTIC_RESTART_COUNT unset or 0), so that a restarted group
 * runs on. */
static void test_kill(dr_run_t *r, uint64_t done) {
  const char *s = getenv("DDPRUN_CKPT_TEST_KILL_AT");
  if (s == NULL || s[0] == '\0')
    return;
  const char *restarts = getenv("TORCHELASTIC_RESTART_COUNT");
  if (restarts != NULL && strtoul(restarts, NULL, 10) != 0)
    return;
  char *end;
  unsigned long long at = strtoull(s, &end, 10);
  if (at != done)
    return;
  if (*end == ':' && strtoul(end + 1, NULL, 10) != r->rank)
    return;
  fprintf(stderr, "train: rank %u: test hook: killing this worker after "
          "step %" PRIu64 "\n", r->rank, done);
  raise(SIGKILL);
}

int dr_train_ckpt_due(const dr_run_t *r, uint64_t done) {
  const dr_train_config_t *c = &r->c;
  return c->ckpt_dir != NULL && c->ckpt_every > 0 && done % c->ckpt_every == 0;
}

int dr_train_ckpt_after_step(dr_run_t *r, uint64_t done) {
  if (dr_train_ckpt_due(r, done)) {
    int rc = dr_train_ckpt_save(r, done);
    if (rc != 0)
      return rc;
  }
  test_kill(r, done);
  return 0;
}

int dr_train_ckpt_save(dr_run_t *r, uint64_t done) {
  verdict_t v = {0, done, 0};
  if (r->rank == 0)
    v.code = save(r, done);
  /* The barrier after the save: no rank starts the next step before rank 0
   * has committed this one, and all stop together if it could not. */
  char err[256] = "";
  int rc = dr_pg_broadcast_sync(r->pg, &v, sizeof(v), 0, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "checkpoint barrier", rc, err);
  if (v.code != 0) {
    if (r->rank != 0)
      fprintf(stderr, "train: rank %u: rank 0 could not write the "
              "checkpoint of step %" PRIu64 "; stopping (exit %d)\n",
              r->rank, done, (int)v.code);
    return (int)v.code;
  }
  /* The time spent on the checkpoint counts once against the agent's
   * --hang-timeout, not in addition to the next step's. */
  dr_progress_report(r->progress, done);
  return 0;
}
