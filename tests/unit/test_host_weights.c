/* Host-shared weights (worker/host_weights.h) with ranks as forked
 * processes: each weight updated once with the ring's average, whatever
 * bucket and shard boundaries cut its parameter; the segment's checks at
 * open; the two bucket slots; a peer that exits, and one that never
 * arrives, named within the deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "host_weights.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static dr_model_t *model(void) {
  dr_model_config_t c = {.input_dim = 8, .width = 16, .layers = 2,
                         .classes = 4, .max_batch = 4, .seed = 7};
  dr_model_t *m = NULL;
  char err[128];
  assert_int_equal(dr_model_new(&c, &m, err, sizeof(err)), 0);
  return m;
}

static dr_optim_t *sgd(dr_model_t *m) {
  dr_optim_config_t c = {.kind = DR_OPT_SGD, .lr = 0.5f};
  dr_optim_t *o = NULL;
  assert_int_equal(dr_optim_new(&c, m, &o), 0);
  return o;
}

static void name_of(char *buf, size_t n, const char *what) {
  snprintf(buf, n, "/ddprun-unit-hostw-%s-%d", what, (int)getpid());
}

static dr_hostw_shape_t shape(dr_model_t *m, dr_optim_t *o, uint32_t rank,
                              uint32_t world) {
  dr_hostw_shape_t s = {.rank = rank, .world = world,
                        .n_elems = dr_model_n_elems(m),
                        .state_elems = dr_optim_state_elems(o),
                        .max_buckets = dr_model_n_params(m)};
  return s;
}

/* Rank q's gradient of element i (registration order). */
static float grad(uint32_t q, size_t i) {
  return (float)(q + 1) * 0.37f * sinf((float)i * 0.7f + (float)q);
}

/* Two buckets in reverse registration order, split inside no parameter;
 * their shards do cut parameters. */
static void fill_buckets(dr_hostw_t *h, dr_model_t *m, uint32_t q,
                           float *base[2], size_t len[2]) {
  size_t np = dr_model_n_params(m), total = dr_model_n_elems(m);
  float *mem = dr_hostw_alloc(h, total * sizeof(float));
  assert_non_null(mem);
  size_t at = 0, split = np / 2, reg[64];
  size_t off = 0;
  for (size_t i = 0; i < np; i++) {
    reg[i] = off;
    off += dr_model_param(m, i)->n_elems;
  }
  base[0] = mem;
  for (size_t k = 0; k < np; k++) {
    size_t i = np - 1 - k;
    if (k == split) {
      len[0] = at;
      base[1] = mem + at;
    }
    dr_param_t *p = dr_model_param(m, i);
    p->g = mem + at;
    for (size_t e = 0; e < p->n_elems; e++)
      p->g[e] = grad(q, reg[i] + e);
    at += p->n_elems;
  }
  len[1] = at - len[0];
}

/* Publishes this rank's buckets (from fill_buckets) and runs the step. */
static int launch_and_step(dr_hostw_t *h, dr_model_t *m, dr_optim_t *o,
                           float *const b[2], const size_t n[2],
                           uint64_t deadline_ns, char *err, size_t err_len) {
  for (size_t i = 0; i < 2; i++)
    assert_int_equal(dr_hostw_launch(h, i, b[i], n[i], NULL), 0);
  dr_hostw_stats_t st;
  return dr_hostw_step(h, m, o, 2, 0, deadline_ns, &st, err, err_len);
}

/* One rank's whole step; 0 or the step's code. */
static int rank_step(const char *name, uint32_t q, uint32_t W,
                     const float *w0) {
  dr_model_t *m = model();
  dr_optim_t *o = sgd(m);
  dr_hostw_shape_t s = shape(m, o, q, W);
  dr_hostw_t *h = NULL;
  char err[256];
  int rc = dr_hostw_open(name, &s, w0, NULL, &h, err, sizeof(err));
  if (rc != 0)
    return rc;
  dr_hostw_attach(h, m, o);
  float *b[2];
  size_t n[2];
  fill_buckets(h, m, q, b, n);
  rc = launch_and_step(h, m, o, b, n, now_ns() + 10000000000ull, err,
                       sizeof(err));
  dr_hostw_close(&h);
  dr_optim_free(&o);
  dr_model_free(&m);
  return rc;
}

