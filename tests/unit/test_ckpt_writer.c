/* The background checkpoint writer (worker/ckpt/ckpt_writer.h): a job
 * written by the thread is the same file, byte for byte, as one written
 * in place; one job in flight at most (poll while it is held, a second
 * submit refused, nothing to collect twice); pruning after a write; a
 * failure reported with its message and nothing pruned; the thread runs
 * the job with every signal blocked; freeing lets a job in flight
 * finish. A job is held in flight by its before_commit hook, which waits
 * on the fixture's gate until the test opens it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_writer.h"

#define N_ELEMS 5000 /* floats: past the writer's 64 KiB chunk */

typedef struct {
  char dir[64];
  float data[N_ELEMS];
  dr_ckpt_span_t span;
  dr_ckpt_header_t h;
  /* The gate that holds a job before its rename. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int held;   /* the hook is waiting */
  int open;   /* the test let it go */
  int hooked; /* the hook ran */
  pthread_t hook_thread;
  int term_blocked; /* SIGTERM was blocked where the hook ran */
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  snprintf(f->dir, sizeof(f->dir), "/tmp/test_ckpt_writer.XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  for (int i = 0; i < N_ELEMS; i++)
    f->data[i] = (float)i * 0.5f - 7.0f;
  f->span.p = f->data;
  f->span.n_elems = N_ELEMS;
  dr_ckpt_header_t *h = &f->h;
  h->rng_version = DR_CKPT_RNG_XOSHIRO;
  h->total_steps = 100;
  h->steps_per_epoch = 50;
  h->seed = 42;
  h->train_samples = 1000;
  h->global_batch = 20;
  h->layers = 1;
  h->width = 8;
  h->input_dim = 4;
  h->classes = 2;
  h->param_elems = N_ELEMS - 1000;
  h->optim_elems = 1000;
  h->lr = 0.01;
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
  assert_int_equal(system(cmd), 0);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
  return 0;
}

/* before_commit: records where it runs, then waits for the gate. */
static void gate(void *arg, const char *tmp_path) {
  fx_t *f = arg;
  (void)tmp_path;
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  pthread_mutex_lock(&f->mu);
  f->hooked = 1;
  f->hook_thread = pthread_self();
  f->term_blocked = sigismember(&now, SIGTERM) == 1;
  f->held = 1;
  pthread_cond_broadcast(&f->cv);
  while (!f->open)
    pthread_cond_wait(&f->cv, &f->mu);
  f->held = 0;
  pthread_mutex_unlock(&f->mu);
}

static void wait_held(fx_t *f) {
  pthread_mutex_lock(&f->mu);
  while (!f->held)
    pthread_cond_wait(&f->cv, &f->mu);
  pthread_mutex_unlock(&f->mu);
}

static void open_gate(fx_t *f) {
  pthread_mutex_lock(&f->mu);
  f->open = 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

static dr_ckpt_job_t job_at(fx_t *f, const char *dir, uint64_t step,
                            uint32_t keep, int gated) {
  dr_ckpt_job_t j;
  memset(&j, 0, sizeof(j));
  j.dir = dir;
  j.header = f->h;
  j.header.step = step;
  j.header.epoch = step / f->h.steps_per_epoch;
  j.header.epoch_pos = step % f->h.steps_per_epoch;
  j.spans = &f->span;
  j.n_spans = 1;
  j.keep = keep;
  j.before_commit = gated ? gate : NULL;
  j.arg = gated ? f : NULL;
  return j;
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  fseek(fp, 0, SEEK_END);
  *n = (size_t)ftell(fp);
  fseek(fp, 0, SEEK_SET);
  uint8_t *b = malloc(*n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, *n, fp), *n);
  fclose(fp);
  return b;
}

static void test_same_bytes_as_in_place(void **state) {
  fx_t *f = *state;
  char here[128];
  snprintf(here, sizeof(here), "%s/here", f->dir);
  assert_int_equal(mkdir(here, 0755), 0);
  dr_ckpt_job_t j = job_at(f, here, 7, 0, 0);
  dr_ckpt_result_t in_place;
  dr_ckpt_job_run(&j, &in_place);
  assert_int_equal(in_place.rc, 0);

  dr_ckpt_writer_t *w = NULL;
  assert_int_equal(dr_ckpt_writer_new(&w), 0);
  open_gate(f); /* the hook only records where it runs */
  j = job_at(f, f->dir, 7, 0, 1);
  assert_int_equal(dr_ckpt_writer_submit(w, &j), 0);
  const dr_ckpt_result_t *res = dr_ckpt_writer_wait(w);
  assert_non_null(res);
  assert_int_equal(res->rc, 0);
  assert_int_equal(res->step, 7);
  assert_int_equal(res->pruned, 0);
  char want[4096];
  assert_int_equal(dr_ckpt_path(want, sizeof(want), f->dir, 7), 0);
  assert_string_equal(res->path, want);
  /* On the writer's thread, with SIGTERM blocked. */
  assert_true(f->hooked);
  assert_false(pthread_equal(f->hook_thread, pthread_self()));
  assert_true(f->term_blocked);

  size_t na, nb;
  uint8_t *a = slurp(in_place.path, &na);
  uint8_t *b = slurp(res->path, &nb);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na);
  free(a);
  free(b);
  dr_ckpt_header_t h;
  char err[512];
  assert_int_equal(dr_ckpt_verify(want, &h, err, sizeof(err)), 0);
  assert_int_equal(h.step, 7);
  /* Collected: nothing more to collect. */
  assert_null(dr_ckpt_writer_poll(w));
  assert_null(dr_ckpt_writer_wait(w));
  assert_false(dr_ckpt_writer_busy(w));
  dr_ckpt_writer_free(&w);
  assert_null(w);
}

