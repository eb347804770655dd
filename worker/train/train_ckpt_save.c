/* train's checkpoint writing. At every --ckpt-every-th step boundary rank
 * 0 copies what goes into the file (the snapshot: the weights, the
 * optimizer state, the compression state gathered from every rank, and
 * the header, with the schedule, the epoch and position and the loss
 * scale) and hands the copy to a writer thread (ckpt_writer.h), which
 * encodes, checksums, writes, fsyncs, renames and prunes while the steps
 * go on. The step waits for the copy, and, when a checkpoint is due while
 * the previous one is still being written, for that write (counted:
 * ckpt_waits in the final line).
 *
 * The ranks agree at step boundaries in one small all-reduce (agree()),
 * rank 0 giving its verdict and the others zeros:
 *  - at a checkpoint's step, once rank 0 has waited for the previous
 *    write and taken the copy: whether both went well. The copy goes to
 *    the writer only after this, so a group that has lost a rank never
 *    begins a checkpoint (see agree() for why an all-reduce).
 *  - at each later boundary while a write is in flight: whether it is
 *    done and how it went. A failed write stops every rank at the first
 *    boundary after it, with the messages and codes of a write in the
 *    step (rank 0: its code, 6 for a disk that refuses; the others 8).
 *  - before DDPRUN_CKPT_TEST_KILL_AT's kill, at the end of the run and at
 *    a preemption, after rank 0 has waited for the write.
 * Every rank knows alike whether a write is in flight (it begins at a
 * step every rank knows and ends at an agreement), so all take part in
 * the same all-reduces.
 *
 * A checkpoint is complete only after its rename: a run killed while a
 * write is in flight resumes from the one before, bit for bit like any
 * resume (the copy is the state of its step, whatever the steps after it
 * did). Every exit path of train lets the write in flight finish
 * (dr_train_ckpt_close). A preemption writes its checkpoint in the step
 * (the process is about to exit), and so do all checkpoints when rank 0
 * has no memory for the copy or cannot start the thread. */
#include "train.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt.h"
#include "ckpt_writer.h"
#include "fault_inject.h"
#include "gpu_train.h"
#include "mono.h"
#include "progress.h"
#include "train_ckpt.h"

struct dr_train_saver {
  int pending;           /* every rank: a write handed over whose outcome
                            the ranks have not agreed on yet */
  uint64_t pending_step;
  /* Rank 0 only. */
  dr_ckpt_writer_t *writer;
  float *copy;           /* the snapshot, in payload order */
  size_t copy_elems;
  int in_place;          /* no copy or no thread: written in the step */
  dr_ckpt_span_t span;   /* the job's one span, over copy */
  uint64_t hook_step;    /* test_delay's argument: the step being written */
  double file_mib;       /* the size of the file being written */
  uint64_t written;      /* checkpoints renamed into place */
  uint64_t waits;        /* checkpoint steps that waited for the previous
                            write, and how long in all */
  uint64_t wait_us;
};

static struct dr_train_saver *saver_of(dr_run_t *r) {
  if (r->saver == NULL)
    r->saver = calloc(1, sizeof(*r->saver));
  return r->saver;
}

/* dr_ckpt_write's hook before the rename: DDPRUN_CKPT_TEST_DELAY_MS
 * (fault_inject.h), on the thread that writes. ARG: the step's number. */
