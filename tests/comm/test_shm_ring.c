/* The shared-memory ring on its own: byte streams through the wrap point
 * with every mix of piece sizes, sleeping and waking, abort, a dead
 * producer, and the ways creating or opening a segment can fail.
 *
 * Producer and consumer are two threads of this process mapping the same
 * segment twice (as two processes would), except for the dead-producer
 * test, where the producer is a child process. The threads never call
 * cmocka; they report through their return value. Every wait is bounded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shm_ring.h"

#define CAP 4096u
#define WAIT_NS (10ull * 1000000000u) /* bound on any one wait */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint8_t pattern(uint64_t off) {
  return (uint8_t)((off * 2654435761u) >> 13);
}

typedef struct {
  char name[64];
  dr_shm_ring_t *prod, *cons;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  snprintf(f->name, sizeof(f->name), "/dr-test-ring-%d-%p", (int)getpid(),
           (void *)f);
  if (dr_shm_ring_create(f->name, CAP, &f->prod, NULL) != 0 ||
      dr_shm_ring_open(f->name, &f->cons, NULL) != 0)
    return -1;
  dr_shm_ring_unlink(f->name);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  dr_shm_ring_close(&f->prod);
  dr_shm_ring_close(&f->cons);
  free(f);
  return 0;
}

/* ---- the stream --------------------------------------------------------- */

typedef struct {
  dr_shm_ring_t *r;
  uint64_t total;
  const size_t *sizes; /* piece sizes, cycled */
  size_t n_sizes;
  int sleep_when_blocked; /* futex wait instead of spinning */
  char failure[128];
} side_t;

static int wait_for(dr_shm_ring_t *r, int producer, side_t *s) {
  dr_shm_waiter_t w;
  int ready = producer ? dr_shm_ring_prepare_write(r, 1, &w)
                       : dr_shm_ring_prepare_read(r, 1, &w);
  if (ready)
    return 0;
  int rc = dr_shm_wait(&w, 1, now_ns() + WAIT_NS);
  dr_shm_wait_done(&w);
  if (rc == -ETIMEDOUT) {
    snprintf(s->failure, sizeof(s->failure), "%s never woken",
             producer ? "producer" : "consumer");
    return -1;
  }
  return 0;
}

static void *producer(void *arg) {
  side_t *s = arg;
  uint64_t off = 0;
  size_t k = 0;
  while (off < s->total) {
    size_t want = s->sizes[k++ % s->n_sizes];
    if (want > s->total - off)
      want = (size_t)(s->total - off);
    while (want > 0) {
      void *p;
      size_t span = dr_shm_ring_write_span(s->r, &p);
      if (span == 0) {
        if (s->sleep_when_blocked && wait_for(s->r, 1, s) != 0)
          return NULL;
        continue;
      }
      size_t n = span < want ? span : want;
      for (size_t i = 0; i < n; i++)
        ((uint8_t *)p)[i] = pattern(off + i);
      dr_shm_ring_commit(s->r, n);
      off += n;
      want -= n;
    }
  }
  return NULL;
}

static void *consumer(void *arg) {
  side_t *s = arg;
  uint64_t off = 0;
  size_t k = 0;
  while (off < s->total) {
    size_t want = s->sizes[k++ % s->n_sizes];
    if (want > s->total - off)
      want = (size_t)(s->total - off);
    while (want > 0) {
      const void *p;
      size_t span = dr_shm_ring_read_span(s->r, &p);
      if (span == 0) {
        if (s->sleep_when_blocked && wait_for(s->r, 0, s) != 0)
          return NULL;
        continue;
      }
      size_t n = span < want ? span : want;
      for (size_t i = 0; i < n; i++)
        if (((const uint8_t *)p)[i] != pattern(off + i)) {
          snprintf(s->failure, sizeof(s->failure),
                   "byte at offset %llu is wrong",
                   (unsigned long long)(off + i));
          return NULL;
        }
      dr_shm_ring_release(s->r, n);
      off += n;
      want -= n;
    }
  }
  return NULL;
}