static void test_one_in_flight(void **state) {
  fx_t *f = *state;
  dr_ckpt_writer_t *w = NULL;
  assert_int_equal(dr_ckpt_writer_new(&w), 0);
  assert_null(dr_ckpt_writer_poll(w)); /* nothing handed over */
  assert_false(dr_ckpt_writer_busy(w));
  dr_ckpt_job_t j = job_at(f, f->dir, 10, 0, 1);
  assert_int_equal(dr_ckpt_writer_submit(w, &j), 0);
  wait_held(f);
  /* Held before its rename: in flight, not collectable, no second job,
   * and no file under the final name yet. */
  assert_true(dr_ckpt_writer_busy(w));
  assert_null(dr_ckpt_writer_poll(w));
  dr_ckpt_job_t k = job_at(f, f->dir, 11, 0, 0);
  assert_int_equal(dr_ckpt_writer_submit(w, &k), -EBUSY);
  char path[4096];
  assert_int_equal(dr_ckpt_path(path, sizeof(path), f->dir, 10), 0);
  assert_int_equal(access(path, F_OK), -1);
  open_gate(f);
  const dr_ckpt_result_t *res = dr_ckpt_writer_wait(w);
  assert_non_null(res);
  assert_int_equal(res->rc, 0);
  assert_int_equal(access(path, F_OK), 0);
  /* Free again: the next job goes. */
  assert_int_equal(dr_ckpt_writer_submit(w, &k), 0);
  while ((res = dr_ckpt_writer_poll(w)) == NULL)
    usleep(1000);
  assert_int_equal(res->step, 11);
  assert_int_equal(res->rc, 0);
  dr_ckpt_writer_free(&w);
}

static void test_prunes_after_a_write(void **state) {
  fx_t *f = *state;
  dr_ckpt_writer_t *w = NULL;
  assert_int_equal(dr_ckpt_writer_new(&w), 0);
  for (uint64_t step = 5; step <= 20; step += 5) {
    dr_ckpt_job_t j = job_at(f, f->dir, step, 2, 0);
    assert_int_equal(dr_ckpt_writer_submit(w, &j), 0);
    const dr_ckpt_result_t *res = dr_ckpt_writer_wait(w);
    assert_non_null(res);
    assert_int_equal(res->rc, 0);
    assert_int_equal(res->pruned, step > 10 ? 1 : 0);
  }
  dr_ckpt_writer_free(&w);
  uint64_t *steps;
  size_t n;
  assert_int_equal(dr_ckpt_list(f->dir, &steps, &n), 0);
  assert_int_equal(n, 2);
  assert_int_equal(steps[0], 20);
  assert_int_equal(steps[1], 15);
  free(steps);
}

static void test_failure_reported(void **state) {
  fx_t *f = *state;
  char gone[128];
  snprintf(gone, sizeof(gone), "%s/missing", f->dir);
  dr_ckpt_writer_t *w = NULL;
  assert_int_equal(dr_ckpt_writer_new(&w), 0);
  dr_ckpt_job_t j = job_at(f, gone, 3, 2, 0);
  assert_int_equal(dr_ckpt_writer_submit(w, &j), 0);
  const dr_ckpt_result_t *res = dr_ckpt_writer_wait(w);
  assert_non_null(res);
  assert_int_equal(res->rc, -ENOENT);
  assert_non_null(strstr(res->err, "open() of "));
  assert_int_equal(res->pruned, 0);
  assert_string_equal(res->path, "");
  /* The writer goes on after a failure. */
  j = job_at(f, f->dir, 4, 2, 0);
  assert_int_equal(dr_ckpt_writer_submit(w, &j), 0);
  res = dr_ckpt_writer_wait(w);
  assert_non_null(res);
  assert_int_equal(res->rc, 0);
  dr_ckpt_writer_free(&w);
}

/* Freed while the job is held: the free waits, and the file is there. */
static void *opener(void *arg) {
  fx_t *f = arg;
  wait_held(f);
  usleep(20000); /* the free is waiting by now, or soon */
  open_gate(f);
  return NULL;
}

static void test_free_finishes_the_job(void **state) {
  fx_t *f = *state;
  dr_ckpt_writer_t *w = NULL;
  assert_int_equal(dr_ckpt_writer_new(&w), 0);
  dr_ckpt_job_t j = job_at(f, f->dir, 30, 0, 1);
  assert_int_equal(dr_ckpt_writer_submit(w, &j), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, opener, f), 0);
  dr_ckpt_writer_free(&w);
  assert_null(w);
  pthread_join(t, NULL);
  char path[4096], err[512];
  dr_ckpt_header_t h;
  assert_int_equal(dr_ckpt_path(path, sizeof(path), f->dir, 30), 0);
  assert_int_equal(dr_ckpt_verify(path, &h, err, sizeof(err)), 0);
  dr_ckpt_writer_free(&w); /* NULL: nothing */
  dr_ckpt_writer_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_same_bytes_as_in_place, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_one_in_flight, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prunes_after_a_write, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_failure_reported, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_free_finishes_the_job, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
