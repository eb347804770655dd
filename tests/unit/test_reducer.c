/* The reducer: bucket assignment, gradient views, launch order under any
 * ready order, no_sync, overlap off, and the rebuild in observed order.
 * The model and process group are stand-ins defined here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "reducer.h"

/* ---- stand-ins ---------------------------------------------------------- */

#define MAX_PARAMS 64
struct dr_model {
  size_t n;
  dr_param_t p[MAX_PARAMS];
};

size_t dr_model_n_params(const dr_model_t *m) { return m->n; }
dr_param_t *dr_model_param(dr_model_t *m, size_t i) { return &m->p[i]; }

int dr_pg_allreduce(dr_pg_t *pg, float *buf, size_t n, dr_pg_op_t op,
                    dr_work_t **w) {
  (void)pg, (void)buf, (void)n, (void)op, (void)w;
  return -1;
}
uint32_t dr_pg_rank(const dr_pg_t *pg) { (void)pg; return 0; }
uint32_t dr_pg_world(const dr_pg_t *pg) { (void)pg; return 1; }
int dr_pg_broadcast_sync(dr_pg_t *pg, void *buf, size_t n, uint32_t root,
                         char *err, size_t len) {
  (void)pg, (void)buf, (void)n, (void)root, (void)err, (void)len;
  return 0;
}
int dr_work_wait_keep(dr_work_t *w, char *err, size_t len) {
  (void)w, (void)err, (void)len;
  return 0;
}
void dr_work_free(dr_work_t **w) { *w = NULL; }
uint64_t dr_work_start_us(const dr_work_t *w) { (void)w; return 0; }
uint64_t dr_work_end_us(const dr_work_t *w) { (void)w; return 0; }

static dr_model_t *model_new(size_t n, const size_t *elems) {
  dr_model_t *m = calloc(1, sizeof(*m));
  m->n = n;
  for (size_t i = 0; i < n; i++)
    m->p[i].n_elems = elems[i];
  return m;
}

/* Records launches: bucket numbers in order, and how many params were
 * ready when each launched. */
typedef struct {
  size_t launched[MAX_PARAMS];
  size_t n;
  size_t ready_so_far;
} rec_t;

static int rec_launch(void *arg, size_t bucket, float *data, size_t n_elems,
                      dr_work_t **w) {
  rec_t *r = arg;
  (void)data, (void)n_elems;
  r->launched[r->n++] = bucket;
  *w = NULL;
  return 0;
}

/* ---- tests -------------------------------------------------------------- */

static void test_plan(void **state) {
  size_t bucket_of[8];
  /* 4-byte floats: caps in bytes. Reverse order of 5 params. */
  size_t elems[5] = {10, 10, 10, 10, 10};
  size_t order[5] = {4, 3, 2, 1, 0};
  /* First bucket 40 bytes (one param), then 80 (two params). */
  size_t nb = dr_bucket_plan(order, 5, elems, 80, 40, bucket_of);
  assert_int_equal(nb, 3);
  assert_int_equal(bucket_of[4], 0);
  assert_int_equal(bucket_of[3], 1);
  assert_int_equal(bucket_of[2], 1);
  assert_int_equal(bucket_of[1], 2);
  assert_int_equal(bucket_of[0], 2);
  /* A parameter larger than the cap gets a bucket of its own. */
  size_t big[4] = {5, 100, 5, 5};
  size_t o2[4] = {3, 2, 1, 0};
  nb = dr_bucket_plan(o2, 4, big, 64, 64, bucket_of);
  assert_int_equal(nb, 3);
  assert_int_equal(bucket_of[3], 0);
  assert_int_equal(bucket_of[2], 0);
  assert_int_equal(bucket_of[1], 1);
  assert_int_equal(bucket_of[0], 2);
  /* Everything fits: one bucket. */
  nb = dr_bucket_plan(o2, 4, big, 1 << 20, 1 << 20, bucket_of);
  assert_int_equal(nb, 1);
  /* Nothing to plan. */
  assert_int_equal(dr_bucket_plan(o2, 0, big, 64, 64, bucket_of), 0);
}

