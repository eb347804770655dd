/* The per-thread CPU sampler (worker/thread_cpu.c), on real threads: one
 * that spins 50 ms of CPU shows at least 40 ms, read by itself and
 * through /proc by another thread; one that sleeps shows almost none and
 * a voluntary switch per sleep; two spinners on one CPU wait on its run
 * queue and are preempted. Then the parsers of the /proc files, a thread
 * that is gone, and the difference of two samples. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "thread_cpu.h"

#define MS 1000000ull

static uint64_t own_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A worker thread and the main thread meet at the barrier around each
 * phase: the main thread reads the worker's /proc figures while the
 * worker waits there (asleep, so its on-CPU time is up to date). */
typedef struct {
  pthread_barrier_t *bar;
  int cpu;            /* pin to this CPU; -1: not pinned */
  int sleeps;         /* 0: spin; else sleep this many times 10 ms */
  uint64_t spin_ns;   /* CPU time to burn */
  pid_t tid;
  int pinned;         /* sched_setaffinity worked */
  dr_thread_cpu_t self0, self1;
  int self_rc;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  w->tid = dr_thread_cpu_tid();
  if (w->cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(w->cpu, &set);
    w->pinned = sched_setaffinity(0, sizeof(set), &set) == 0;
  }
  w->self_rc = dr_thread_cpu_self(&w->self0, NULL, 0);
  pthread_barrier_wait(w->bar); /* 1: the main thread reads "before" */
  pthread_barrier_wait(w->bar); /* 2: go */
  if (w->sleeps > 0) {
    for (int i = 0; i < w->sleeps; i++) {
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  } else {
    uint64_t end = own_cpu_ns() + w->spin_ns;
    volatile uint64_t x = 0;
    while (own_cpu_ns() < end)
      x = x + 1;
  }
  int rc = dr_thread_cpu_self(&w->self1, NULL, 0);
  if (w->self_rc == 0)
    w->self_rc = rc;
  pthread_barrier_wait(w->bar); /* 3: the main thread reads "after" */
  pthread_barrier_wait(w->bar); /* 4: done */
  return NULL;
}

/* Runs n workers through their phase; d_of[k], d_self[k]: worker k's
 * figures over it, read through /proc and by itself. */
static void run_workers(worker_t *w, int n, dr_thread_cpu_t *d_of,
                        dr_thread_cpu_t *d_self) {
  pthread_barrier_t bar;
  assert_int_equal(pthread_barrier_init(&bar, NULL, (unsigned)n + 1), 0);
  pthread_t th[4];
  assert_true(n <= 4);
  for (int k = 0; k < n; k++) {
    w[k].bar = &bar;
    assert_int_equal(pthread_create(&th[k], NULL, worker, &w[k]), 0);
  }
  dr_thread_cpu_t before[4], after[4];
  char why[256];
  pthread_barrier_wait(&bar);
  for (int k = 0; k < n; k++) {
    int rc = dr_thread_cpu_of(w[k].tid, &before[k], why, sizeof(why));
    if (rc != 0)
      print_message("dr_thread_cpu_of: %s\n", why);
    assert_int_equal(rc, 0);
  }
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar);
  for (int k = 0; k < n; k++)
    assert_int_equal(dr_thread_cpu_of(w[k].tid, &after[k], why, sizeof(why)),
                     0);
  pthread_barrier_wait(&bar);
  for (int k = 0; k < n; k++) {
    assert_int_equal(pthread_join(th[k], NULL), 0);
    assert_int_equal(w[k].self_rc, 0);
    dr_thread_cpu_sub(&after[k], &before[k], &d_of[k]);
    dr_thread_cpu_sub(&w[k].self1, &w[k].self0, &d_self[k]);
    unsigned all = DR_TCPU_CPU | DR_TCPU_WAIT | DR_TCPU_CS;
    assert_int_equal(d_of[k].have & all, all);
    assert_int_equal(d_self[k].have & all, all);
  }
  pthread_barrier_destroy(&bar);
}

static void spinner_shows_its_cpu(void **state) {
  (void)state;
  worker_t w = {.cpu = -1, .spin_ns = 50 * MS};
  dr_thread_cpu_t of, self;
  run_workers(&w, 1, &of, &self);
  print_message("spinner: cpu %.1f ms (self %.1f), wait %.1f ms, "
                "switches %llu/%llu\n", of.cpu_ns / 1e6, self.cpu_ns / 1e6,
                of.wait_ns / 1e6, (unsigned long long)of.vol_cs,
                (unsigned long long)of.invol_cs);
  assert_true(self.cpu_ns >= 50 * MS);
  assert_true(of.cpu_ns >= 40 * MS);
}

