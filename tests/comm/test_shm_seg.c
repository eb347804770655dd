/* The named shared-memory segment on its own (worker/comm/shm_seg.h): two
 * mappings of one segment share their bytes; a taken name, a size out of
 * bounds and a missing name fail with the call named and nothing left
 * behind; a new name carries the prefix and the tag and is tried again
 * while taken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm_name.h"
#include "shm_seg.h"

#define SIZE 8192u

typedef struct {
  char prefix[64]; /* this test's DDPRUN_SHM_PREFIX */
  char name[128];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  snprintf(f->prefix, sizeof(f->prefix), "ddprun-unit-seg-%d-", (int)getpid());
  snprintf(f->name, sizeof(f->name), "/%sexact", f->prefix);
  setenv(DR_SHM_PREFIX_ENV, f->prefix, 1);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  unsetenv(DR_SHM_PREFIX_ENV);
  unsetenv("DDPRUN_SHM_TEST_TAKEN");
  dr_shm_remove_prefix(f->prefix);
  free(f);
  return 0;
}

static void test_create_open_share(void **state) {
  fixture_t *f = *state;
  dr_shm_seg_t a, b;
  const char *what = NULL;
  assert_int_equal(dr_shm_seg_create(f->name, SIZE, &a, &what), 0);
  assert_non_null(a.base);
  assert_int_equal(a.n_bytes, SIZE);
  assert_int_equal(dr_shm_seg_open(f->name, SIZE, SIZE, &b, &what), 0);
  assert_int_equal(b.n_bytes, SIZE);
  ((volatile uint8_t *)a.base)[SIZE - 1] = 0x5a;
  assert_int_equal(((volatile uint8_t *)b.base)[SIZE - 1], 0x5a);
  assert_int_equal(dr_shm_seg_unlink(f->name), 0);
  assert_int_equal(dr_shm_seg_unlink(f->name), -ENOENT);
  /* The mappings outlive the name. */
  ((volatile uint8_t *)b.base)[0] = 0xa5;
  assert_int_equal(((volatile uint8_t *)a.base)[0], 0xa5);
  dr_shm_seg_close(&a);
  dr_shm_seg_close(&b);
  assert_null(a.base);
  dr_shm_seg_close(&a); /* closing twice is fine */
}

static void test_failures(void **state) {
  fixture_t *f = *state;
  dr_shm_seg_t a, b;
  const char *what = NULL;
  assert_int_equal(dr_shm_seg_create(f->name, 0, &a, &what), -EINVAL);
  assert_int_equal(dr_shm_seg_open(f->name, 1, SIZE, &b, &what), -ENOENT);
  assert_string_equal(what, "shm_open");
  assert_int_equal(dr_shm_seg_create(f->name, SIZE, &a, NULL), 0);
  /* A taken name fails and leaves the segment as it was. */
  assert_int_equal(dr_shm_seg_create(f->name, 2 * SIZE, &b, &what), -EEXIST);
  assert_string_equal(what, "shm_open");
  assert_null(b.base);
  /* A size out of bounds maps nothing and says what it found. */
  assert_int_equal(dr_shm_seg_open(f->name, SIZE + 1, 4 * SIZE, &b, &what),
                   -EPROTO);
  assert_string_equal(what, "the segment's size");
  assert_int_equal(b.n_bytes, SIZE);
  assert_null(b.base);
  assert_int_equal(dr_shm_seg_open(f->name, 1, SIZE - 1, &b, &what),
                   -EPROTO);
  /* An empty segment (another user's squat) is refused before mmap. */
  char empty[160];
  snprintf(empty, sizeof(empty), "%s-empty", f->name);
  int fd = shm_open(empty, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(dr_shm_seg_open(empty, 1, SIZE, &b, &what), -EPROTO);
  assert_int_equal(b.n_bytes, 0);
  dr_shm_seg_unlink(empty);
  dr_shm_seg_unlink(f->name);
  dr_shm_seg_close(&a);
}

static void test_named(void **state) {
  fixture_t *f = *state;
  char name[200], want[96];
  dr_shm_seg_t a, b;
  int taken = -1;
  const char *what = NULL;
  setenv("DDPRUN_SHM_TEST_TAKEN", "2", 1);
  assert_int_equal(dr_shm_seg_create_named(name, sizeof(name), "weights",
                                           SIZE, &a, &taken, &what), 0);
  unsetenv("DDPRUN_SHM_TEST_TAKEN");
  assert_int_equal(taken, 2);
  snprintf(want, sizeof(want), "/%s", f->prefix);
  assert_memory_equal(name, want, strlen(want));
  assert_int_equal(strlen(name), strlen(want) + 16 + strlen("-weights"));
  assert_string_equal(name + strlen(name) - strlen("-weights"), "-weights");
  assert_int_equal(dr_shm_seg_open(name, SIZE, SIZE, &b, &what), 0);
  dr_shm_seg_close(&b);
  assert_int_equal(dr_shm_seg_unlink(name), 0);
  dr_shm_seg_close(&a);
  /* A bad tag: nothing created. */
  assert_int_equal(dr_shm_seg_create_named(name, sizeof(name), "a/b", SIZE,
                                           &b, NULL, &what), -EINVAL);
  assert_null(b.base);
  /* What is left is the two squatted names, and nothing else. */
  assert_int_equal(dr_shm_remove_prefix(f->prefix), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_create_open_share, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_failures, setup, teardown),
      cmocka_unit_test_setup_teardown(test_named, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