static void test_views_contiguous(void **state) {
  size_t elems[6] = {3, 7, 11, 13, 17, 19};
  dr_model_t *m = model_new(6, elems);
  rec_t rec = {{0}, 0, 0};
  dr_reducer_config_t cfg = {64, 32, 1, 0, rec_launch, &rec, NULL, NULL, NULL};
  dr_reducer_t *r = NULL;
  assert_int_equal(dr_reducer_new(&cfg, m, NULL, &r), 0);
  /* Reverse registration order fills the buckets: param 5 first. */
  float *base = m->p[5].g;
  size_t off = 0;
  for (size_t k = 0; k < 6; k++) {
    size_t p = 5 - k;
    assert_ptr_equal(m->p[p].g, base + off);
    off += elems[p];
  }
  /* Buckets: [19] (over the 32-byte first cap, alone), [17] (over the
   * 64-byte cap, alone), [13], [11], [7, 3]. */
  static const size_t want[5] = {19, 17, 13, 11, 10};
  assert_int_equal(dr_reducer_n_buckets(r), 5);
  for (size_t b = 0; b < 5; b++)
    assert_int_equal(dr_reducer_bucket_elems(r, b), want[b]);
  dr_reducer_free(&r);
  free(m);
}

/* Any ready order: buckets launch 0, 1, 2, ... and each launches in the
 * very mark_ready call that makes it and all before it ready. */
