/* Progress slots: the agent's side against the worker's (proto/progress.c)
 * and against python/ddprun_progress, which must write the slot the same
 * way: seq, step and the flag that marks a rank as reporting. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "progress.h"

typedef struct {
  char dir[64];
  char path[96];
  dr_progress_t *p;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  snprintf(f->dir, sizeof(f->dir), "/tmp/test_progress_XXXXXX");
  if (mkdtemp(f->dir) == NULL)
    return -1;
  snprintf(f->path, sizeof(f->path), "%s/progress", f->dir);
  if (dr_progress_create(f->path, 3, &f->p) != 0)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  dr_progress_close(&f->p);
  assert_null(f->p);
  unlink(f->path);
  rmdir(f->dir);
  free(f);
  return 0;
}

static void test_c_worker(void **state) {
  fx_t *f = *state;
  setenv("DDPRUN_PROGRESS_FILE", f->path, 1);
  setenv("LOCAL_RANK", "1", 1);
  dr_progress_t *w = dr_progress_attach_env();
  assert_non_null(w);
  dr_progress_sample_t s = dr_progress_read(f->p, 1);
  assert_int_equal(s.seq, 0);
  assert_int_equal(s.flags, DR_PROGRESS_REPORTS); /* marked at attach */
  dr_progress_report(w, 41);
  dr_progress_report(w, 42);
  s = dr_progress_read(f->p, 1);
  assert_int_equal(s.seq, 2);
  assert_int_equal(s.step, 42);
  assert_int_equal(dr_progress_read(f->p, 0).flags, 0);
  dr_progress_reset(f->p, 1);
  s = dr_progress_read(f->p, 1);
  assert_int_equal(s.seq + s.step + s.flags, 0);
  dr_progress_close(&w);
  /* A slot past the file's end, or no ddprun: nothing. */
  setenv("LOCAL_RANK", "3", 1);
  assert_null(dr_progress_attach_env());
  unsetenv("DDPRUN_PROGRESS_FILE");
  assert_null(dr_progress_attach_env());
  unsetenv("LOCAL_RANK");
}

/* Runs python3 with python/ on its path: the status, or -1. */
static int python(const char *progress, const char *local_rank,
                  const char *code) {
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    setenv("PYTHONPATH", DR_PYTHON_DIR, 1);
    if (progress != NULL)
      setenv("DDPRUN_PROGRESS_FILE", progress, 1);
    else
      unsetenv("DDPRUN_PROGRESS_FILE");
    if (local_rank != NULL)
      setenv("LOCAL_RANK", local_rank, 1);
    else
      unsetenv("LOCAL_RANK");
    execlp("python3", "python3", "-c", code, (char *)NULL);
    _exit(127);
  }
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
    return -1;
  return WEXITSTATUS(st);
}

static void test_python_module(void **state) {
  fx_t *f = *state;
  int rc = python(f->path, "2", "import ddprun_progress as d\n"
                  "assert d.enabled()\nd.step(7)\nd.step(2**64 + 9)\n");
  if (rc == 127)
    skip(); /* no python3 */
  assert_int_equal(rc, 0);
  dr_progress_sample_t s = dr_progress_read(f->p, 2);
  assert_int_equal(s.seq, 2);
  assert_int_equal(s.step, 9);
  assert_int_equal(s.flags, DR_PROGRESS_REPORTS);
  /* Its neighbours untouched. */
  s = dr_progress_read(f->p, 1);
  assert_int_equal(s.seq + s.step + s.flags, 0);
  /* Outside ddprun, a slot past the end, a missing file, a bad rank:
   * a no-op, never an error. */
  const char *noop = "import ddprun_progress as d\n"
                     "assert not d.enabled()\nd.step(1)\n";
  assert_int_equal(python(NULL, NULL, noop), 0);
  assert_int_equal(python(f->path, "3", noop), 0);
  assert_int_equal(python("/nonexistent/progress", "0", noop), 0);
  assert_int_equal(python(f->path, "x", noop), 0);
  assert_int_equal(python(f->path, "-1", noop), 0);
  s = dr_progress_read(f->p, 0);
  assert_int_equal(s.seq + s.step + s.flags, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_c_worker, setup, teardown),
      cmocka_unit_test_setup_teardown(test_python_module, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
