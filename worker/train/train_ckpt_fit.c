/* Whether a checkpoint fits the run that would resume from it: the
 * header the run would write, and the comparison that refuses (exit 2),
 * naming the field, a file of another model, data, batch or schedule. */
#include "train_ckpt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dr__train_ckpt_header(dr_run_t *r, uint64_t step, dr_ckpt_header_t *h) {
  const dr_model_config_t *mc = dr_model_config(r->model);
  memset(h, 0, sizeof(*h));
  h->rng_version = DR_CKPT_RNG_XOSHIRO;
  h->step = step;
  h->total_steps = r->sched_steps;
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
  const dr_train_config_t *c = &r->c;
  h->warmup_steps = c->warmup;
  h->lr = c->lr;
  h->min_lr_frac = c->min_lr_frac;
  h->momentum = c->momentum;
  h->weight_decay = c->weight_decay;
  h->beta1 = c->beta1;
  h->beta2 = c->beta2;
  h->eps = c->eps;
  dr__train_ckpt_cmp_header(r, h);
}

/* The shortest text that reads back as v. */
static const char *real(char *buf, size_t n, double v) {
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, n, "%.*g", digits, v);
    if (strtod(buf, NULL) == v)
      break;
  }
  return buf;
}

/* Appends "FLAG is WAS there and IS here" to the list of changes. */
static void add_change(char *list, size_t n, const char *flag,
                       const char *was, const char *is) {
  size_t len = strlen(list);
  snprintf(list + len, n - len, "%s%s is %s there and %s here",
           len > 0 ? ", " : "", flag, was, is);
}

/* The learning rate at step of this run's schedule over total steps. */
static double lr_over(const dr_run_t *r, uint64_t total, uint64_t step) {
  dr_optim_config_t oc = *dr_optim_config(r->opt);
  oc.total_steps = total;
  return dr_optim_schedule_lr(&oc, step);
}

/* What a run extended from f's schedule to r->total_steps does with the
 * learning rate (as the progress lines print it), with the schedule's new
 * total_steps (*sched). */
static void extension(const dr_run_t *r, const dr_ckpt_header_t *f,
                      int hold, uint64_t *sched, char *buf, size_t n) {
  if (hold) {
    *sched = f->total_steps;
    snprintf(buf, n, "the schedule of %" PRIu64 " steps goes on unchanged, "
             "and the learning rate stays at its final %.3g from step %"
             PRIu64 " to %" PRIu64, f->total_steps,
             lr_over(r, f->total_steps, f->total_steps),
             (f->total_steps > f->step ? f->total_steps : f->step) + 1,
             r->total_steps);
    return;
  }
  *sched = r->total_steps;
  snprintf(buf, n, "the warmup and cosine decay now span %" PRIu64 " steps: "
           "step %" PRIu64 " runs at lr %.3g (%.3g in the schedule of %"
           PRIu64 " steps)", r->total_steps, f->step + 1,
           lr_over(r, r->total_steps, f->step),
           lr_over(r, f->total_steps, f->step), f->total_steps);
}

/* The schedule (--steps, --warmup, --lr, --min-lr-frac) and the
 * hyper-parameters that the checkpoint's optimizer uses (a change of the
 * others changes nothing), all in one line: refused (exit 2), or reported
 * and taken with --allow-schedule-change. A larger --steps alone is an
 * extension that --extend-schedule takes too. Version-1 files record no
 * schedule but its length. Returns 0 or exit code 2; *sched: the
 * schedule's total_steps from here on. */
