/* The wait on a shared bell (worker/comm/shm_wait.h), with the other side
 * a child process: a count already reached ends it at once, a publication
 * wakes a sleeper, a dead (unreaped) process is named, a check's code ends
 * it, and the deadline does; the spin only where each rank has a CPU.
 * Every wait is bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shm_wait.h"

#define BOUND_NS (10ull * 1000000000u) /* on any one wait */

/* What both processes share. */
typedef struct {
  dr_shm_bell_t bell;
  _Atomic uint64_t count;
  _Atomic int32_t pid;
} shared_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int setup(void **state) {
  void *p = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return -1;
  *state = p;
  return 0;
}

static int teardown(void **state) {
  munmap(*state, sizeof(shared_t));
  return 0;
}

static dr_shm_await_t await_of(shared_t *s, uint64_t target) {
  dr_shm_await_t a = {.bell = &s->bell, .count = &s->count,
                      .target = target, .pid = &s->pid};
  return a;
}

static void test_reached(void **state) {
  shared_t *s = *state;
  atomic_store(&s->count, 3);
  dr_shm_await_t a = await_of(s, 2);
  a.spin_ns = DR_SHM_SPIN_NS;
  assert_int_equal(dr_shm_await(&a, now_ns() + BOUND_NS), 0);
  /* Even past the deadline: the count is looked at first. */
  assert_int_equal(dr_shm_await(&a, 0), 0);
}

static void test_post_wakes_sleeper(void **state) {
  shared_t *s = *state;
  pid_t kid = fork();
  if (kid == 0) {
    /* Publishes once the parent sleeps, so the post must wake it. */
    uint64_t until = now_ns() + BOUND_NS;
    while (atomic_load(&s->bell.sleepers) == 0 && now_ns() < until)
      dr_shm_relax();
    atomic_store(&s->count, 1);
    dr_shm_bell_post(&s->bell);
    _exit(0);
  }
  atomic_store(&s->pid, (int32_t)kid);
  dr_shm_await_t a = await_of(s, 1);
  uint64_t t0 = now_ns();
  assert_int_equal(dr_shm_await(&a, t0 + BOUND_NS), 0);
  assert_true(now_ns() - t0 < BOUND_NS);
  assert_int_equal(atomic_load(&s->bell.sleepers), 0);
  int ws;
  assert_int_equal(waitpid(kid, &ws, 0), kid);
}

static void test_dead_peer(void **state) {
  shared_t *s = *state;
  pid_t kid = fork();
  if (kid == 0)
    _exit(0);
  /* A zombie until reaped below: as dead as a reaped one. */
  atomic_store(&s->pid, (int32_t)kid);
  dr_shm_await_t a = await_of(s, 1);
  uint64_t t0 = now_ns();
  assert_int_equal(dr_shm_await(&a, t0 + BOUND_NS), -ESRCH);
  assert_true(now_ns() - t0 < BOUND_NS);
  assert_false(dr_pid_alive(kid));
  assert_true(dr_pid_alive((int)getpid()));
  int ws;
  assert_int_equal(waitpid(kid, &ws, 0), kid);
  assert_false(dr_pid_alive(kid));
}

static int refuse(void *arg) {
  (*(int *)arg)++;
  return 42;
}

static void test_check_and_deadline(void **state) {
  shared_t *s = *state;
  atomic_store(&s->pid, (int32_t)getpid());
  int calls = 0;
  dr_shm_await_t a = await_of(s, 1);
  a.check = refuse;
  a.arg = &calls;
  assert_int_equal(dr_shm_await(&a, now_ns() + BOUND_NS), 42);
  assert_int_equal(calls, 1);
  a.check = NULL;
  uint64_t t0 = now_ns();
  assert_int_equal(dr_shm_await(&a, t0 + 30000000u), -ETIMEDOUT);
  uint64_t took = now_ns() - t0;
  assert_true(took >= 30000000u && took < BOUND_NS);
  assert_int_equal(atomic_load(&s->bell.sleepers), 0);
}

static void test_spin_policy(void **state) {
  (void)state;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  assert_int_equal(dr_shm_spin_ns(1), cpus > 0 ? DR_SHM_SPIN_NS : 0);
  assert_int_equal(dr_shm_spin_ns((uint32_t)cpus + 1), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reached, setup, teardown),
      cmocka_unit_test_setup_teardown(test_post_wakes_sleeper, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_dead_peer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_check_and_deadline, setup,
                                      teardown),
      cmocka_unit_test(test_spin_policy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
