/* The Python start-up hook's files (pyboot.h): written byte for byte as
 * python/ddprun_boot holds them, DDPRUN_PYTHON_HOOKS=0, a root that cannot
 * take them, and the PYTHONPATH the workers get. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pyboot.h"

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return NULL;
  char *buf = malloc(1 << 16);
  *len = buf != NULL ? fread(buf, 1, 1 << 16, f) : 0;
  fclose(f);
  return buf;
}

static void same_file(const char *a, const char *b) {
  size_t la = 0, lb = 0;
  char *x = slurp(a, &la), *y = slurp(b, &lb);
  assert_non_null(x);
  assert_non_null(y);
  assert_true(la > 0);
  assert_int_equal(la, lb);
  assert_memory_equal(x, y, la);
  free(x);
  free(y);
}

static void test_written_as_sources(void **state) {
  (void)state;
  char root[] = "/tmp/pyboot-XXXXXX";
  assert_non_null(mkdtemp(root));
  unsetenv("DDPRUN_PYTHON_HOOKS");
  char dir[1024];
  assert_int_equal(dr_pyboot_write(root, dir, sizeof(dir)), 0);
  char want[1100];
  snprintf(want, sizeof(want), "%s/pyboot", root);
  assert_string_equal(dir, want);
  const char *names[] = {"sitecustomize.py", "ddprun_fr.py"};
  for (int i = 0; i < 2; i++) {
    char got[1200], src[1200];
    snprintf(got, sizeof(got), "%s/%s", dir, names[i]);
    snprintf(src, sizeof(src), "%s/ddprun_boot/%s", DR_PYTHON_DIR, names[i]);
    same_file(got, src);
    unlink(got);
  }
  /* Written again over what is there. */
  assert_int_equal(dr_pyboot_write(root, dir, sizeof(dir)), 0);
  assert_int_equal(dr_pyboot_write(root, dir, sizeof(dir)), 0);
  for (int i = 0; i < 2; i++) {
    char got[1200];
    snprintf(got, sizeof(got), "%s/%s", dir, names[i]);
    assert_int_equal(unlink(got), 0);
  }
  assert_int_equal(rmdir(dir), 0);
  assert_int_equal(rmdir(root), 0);
}

static void test_off_and_unwritable(void **state) {
  (void)state;
  char dir[1024] = "x";
  setenv("DDPRUN_PYTHON_HOOKS", "0", 1);
  assert_int_equal(dr_pyboot_write("/nonexistent", dir, sizeof(dir)), 0);
  assert_string_equal(dir, "");
  setenv("DDPRUN_PYTHON_HOOKS", "1", 1);
  assert_int_equal(dr_pyboot_write("/nonexistent/a", dir, sizeof(dir)),
                   -ENOENT);
  assert_string_equal(dir, "");
  /* A file where the directory goes. */
  char root[] = "/tmp/pyboot-XXXXXX";
  assert_non_null(mkdtemp(root));
  char in_way[1100];
  snprintf(in_way, sizeof(in_way), "%s/pyboot", root);
  FILE *f = fopen(in_way, "w");
  assert_non_null(f);
  fclose(f);
  assert_true(dr_pyboot_write(root, dir, sizeof(dir)) < 0);
  assert_string_equal(dir, "");
  /* Too small a buffer for the path. */
  char small[8];
  assert_int_equal(dr_pyboot_write(root, small, sizeof(small)),
                   -ENAMETOOLONG);
  assert_string_equal(small, "");
  unlink(in_way);
  rmdir(root);
  unsetenv("DDPRUN_PYTHON_HOOKS");
}

static void test_pythonpath(void **state) {
  (void)state;
  char out[64];
  assert_int_equal(dr_pyboot_pythonpath("/b", NULL, out, sizeof(out)), 0);
  assert_string_equal(out, "/b");
  /* An empty PYTHONPATH adds no empty entry (the working directory). */
  assert_int_equal(dr_pyboot_pythonpath("/b", "", out, sizeof(out)), 0);
  assert_string_equal(out, "/b");
  assert_int_equal(dr_pyboot_pythonpath("/b", "/u:/v", out, sizeof(out)), 0);
  assert_string_equal(out, "/b:/u:/v");
  char tiny[6];
  assert_int_equal(dr_pyboot_pythonpath("/b", "/u:/v", tiny, sizeof(tiny)),
                   -ENAMETOOLONG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_written_as_sources),
      cmocka_unit_test(test_off_and_unwritable),
      cmocka_unit_test(test_pythonpath),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
