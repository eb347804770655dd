/* The background writer of checkpoint files (ckpt_writer.h).
 *
 * The job slot moves EMPTY -> QUEUED (submit) -> DONE (the thread) ->
 * EMPTY (poll or wait), under the mutex. The thread fills res without the
 * lock while the slot is QUEUED: the caller reads res only after it saw
 * DONE under the lock, and the thread writes it again only after the next
 * submit, so the two never touch it at once. */
#include "ckpt_writer.h"

#include "mono.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SLOT_EMPTY, SLOT_QUEUED, SLOT_DONE } slot_t;

struct dr_ckpt_writer {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* broadcast at every change of slot or stop */
  slot_t slot;
  int stop;
  dr_ckpt_job_t job;
  dr_ckpt_result_t res;
};

void dr_ckpt_job_run(const dr_ckpt_job_t *job, dr_ckpt_result_t *res) {
  const dr_ckpt_header_t *h = &job->header;
  res->step = h->step;
  res->path[0] = res->err[0] = res->prune_err[0] = '\0';
  res->pruned = 0;
  uint64_t t0 = dr_mono_us();
  res->rc = dr_ckpt_write(job->dir, h, job->spans, job->n_spans,
                          job->before_commit, job->arg, res->path,
                          sizeof(res->path), res->err, sizeof(res->err));
  res->write_us = dr_mono_us() - t0;
  if (res->rc == 0 && job->keep > 0)
    res->pruned = dr_ckpt_prune(job->dir, h->step, job->keep, res->prune_err,
                                sizeof(res->prune_err));
}

static void *writer_main(void *arg) {
  dr_ckpt_writer_t *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (w->slot != SLOT_QUEUED && !w->stop)
      pthread_cond_wait(&w->cv, &w->mu);
    /* A job handed over before the stop is written all the same. */
    if (w->slot != SLOT_QUEUED)
      break;
    pthread_mutex_unlock(&w->mu);
    dr_ckpt_job_run(&w->job, &w->res);
    pthread_mutex_lock(&w->mu);
    w->slot = SLOT_DONE;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int dr_ckpt_writer_new(dr_ckpt_writer_t **out) {
  *out = NULL;
  dr_ckpt_writer_t *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return -ENOMEM;
  int rc = pthread_mutex_init(&w->mu, NULL);
  if (rc != 0)
    goto fail_mu;
  rc = pthread_cond_init(&w->cv, NULL);
  if (rc != 0)
    goto fail_cv;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  rc = pthread_create(&w->thread, NULL, writer_main, w);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0)
    goto fail_thread;
  *out = w;
  return 0;

fail_thread:
  pthread_cond_destroy(&w->cv);
fail_cv:
  pthread_mutex_destroy(&w->mu);
fail_mu:
  free(w);
  return -rc;
}

int dr_ckpt_writer_submit(dr_ckpt_writer_t *w, const dr_ckpt_job_t *job) {
  int rc = 0;
  pthread_mutex_lock(&w->mu);
  if (w->slot != SLOT_EMPTY) {
    rc = -EBUSY;
  } else {
    w->job = *job;
    w->slot = SLOT_QUEUED;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return rc;
}

int dr_ckpt_writer_busy(dr_ckpt_writer_t *w) {
  pthread_mutex_lock(&w->mu);
  int busy = w->slot != SLOT_EMPTY;
  pthread_mutex_unlock(&w->mu);
  return busy;
}

/* Collects the result when the slot is DONE, first waiting for it when
 * wait is set. */
static const dr_ckpt_result_t *collect(dr_ckpt_writer_t *w, int wait) {
  const dr_ckpt_result_t *r = NULL;
  pthread_mutex_lock(&w->mu);
  while (wait && w->slot == SLOT_QUEUED)
    pthread_cond_wait(&w->cv, &w->mu);
  if (w->slot == SLOT_DONE) {
    w->slot = SLOT_EMPTY;
    r = &w->res;
  }
  pthread_mutex_unlock(&w->mu);
  return r;
}

const dr_ckpt_result_t *dr_ckpt_writer_poll(dr_ckpt_writer_t *w) {
  return collect(w, 0);
}

const dr_ckpt_result_t *dr_ckpt_writer_wait(dr_ckpt_writer_t *w) {
  return collect(w, 1);
}

void dr_ckpt_writer_free(dr_ckpt_writer_t **wp) {
  if (wp == NULL || *wp == NULL)
    return;
  dr_ckpt_writer_t *w = *wp;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
  *wp = NULL;
}