static void test_delay(void *arg, const char *tmp_path) {
  long ms = dr_fault_ckpt_delay_ms(*(const uint64_t *)arg);
  if (ms <= 0)
    return;
  fprintf(stderr, "train: rank 0: test hook: %s is written; waiting %ld ms "
          "before the rename\n", tmp_path, ms);
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* "DIR/ckpt-<step>.bin", the newest checkpoint of dir before step, or
 * "none". */
static const char *previous(const char *dir, uint64_t step, char *buf,
                            size_t n) {
  uint64_t *steps;
  size_t count;
  snprintf(buf, n, "none");
  if (dr_ckpt_list(dir, &steps, &count) != 0)
    return buf;
  for (size_t i = 0; i < count; i++)
    if (steps[i] < step && dr_ckpt_path(buf, n, dir, steps[i]) == 0)
      break;
  free(steps);
  return buf;
}

/* Rank 0: says how a write went; 0, or the exit code of its failure.
 * say_exit: the failure's line ends with that code (not on the way out
 * of a run that stops for another reason, whose code it keeps). */
static int report(dr_run_t *r, const dr_ckpt_result_t *res, int say_exit) {
  const dr_train_config_t *c = &r->c;
  uint64_t step = res->step;
  int rc = res->rc;
  if (rc == -EISDIR || rc == DR_ENOTREG) {
    /* Something not ours holds the name: this one checkpoint cannot be
     * made, and a restart would find it there again; the run goes on, and
     * the next checkpoint is written as usual. */
    char prev[4096];
    fprintf(stderr, "train: rank 0: not writing the checkpoint of step %"
            PRIu64 ": %s; move it away to have this step's checkpoint "
            "(training goes on; the newest checkpoint is %s)\n", step,
            res->err, previous(c->ckpt_dir, step, prev, sizeof(prev)));
    return 0;
  }
  if (rc != 0) {
    /* The write never touches an older file: say which one a run of the
     * job again resumes from. */
    int code = dr__train_ckpt_exit_code(rc);
    char note[96] = "", prev[4096], what[4200], advice[8500] = "";
    if (code == DR_TRAIN_ESTORAGE)
      snprintf(advice, sizeof(advice), "; the previous checkpoint (%s) is "
               "kept; %s or give another --ckpt-dir, then run the job again",
               previous(c->ckpt_dir, step, prev, sizeof(prev)),
               dr__train_ckpt_advice(what, sizeof(what), rc, c->ckpt_dir));
    if (say_exit)
      dr__train_ckpt_exit_note(code, note, sizeof(note));
    fprintf(stderr, "train: rank 0: cannot write the checkpoint of step %"
            PRIu64 ": %s%s%s\n", step, res->err, advice, note);
    return code;
  }
  if (res->pruned < 0)
    fprintf(stderr, "train: rank 0: pruning old checkpoints: %s\n",
            res->prune_err);
  fprintf(stdout, "checkpoint step %" PRIu64 " %s (%.1f MiB in %.0f ms)\n",
          step, res->path, r->saver->file_mib, res->write_us / 1e3);
  r->saver->written++;
  return 0;
}

/* Rank 0: the writer thread and a copy of n_elems floats, made at the
 * first checkpoint; without either, every checkpoint is written in the
 * step from then on, said once. 0, or -1 for in place. */
static int background_ready(dr_run_t *r, size_t n_elems) {
  struct dr_train_saver *s = r->saver;
  if (s->in_place)
    return -1;
  char why[160] = "";
  int rc = s->writer == NULL ? dr_ckpt_writer_new(&s->writer) : 0;
  if (rc != 0)
    snprintf(why, sizeof(why), "cannot start the checkpoint writer thread "
             "(%s)", strerror(-rc));
  if (rc == 0 && (s->copy == NULL || s->copy_elems < n_elems)) {
    free(s->copy);
    s->copy_elems = 0;
    s->copy = n_elems <= SIZE_MAX / sizeof(float)
                  ? malloc(n_elems * sizeof(float))
                  : NULL;
    if (s->copy == NULL)
      snprintf(why, sizeof(why), "no memory for the copy of a checkpoint "
               "(%.1f MiB)", n_elems * 4.0 / 1048576.0);
    else
      s->copy_elems = n_elems;
  }
  if (why[0] == '\0')
    return 0;
  fprintf(stderr, "train: rank 0: %s; checkpoints are written in the step "
          "from now on, which waits for each\n", why);
  s->in_place = 1;
  return -1;
}

/* Rank 0: the checkpoint of step done, after any write in flight. The
 * header and the copy the writer takes (*job, handed over later), or, in
 * place, the file written now from the live state and its outcome said.
 * 0 or an exit code. */
static int take(dr_run_t *r, uint64_t done, float *cmp_state, int in_place,
                dr_ckpt_job_t *job) {
  struct dr_train_saver *s = r->saver;
  /* A GPU run saves the host copy of its device state: the same file as
   * a CPU run's, so either resumes the other's. The header after it: the
   * download brings the device's loss scaler up to date. */
  if (r->gpu != NULL) {
    int g = dr_gpu_train_to_host(r, 1);
    if (g != 0)
      return g;
  }
  memset(job, 0, sizeof(*job));
  dr__train_ckpt_header(r, done, &job->header);
  size_t n;
  dr_ckpt_span_t *spans =
      dr__train_ckpt_spans(r, cmp_state, job->header.comm_elems, &n);
  if (spans == NULL)
    return dr_train_nomem(r, "the list of a checkpoint's tensors");
  job->dir = r->c.ckpt_dir;
  job->keep = r->c.ckpt_keep;
  job->before_commit = test_delay;
  job->arg = &s->hook_step;
  s->hook_step = done;
  s->file_mib = (DR_CKPT_HEADER_BYTES + 4.0 * dr_ckpt_floats(&job->header)) /
                1048576.0;
  size_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += spans[i].n_elems;
  if (!in_place && background_ready(r, total) == 0) {
    float *p = s->copy;
    for (size_t i = 0; i < n; i++) {
      if (spans[i].n_elems == 0)
        continue; /* no compression state: its span is NULL */
      memcpy(p, spans[i].p, spans[i].n_elems * sizeof(float));
      p += spans[i].n_elems;
    }
    free(spans);
    s->span.p = s->copy;
    s->span.n_elems = total;
    job->spans = &s->span;
    job->n_spans = 1;
    return 0;
  }
  job->spans = spans;
  job->n_spans = n;
  dr_ckpt_result_t res;
  dr_ckpt_job_run(job, &res);
  free(spans);
  job->spans = NULL;
  return report(r, &res, 1);
}

/* Rank 0: the result of the write in flight, if it is done; with wait,
 * once it is. counted: the wait is a checkpoint step's for the previous
 * write. */
static const dr_ckpt_result_t *outcome(struct dr_train_saver *s, int wait,
                                       int counted) {
  if (s->writer == NULL)
    return NULL;
  const dr_ckpt_result_t *res = dr_ckpt_writer_poll(s->writer);
  if (res != NULL || !wait)
    return res;
  uint64_t t0 = dr_mono_us();
  res = dr_ckpt_writer_wait(s->writer);
  if (counted) {
    s->waits++;
    s->wait_us += dr_mono_us() - t0;
  }
  return res;
}

/* Every rank, at the boundary after step: rank 0's code (an exit code; 0
 * = go on) and *flag reach every rank; the others give zeros. A flag
 * with a failure says that the write in flight failed, else the
 * checkpoint of step itself did.
 *
 * An all-reduce, not a broadcast: every segment of a ring all-reduce
 * passes through every rank after rank 0 entered it, so it fails when a
 * rank died before (a broadcast from rank 0 may complete on rank 0 with
 * a peer already gone, its header sent). The ranks other than 0 hold
 * SIGTERM meanwhile (train_fail.c). Returns rank 0's code, the code of
 * a rank that stops because rank 0 failed, or that of a failed
 * all-reduce. */
static int agree(dr_run_t *r, uint64_t step, int code, int *flag) {
  float v[2] = {0.0f, 0.0f};
  if (r->rank == 0) {
    v[0] = (float)code;
    v[1] = (float)*flag;
  } else {
    dr_train_hold_stop();
  }
  char err[256] = "";
  int rc = dr_pg_allreduce_sync(r->pg, v, 2, DR_PG_SUM, err, sizeof(err));
  if (r->rank != 0 && rc == 0 && v[0] != 0.0f) {
    char why[128];
    snprintf(why, sizeof(why), "rank 0 could not write its checkpoint (of "
             "step %" PRIu64 ")",
             v[1] != 0.0f ? r->saver->pending_step : step);
    return dr_train_peer_failed(r, why);
  }
  if (r->rank != 0)
    dr_train_release_stop();
  if (rc != 0)
    return dr_train_comm_failed(r, "checkpoint barrier", rc, err);
  *flag = (int)v[1];
  return (int)v[0];
}

/* Every rank: the checkpoint of step done (see the top). in_place: rank 0
 * writes it before the agreement, from the live state, and nothing is in
 * flight after. An exit code. */
static int checkpoint(dr_run_t *r, uint64_t done, int in_place) {
  struct dr_train_saver *s = saver_of(r);
  if (s == NULL)
    return dr_train_nomem(r, "the checkpoint writer's state");
  /* Each rank's error feedback goes into rank 0's file: on a GPU, from
   * every rank's device first. */
  float *cmp_state = NULL;
  uint64_t cmp_elems = 0;
  int code = r->gpu != NULL && r->cmp != NULL ? dr_gpu_train_to_host(r, 1)
                                              : 0;
  if (code == 0)
    code = dr__train_ckpt_cmp_gather(r, &cmp_state, &cmp_elems);
  if (code != 0)
    return code;
  int prev_failed = 0;
  dr_ckpt_job_t job;
  memset(&job, 0, sizeof(job));
  if (r->rank == 0) {
    const dr_ckpt_result_t *res = s->pending ? outcome(s, 1, 1) : NULL;
    if (res != NULL)
      code = report(r, res, 1);
    prev_failed = code != 0;
    if (code == 0)
      code = take(r, done, cmp_state, in_place, &job);
  }
  code = agree(r, done, code, &prev_failed);
  free(cmp_state); /* the copy or the file holds it now */
  if (code != 0)
    return code;
  /* The slot is free: the previous job was collected above. */
  if (job.spans != NULL)
    dr_ckpt_writer_submit(s->writer, &job);
  /* Every checkpoint but a preemption's counts as in flight on every
   * rank: only rank 0 knows whether it wrote in place instead (no copy),
   * and then answers "done" at the next boundary. */
  s->pending = !in_place;
  s->pending_step = done;
  /* The time spent on the checkpoint counts once against the agent's
   * --hang-timeout, not in addition to the next step's. */
  dr_progress_report(r->progress, done);
  return 0;
}

/* Every rank, with a write in flight: rank 0 looks whether it is done
 * (wait: waits for it), and the ranks agree on that and on how it went.
 * An exit code. */
static int settle(dr_run_t *r, uint64_t step, int wait) {
  struct dr_train_saver *s = r->saver;
  int code = 0, done = 0;
  if (r->rank == 0) {
    const dr_ckpt_result_t *res = outcome(s, wait, 0);
    /* Nothing handed over (written in place) is done too. */
    done = res != NULL || s->writer == NULL ||
           !dr_ckpt_writer_busy(s->writer);
    if (res != NULL)
      code = report(r, res, 1);
  }
  code = agree(r, step, code, &done);
  if (code != 0)
    return code;
  if (done)
    s->pending = 0;
  if (wait)
    dr_progress_report(r->progress, step);
  return 0;
}

/* After a step's checkpoint: DDPRUN_CKPT_TEST_KILL_AT (fault_inject.h). */
static void test_kill(dr_run_t *r, uint64_t done) {
  if (!dr_fault_kill_due(r->rank, done))
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
  int due = dr_train_ckpt_due(r, done);
  /* The kill hook strikes "after that step's checkpoint": once every
   * checkpoint so far is complete, on every rank alike. */
  int kill = dr_fault_kill_step(done);
  int rc = due ? checkpoint(r, done, 0) : 0;
  if (rc == 0 && r->saver != NULL && r->saver->pending && (kill || !due))
    rc = settle(r, done, kill);
  if (rc != 0)
    return rc;
  test_kill(r, done);
  return 0;
}

int dr_train_ckpt_save(dr_run_t *r, uint64_t done) {
  struct dr_train_saver *s = r->saver;
  if (s != NULL && s->pending && s->pending_step == done)
    return settle(r, done, 1);
  return checkpoint(r, done, 1);
}

int dr_train_ckpt_finish(dr_run_t *r, uint64_t done) {
  if (r->saver == NULL || !r->saver->pending)
    return 0;
  return settle(r, done, 1);
}

void dr_train_ckpt_close(dr_run_t *r) {
  struct dr_train_saver *s = r->saver;
  if (s == NULL)
    return;
  if (s->writer != NULL) {
    const dr_ckpt_result_t *res = dr_ckpt_writer_wait(s->writer);
    if (res != NULL)
      report(r, res, 0);
    dr_ckpt_writer_free(&s->writer);
  }
  free(s->copy);
  free(s);
  r->saver = NULL;
}

const char *dr_train_ckpt_fields(const dr_run_t *r, char *buf, size_t n) {
  const struct dr_train_saver *s = r->saver;
  if (r->c.ckpt_dir == NULL)
    snprintf(buf, n, "%s", "");
  else
    snprintf(buf, n, " ckpt_written=%" PRIu64 " ckpt_waits=%" PRIu64
             " ckpt_wait_ms=%.1f", s != NULL ? s->written : 0,
             s != NULL ? s->waits : 0, s != NULL ? s->wait_us / 1e3 : 0.0);
  return buf;
}
