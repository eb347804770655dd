/* proto/os/shm_name.c: names nobody can predict under the agent's prefix, a
 * name found taken tried again with new digits (a fixed number of times),
 * and the removal of a prefix's /dev/shm entries, nobody else's. Real
 * segments under a prefix of this test's own (with its pid), removed in
 * the teardown. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm_name.h"

typedef struct {
  char prefix[64];
} fx_t;

static int setup(void **state) {
  fx_t *fx = calloc(1, sizeof(*fx));
  if (fx == NULL)
    return -1;
  snprintf(fx->prefix, sizeof(fx->prefix), "ddprun-unit%ld-", (long)getpid());
  setenv(DR_SHM_PREFIX_ENV, fx->prefix, 1);
  unsetenv("DDPRUN_SHM_TEST_TAKEN");
  unsetenv("DDPRUN_SHM_TEST_KILL");
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fx_t *fx = *state;
  dr_shm_remove_prefix(fx->prefix);
  unsetenv(DR_SHM_PREFIX_ENV);
  unsetenv("DDPRUN_SHM_TEST_TAKEN");
  free(fx);
  return 0;
}

/* Creates the segment as a worker does: O_EXCL. */
typedef struct {
  int calls;
  char names[DR_SHM_NAME_TRIES + 1][160];
} tries_t;

static int create_excl(const char *name, void *arg) {
  tries_t *t = arg;
  snprintf(t->names[t->calls++ % (DR_SHM_NAME_TRIES + 1)],
           sizeof(t->names[0]), "%s", name);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  close(fd);
  return 0;
}

static int exists(const char *name) {
  int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
  if (fd >= 0)
    close(fd);
  return fd >= 0;
}

static void test_names(void **state) {
  fx_t *fx = *state;
  char a[160], b[160], want[96];
  tries_t t = {0};
  int taken = -1;
  assert_int_equal(dr_shm_create(a, sizeof(a), "ring0to1", create_excl, &t,
                                 &taken), 0);
  assert_int_equal(taken, 0);
  assert_int_equal(t.calls, 1);
  /* "/" PREFIX 16 hex digits "-" TAG */
  snprintf(want, sizeof(want), "/%s", fx->prefix);
  assert_memory_equal(a, want, strlen(want));
  const char *d = a + strlen(want);
  for (int i = 0; i < 16; i++)
    assert_non_null(strchr("0123456789abcdef", d[i]));
  assert_string_equal(d + 16, "-ring0to1");
  assert_true(exists(a));
  /* Another name each time. */
  assert_int_equal(dr_shm_create(b, sizeof(b), "ring0to1", create_excl, &t,
                                 NULL), 0);
  assert_string_not_equal(a, b);

  /* A tag or buffer that does not do: refused before any try. */
  t.calls = 0;
  assert_int_equal(dr_shm_create(a, sizeof(a), "a/b", create_excl, &t, NULL),
                   -EINVAL);
  assert_int_equal(dr_shm_create(a, sizeof(a), "", create_excl, &t, NULL),
                   -EINVAL);
  assert_int_equal(dr_shm_create(a, 20, "weights", create_excl, &t, NULL),
                   -EINVAL);
  assert_int_equal(t.calls, 0);

  /* A prefix that is not a name's: the default. */
  setenv(DR_SHM_PREFIX_ENV, "../etc/", 1);
  assert_int_equal(dr_shm_create(a, sizeof(a), "weights", create_excl, &t,
                                 NULL), 0);
  assert_memory_equal(a, "/ddprun-", 8);
  assert_int_equal(shm_unlink(a), 0);
}

/* Names taken before the call (DDPRUN_SHM_TEST_TAKEN makes them, as
 * another user would): each is tried once, then new digits. */
static void test_taken_retried(void **state) {
  (void)state;
  char name[160];
  tries_t t = {0};
  int taken = 0;
  setenv("DDPRUN_SHM_TEST_TAKEN", "3", 1);
  assert_int_equal(dr_shm_create(name, sizeof(name), "weights", create_excl,
                                 &t, &taken), 0);
  assert_int_equal(taken, 3);
  assert_int_equal(t.calls, 4);
  assert_string_equal(t.names[3], name);
  for (int i = 0; i < 4; i++)
    assert_true(exists(t.names[i]));

  /* All of them taken: -EEXIST after DR_SHM_NAME_TRIES names. */
  memset(&t, 0, sizeof(t));
  setenv("DDPRUN_SHM_TEST_TAKEN", "100", 1);
  assert_int_equal(dr_shm_create(name, sizeof(name), "weights", create_excl,
                                 &t, &taken), -EEXIST);
  assert_int_equal(taken, DR_SHM_NAME_TRIES);
  assert_int_equal(t.calls, DR_SHM_NAME_TRIES);
}

static int refuse(const char *name, void *arg) {
  (void)name;
  ++*(int *)arg;
  return -ENOSPC;
}

/* Any other failure ends the tries at once. */
static void test_other_failure_not_retried(void **state) {
  (void)state;
  char name[160];
  int calls = 0;
  assert_int_equal(dr_shm_create(name, sizeof(name), "ring1to0", refuse,
                                 &calls, NULL), -ENOSPC);
  assert_int_equal(calls, 1);
}

/* The agent's clean-up: its prefix's entries, not another's that merely
 * begins alike. */
static void test_remove_prefix(void **state) {
  fx_t *fx = *state;
  char name[160], other[160];
  tries_t t = {0};
  for (int i = 0; i < 3; i++)
    assert_int_equal(dr_shm_create(name, sizeof(name), "ring0to1",
                                   create_excl, &t, NULL), 0);
  snprintf(other, sizeof(other), "/%.*sx-other", (int)strlen(fx->prefix) - 1,
           fx->prefix);
  int fd = shm_open(other, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(dr_shm_remove_prefix(fx->prefix), 3);
  assert_false(exists(name));
  assert_true(exists(other));
  assert_int_equal(dr_shm_remove_prefix(fx->prefix), 0);
  assert_int_equal(shm_unlink(other), 0);
  assert_int_equal(dr_shm_remove_prefix(""), -EINVAL);

  char p[80];
  assert_int_equal(dr_shm_prefix_new(p, sizeof(p)), 0);
  assert_memory_equal(p, "ddprun-", 7);
  assert_true(strlen(p) <= DR_SHM_PREFIX_MAX);
  assert_int_equal(p[strlen(p) - 1], '-');
  char q[80];
  assert_int_equal(dr_shm_prefix_new(q, sizeof(q)), 0);
  assert_string_not_equal(p, q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_taken_retried, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_failure_not_retried, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_remove_prefix, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