static int check_schedule(dr_run_t *r, const char *path,
                          const dr_ckpt_header_t *f,
                          const dr_ckpt_header_t *w, uint64_t *sched) {
  char list[1024] = "", was[32], is[32], effect[512] = "";
  const char *mode = r->c.extend_schedule;
  const int named = strcmp(mode, "none") != 0;
  const int longer = f->total_steps < r->total_steps;
  /* The length first: an extension is what --extend-schedule names. */
  *sched = r->total_steps;
  if (f->total_steps != r->total_steps) {
    snprintf(was, sizeof(was), "%" PRIu64, f->total_steps);
    snprintf(is, sizeof(is), "%" PRIu64, r->total_steps);
    if (longer && (named || r->c.allow_schedule_change))
      extension(r, f, strcmp(mode, "hold") == 0, sched, effect,
                sizeof(effect));
    if (!longer || !named)
      add_change(list, sizeof(list),
                 "--steps (the learning-rate schedule's length)", was, is);
  }
  if (!f->has_schedule) {
    fprintf(stderr, "train: rank 0: %s is of checkpoint format version %u, "
            "which records no learning-rate schedule: --lr, --warmup, "
            "--min-lr-frac and the optimizer's hyper-parameters are taken "
            "as given\n", path, (unsigned)f->version);
  } else {
    if (f->warmup_steps != w->warmup_steps) {
      snprintf(was, sizeof(was), "%" PRIu64, f->warmup_steps);
      snprintf(is, sizeof(is), "%" PRIu64, w->warmup_steps);
      add_change(list, sizeof(list), "--warmup", was, is);
    }
    enum { BOTH, SGD, ADAMW };
    static const struct {
      const char *flag;
      size_t off;
      int opt;
    } reals[] = {
#define R(f, flag, opt) {flag, offsetof(dr_ckpt_header_t, f), opt}
        R(lr, "--lr", BOTH),
        R(min_lr_frac, "--min-lr-frac", BOTH),
        R(weight_decay, "--weight-decay", BOTH),
        R(momentum, "--momentum", SGD),
        R(beta1, "--beta1", ADAMW),
        R(beta2, "--beta2", ADAMW),
        R(eps, "--eps", ADAMW),
#undef R
    };
    int opt = f->optimizer == DR_OPT_ADAMW ? ADAMW : SGD;
    for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++) {
      double a, b;
      if (reals[i].opt != BOTH && reals[i].opt != opt)
        continue;
      memcpy(&a, (const char *)f + reals[i].off, sizeof(a));
      memcpy(&b, (const char *)w + reals[i].off, sizeof(b));
      if (a != b)
        add_change(list, sizeof(list), reals[i].flag,
                   real(was, sizeof(was), a), real(is, sizeof(is), b));
    }
  }
  if (list[0] == '\0') {
    if (effect[0] != '\0')
      fprintf(stderr, "train: rank 0: extending the run of the checkpoint %s "
              "from %" PRIu64 " to %" PRIu64 " steps (--extend-schedule %s): "
              "%s\n", path, f->total_steps, r->total_steps, mode, effect);
    return 0;
  }
  if (r->c.allow_schedule_change) {
    fprintf(stderr, "train: rank 0: the checkpoint %s has another schedule: "
            "%s; going on with this run's from step %" PRIu64 " "
            "(--allow-schedule-change%s%s)%s%s\n", path, list, f->step + 1,
            effect[0] != '\0' ? ", --extend-schedule " : "",
            effect[0] != '\0' ? (named ? mode : "stretch") : "",
            effect[0] != '\0' ? "; " : "", effect);
    return 0;
  }
  fprintf(stderr, "train: rank 0: the checkpoint %s does not fit this run: "
          "%s; resume with the values it was written with, %sgive "
          "--allow-schedule-change to go on with this run's, or give another "
          "--ckpt-dir (exit %d)\n", path, list,
          longer && !named ? "give --extend-schedule stretch or hold to "
          "extend the run (docs/train.md), " : "", DR_TRAIN_ECONFIG);
  return DR_TRAIN_ECONFIG;
}

/* A checkpoint that does not fit this run is a configuration error: the
 * run must not silently start over or diverge. Names the first field
 * that differs. */
int dr__train_ckpt_fits(dr_run_t *r, const char *path,
                        const dr_ckpt_header_t *f, uint64_t *sched_steps) {
  dr_ckpt_header_t w;
  dr__train_ckpt_header(r, f->step, &w);
  static const struct {
    size_t off;
    int wide;
    const char *what;
  } fields[] = {
#define F32(f, what) {offsetof(dr_ckpt_header_t, f), 0, what}
#define F64(f, what) {offsetof(dr_ckpt_header_t, f), 1, what}
      F32(rng_version, "RNG version"),
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
  return check_schedule(r, path, f, &w, sched_steps);
}
