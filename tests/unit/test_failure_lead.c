/* A failure's message, its failing line first (agent/failure_lead.h):
 * train's full disk after its start-up lines, a Python traceback, a
 * message of one line, one with no failing line, blank lines, and the
 * bounds of the buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "failure_lead.h"

static void lead(const char *in, const char *want, int moved) {
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", in);
  assert_int_equal(dr_failure_lead(buf, sizeof(buf)), moved);
  assert_string_equal(buf, want);
}

static void test_train_full_disk(void **state) {
  (void)state;
  lead("train: rank 0: local rank 0, world 2, host vm, device cpu\n"
       "train: rank 0: collectives on the waiting thread: 2 ranks\n"
       "train: rank 0: no checkpoint in /c; starting at step 0\n"
       "train: rank 0: cannot write /c/ckpt-0000000015.bin.tmp.7 "
       "(No space left on device) (exit 6)\n",
       "train: rank 0: cannot write /c/ckpt-0000000015.bin.tmp.7 "
       "(No space left on device) (exit 6)\n"
       "train: rank 0: local rank 0, world 2, host vm, device cpu\n"
       "train: rank 0: collectives on the waiting thread: 2 ranks\n"
       "train: rank 0: no checkpoint in /c; starting at step 0",
       1);
}

static void test_traceback(void **state) {
  (void)state;
  /* The last failing line: the exception, not the traceback's head. */
  lead("Traceback (most recent call last):\n"
       "  File \"ddp.py\", line 9, in <module>\n"
       "    step()\n"
       "RuntimeError: injected failure before step 5",
       "RuntimeError: injected failure before step 5\n"
       "Traceback (most recent call last):\n"
       "  File \"ddp.py\", line 9, in <module>\n"
       "    step()",
       1);
}

static void test_already_first_or_single(void **state) {
  (void)state;
  lead("cannot start '/bin/x': fork() failed", "cannot start '/bin/x': "
       "fork() failed", 0);
  lead("RuntimeError: boom\nsome context", "RuntimeError: boom\nsome context",
       0);
  lead("", "", 0);
}

static void test_no_failing_line_takes_the_last(void **state) {
  (void)state;
  lead("starting\nstep 10\nstep 20\n\n", "step 20\nstarting\nstep 10", 1);
  lead("\n\n", "\n\n", 0);
}

static void test_bounds(void **state) {
  (void)state;
  char buf[8] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}; /* no NUL */
  assert_int_equal(dr_failure_lead(buf, sizeof(buf)), 0);
  assert_memory_equal(buf, "abcdefgh", 8);
  char full[32];
  snprintf(full, sizeof(full), "ok\nError: x");
  assert_int_equal(dr_failure_lead(full, strlen(full) + 1), 1);
  assert_string_equal(full, "Error: x\nok");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_train_full_disk),
      cmocka_unit_test(test_traceback),
      cmocka_unit_test(test_already_first_or_single),
      cmocka_unit_test(test_no_failing_line_takes_the_last),
      cmocka_unit_test(test_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
