/* The settings of `train`: --key value flags and an INI file
 * (--config FILE, `key = value` at top level or in [train]), flags over
 * file over defaults. --help lists every key with its default. */
#ifndef DR_TRAIN_CONFIG_H
#define DR_TRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/* --smoke's steps when --steps is not given. */
#define DR_TRAIN_SMOKE_STEPS 20

typedef struct {
  char *config;
  char *data;           /* "synthetic" or "text:PATH" */
  uint64_t samples;     /* synthetic training samples */
  uint64_t eval_samples;
  double eval_frac;     /* text: held-out fraction */
  uint32_t layers, width, input_dim, classes, context, embed_dim;
  uint32_t batch;       /* per rank, per micro-batch */
  int batch_given;      /* --batch was set (flag or file) */
  uint64_t global_batch; /* 0, or samples per step over all ranks: batch
                           is derived from it and the world size */
  uint64_t steps;       /* optimizer steps; 0 = from epochs */
  int steps_given;      /* --steps was set (flag or file) */
  uint32_t epochs;
  double lr;
  uint64_t lr_ref_batch; /* --lr-ref-batch: the global batch --lr was tuned
                            for; 0 when not given */
  char *lr_scale;       /* none | linear (lr_schedule.h) */
  uint64_t lr_warmup;   /* linear: steps over which the scaling ramps in */
  char *optimizer;      /* sgd | adamw */
  double momentum, weight_decay, beta1, beta2, eps;
  uint64_t warmup;
  double min_lr_frac;
  uint64_t seed;
  double bucket_cap_mb, first_bucket_mb;
  int bucket_cap_auto;  /* --bucket-cap-mb auto: measured and planned */
  char *profile_out;    /* rank 0 writes the planner's profile here */
  int no_overlap;
  uint32_t grad_accum;
  double comm_timeout;  /* seconds */
  uint32_t log_every;
  char *trace;          /* Chrome trace path; {rank} is replaced */
  int thread_stats;     /* the threads' CPU figures (also with trace) */
  int force_tcp;
  const char *comm_schedule;  /* auto, thread, inline */
  const char *host_weights;   /* auto, shared, private */
  char *device;         /* auto | cpu | cuda */
  char *precision;      /* fp32 | bf16 (cuda only) */
  int tf32;             /* cuda, fp32: GEMMs on TF32 tensor cores */
  char *dump_weights;   /* rank 0 writes the final fp32 weights here */
  char *ckpt_dir;       /* NULL: no checkpoints */
  uint64_t ckpt_every;  /* steps between checkpoints; 0 = never write */
  uint32_t ckpt_keep;   /* checkpoints kept */
  int allow_schedule_change; /* resume although the schedule differs */
  char *extend_schedule; /* none | stretch | hold: a resume with more
                            --steps than its checkpoint's schedule */
  char *grad_compress;  /* none | fp16 | bf16 | powersgd[:RANK] */
  uint64_t powersgd_start_step; /* steps all-reduced uncompressed first */
  int powersgd_no_ef;   /* tests: PowerSGD without error feedback */
  char *loss_scale;     /* dynamic[:INIT] | FIXED | none */
  int smoke;            /* --smoke: the self-check of train_smoke.h */
} dr_train_config_t;

/* 0; 1 after --help or --version (printed); DR_EBADARG with a one-line message. */
int dr_train_config_parse(int argc, char **argv, dr_train_config_t *c,
                          char *err, size_t err_len);
void dr_train_config_free(dr_train_config_t *c);

/* With --global-batch: sets batch to global_batch / (WORLD x grad_accum);
 * DR_EBADARG with a one-line message when it does not divide. */
int dr_train_config_derive_batch(dr_train_config_t *c, uint32_t world,
                                 char *err, size_t err_len);

#endif /* DR_TRAIN_CONFIG_H */
