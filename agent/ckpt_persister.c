/* The persist tier's thread and its queue (ckpt_persister.h). */
#include "ckpt_persister.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mono.h"

/* How long the thread gets to end once told to stop: a cancelled copy
 * removes its partial copy first. */
#define JOIN_MS 5000
/* After the last copy's bound, how long its cancellation gets. */
#define CANCEL_MS 2000

struct dr_persister {
  dr_persist_cfg_t cfg;
  pthread_t t;
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* a job queued, or stopping */
  pthread_cond_t cv_last; /* the last copy finished */
  int stopping;                        /* under mu */
  dr_persist_job_t *todo, *todo_tail;  /* under mu */
  dr_persist_job_t *done;              /* under mu: newest first */
  atomic_int cancel;      /* ends the copy under way at its next chunk */
  int wedged;             /* loop thread: the thread would not end */
  uv_async_t async;
  dr_persist_done_cb cb;
  void *arg;
};

static void run(dr_persister_t *p, dr_persist_job_t *j) {
  dr_ckpt_copy_io_t io = {&p->cancel, j->deadline_ms, NULL, NULL};
  uint64_t t0 = dr_mono_ms();
  if (j->kind == DR_PERSIST_RESTORE)
    j->rc = dr_persist_restore(p->cfg.dir2, p->cfg.store, &io, &j->res);
  else
    j->rc = dr_persist_copy_out(p->cfg.store, p->cfg.dir2, p->cfg.keep,
                                p->cfg.host, &io, &j->res);
  j->ms = dr_mono_ms() - t0;
}

static void *persister_main(void *arg) {
  dr_persister_t *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stopping && p->todo == NULL)
      pthread_cond_wait(&p->cv, &p->mu);
    if (p->stopping)
      break;
    dr_persist_job_t *j = p->todo;
    p->todo = j->next;
    if (p->todo == NULL)
      p->todo_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    run(p, j);
    pthread_mutex_lock(&p->mu);
    if (j->last) {
      /* Its caller waits for it, or has given up on it. */
      if (j->abandoned) {
        free(j);
      } else {
        j->finished = 1;
        pthread_cond_broadcast(&p->cv_last);
      }
      continue;
    }
    j->next = p->done;
    p->done = j;
    if (!p->stopping)
      uv_async_send(&p->async);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* The finished jobs, oldest first, handed to the callback. */
static void deliver(dr_persister_t *p) {
  pthread_mutex_lock(&p->mu);
  dr_persist_job_t *list = p->done, *rev = NULL;
  p->done = NULL;
  pthread_mutex_unlock(&p->mu);
  while (list != NULL) {
    dr_persist_job_t *n = list->next;
    list->next = rev;
    rev = list;
    list = n;
  }
  while (rev != NULL) {
    dr_persist_job_t *n = rev->next;
    rev->next = NULL;
    p->cb(p->arg, rev);
    rev = n;
  }
}

static void on_async(uv_async_t *h) { deliver(h->data); }

static void on_closed(uv_handle_t *h) {
  dr_persister_t *p = h->data;
  if (p->wedged)
    return; /* its thread may still wake up and use it */
  pthread_cond_destroy(&p->cv_last);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

int dr_persister_start(uv_loop_t *loop, const dr_persist_cfg_t *cfg,
                       dr_persist_done_cb cb, void *arg,
                       dr_persister_t **out) {
  *out = NULL;
  dr_persister_t *p = calloc(1, sizeof(*p));
  if (p == NULL)
    return -ENOMEM;
  p->cfg = *cfg;
  p->cb = cb;
  p->arg = arg;
  atomic_init(&p->cancel, 0);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  /* The last copy's wait has a deadline on the monotonic clock. */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv_last, &ca);
  pthread_condattr_destroy(&ca);
  int rc = uv_async_init(loop, &p->async, on_async);
  p->async.data = p;
  if (rc != 0) {
    on_closed((uv_handle_t *)&p->async);
    return rc;
  }
  rc = -pthread_create(&p->t, NULL, persister_main, p);
  if (rc != 0) {
    uv_close((uv_handle_t *)&p->async, on_closed); /* frees p */
    return rc;
  }
  *out = p;
  return 0;
}

static void enqueue(dr_persister_t *p, dr_persist_job_t *job) {
  job->next = NULL;
  if (p->todo_tail != NULL)
    p->todo_tail->next = job;
  else
    p->todo = job;
  p->todo_tail = job;
  pthread_cond_signal(&p->cv);
}

void dr_persister_submit(dr_persister_t *p, dr_persist_job_t *job) {
  pthread_mutex_lock(&p->mu);
  enqueue(p, job);
  pthread_mutex_unlock(&p->mu);
}

static struct timespec mono_at(uint64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  return ts;
}

int dr_persister_last(dr_persister_t *p, uint64_t bound_ms,
                      dr_persist_job_t *out) {
  dr_persist_job_t *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return -ENOMEM;
  uint64_t end = dr_mono_ms() + bound_ms;
  j->kind = DR_PERSIST_COPY;
  j->last = 1;
  j->deadline_ms = end;
  pthread_mutex_lock(&p->mu);
  enqueue(p, j);
  for (int pass = 0; !j->finished && pass < 2; pass++) {
    struct timespec at = mono_at(pass == 0 ? end : end + CANCEL_MS);
    while (!j->finished &&
           pthread_cond_timedwait(&p->cv_last, &p->mu, &at) != ETIMEDOUT)
      ;
    if (!j->finished)
      atomic_store(&p->cancel, 1); /* what runs before it, or it */
  }
  int rc = 0;
  if (j->finished) {
    *out = *j;
    out->next = NULL;
    free(j);
  } else {
    j->abandoned = 1; /* the thread frees it, if it ever gets there */
    rc = -ETIMEDOUT;
  }
  pthread_mutex_unlock(&p->mu);
  deliver(p); /* the jobs before it, said first by their callback */
  return rc;
}

static void free_list(dr_persist_job_t *j) {
  while (j != NULL) {
    dr_persist_job_t *n = j->next;
    free(j);
    j = n;
  }
}

int dr_persister_stop(dr_persister_t **pp) {
  dr_persister_t *p = *pp;
  if (p == NULL)
    return 0;
  *pp = NULL;
  atomic_store(&p->cancel, 1);
  pthread_mutex_lock(&p->mu);
  p->stopping = 1;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  struct timespec at;
  clock_gettime(CLOCK_REALTIME, &at); /* pthread_timedjoin_np's clock */
  at.tv_sec += JOIN_MS / 1000;
  int rc = pthread_timedjoin_np(p->t, NULL, &at);
  if (rc != 0) {
    p->wedged = 1;
  } else {
    free_list(p->todo);
    free_list(p->done);
    p->todo = p->todo_tail = p->done = NULL;
  }
  uv_close((uv_handle_t *)&p->async, on_closed);
  return rc != 0 ? -EBUSY : 0;
}
