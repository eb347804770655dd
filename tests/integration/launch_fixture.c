/* The launch harness' cmocka fixture: a private directory and marker,
 * the processes, server and sockets a test starts, and the check at
 * teardown that none of them outlives it; and the main that runs one case
 * per ctest. See launch_harness.h. */
#include "launch_harness.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "launch_internal.h"

#define DR_L_REAP_MS 10000      /* waiting for a SIGKILLed child */
#define DR_L_STRAY_WAIT_MS 1500 /* for processes of a test to go */

int dr_l_setup(void **state) {
  static unsigned serial;
  dr_l_fixture_t *fx = calloc(1, sizeof(*fx));
  if (fx == NULL)
    return -1;
  const char *tmp = getenv("TMPDIR");
  snprintf(fx->dir, sizeof(fx->dir), "%s/ddprun-ltest-XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(fx->dir) == NULL) {
    fprintf(stderr, "harness: mkdtemp(%s) failed (%s)\n", fx->dir,
            strerror(errno));
    free(fx);
    return -1;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(fx->marker, sizeof(fx->marker), "ddprun-ltest-%d-%u-%ld",
           (int)getpid(), serial++, (long)(ts.tv_nsec ^ ts.tv_sec));
  signal(SIGPIPE, SIG_IGN);
  *state = fx;
  return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static int sanitizer_report(const char *text) {
  return strstr(text, "ERROR: AddressSanitizer") != NULL ||
         strstr(text, "ERROR: LeakSanitizer") != NULL ||
         strstr(text, "runtime error:") != NULL ||
         strstr(text, "WARNING: ThreadSanitizer") != NULL;
}

int dr_l_teardown(void **state) {
  dr_l_fixture_t *fx = *state;
  int rc = 0;
  for (size_t i = 0; i < fx->n_procs; i++) {
    dr_l_proc_t *p = fx->procs[i];
    if (!p->reaped) {
      if (fx->passed)
        fprintf(stderr, "harness: %s (pid %d) still running at teardown\n",
                p->name, (int)p->pid);
      kill(p->pid, SIGKILL);
      if (dr_l_wait(p, DR_L_REAP_MS) != 0)
        dr__l_reap(p);
    }
  }
  if (fx->srv != NULL && !fx->passed)
    dr_h_log_dump(dr_h_server_log_path(fx->srv), 60);
  if (dr_h_server_stop(&fx->srv, 3000) != 0)
    rc = -1;

  /* Whatever carries the marker now was left behind by ddprun. */
  size_t left = dr_l_wait_marker_gone(fx->marker, DR_L_STRAY_WAIT_MS);
  if (left > 0) {
    pid_t pids[256];
    size_t n = dr_l_marker_pids(fx->marker, pids, 256);
    for (size_t i = 0; i < n && i < 256; i++) {
      fprintf(stderr,
              "harness: process %d of this test outlived ddprun; "
              "killing it\n",
              (int)pids[i]);
      kill(pids[i], SIGKILL);
    }
    dr_l_wait_marker_gone(fx->marker, DR_L_STRAY_WAIT_MS);
    rc = -1;
  }

  for (size_t i = 0; i < fx->n_procs; i++) {
    dr_l_proc_t *p = fx->procs[i];
    if (sanitizer_report(dr_l_err(p))) {
      fprintf(stderr, "harness: %s reported a sanitizer error\n", p->name);
      rc = -1;
    }
    if (!fx->passed || rc != 0)
      dr_l_dump(p);
    dr__l_proc_free(p);
  }
  for (size_t i = 0; i < fx->n_fds; i++)
    close(fx->fds[i]);
  nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(fx);
  *state = NULL;
  return rc;
}

uint16_t dr_l_rdzv(dr_l_fixture_t *fx, const char *const *args) {
  assert_null(fx->srv);
  const char *argv[32];
  size_t n = 0;
  int has_level = 0;
  for (size_t i = 0; args != NULL && args[i] != NULL && n < 28; i++) {
    has_level |= strcmp(args[i], "--log-level") == 0;
    argv[n++] = args[i];
  }
  if (!has_level) {
    argv[n++] = "--log-level";
    argv[n++] = "warn";
  }
  argv[n] = NULL;
  int rc = dr_h_server_start(fx->dir, argv, NULL, &fx->srv);
  if (rc != 0)
    fail_msg("starting ddprun-rdzv failed: %s", dr_err_name(rc));
  return dr_h_server_port(fx->srv);
}

const char *dr_l_path(dr_l_fixture_t *fx, const char *name) {
  static char path[600];
  snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
  return path;
}

const char *dr_l_write_file(dr_l_fixture_t *fx, const char *name,
                            const char *content, int mode) {
  const char *path = dr_l_path(fx, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  assert_true(fd >= 0);
  size_t len = strlen(content);
  assert_int_equal(write(fd, content, len), (ssize_t)len);
  close(fd);
  return path;
}

int dr_l_main(const char *group, const struct CMUnitTest *tests, size_t n,
              int argc, char **argv) {
  if (argc > 2) {
    fprintf(stderr, "usage: %s [TEST]\n", argv[0]);
    return 2;
  }
  if (argc == 2) {
    size_t i = 0;
    while (i < n && strcmp(tests[i].name, argv[1]) != 0)
      i++;
    if (i == n) {
      fprintf(stderr, "%s: no test named '%s'\n", argv[0], argv[1]);
      return 2;
    }
    return _cmocka_run_group_tests(group, &tests[i], 1, NULL, NULL);
  }
  return _cmocka_run_group_tests(group, tests, n, NULL, NULL);
}
