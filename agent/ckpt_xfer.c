/* The plane's transfer thread and its two queues (ckpt_xfer.h). */
#include "ckpt_xfer.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_rules.h"
#include "mono.h"

struct dr_xfer {
  dr_ckpt_ctx_t ctx;
  pthread_t t;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stopping;                  /* under mu */
  dr_xfer_job_t *todo, *todo_tail; /* under mu: fetches first */
  dr_xfer_job_t *done;           /* under mu: for the loop */
  uint64_t next_id;              /* loop thread */
  dr_tbucket_t pace;             /* the thread's */
  uv_async_t async;
  dr_xfer_done_cb cb;
  void *arg;
};

static void run_push(dr_xfer_t *x, dr_xfer_job_t *j) {
  for (size_t i = 0; i < j->n_peers; i++) {
    dr_xfer_peer_t *p = &j->peers[i];
    dr_ckpt_moved_t mv;
    p->rc = dr_ckpt_push(&x->ctx, p->addr, p->port, j->name, j->origin,
                         &x->pace, &mv, p->why, sizeof(p->why));
    if (p->rc == 0)
      j->moved = mv;
  }
}

static void run_fetch(dr_xfer_t *x, dr_xfer_job_t *j) {
  char name[DR_CKPT_NAME_MAX + 1];
  uint32_t origin;
  for (size_t i = 0; i < j->n_peers; i++)
    j->peers[i].rc = 1;
  /* A fetch of an earlier round may have brought it already. */
  if (dr_ckpt_store_find_step(x->ctx.store, j->step, name, sizeof(name),
                              &origin) == 0) {
    j->have_it = 1;
    return;
  }
  for (size_t i = 0; i < j->n_peers && j->served < 0; i++) {
    dr_xfer_peer_t *p = &j->peers[i];
    p->rc = dr_ckpt_fetch(&x->ctx, p->addr, p->port, j->step, &j->moved,
                          p->why, sizeof(p->why));
    if (p->rc == 0)
      j->served = (int)i;
    if (p->rc == -ECANCELED)
      break;
  }
}

static void *xfer_main(void *arg) {
  dr_xfer_t *x = arg;
  pthread_mutex_lock(&x->mu);
  for (;;) {
    while (!x->stopping && x->todo == NULL)
      pthread_cond_wait(&x->cv, &x->mu);
    if (x->stopping)
      break;
    dr_xfer_job_t *j = x->todo;
    x->todo = j->next;
    if (x->todo == NULL)
      x->todo_tail = NULL;
    pthread_mutex_unlock(&x->mu);
    uint64_t t0 = dr_mono_ms();
    j->served = -1;
    if (j->kind == DR_XFER_PUSH)
      run_push(x, j);
    else
      run_fetch(x, j);
    j->ms = dr_mono_ms() - t0;
    pthread_mutex_lock(&x->mu);
    j->next = x->done;
    x->done = j;
    if (!x->stopping)
      uv_async_send(&x->async);
  }
  pthread_mutex_unlock(&x->mu);
  return NULL;
}

/* Hands the finished jobs to the loop, oldest first. */
static void on_async(uv_async_t *h) {
  dr_xfer_t *x = h->data;
  pthread_mutex_lock(&x->mu);
  dr_xfer_job_t *list = x->done;
  x->done = NULL;
  pthread_mutex_unlock(&x->mu);
  dr_xfer_job_t *rev = NULL;
  while (list != NULL) {
    dr_xfer_job_t *n = list->next;
    list->next = rev;
    rev = list;
    list = n;
  }
  while (rev != NULL) {
    dr_xfer_job_t *n = rev->next;
    rev->next = NULL;
    x->cb(x->arg, rev);
    rev = n;
  }
}

static void on_closed(uv_handle_t *h) {
  dr_xfer_t *x = h->data;
  pthread_cond_destroy(&x->cv);
  pthread_mutex_destroy(&x->mu);
  free(x);
}

int dr_xfer_start(uv_loop_t *loop, const dr_ckpt_ctx_t *ctx, uint64_t rate,
                  dr_xfer_done_cb cb, void *arg, dr_xfer_t **out) {
  *out = NULL;
  dr_xfer_t *x = calloc(1, sizeof(*x));
  if (x == NULL)
    return -ENOMEM;
  x->ctx = *ctx;
  x->cb = cb;
  x->arg = arg;
  /* One chunk may go at once; beyond it, the rate. */
  dr_tbucket_init(&x->pace, rate, DR_CKPT_CHUNK, dr_mono_ns());
  pthread_mutex_init(&x->mu, NULL);
  pthread_cond_init(&x->cv, NULL);
  int rc = uv_async_init(loop, &x->async, on_async);
  if (rc != 0) {
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x);
    return rc;
  }
  x->async.data = x;
  rc = -pthread_create(&x->t, NULL, xfer_main, x);
  if (rc != 0) {
    uv_close((uv_handle_t *)&x->async, on_closed); /* frees x */
    return rc;
  }
  *out = x;
  return 0;
}

/* Under mu: the queued pushes of job's origin older than job leave the
 * queue for the loop, superseded. A copy that cannot keep up with the
 * checkpoints (a slow link, a low --ckpt-replicate-rate) then moves the
 * newest next rather than every one in turn, each older than the last. */
static void supersede_locked(dr_xfer_t *x, const dr_xfer_job_t *job) {
  uint64_t step, old;
  if (dr_ckpt_name_step(job->name, &step) != 1)
    return;
  dr_xfer_job_t **pp = &x->todo, *prev = NULL;
  int moved = 0;
  while (*pp != NULL) {
    dr_xfer_job_t *j = *pp;
    if (j->kind == DR_XFER_PUSH && j->origin == job->origin &&
        dr_ckpt_name_step(j->name, &old) == 1 && old < step) {
      *pp = j->next;
      j->superseded = 1;
      j->next = x->done;
      x->done = j;
      moved = 1;
      continue;
    }
    prev = j;
    pp = &j->next;
  }
  x->todo_tail = prev;
  if (moved && !x->stopping)
    uv_async_send(&x->async);
}

uint64_t dr_xfer_submit(dr_xfer_t *x, dr_xfer_job_t *job) {
  job->id = ++x->next_id;
  job->next = NULL;
  pthread_mutex_lock(&x->mu);
  if (job->kind == DR_XFER_PUSH)
    supersede_locked(x, job);
  if (job->kind == DR_XFER_FETCH) {
    job->next = x->todo;
    x->todo = job;
    if (x->todo_tail == NULL)
      x->todo_tail = job;
  } else {
    if (x->todo_tail != NULL)
      x->todo_tail->next = job;
    else
      x->todo = job;
    x->todo_tail = job;
  }
  pthread_cond_signal(&x->cv);
  pthread_mutex_unlock(&x->mu);
  return job->id;
}

static void free_list(dr_xfer_job_t *j) {
  while (j != NULL) {
    dr_xfer_job_t *n = j->next;
    free(j);
    j = n;
  }
}

void dr_xfer_stop(dr_xfer_t **xp) {
  dr_xfer_t *x = *xp;
  if (x == NULL)
    return;
  pthread_mutex_lock(&x->mu);
  x->stopping = 1;
  pthread_cond_signal(&x->cv);
  pthread_mutex_unlock(&x->mu);
  pthread_join(x->t, NULL);
  free_list(x->todo);
  free_list(x->done);
  x->todo = x->todo_tail = x->done = NULL;
  uv_close((uv_handle_t *)&x->async, on_closed);
  *xp = NULL;
}
