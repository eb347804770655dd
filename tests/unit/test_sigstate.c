/* What a process does with a signal (agent/sigstate.c): the signals whose
 * delivery can wait for a handler, the masks of /proc/PID/status parsed
 * from text, and this process's own masks as it changes them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sigstate.h"

static void test_default_ends(void **state) {
  (void)state;
  assert_int_equal(dr_sig_default_ends(SIGUSR1), 1);
  assert_int_equal(dr_sig_default_ends(SIGUSR2), 1);
  assert_int_equal(dr_sig_default_ends(SIGALRM), 1);
  assert_int_equal(dr_sig_default_ends(SIGRTMIN), 1);
  assert_int_equal(dr_sig_default_ends(SIGCHLD), 0);
  assert_int_equal(dr_sig_default_ends(SIGWINCH), 0);
  assert_int_equal(dr_sig_default_ends(SIGCONT), 0);
  assert_int_equal(dr_sig_default_ends(SIGTSTP), 0);
  assert_int_equal(dr_sig_default_ends(SIGKILL), 0);
  assert_int_equal(dr_sig_default_ends(0), 0);
  assert_int_equal(dr_sig_default_ends(64), 0);
  assert_int_equal(dr_sig_default_ends(-1), 0);
}

/* A status file whose masks are CGT, IGN, BLK. */
static const char *status(char *buf, size_t n, const char *cgt,
                          const char *ign, const char *blk) {
  snprintf(buf, n,
           "Name:\ttrain\nState:\tS (sleeping)\nPid:\t42\n"
           "SigQ:\t0/95153\nSigPnd:\t0000000000000000\n"
           "ShdPnd:\t0000000000000000\nSigBlk:\t%s\nSigIgn:\t%s\n"
           "SigCgt:\t%s\nCapInh:\t0000000000000000\n", blk, ign, cgt);
  return buf;
}

static void test_status_text(void **state) {
  (void)state;
  char b[512];
  const char *zero = "0000000000000000";
  /* SIGUSR1 is 10: bit 9, 0x200. */
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), zero, zero, zero), SIGUSR1), 0);
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), "0000000000000200", zero, zero), SIGUSR1), 1);
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), zero, "0000000000000200", zero), SIGUSR1), 1);
  /* Blocked only: apart, since a block may last a moment (a fork). */
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), zero, zero, "0000000000000200"), SIGUSR1),
      DR_SIG_BLOCKED);
  /* Caught and blocked (a handler that runs once unblocked): handled. */
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), "0000000000000200", zero, "0000000000000200"),
      SIGUSR1), DR_SIG_HANDLED);
  /* Another signal's bit (SIGUSR2, 0x800) is not SIGUSR1's. */
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), "0000000000000800", zero, zero), SIGUSR1), 0);
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), "0000000000000800", zero, zero), SIGUSR2), 1);
  /* The highest signal, 64: the top bit. */
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), "8000000000000000", zero, zero), 64), 1);
  /* Malformed: a mask that is not hex, a missing line, bad signals. */
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), "zz", zero, zero), SIGUSR1), -EINVAL);
  assert_int_equal(dr_proc_status_sig_ready(
      "Name:\ttrain\nSigIgn:\t0\nSigCgt:\t200\n", SIGUSR1), -EINVAL);
  assert_int_equal(dr_proc_status_sig_ready("", SIGUSR1), -EINVAL);
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), zero, zero, zero), 0), -EINVAL);
  assert_int_equal(dr_proc_status_sig_ready(
      status(b, sizeof(b), zero, zero, zero), 65), -EINVAL);
  /* "SigCgtX:" is not "SigCgt:". */
  assert_int_equal(dr_proc_status_sig_ready(
      "SigBlk:\t0\nSigIgn:\t0\nSigCgtX:\t200\nSigCgt:\t0\n", SIGUSR1), 0);
}

static void on_usr2(int sig) { (void)sig; }

static void test_own_process(void **state) {
  (void)state;
  pid_t me = getpid();
  signal(SIGUSR2, SIG_DFL);
  assert_int_equal(dr_proc_sig_ready(me, SIGUSR2), 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_usr2;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR2, &sa, NULL), 0);
  assert_int_equal(dr_proc_sig_ready(me, SIGUSR2), 1);
  assert_int_equal(dr_proc_sig_ready(me, SIGUSR1), 0);
  signal(SIGUSR2, SIG_IGN);
  assert_int_equal(dr_proc_sig_ready(me, SIGUSR2), 1);
  signal(SIGUSR2, SIG_DFL);
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  assert_int_equal(sigprocmask(SIG_BLOCK, &set, &old), 0);
  assert_int_equal(dr_proc_sig_ready(me, SIGUSR2), DR_SIG_BLOCKED);
  assert_int_equal(sigprocmask(SIG_SETMASK, &old, NULL), 0);
  assert_int_equal(dr_proc_sig_ready(me, SIGUSR2), 0);
}

static void test_gone(void **state) {
  (void)state;
  pid_t p = fork();
  assert_true(p >= 0);
  if (p == 0)
    _exit(0);
  assert_int_equal(waitpid(p, NULL, 0), p);
  assert_int_equal(dr_proc_sig_ready(p, SIGUSR1), -ENOENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_ends),
      cmocka_unit_test(test_status_text),
      cmocka_unit_test(test_own_process),
      cmocka_unit_test(test_gone),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