static void stream(fixture_t *f, uint64_t total, const size_t *ws, size_t nw,
                   const size_t *rs, size_t nr, int sleep) {
  side_t p = {.r = f->prod, .total = total, .sizes = ws, .n_sizes = nw,
              .sleep_when_blocked = sleep};
  side_t c = {.r = f->cons, .total = total, .sizes = rs, .n_sizes = nr,
              .sleep_when_blocked = sleep};
  pthread_t tp, tc;
  assert_int_equal(pthread_create(&tp, NULL, producer, &p), 0);
  assert_int_equal(pthread_create(&tc, NULL, consumer, &c), 0);
  pthread_join(tp, NULL);
  pthread_join(tc, NULL);
  assert_string_equal(p.failure, "");
  assert_string_equal(c.failure, "");
  assert_int_equal(dr_shm_ring_used(f->cons), 0);
}

/* Every piece size from 1 to past the capacity, on both sides, with the
 * stream long enough to wrap many times; odd sizes put the wrap point
 * everywhere inside a piece. */
static void test_every_size(void **state) {
  fixture_t *f = *state;
  static size_t sizes[CAP + 70];
  for (size_t i = 0; i < CAP + 70; i++)
    sizes[i] = i + 1;
  static const size_t one[] = {1}, odd[] = {7, 4093, 13, 1, CAP, 333},
                      big[] = {CAP, CAP * 3};
  stream(f, 3 * CAP + 123, one, 1, one, 1, 0);
  stream(f, (uint64_t)CAP * 600, sizes, CAP + 70, odd, 6, 0);
  stream(f, (uint64_t)CAP * 600, odd, 6, sizes, CAP + 70, 0);
  stream(f, (uint64_t)CAP * 50, big, 2, one, 1, 0);
  stream(f, (uint64_t)CAP * 50 + 5, one, 1, big, 2, 0);
}

/* Same streams with both sides sleeping on futexes when blocked: every
 * commit and release must wake the other side. */
static void test_sleep_wake(void **state) {
  fixture_t *f = *state;
  static const size_t a[] = {1, 64, 4096, 100}, b[] = {3, 4096, 17};
  stream(f, (uint64_t)CAP * 400, a, 4, b, 3, 1);
  stream(f, (uint64_t)CAP * 400 + 1, b, 3, a, 4, 1);
}

static void test_spans_and_padding(void **state) {
  fixture_t *f = *state;
  void *p;
  const void *q;
  assert_int_equal(dr_shm_ring_capacity(f->prod), CAP);
  assert_int_equal(dr_shm_ring_write_span(f->prod, &p), CAP);
  assert_int_equal(dr_shm_ring_read_span(f->cons, &q), 0);
  dr_shm_ring_commit(f->prod, CAP - 10);
  assert_int_equal(dr_shm_ring_free(f->prod), 10);
  assert_int_equal(dr_shm_ring_write_span(f->prod, &p), 10);
  dr_shm_ring_release(f->cons, CAP - 20);
  /* Free space now wraps: the span stops at the end of the data. */
  assert_int_equal(dr_shm_ring_free(f->prod), CAP - 10);
  assert_int_equal(dr_shm_ring_write_span(f->prod, &p), 10);
  /* Padding is committed without a contiguous span. */
  dr_shm_ring_commit(f->prod, 30);
  assert_int_equal(dr_shm_ring_used(f->cons), 40);
  assert_int_equal(dr_shm_ring_read_span(f->cons, &q), 20);
  dr_shm_ring_release(f->cons, 20);
  assert_int_equal(dr_shm_ring_read_span(f->cons, &q), 20);
  dr_shm_ring_release(f->cons, 20);
  assert_int_equal(dr_shm_ring_used(f->cons), 0);
}

static void *abort_later(void *arg) {
  fixture_t *f = arg;
  /* Races with the wait below either way: before it, prepare sees the
   * flag; after it, the wake ends it. */
  dr_shm_ring_abort(f->prod);
  return NULL;
}

static void test_abort_wakes(void **state) {
  fixture_t *f = *state;
  dr_shm_waiter_t w;
  assert_int_equal(dr_shm_ring_prepare_read(f->cons, 1, &w), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, abort_later, f), 0);
  uint64_t deadline = now_ns() + WAIT_NS;
  while (!dr_shm_ring_aborted(f->cons) && now_ns() < deadline)
    assert_int_not_equal(dr_shm_wait(&w, 1, deadline), -ETIMEDOUT);
  dr_shm_wait_done(&w);
  pthread_join(t, NULL);
  assert_true(dr_shm_ring_aborted(f->cons));
  assert_int_equal(dr_shm_ring_prepare_read(f->cons, 1, &w), 1);
}