static void test_sums_and_updates(void **state) {
  (void)state;
  const uint32_t W = 3;
  dr_model_t *m = model();
  dr_optim_t *o = sgd(m);
  size_t n = dr_model_n_elems(m);
  float *w0 = malloc(n * sizeof(float));
  memcpy(w0, dr_model_param(m, 0)->w, n * sizeof(float));
  char name[128];
  name_of(name, sizeof(name), "sums");
  dr_hostw_shape_t s = shape(m, o, 0, W);
  dr_hostw_t *h = NULL;
  char err[256];
  assert_int_equal(dr_hostw_open(name, &s, w0, NULL, &h, err, sizeof(err)),
                   0);
  pid_t kids[2];
  for (uint32_t q = 1; q < W; q++) {
    kids[q - 1] = fork();
    if (kids[q - 1] == 0)
      _exit(rank_step(name, q, W, w0) == 0 ? 0 : 3);
  }
  dr_hostw_attach(h, m, o);
  float *b[2];
  size_t len[2];
  fill_buckets(h, m, 0, b, len);
  assert_int_equal(launch_and_step(h, m, o, b, len,
                                   now_ns() + 10000000000ull, err,
                                   sizeof(err)), 0);
  for (uint32_t q = 1; q < W; q++) {
    int ws = 0;
    assert_int_equal(waitpid(kids[q - 1], &ws, 0), kids[q - 1]);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  }
  dr_hostw_unlink(h);
  /* Element i of a bucket of length L lies in segment k; its average is
   * ((x[k] + x[k+1]) + x[k+2]) / 3 over ranks, and w -= 0.5 * avg. The
   * weights at w are the shared ones (every rank's update). */
  size_t reg = 0, changed = 0;
  size_t np = dr_model_n_params(m);
  for (size_t i = 0; i < np; i++) {
    dr_param_t *p = dr_model_param(m, i);
    size_t bi = (size_t)(p->g - b[0]) < len[0] ? 0 : 1;
    size_t L = len[bi], base = L / W, rem = L % W;
    for (size_t e = 0; e < p->n_elems; e++) {
      size_t at = (size_t)(p->g + e - b[bi]), k = 0;
      while (k + 1 < W && at >= (k + 1) * base + (k + 1 < rem ? k + 1 : rem))
        k++;
      float acc = grad(k, reg + e);
      acc += grad((k + 1) % W, reg + e);
      float avg = (acc + grad((k + 2) % W, reg + e)) / (float)W;
      float want = w0[reg + e] - 0.5f * avg;
      assert_memory_equal(&p->w[e], &want, sizeof(float));
      changed += p->w[e] != w0[reg + e];
    }
    reg += p->n_elems;
  }
  assert_true(changed > n / 2);
  dr_hostw_close(&h);
  free(w0);
  dr_optim_free(&o);
  dr_model_free(&m);
}

static void test_open_checks_and_slots(void **state) {
  (void)state;
  dr_model_t *m = model();
  dr_optim_t *o = sgd(m);
  size_t n = dr_model_n_elems(m);
  const float *w = dr_model_param(m, 0)->w;
  char name[128], err[256];
  name_of(name, sizeof(name), "open");
  dr_hostw_shape_t s = shape(m, o, 0, 2);
  dr_hostw_t *h = NULL, *h1 = NULL;
  assert_int_equal(dr_hostw_open(name, &s, w, NULL, &h, err, sizeof(err)), 0);
  /* The name exists: a second creator fails. */
  assert_int_equal(dr_hostw_open(name, &s, w, NULL, &h1, err, sizeof(err)),
                   -EEXIST);
  assert_non_null(strstr(err, "shm_open"));
  dr_hostw_shape_t other = s;
  other.rank = 1;
  other.n_elems = n - 1;
  assert_int_equal(dr_hostw_open(name, &other, w, NULL, &h1, err,
                                 sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "model"));
  float *diff = malloc(n * sizeof(float));
  memcpy(diff, w, n * sizeof(float));
  diff[n / 2] += 1.0f;
  other = s;
  other.rank = 1;
  assert_int_equal(dr_hostw_open(name, &other, diff, NULL, &h1, err,
                                 sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, "rank 1's weights or optimizer state differ"));
  assert_int_equal(dr_hostw_open(name, &other, w, NULL, &h1, err,
                                 sizeof(err)), 0);
  dr_hostw_unlink(h);
  /* Two plans' worth of bucket memory, zeroed; a third is refused. */
  float *a = dr_hostw_alloc(h, n * sizeof(float));
  float *b = dr_hostw_alloc(h, n * sizeof(float));
  assert_non_null(a);
  assert_non_null(b);
  assert_ptr_not_equal(a, b);
  assert_null(dr_hostw_alloc(h, 4));
  assert_null(dr_hostw_alloc(h1, 2 * n * sizeof(float) + 64));
  a[3] = 9.0f;
  dr_hostw_free(h, a);
  float *c = dr_hostw_alloc(h, n * sizeof(float));
  assert_ptr_equal(c, a);
  assert_true(c[3] == 0.0f);
  free(diff);
  dr_hostw_close(&h1);
  dr_hostw_close(&h);
  assert_null(h);
  dr_optim_free(&o);
  dr_model_free(&m);
}

