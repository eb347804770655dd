/* Internals of `train`: the run's state shared by its setup (train_main.c),
 * its step loop and evaluation (train_loop.c, over the device of
 * train_device.h) and its reports (train_report.c). */
#ifndef DR_TRAIN_H
#define DR_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "compress.h"
#include "data.h"
#include "loss_scale.h"
#include "lr_schedule.h"
#include "model.h"
#include "optim.h"
#include "pg.h"
#include "reducer.h"
#include "trace.h"
#include "train_config.h"

/* The GPU path's state (gpu/gpu_train.h). */
typedef struct dr_gpu dr_gpu_t;
/* The device that runs the step and the evaluation (train_device.h). */
typedef struct dr_train_device dr_train_device_t;
/* The threads' per-step CPU figures (train_threads.h). */
typedef struct dr_train_threads dr_train_threads_t;

/* Exit codes of train: the table in proto/exit_codes.h (DR_EXIT_*), and
 * DR_TRAIN_EFAIL for a failure that has no code of its own there, which
 * ddprun treats as a crash (restartable, a root cause). */
#include "exit_codes.h"
enum {
  DR_TRAIN_OK = DR_EXIT_OK,
  DR_TRAIN_EFAIL = 1,
  DR_TRAIN_ECONFIG = DR_EXIT_CONFIG,
  DR_TRAIN_ECOMM = DR_EXIT_COMM,
  DR_TRAIN_ETIMEOUT = DR_EXIT_TIMEOUT,
  DR_TRAIN_ENONFINITE = DR_EXIT_NONFINITE,
  DR_TRAIN_ESTORAGE = DR_EXIT_STORAGE,
  DR_TRAIN_ENOMEM = DR_EXIT_NOMEM,
  DR_TRAIN_EPEER = DR_EXIT_PEER,
  DR_TRAIN_EDEVICE = DR_EXIT_DEVICE,
  DR_TRAIN_EPREEMPTED = DR_EXIT_PREEMPTED
};

typedef struct {
  double data_ms, compute_ms, comm_ms, exposed_ms, step_ms;
} dr_step_time_t;

typedef struct {
  dr_train_config_t c;
  dr_pg_config_t pgc;
  dr_pg_t *pg;
  uint32_t rank, world, local_rank;
  char host[256];
  dr_dataset_t *data;
  dr_model_t *model;
  dr_optim_t *opt;
  dr_reducer_t *red;
  dr_trace_t *trace;
  dr_batch_t batch;
  uint64_t *shard;
  uint64_t shard_len;
  uint64_t steps_per_epoch, total_steps;
  uint64_t sched_steps;      /* the learning-rate schedule's total_steps:
                                total_steps, or a resumed checkpoint's
                                (--extend-schedule hold) */
  uint64_t global_batch;     /* samples per optimizer step, all ranks */
  dr_step_time_t *times;     /* per step */
  double last_loss;          /* the last logged loss, averaged over ranks */
  uint64_t t0_us;            /* start of the loop */
  uint64_t start_step;       /* first step this run executes (a resume) */
  struct dr_progress *progress; /* slots the agent watches for hangs */
  int use_gpu;               /* --device resolved to cuda */
  const dr_train_device_t *dev; /* the CPU's, or the GPU's once
                                   dr_gpu_train_open has run */
  dr_gpu_t *gpu;             /* NULL on the CPU */
  struct dr_train_plan *plan;   /* --bucket-cap-mb auto, --profile-out */
  dr_cmp_config_t cmpc;      /* --grad-compress and its settings */
  dr_cmp_t *cmp;             /* the reducer's launch hook; NULL when
                                neither compression nor loss scaling */
  dr_loss_scale_t ls;        /* --loss-scale: the same on every rank */
  dr_train_threads_t *threads; /* --trace or --thread-stats; else NULL */
  struct dr_hostw *hostw;    /* --host-weights: the shared copy, or NULL */
  struct dr_train_saver *saver; /* train_ckpt_save.c: the checkpoint
                                   writer and its state; NULL before the
                                   first checkpoint */
  uint64_t ckpt_global_batch; /* the resumed checkpoint's global batch;
                                 0 without a resume */
  dr_lr_scale_t lrs;         /* --lr-scale (lr_schedule.h) */
  int log_first;             /* the loop logs step 1 on its own too */
  double first_loss;         /* the first logged loss, averaged over ranks */
  struct dr_train_smoke *smoke; /* --smoke (train_smoke.h); else NULL */
} dr_run_t;


/* train_loop.c: runs steps start .. total_steps - 1. Returns an exit
 * code. */
int dr_train_loop(dr_run_t *r, uint64_t start);
/* The loss scaler's verdict on step (DR_LS_SKIP or DR_LS_EFLOOR, with
 * r->ls already updated from the scale `before`): rank 0 says the
 * skipped step on stdout; at the floor every rank says why it stops and
 * DR_TRAIN_ENONFINITE is returned. 0 otherwise. */
int dr_train_overflow_said(dr_run_t *r, uint64_t step, double before,
                           int verdict);
