/* train --smoke (train_smoke.h): the run, its four checks and their
 * lines, and the checkpoint directory it makes and removes. */
#include "train_smoke.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "fault_inject.h"
#include "gpu_train.h"
#include "train_ckpt.h"

struct dr_train_smoke {
  char dir[4096];   /* the checkpoint directory; "" when none was made */
  char why[640];    /* ... and why not */
  char base[4096];  /* where it was made */
  int made_base;    /* rank 0 created base (an absent --ckpt-dir) too */
};

/* What rank 0 tells the others of the directory. */
typedef struct {
  char dir[4096];
  char why[640];
} made_t;

enum { CHECK_STEPS, CHECK_CKPT, CHECK_EVAL, CHECK_LOSS, N_CHECKS };
enum { NOT_RUN, OK, FAILED };

typedef struct {
  const char *name;
  int state;
  char text[1400]; /* the line after "smoke: NAME: " */
} check_t;

static void set_check(check_t *k, int state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_check(check_t *k, int state, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(k->text, sizeof(k->text), fmt, ap);
  va_end(ap);
  k->state = state;
}

/* Rank 0: mkdtemp under base. 0, or -1 with s->why. */
static int make_dir(struct dr_train_smoke *s, const char *base, int given) {
  snprintf(s->base, sizeof(s->base), "%s", base);
  if (given && mkdir(base, 0755) == 0)
    s->made_base = 1;
  char templ[4096];
  if (snprintf(templ, sizeof(templ), "%s/train-smoke.XXXXXX", base) >=
      (int)sizeof(templ)) {
    snprintf(s->why, sizeof(s->why), "the path under %s is too long", base);
    return -1;
  }
  if (mkdtemp(templ) == NULL) {
    snprintf(s->why, sizeof(s->why), "mkdtemp() in %s%s failed (%s)", base,
             given ? " (--ckpt-dir)" : "", strerror(errno));
    if (s->made_base && rmdir(base) == 0)
      s->made_base = 0;
    return -1;
  }
  snprintf(s->dir, sizeof(s->dir), "%s", templ);
  return 0;
}

int dr_train_smoke_open(dr_run_t *r) {
  dr_train_config_t *c = &r->c;
  struct dr_train_smoke *s = calloc(1, sizeof(*s));
  made_t *m = calloc(1, sizeof(*m));
  if (s == NULL || m == NULL) {
    free(s);
    free(m);
    return dr_train_nomem(r, "--smoke's state");
  }
  r->smoke = s;
  if (r->rank == 0) {
    const char *tmp = getenv("TMPDIR");
    const char *base = c->ckpt_dir != NULL ? c->ckpt_dir
                       : tmp != NULL && tmp[0] != '\0' ? tmp
                                                       : "/tmp";
    make_dir(s, base, c->ckpt_dir != NULL);
    memcpy(m->dir, s->dir, sizeof(m->dir));
    memcpy(m->why, s->why, sizeof(m->why));
  } else {
    dr_train_hold_stop();
  }
  char err[256] = "";
  int rc = dr_pg_broadcast_sync(r->pg, m, sizeof(*m), 0, err, sizeof(err));
  if (r->rank != 0)
    dr_train_release_stop();
  if (rc != 0) {
    free(m);
    return dr_train_comm_failed(r, "--smoke's checkpoint directory", rc, err);
  }
  if (r->rank != 0) {
    memcpy(s->dir, m->dir, sizeof(s->dir));
    memcpy(s->why, m->why, sizeof(s->why));
  }
  free(m);
  /* The same on every rank: whether there is a directory decides who
   * takes part in the checkpoint's collectives. */
  free(c->ckpt_dir);
  c->ckpt_dir = NULL;
  c->ckpt_every = 0;
  if (s->dir[0] != '\0' && (c->ckpt_dir = strdup(s->dir)) == NULL)
    return dr_train_nomem(r, "--smoke's checkpoint directory");
  return 0;
}

/* Rank 0: the checkpoint of step done, read back and compared with the
 * live state, which is what was written. Sets k. */
static void verify(dr_run_t *r, uint64_t done, check_t *k) {
  const char *dir = r->smoke->dir;
  char path[4096], err[512] = "";
  dr_ckpt_header_t h;
  float *back = NULL;
  dr_ckpt_span_t *live = NULL;
  if (dr_ckpt_path(path, sizeof(path), dir, done) != 0) {
    set_check(k, FAILED, "the path of step %" PRIu64 "'s checkpoint in %s "
              "is too long", done, dir);
    return;
  }
  int rc = dr_ckpt_read_header(path, &h, err, sizeof(err));
  uint64_t floats = rc == 0 ? dr_ckpt_floats(&h) : 0;
  if (rc == 0 && floats > 0 &&
      (back = malloc(floats * sizeof(float))) == NULL)
    rc = -ENOMEM;
  dr_ckpt_span_t span = {back, (size_t)floats};
  if (rc == 0)
    rc = dr_ckpt_read(path, &h, &span, 1, err, sizeof(err));
  if (rc != 0) {
    set_check(k, FAILED, "step %" PRIu64 " written to %s, but it cannot be "
              "read back: %s", done, path, err[0] ? err : dr_strerror(rc));
    goto out;
  }
  if (dr_fault_smoke_break("ckpt") && floats > 0) {
    uint32_t bits;
    memcpy(&bits, &back[0], sizeof(bits));
    bits ^= 1u;
    memcpy(&back[0], &bits, sizeof(bits));
    fprintf(stderr, "train: rank 0: test hook: flipped the lowest bit of "
            "the first weight read back from %s (DDPRUN_SMOKE_TEST_BREAK="
            "ckpt)\n", path);
  }
  size_t n;
  live = dr__train_ckpt_spans(r, NULL, 0, &n);
  if (live == NULL) {
    set_check(k, FAILED, "no memory to compare %s with the weights", path);
    goto out;
  }
  /* The parameters, then the optimizer state (the last span, the
   * compression state gathered from every rank, is no rank's own). */
  const size_t np = dr_model_n_params(r->model);
  uint64_t pos = 0;
  uint32_t crc = 0;
  for (size_t i = 0; i + 1 < n; i++) {
    const size_t len = live[i].n_elems;
    if (pos + len > floats) {
      set_check(k, FAILED, "step %" PRIu64 " written to %s holds %" PRIu64
                " floats, fewer than the run's", done, path, floats);
      goto out;
    }
    if (len > 0 && memcmp(back + pos, live[i].p, len * sizeof(float)) != 0) {
      size_t j = 0;
      while (memcmp(back + pos + j, live[i].p + j, sizeof(float)) == 0)
        j++;
      uint32_t was, got;
      memcpy(&was, live[i].p + j, sizeof(was));
      memcpy(&got, back + pos + j, sizeof(got));
      char what[64];
      if (i < np)
        snprintf(what, sizeof(what), "parameter %zu", i);
      else
        snprintf(what, sizeof(what), "the optimizer state");
      set_check(k, FAILED, "step %" PRIu64 " written to %s and read back: "
                "%s differs at element %zu (written 0x%08x, read 0x%08x)",
                done, path, what, j, was, got);
      goto out;
    }
    crc = dr_ckpt_crc32(crc, back + pos, len * sizeof(float));
    pos += len;
  }
  size_t n_params = dr_model_n_elems(r->model);
  set_check(k, OK, "step %" PRIu64 " written to %s and read back: %zu "
            "parameter and %" PRIu64 " optimizer-state floats bit-identical "
            "(%" PRIu64 " bytes, CRC-32 0x%08x)", done, path, n_params,
            pos - n_params, pos * (uint64_t)sizeof(float), crc);
out:
  free(live);
  free(back);
}

/* Every rank: the checkpoint check. An exit code when the group cannot
 * go on (a failed write or broadcast: rank 0's failure stops the others
 * as in any run), else 0 with k set. */
static int check_ckpt(dr_run_t *r, uint64_t done, check_t *k) {
  const struct dr_train_smoke *s = r->smoke;
  if (s->dir[0] == '\0') {
    set_check(k, FAILED, "no directory to write it to: %s", s->why);
    return 0;
  }
  int code = dr_train_ckpt_save(r, done);
  if (code != 0) {
    set_check(k, FAILED, "step %" PRIu64 "'s could not be written in %s "
              "(exit %d; see above)", done, s->dir, code);
    return code;
  }
  int32_t state = FAILED;
  if (r->rank == 0) {
    verify(r, done, k);
    state = k->state;
  }
  char err[256] = "";
  int rc = dr_pg_broadcast_sync(r->pg, &state, sizeof(state), 0, err,
                                sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "--smoke's checkpoint verdict", rc, err);
  if (r->rank != 0)
    set_check(k, state, "rank 0's verdict");
  return 0;
}

/* Every rank: the evaluation check, with the results for the final
 * report. An exit code when the evaluation itself failed. */
static int check_eval(dr_run_t *r, check_t *k, double *acc, double *loss) {
  int code = dr_train_evaluate(r, acc, loss);
  if (code != 0) {
    set_check(k, FAILED, "failed (exit %d; see above)", code);
    return code;
  }
  uint64_t n = dr_data_len(r->data, DR_SPLIT_EVAL);
  if (n == 0)
    set_check(k, FAILED, "no held-out samples to evaluate (--eval-samples "
              "0, or --eval-frac leaves none of the text)");
  else if (!isfinite(*loss) || *loss < 0 || !(*acc >= 0 && *acc <= 1))
    set_check(k, FAILED, "%" PRIu64 " held-out samples, loss %g, accuracy "
              "%g: not a finite loss and an accuracy in [0, 1]", n, *loss,
              *acc);
  else
    set_check(k, OK, "%" PRIu64 " held-out samples, loss %.4f, accuracy "
              "%.4f", n, *loss, *acc);
  return 0;
}

/* The loss check: step 1's loss against the last logged window's. */
static void check_loss(const dr_run_t *r, check_t *k) {
  const uint64_t total = r->total_steps, every = r->c.log_every;
  if (total < 2) {
    set_check(k, FAILED, "one step has no later loss to compare with; "
              "give --steps 2 or more");
    return;
  }
  /* Step 1 is logged on its own, so the last window starts at step 2 at
   * the earliest. */
  uint64_t from = (total - 1) / every * every + 1;
  if (from < 2)
    from = 2;
  const double first = r->first_loss, last = r->last_loss;
  char range[64];
  if (from == total)
    snprintf(range, sizeof(range), "step %" PRIu64, total);
  else
    snprintf(range, sizeof(range), "mean of steps %" PRIu64 "-%" PRIu64,
             from, total);
  int ok = isfinite(first) && isfinite(last) && last < first;
  set_check(k, ok ? OK : FAILED, "final loss %.4f (%s) %s step 1's %.4f "
            "(both averaged over the ranks)", last, range,
            ok ? "below" : "not below", first);
}

/* Rank 0: the lines, and the verdict. 0 when every check held. */
static int say(const dr_run_t *r, const check_t *k, int report_code) {
  char failed[128] = "", not_run[128] = "";
  int n_failed = 0;
  for (int i = 0; i < N_CHECKS; i++) {
    char *list = k[i].state == FAILED ? failed : not_run;
    if (k[i].state == OK)
      continue;
    if (k[i].state == FAILED)
      n_failed++;
    size_t len = strlen(list);
    snprintf(list + len, sizeof(failed) - len, "%s%s", len ? ", " : "",
             k[i].name);
  }
  int all = n_failed == 0 && not_run[0] == '\0' && report_code == 0;
  if (r->rank != 0)
    return all ? 0 : DR_TRAIN_EFAIL;
  for (int i = 0; i < N_CHECKS; i++)
    if (k[i].state == NOT_RUN)
      fprintf(stdout, "smoke: %s: not run: a check before it failed\n",
              k[i].name);
    else
      fprintf(stdout, "smoke: %s: %s: %s\n", k[i].name, k[i].text,
              k[i].state == OK ? "ok" : "FAILED");
  if (all) {
    fprintf(stdout, "smoke: all %d checks passed\n", N_CHECKS);
    return 0;
  }
  char report[96] = "";
  if (report_code != 0)
    snprintf(report, sizeof(report), "%sthe final report (exit %d; see "
             "above)", failed[0] ? ", " : "", report_code);
  fprintf(stdout, "smoke: FAILED: %s%s (%d of %d checks failed%s%s)\n",
          failed, report, n_failed, N_CHECKS,
          not_run[0] ? "; not run: " : "", not_run);
  return DR_TRAIN_EFAIL;
}

int dr_train_smoke_run(dr_run_t *r) {
  check_t k[N_CHECKS] = {{"steps", NOT_RUN, ""},
                         {"checkpoint", NOT_RUN, ""},
                         {"evaluation", NOT_RUN, ""},
                         {"loss fell", NOT_RUN, ""}};
  const uint64_t total = r->total_steps;
  r->log_first = 1;
  int code = dr_train_loop(r, 0);
  if (code != 0) {
    set_check(&k[CHECK_STEPS], FAILED, "the run stopped (exit %d; see "
              "above)", code);
    return say(r, k, 0);
  }
  set_check(&k[CHECK_STEPS], OK, "%" PRIu64 " step%s ran, loss %.4f -> "
            "%.4f", total, total == 1 ? "" : "s", r->first_loss,
            r->last_loss);
  /* A failure of the group stops the checks where it happened: the other
   * ranks may no longer take part in a collective. */
  if (check_ckpt(r, total, &k[CHECK_CKPT]) != 0)
    return say(r, k, 0);
  double acc = 0, eval_loss = 0;
  if (check_eval(r, &k[CHECK_EVAL], &acc, &eval_loss) != 0)
    return say(r, k, 0);
  check_loss(r, &k[CHECK_LOSS]);
  /* The final checksum and --dump-weights read the host's copy. */
  code = r->gpu != NULL ? dr_gpu_train_to_host(r, 0) : 0;
  if (code == 0)
    code = dr_report_final(r, acc, eval_loss);
  return say(r, k, code);
}

void dr_train_smoke_close(dr_run_t *r) {
  struct dr_train_smoke *s = r->smoke;
  if (s == NULL)
    return;
  r->smoke = NULL;
  if (r->rank == 0 && s->dir[0] != '\0') {
    /* Flat: the checkpoint and any temporary file its writer left. */
    int bad = 0;
    DIR *d = opendir(s->dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
          unlinkat(dirfd(d), e->d_name, 0) != 0)
        bad = errno;
    if (d != NULL)
      closedir(d);
    if (bad == 0 && rmdir(s->dir) != 0)
      bad = errno;
    if (bad != 0)
      fprintf(stderr, "train: rank 0: --smoke: cannot remove its checkpoint "
              "directory %s (%s)\n", s->dir, strerror(bad));
    if (s->made_base)
      rmdir(s->base); /* only if nothing else came into it */
  }
  free(s);
}
