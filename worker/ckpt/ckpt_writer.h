/* A background writer of checkpoint files: one thread that takes one job
 * at a time, writes it with dr_ckpt_write (temporary file, fsync, rename,
 * fsync of the directory: ckpt.h) and prunes the directory after it, so
 * that the program that handed the checkpoint over goes on meanwhile.
 *
 * One job in flight at most: a job is handed over (submit), then its
 * result is collected (poll, or wait), and only then may the next one be
 * handed over. The caller decides what a result means and says it; the
 * thread prints nothing of its own (a job's before_commit hook may).
 *
 * The thread starts with every signal blocked: the program's handlers run
 * on its own threads, never in the middle of a write. */
#ifndef DR_CKPT_WRITER_H
#define DR_CKPT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

typedef struct dr_ckpt_writer dr_ckpt_writer_t;

/* What to write. dir, the spans and the floats they point to are
 * borrowed from the caller until the job's result is collected (or the
 * writer freed): the caller must not change them meanwhile. */
typedef struct {
  const char *dir;
  dr_ckpt_header_t header;      /* copied at submit */
  const dr_ckpt_span_t *spans;
  size_t n_spans;
  /* After a write that succeeded: dr_ckpt_prune(dir, header.step, keep).
   * 0: no pruning. */
  uint32_t keep;
  /* dr_ckpt_write's hook before the rename (may be NULL); called on the
   * thread that runs the job. */
  dr_ckpt_before_commit_fn before_commit;
  void *arg;
} dr_ckpt_job_t;

/* How a job went. */
typedef struct {
  uint64_t step;         /* the job's header.step */
  int rc;                /* dr_ckpt_write's: 0, or its code (ckpt.h) */
  char path[4096];       /* rc 0: the final name */
  char err[4400];        /* rc != 0: dr_ckpt_write's message */
  uint64_t write_us;     /* dr_ckpt_write, start to the directory's fsync */
  int pruned;            /* dr_ckpt_prune's result after a write that
                            succeeded (files deleted, or -errno with
                            prune_err); 0 otherwise */
  char prune_err[4400];
} dr_ckpt_result_t;

/* Runs job on the calling thread, as the writer's thread does: for a
 * checkpoint written in place. */
void dr_ckpt_job_run(const dr_ckpt_job_t *job, dr_ckpt_result_t *res);

/* Starts the thread. 0, -ENOMEM, or -errno of pthread_create. */
int dr_ckpt_writer_new(dr_ckpt_writer_t **out);

/* Hands job to the thread and returns at once. 0, or -EBUSY while the
 * previous job's result has not been collected (nothing handed over). */
int dr_ckpt_writer_submit(dr_ckpt_writer_t *w, const dr_ckpt_job_t *job);

/* 1 while a job is handed over and its result not collected. */
int dr_ckpt_writer_busy(dr_ckpt_writer_t *w);

/* The result of the job handed over, if it is done: collects it (the
 * writer takes the next job from now on; the result stays valid until
 * then). NULL while the job runs, or when none was handed over. Never
 * waits for the thread's work. */
const dr_ckpt_result_t *dr_ckpt_writer_poll(dr_ckpt_writer_t *w);

/* The same, but waits for the job to be done; NULL only when no job was
 * handed over. */
const dr_ckpt_result_t *dr_ckpt_writer_wait(dr_ckpt_writer_t *w);

/* Lets a job in flight finish (its result is dropped), stops the thread
 * and frees the writer; *w becomes NULL. NULL or *w NULL: nothing. */
void dr_ckpt_writer_free(dr_ckpt_writer_t **w);

#endif /* DR_CKPT_WRITER_H */