static void test_launch_order_shuffled(void **state) {
  size_t elems[12];
  for (int i = 0; i < 12; i++)
    elems[i] = 8 + (size_t)(i % 3);
  srand(7);
  for (int trial = 0; trial < 200; trial++) {
    dr_model_t *m = model_new(12, elems);
    rec_t rec = {{0}, 0, 0};
    dr_reducer_config_t cfg = {100, 40, 1, 0, rec_launch, &rec, NULL, NULL, NULL};
    dr_reducer_t *r = NULL;
    assert_int_equal(dr_reducer_new(&cfg, m, NULL, &r), 0);
    size_t nb = dr_reducer_n_buckets(r);
    assert_true(nb >= 3);
    size_t perm[12];
    for (size_t i = 0; i < 12; i++)
      perm[i] = i;
    for (size_t i = 11; i > 0; i--) {
      size_t j = (size_t)rand() % (i + 1);
      size_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    char err[64];
    assert_int_equal(dr_reducer_begin(r, 1, err, sizeof(err)), 0);
    /* Which bucket each param is in: the position of its view. */
    int ready[12] = {0};
    for (size_t k = 0; k < 12; k++) {
      size_t before = rec.n;
      ready[perm[k]] = 1;
      dr_reducer_mark_ready(r, perm[k]);
      /* Expected launches: the longest prefix of buckets fully ready. */
      size_t prefix = 0;
      for (size_t b = 0; b < nb; b++) {
        int all = 1;
        for (size_t p = 0; p < 12; p++) {
          float *g0 = m->p[11].g; /* bucket 0 starts at param 11's view */
          size_t pos = (size_t)(m->p[p].g - g0), start = 0, bi = 0;
          while (bi < nb && pos >= start + dr_reducer_bucket_elems(r, bi)) {
            start += dr_reducer_bucket_elems(r, bi);
            bi++;
          }
          if (bi == b && !ready[p])
            all = 0;
        }
        if (!all)
          break;
        prefix++;
      }
      assert_int_equal(rec.n, prefix);
      assert_true(rec.n >= before);
    }
    dr_reducer_end_backward(r);
    assert_int_equal(rec.n, nb);
    for (size_t b = 0; b < nb; b++)
      assert_int_equal(rec.launched[b], b);
    assert_int_equal(dr_reducer_wait(r, err, sizeof(err)), 0);
    dr_reducer_free(&r);
    free(m);
  }
}

static void test_no_sync_and_no_overlap(void **state) {
  size_t elems[4] = {10, 10, 10, 10};
  dr_model_t *m = model_new(4, elems);
  rec_t rec = {{0}, 0, 0};
  dr_reducer_config_t cfg = {40, 40, 1, 0, rec_launch, &rec, NULL, NULL, NULL};
  dr_reducer_t *r = NULL;
  char err[64];
  assert_int_equal(dr_reducer_new(&cfg, m, NULL, &r), 0);
  assert_int_equal(dr_reducer_begin(r, 0, err, sizeof(err)), 0);
  for (size_t p = 4; p-- > 0;)
    dr_reducer_mark_ready(r, p);
  dr_reducer_end_backward(r);
  assert_int_equal(rec.n, 0); /* no_sync: nothing communicated */
  dr_reducer_free(&r);

  cfg.overlap = 0;
  assert_int_equal(dr_reducer_new(&cfg, m, NULL, &r), 0);
  assert_int_equal(dr_reducer_begin(r, 1, err, sizeof(err)), 0);
  for (size_t p = 4; p-- > 0;)
    dr_reducer_mark_ready(r, p);
  assert_int_equal(rec.n, 0); /* overlap off: not during backward */
  dr_reducer_end_backward(r);
  assert_int_equal(rec.n, 4);
  dr_reducer_free(&r);
  free(m);
}

/* After the first synchronised step the buckets follow the ready order
 * that was observed (here: registration order, not reverse). */
static void test_rebuild_observed_order(void **state) {
  size_t elems[4] = {10, 10, 10, 10};
  dr_model_t *m = model_new(4, elems);
  rec_t rec = {{0}, 0, 0};
  dr_reducer_config_t cfg = {40, 40, 1, 1, rec_launch, &rec, NULL, NULL, NULL};
  dr_reducer_t *r = NULL;
  char err[64];
  assert_int_equal(dr_reducer_new(&cfg, m, NULL, &r), 0);
  assert_true(m->p[3].g < m->p[0].g);
  assert_int_equal(dr_reducer_begin(r, 1, err, sizeof(err)), 0);
  for (size_t p = 0; p < 4; p++)
    dr_reducer_mark_ready(r, p);
  dr_reducer_end_backward(r);
  assert_int_equal(dr_reducer_wait(r, err, sizeof(err)), 0);
  assert_int_equal(dr_reducer_begin(r, 1, err, sizeof(err)), 0);
  assert_true(m->p[0].g < m->p[1].g);
  assert_true(m->p[1].g < m->p[2].g);
  assert_true(m->p[2].g < m->p[3].g);
  /* Now param 0 completes bucket 0 alone. */
  rec.n = 0;
  dr_reducer_mark_ready(r, 0);
  assert_int_equal(rec.n, 1);
  dr_reducer_free(&r);
  free(m);
}

/* A second mark of a parameter neither completes its bucket early nor
 * moves it in the observed order. */
static void test_marked_twice(void **state) {
  size_t elems[4] = {10, 10, 10, 10};
  dr_model_t *m = model_new(4, elems);
  rec_t rec = {{0}, 0, 0};
  dr_reducer_config_t cfg = {80, 80, 1, 1, rec_launch, &rec, NULL, NULL, NULL};
  dr_reducer_t *r = NULL;
  char err[64];
  assert_int_equal(dr_reducer_new(&cfg, m, NULL, &r), 0);
  assert_int_equal(dr_reducer_n_buckets(r), 2); /* {3, 2} {1, 0} */
  assert_int_equal(dr_reducer_begin(r, 1, err, sizeof(err)), 0);
  dr_reducer_mark_ready(r, 3);
  dr_reducer_mark_ready(r, 3);
  assert_int_equal(rec.n, 0); /* 2 is not ready yet */
  dr_reducer_mark_ready(r, 2);
  assert_int_equal(rec.n, 1);
  dr_reducer_mark_ready(r, 2);
  dr_reducer_mark_ready(r, 0);
  dr_reducer_mark_ready(r, 3);
  assert_int_equal(rec.n, 1); /* 1 is not ready yet */
  dr_reducer_mark_ready(r, 1);
  assert_int_equal(rec.n, 2);
  dr_reducer_end_backward(r);
  assert_int_equal(dr_reducer_wait(r, err, sizeof(err)), 0);
  assert_int_equal(dr_reducer_begin(r, 1, err, sizeof(err)), 0);
  static const size_t want[4] = {3, 2, 0, 1};
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(dr_reducer_order(r)[i], want[i]);
  dr_reducer_free(&r);
  free(m);
}

/* An allocator that hands out zeroed memory and counts what is live: the
 * GPU path's bucket memory goes through such a hook. */
typedef struct {
  int live, allocs;
  void *last;
  size_t last_bytes;
} pool_t;

static void *pool_alloc(void *arg, size_t n_bytes) {
  pool_t *p = arg;
  p->live++;
  p->allocs++;
  p->last_bytes = n_bytes;
  p->last = calloc(1, n_bytes);
  return p->last;
}

static void pool_free(void *arg, void *mem) {
  pool_t *p = arg;
  p->live--;
  free(mem);
}

/* Gradients point into the hook's memory, a rebuild frees the old block
 * after taking a new one, and free releases the last. */
static void test_mem_hook(void **state) {
  size_t elems[4] = {10, 20, 30, 40};
  dr_model_t *m = model_new(4, elems);
  rec_t rec = {{0}, 0, 0};
  pool_t pool = {0, 0, NULL, 0};
  dr_reducer_config_t cfg = {80, 80, 1, 1, rec_launch, &rec,
                             pool_alloc, pool_free, &pool};
  dr_reducer_t *r = NULL;
  char err[64];
  assert_int_equal(dr_reducer_new(&cfg, m, NULL, &r), 0);
  assert_int_equal(pool.live, 1);
  assert_int_equal(pool.last_bytes, 100 * sizeof(float));
  for (size_t p = 0; p < 4; p++) {
    char *g = (char *)m->p[p].g, *base = pool.last;
    assert_true(g >= base && g + elems[p] * sizeof(float) <=
                                 base + pool.last_bytes);
  }
  assert_int_equal(dr_reducer_begin(r, 1, err, sizeof(err)), 0);
  for (size_t p = 0; p < 4; p++)
    dr_reducer_mark_ready(r, p);
  dr_reducer_end_backward(r);
  assert_int_equal(dr_reducer_wait(r, err, sizeof(err)), 0);
  assert_int_equal(dr_reducer_begin(r, 1, err, sizeof(err)), 0);
  assert_int_equal(pool.allocs, 2);
  assert_int_equal(pool.live, 1);
  assert_true((char *)m->p[0].g == (char *)pool.last);
  dr_reducer_free(&r);
  assert_int_equal(pool.live, 0);
  free(m);
}

/* A launch hook's own code (the GPU path's, here) reaches the caller with
 * its message from the one error table, not "unknown error". */
static int failing_launch(void *arg, size_t bucket, float *data,
                          size_t n_elems, dr_work_t **w) {
  (void)arg, (void)bucket, (void)data, (void)n_elems;
  *w = NULL;
  return DR_GPU_ECUDA;
}

static void test_launch_failure_message(void **state) {
  size_t elems[2] = {10, 10};
  dr_model_t *m = model_new(2, elems);
  dr_reducer_config_t cfg = {1 << 20, 1 << 20, 1, 0, failing_launch, NULL,
                             NULL, NULL, NULL};
  dr_reducer_t *r = NULL;
  char err[256] = "";
  assert_int_equal(dr_reducer_new(&cfg, m, NULL, &r), 0);
  assert_int_equal(dr_reducer_begin(r, 1, err, sizeof(err)), 0);
  for (size_t p = 0; p < 2; p++)
    dr_reducer_mark_ready(r, p);
  dr_reducer_end_backward(r);
  assert_int_equal(dr_reducer_wait(r, err, sizeof(err)), DR_GPU_ECUDA);
  assert_non_null(strstr(err, "bucket 0"));
  assert_non_null(strstr(err, dr_strerror(DR_GPU_ECUDA)));
  assert_null(strstr(err, "unknown error"));
  dr_reducer_free(&r);
  free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan),
      cmocka_unit_test(test_views_contiguous),
      cmocka_unit_test(test_launch_order_shuffled),
      cmocka_unit_test(test_no_sync_and_no_overlap),
      cmocka_unit_test(test_rebuild_observed_order),
      cmocka_unit_test(test_marked_twice),
      cmocka_unit_test(test_mem_hook),
      cmocka_unit_test(test_launch_failure_message),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