/* Accuracy and mean loss on the held-out split, computed across ranks. */
int dr_train_evaluate(dr_run_t *r, double *accuracy, double *loss);

/* train_report.c */
void dr_report_summary(dr_run_t *r);
void dr_report_progress(dr_run_t *r, uint64_t step, double loss, float lr);
/* "<sep>loss_scale=X<sep>skipped=N<sep>overflow_rank=R|sum|none" */
const char *dr_report_scale(const dr_run_t *r, const char *sep, char *buf,
                            size_t n);
int dr_report_stragglers(dr_run_t *r, uint64_t from, uint64_t to);
/* The median of this rank's step times of steps [from, to); 0 if none. */
double dr_report_median_step_ms(const dr_run_t *r, uint64_t from,
                                uint64_t to);
int dr_report_final(dr_run_t *r, double accuracy, double eval_loss);

/* train_ckpt.c. With --ckpt-dir: rank 0 picks the newest checkpoint that
 * verifies and fits this run, loads it and broadcasts it; *start is its
 * step (0 without one). Returns an exit code. */
int dr_train_resume(dr_run_t *r, uint64_t *start);

/* train_ckpt_save.c. Every rank, after each step (done = steps
 * completed): when --ckpt-every divides done, rank 0 copies the
 * checkpoint's state and hands it to its writer thread (the step waits
 * for the copy, and for the previous checkpoint if it is still being
 * written); at the boundaries after it, whether the write is done and
 * how it went, a failure stopping every rank there. Returns an exit
 * code. */
int dr_train_ckpt_after_step(dr_run_t *r, uint64_t done);
/* 1 when dr_train_ckpt_after_step writes the checkpoint of step done. */
int dr_train_ckpt_due(const dr_run_t *r, uint64_t done);

/* Every rank: the checkpoint of step done written now, in the step, and
 * waited for, after the write in flight (a preemption); one that
 * dr_train_ckpt_after_step handed over for done is only waited for.
 * Returns an exit code. */
int dr_train_ckpt_save(dr_run_t *r, uint64_t done);
/* Every rank, at the end of the loop (done = steps completed): waits for
 * the write in flight and learns how it went. Returns an exit code. */
int dr_train_ckpt_finish(dr_run_t *r, uint64_t done);
/* On every way out (teardown): rank 0 lets the write in flight finish
 * and says how it went (the run keeps the code it exits with); frees the
 * writer. */
void dr_train_ckpt_close(dr_run_t *r);
/* For the final line: " ckpt_written=N ckpt_waits=W ckpt_wait_ms=X"
 * (rank 0's: checkpoints renamed into place, checkpoint steps that
 * waited for the previous write, and how long in all) with --ckpt-dir;
 * else empty. buf is returned. */
const char *dr_train_ckpt_fields(const dr_run_t *r, char *buf, size_t n);

/* lr_schedule.c. Every rank, after the resume (r->ckpt_global_batch is
 * known) and before the first step, start: sets r->lrs from the settings
 * and the global batch and gives the optimizer start's rate; rank 0 says
 * on stderr, in one line, where the global batch differs from the
 * reference and what --lr-scale does about it, with the rate step start
 * runs at. Returns 0. */
int dr_train_lr_start(dr_run_t *r, uint64_t start);
/* Every rank, before step's first update: gives the optimizer the base
 * rate of step (nothing without --lr-scale linear). */
void dr_train_lr_step(dr_run_t *r, uint64_t step);

/* train_preempt.c: SIGUSR1 sets a flag (install before the loop; -1 and
 * errno on failure). After each step all ranks agree on whether any was
 * signalled; if so they checkpoint step done and return
 * DR_TRAIN_EPREEMPTED, else 0. */
int dr_train_preempt_install(void);
int dr_train_preempt_after_step(dr_run_t *r, uint64_t done);

/* train_fail.c: the failures every part of train shares, each one line
 * on stderr and an exit code. */

/* A collective failure: prints the message and returns exit code 4. */
int dr_train_comm_failed(dr_run_t *r, const char *what, int rc,
                         const char *msg);

/* An allocation failed: "out of memory allocating WHAT"; returns
 * DR_TRAIN_ENOMEM. */
int dr_train_nomem(dr_run_t *r, const char *what);

/* Ranks other than 0 around the wait for a verdict of rank 0 (a
 * broadcast that says whether rank 0 could do its part): hold catches
 * SIGTERM from now on; release, on a good verdict or none, ends that and
 * lets a SIGTERM that came meanwhile take effect (the process dies of it,
 * as it would have then). */
void dr_train_hold_stop(void);
void dr_train_release_stop(void);

/* After a failed verdict, instead of release: this rank stops because
 * rank 0 failed. Prints "rank N: WHY; stopping (exit 8 ...)", waits
 * (boundedly) for its agent to stop it with SIGTERM, so that rank 0's
 * failure reaches ddprun first, and returns DR_TRAIN_EPEER. */
int dr_train_peer_failed(dr_run_t *r, const char *why);

#endif /* DR_TRAIN_H */