static void sleeper_shows_switches_not_cpu(void **state) {
  (void)state;
  worker_t w = {.cpu = -1, .sleeps = 3};
  dr_thread_cpu_t of, self;
  run_workers(&w, 1, &of, &self);
  print_message("sleeper: cpu %.3f ms, voluntary switches %llu (self "
                "%llu)\n", of.cpu_ns / 1e6, (unsigned long long)of.vol_cs,
                (unsigned long long)self.vol_cs);
  /* Sanitizers make each wake-up dearer; still far below a spin. */
  assert_true(of.cpu_ns < 5 * MS);
  assert_true(self.cpu_ns < 5 * MS);
  assert_true(of.vol_cs >= 3);
  assert_true(self.vol_cs >= 3);
}

/* Two threads that each need 30 ms of one CPU: whichever runs, the other
 * waits on the run queue, 30 ms or more between them. */
static void contention_shows_run_queue_wait(void **state) {
  (void)state;
  cpu_set_t mine;
  assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &mine))
    cpu++;
  worker_t w[2] = {{.cpu = cpu, .spin_ns = 30 * MS},
                   {.cpu = cpu, .spin_ns = 30 * MS}};
  dr_thread_cpu_t of[2], self[2];
  run_workers(w, 2, of, self);
  if (!w[0].pinned || !w[1].pinned)
    skip();
  uint64_t wait = of[0].wait_ns + of[1].wait_ns;
  uint64_t self_wait = self[0].wait_ns + self[1].wait_ns;
  print_message("two spinners on CPU %d: run-queue wait %.1f + %.1f ms, "
                "involuntary switches %llu + %llu\n", cpu,
                of[0].wait_ns / 1e6, of[1].wait_ns / 1e6,
                (unsigned long long)of[0].invol_cs,
                (unsigned long long)of[1].invol_cs);
  assert_true(wait >= 20 * MS);
  assert_true(self_wait >= 20 * MS);
  assert_true(of[0].invol_cs + of[1].invol_cs >= 1);
}

static void *nothing(void *arg) {
  *(pid_t *)arg = dr_thread_cpu_tid();
  return NULL;
}

static void gone_thread_is_named(void **state) {
  (void)state;
  pid_t tid = 0;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, nothing, &tid), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  dr_thread_cpu_t s;
  char why[256];
  assert_int_equal(dr_thread_cpu_of(tid, &s, why, sizeof(why)), -ENOENT);
  assert_int_equal(s.have, 0);
  assert_non_null(strstr(why, "no thread"));
}

static void parsers(void **state) {
  (void)state;
  dr_thread_cpu_t s;
  memset(&s, 0, sizeof(s));
  assert_int_equal(dr__thread_cpu_parse_schedstat("123 456 7\n", &s), 0);
  assert_int_equal(s.cpu_ns, 123);
  assert_int_equal(s.wait_ns, 456);
  assert_int_equal(s.slices, 7);
  assert_int_equal(dr__thread_cpu_parse_schedstat("", &s), -EINVAL);
  assert_int_equal(dr__thread_cpu_parse_schedstat("1 2\n", &s), -EINVAL);

  assert_int_equal(dr__thread_cpu_parse_status(
                       "Name:\ttrain\nvoluntary_ctxt_switches:\t41\n"
                       "nonvoluntary_ctxt_switches:\t5\n", &s), 0);
  assert_int_equal(s.vol_cs, 41);
  assert_int_equal(s.invol_cs, 5);
  assert_int_equal(dr__thread_cpu_parse_status(
                       "Name:\ttrain\nvoluntary_ctxt_switches:\t41\n", &s),
                   -EINVAL);

  uint64_t ticks = 0;
  /* A command name with spaces and parentheses. */
  assert_int_equal(dr__thread_cpu_parse_stat(
                       "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 "
                       "20 0 1 0 100 1000 10\n", &ticks), 0);
  assert_int_equal(ticks, 10);
  assert_int_equal(dr__thread_cpu_parse_stat("42 (a) S 1 2\n", &ticks),
                   -EINVAL);
}

static void sub_never_negative(void **state) {
  (void)state;
  dr_thread_cpu_t a = {10, 20, 3, 4, 5, DR_TCPU_CPU | DR_TCPU_CS};
  dr_thread_cpu_t b = {15, 10, 3, 6, 5, DR_TCPU_CPU | DR_TCPU_WAIT};
  dr_thread_cpu_t d;
  dr_thread_cpu_sub(&b, &a, &d);
  assert_int_equal(d.cpu_ns, 5);
  assert_int_equal(d.wait_ns, 0);
  assert_int_equal(d.vol_cs, 2);
  assert_int_equal(d.invol_cs, 0);
  assert_int_equal(d.have, DR_TCPU_CPU);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(spinner_shows_its_cpu),
      cmocka_unit_test(sleeper_shows_switches_not_cpu),
      cmocka_unit_test(contention_shows_run_queue_wait),
      cmocka_unit_test(gone_thread_is_named),
      cmocka_unit_test(parsers),
      cmocka_unit_test(sub_never_negative),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