/* Rank 1 maps the segment, then exits (how==0) or sleeps (how==1); rank 0
 * steps against it with a deadline of limit_ms. Returns the step's code. */
static int against(int how, uint64_t limit_ms, char *err, size_t err_len,
                   pid_t *kid, uint64_t *took_ms) {
  dr_model_t *m = model();
  dr_optim_t *o = sgd(m);
  const float *w0 = dr_model_param(m, 0)->w;
  char name[128];
  name_of(name, sizeof(name), how == 0 ? "exit" : "hang");
  dr_hostw_shape_t s = shape(m, o, 0, 2);
  dr_hostw_t *h = NULL;
  assert_int_equal(dr_hostw_open(name, &s, w0, NULL, &h, err, err_len), 0);
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  *kid = fork();
  if (*kid == 0) {
    dr_hostw_shape_t s1 = s;
    s1.rank = 1;
    dr_hostw_t *h1 = NULL;
    char e1[256];
    int rc = dr_hostw_open(name, &s1, w0, NULL, &h1, e1, sizeof(e1));
    char c = rc == 0 ? 'y' : 'n';
    ssize_t wr = write(pipefd[1], &c, 1);
    (void)wr;
    if (how == 1)
      sleep(20);
    _exit(0);
  }
  char c = 0;
  assert_int_equal(read(pipefd[0], &c, 1), 1);
  assert_int_equal(c, 'y');
  close(pipefd[0]);
  close(pipefd[1]);
  dr_hostw_unlink(h);
  dr_hostw_attach(h, m, o);
  float *b[2];
  size_t len[2];
  fill_buckets(h, m, 0, b, len);
  uint64_t t0 = now_ns();
  int rc = launch_and_step(h, m, o, b, len, t0 + limit_ms * 1000000u, err,
                           err_len);
  *took_ms = (now_ns() - t0) / 1000000u;
  dr_hostw_close(&h);
  dr_optim_free(&o);
  dr_model_free(&m);
  return rc;
}

static void test_peer_exits(void **state) {
  (void)state;
  char err[256] = "";
  pid_t kid;
  uint64_t took;
  int rc = against(0, 10000, err, sizeof(err), &kid, &took);
  assert_int_equal(rc, DR_PG_EPEER);
  char want[96];
  snprintf(want, sizeof(want), "rank 1 (pid %d) exited while rank 0 waited "
           "for the end of its backward pass", (int)kid);
  assert_non_null(strstr(err, want));
  assert_true(took < 2000);
  int ws;
  assert_int_equal(waitpid(kid, &ws, 0), kid);
}

static void test_peer_never_arrives(void **state) {
  (void)state;
  char err[256] = "";
  pid_t kid;
  uint64_t took;
  int rc = against(1, 200, err, sizeof(err), &kid, &took);
  kill(kid, SIGKILL);
  int ws;
  waitpid(kid, &ws, 0);
  assert_int_equal(rc, DR_PG_ETIMEOUT);
  assert_non_null(strstr(err, "rank 1 did not reach the end of its backward "
                              "pass within the timeout"));
  assert_true(took >= 200 && took < 2000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sums_and_updates),
      cmocka_unit_test(test_open_checks_and_slots),
      cmocka_unit_test(test_peer_exits),
      cmocka_unit_test(test_peer_never_arrives),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
