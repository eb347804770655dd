/* Whether a checkpoint fits the run that would resume from it: the
 * header the run would write, and the comparison that refuses (exit 2),
 * naming the field, a file of another model, data or batch. */
#include "train_ckpt.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void dr__train_ckpt_header(dr_run_t *r, uint64_t step, dr_ckpt_header_t *h) {
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

/* A checkpoint that does not fit this run is a configuration error: the
 * run must not silently start over or diverge. Names the first field
 * that differs. */
int dr__train_ckpt_fits(dr_run_t *r, const char *path,
                        const dr_ckpt_header_t *f) {
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