static void test_wait_times_out(void **state) {
  fixture_t *f = *state;
  dr_shm_waiter_t w[2];
  assert_int_equal(dr_shm_ring_prepare_read(f->cons, 1, &w[0]), 0);
  void *p;
  dr_shm_ring_commit(f->prod, dr_shm_ring_write_span(f->prod, &p));
  assert_int_equal(dr_shm_ring_prepare_write(f->prod, 1, &w[1]), 0);
  uint64_t t0 = now_ns();
  /* Both armed, nobody moves: the wait ends at its deadline. */
  int rc;
  do
    rc = dr_shm_wait(&w[1], 1, t0 + 20000000u);
  while (rc == 0 && now_ns() < t0 + 20000000u);
  assert_int_equal(rc, -ETIMEDOUT);
  assert_true(now_ns() - t0 >= 20000000u);
  dr_shm_wait_done(&w[0]);
  dr_shm_wait_done(&w[1]);
}

/* The producer is a child process that dies (and stays unreaped, a
 * zombie) while the consumer waits for data: the consumer must see it
 * gone well under a second later. */
static void test_dead_producer(void **state) {
  (void)state;
  char name[64];
  snprintf(name, sizeof(name), "/dr-test-dead-%d", (int)getpid());
  int to_parent[2], to_child[2];
  assert_int_equal(pipe(to_parent), 0);
  assert_int_equal(pipe(to_child), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dr_shm_ring_t *r;
    char ok = dr_shm_ring_create(name, CAP, &r, NULL) == 0 ? 'y' : 'n';
    if (ok == 'y') {
      void *p;
      size_t n = dr_shm_ring_write_span(r, &p);
      memset(p, 7, 100 < n ? 100 : n);
      dr_shm_ring_commit(r, 100);
    }
    (void)!write(to_parent[1], &ok, 1);
    char c;
    (void)!read(to_child[0], &c, 1); /* until the parent mapped it */
    _exit(0);
  }
  char ok = 0;
  assert_int_equal(read(to_parent[0], &ok, 1), 1);
  assert_int_equal(ok, 'y');
  dr_shm_ring_t *r;
  assert_int_equal(dr_shm_ring_open(name, &r, NULL), 0);
  dr_shm_ring_unlink(name);
  assert_int_equal(dr_shm_ring_peer_pid(r), pid);
  assert_true(dr_shm_ring_peer_alive(r));
  /* What the producer committed before it died is still there. */
  assert_int_equal(dr_shm_ring_used(r), 100);
  dr_shm_ring_release(r, 100);
  assert_int_equal(write(to_child[1], "x", 1), 1);

  uint64_t t0 = now_ns(), seen = 0;
  while (now_ns() - t0 < 2000000000u) {
    dr_shm_waiter_t w;
    if (dr_shm_ring_prepare_read(r, 1, &w) == 0) {
      dr_shm_wait(&w, 1, now_ns() + 50000000u); /* the group's slice */
      dr_shm_wait_done(&w);
    }
    if (!dr_shm_ring_peer_alive(r)) {
      seen = now_ns() - t0;
      break;
    }
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(seen > 0);
  assert_true(seen < 500000000u);
  dr_shm_ring_close(&r);
  close(to_parent[0]);
  close(to_parent[1]);
  close(to_child[0]);
  close(to_child[1]);
}

static void test_create_and_open_errors(void **state) {
  (void)state;
  char name[64];
  snprintf(name, sizeof(name), "/dr-test-err-%d", (int)getpid());
  dr_shm_ring_t *a, *b;
  const char *what = NULL;
  assert_int_equal(dr_shm_ring_create(name, 1000, &a, &what), -EINVAL);
  assert_int_equal(dr_shm_ring_create(name, CAP, &a, &what), 0);
  assert_int_equal(dr_shm_ring_create(name, CAP, &b, &what), -EEXIST);
  assert_string_equal(what, "shm_open");
  assert_null(b);
  dr_shm_ring_unlink(name);
  dr_shm_ring_close(&a);
  assert_null(a);
  assert_int_equal(dr_shm_ring_open(name, &b, &what), -ENOENT);

  /* A segment that is not a ring. */
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 4096 + CAP), 0);
  close(fd);
  assert_int_equal(dr_shm_ring_open(name, &b, &what), -EPROTO);
  assert_null(b);
  dr_shm_ring_unlink(name);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sleep_wake, setup, teardown),
      cmocka_unit_test_setup_teardown(test_spans_and_padding, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_abort_wakes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wait_times_out, setup, teardown),
      cmocka_unit_test(test_dead_producer),
      cmocka_unit_test(test_create_and_open_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
