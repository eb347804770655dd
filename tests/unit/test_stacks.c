/* Stacks: the tools' output read into frames, places and one-line places
 * (fixtures/stacks holds real output of py-spy 0.4.3, eu-stack and gdb on a
 * PyTorch DDP job whose rank 1 sleeps in time.sleep while rank 0 waits in
 * backward, and on train ranks in an all-reduce; paths of the job's own
 * script were changed to /srv/job), grouping over ranks, and collection
 * from real processes with the tools there are, none, or one that hangs. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "stacks.h"

static char *fixture(const char *name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", DR_FIXTURES, name);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Parses fixture name as tool's output for pid. */
static void parse(const char *tool, const char *name, pid_t pid,
                  dr_stack_t *s) {
  memset(s, 0, sizeof(*s));
  snprintf(s->tool, sizeof(s->tool), "%s", tool);
  char *text = fixture(name);
  assert_int_equal(dr_stack_parse(tool, text, pid, s), 0);
  free(text);
}

static void test_pyspy_sleep(void **state) {
  (void)state;
  dr_stack_t s;
  parse("py-spy", "pyspy_sleep.txt", 23879, &s);
  assert_int_equal(s.n_frames, 1);
  assert_string_equal(s.frames[0].func, "<module>");
  assert_string_equal(s.frames[0].file, "/srv/job/sleepy.py");
  assert_int_equal(s.frames[0].line, 11);
  assert_true(s.frames[0].python);
  /* py-spy shows no native frame: the kernel says it sleeps. */
  assert_int_equal(s.place, DR_PLACE_UNKNOWN);
  dr_stack_refine(&s, 'S', "hrtimer_nanosleep");
  assert_int_equal(s.place, DR_PLACE_SLEEP);
  assert_string_equal(s.where, "<module> at sleepy.py:11");
}

static void test_pyspy_wait(void **state) {
  (void)state;
  dr_stack_t s;
  parse("py-spy", "pyspy_wait.txt", 23878, &s);
  assert_int_equal(s.n_frames, 4);
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  /* torch lives in a pip --target directory, not site-packages: still a
   * library, being outside the script's directory. */
  assert_string_equal(s.where, "_engine_run_backward <- <module> at sleepy.py:15");
  dr_stack_refine(&s, 'S', "hrtimer_nanosleep");
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
}

static void test_pyspy_short_names(void **state) {
  (void)state;
  dr_stack_t s;
  parse("py-spy", "pyspy_short.txt", 29150, &s);
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  assert_string_equal(s.where, "_engine_run_backward <- <module> at sleepy.py:15");
  parse("py-spy", "pyspy_short.txt", 29151, &s);
  assert_int_equal(s.n_frames, 1);
  assert_string_equal(s.where, "<module> at sleepy.py:11");
  /* A pid that is not in the dump: its first thread is taken. */
  parse("py-spy", "pyspy_short.txt", 1, &s);
  assert_string_equal(s.frames[0].func, "_engine_run_backward");
}

static void test_pyspy_native(void **state) {
  (void)state;
  dr_stack_t s;
  parse("py-spy", "pyspy_native.txt", 29151, &s);
  assert_string_equal(s.frames[0].func, "clock_nanosleep");
  assert_false(s.frames[0].python);
  assert_int_equal(s.place, DR_PLACE_SLEEP);
  assert_string_equal(s.where, "time_sleep <- <module> at sleepy.py:11");
  parse("py-spy", "pyspy_native.txt", 29150, &s);
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  assert_string_equal(s.where,
                      "c10d::Reducer::finalize_backward <- <module> at sleepy.py:15");
}

static void test_eustack_python(void **state) {
  (void)state;
  dr_stack_t s;
  parse("eu-stack", "eustack_py_sleep.txt", 29151, &s);
  assert_string_equal(s.frames[0].func, "clock_nanosleep");
  assert_int_equal(s.place, DR_PLACE_SLEEP);
  assert_string_equal(s.where, "time_sleep");
  parse("eu-stack", "eustack_py_wait.txt", 29150, &s);
  assert_string_equal(s.frames[1].func, "pthread_cond_wait");
  assert_string_equal(s.frames[2].func, "std::condition_variable::wait");
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  assert_string_equal(s.where, "c10d::Reducer::finalize_backward <- "
                               "torch::autograd::GraphTask::exec_post_processing");
  /* Another thread's pid is that thread's stack. */
  parse("eu-stack", "eustack_py_wait.txt", 29236, &s);
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  assert_non_null(strstr(s.where, "waitRecv"));
}

static void test_gdb_python(void **state) {
  (void)state;
  dr_stack_t s;
  parse("gdb", "gdb_py_sleep.txt", 29151, &s);
  assert_string_equal(s.frames[0].func, "__GI___clock_nanosleep");
  assert_string_equal(s.frames[2].func, "time_sleep");
  assert_string_equal(s.frames[2].file, "./Modules/timemodule.c");
  assert_int_equal(s.frames[2].line, 383);
  assert_int_equal(s.place, DR_PLACE_SLEEP);
  assert_string_equal(s.where, "time_sleep at timemodule.c:383");
  /* A gloo thread of the same process, by its LWP. */
  parse("gdb", "gdb_py_sleep.txt", 29238, &s);
  assert_string_equal(s.frames[5].func, "std::condition_variable::wait");
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  assert_string_equal(s.where, "c10d::ProcessGroupGloo::runLoop");
}

static void test_train(void **state) {
  (void)state;
  dr_stack_t s;
  parse("eu-stack", "eustack_train_wait.txt", 30351, &s);
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  assert_string_equal(s.where, "dr_work_wait_keep <- sync_wait");
  parse("eu-stack", "eustack_train_stopped.txt", 30352, &s);
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  parse("gdb", "gdb_train_wait.txt", 30351, &s);
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  assert_string_equal(s.where, "dr_work_wait_keep at pg.c:373 <- dr_work_wait");
  /* Its communication thread, in a futex through syscall() within the
   * all-reduce. */
  parse("gdb", "gdb_train_wait.txt", 30353, &s);
  assert_string_equal(s.frames[0].func, "syscall");
  assert_string_equal(s.frames[1].func, "dr_shm_wait");
  assert_int_equal(s.place, DR_PLACE_COLLECTIVE);
  assert_string_equal(s.where, "dr_shm_wait at shm_ring.c:320 <- dr__pg_wait");
}

static void test_kernel(void **state) {
  (void)state;
  dr_stack_t s;
  parse("kernel", "kernel_sleep.txt", 23879, &s);
  assert_int_equal(s.place, DR_PLACE_SLEEP);
  assert_string_equal(s.where, "kernel: hrtimer_nanosleep <- common_nsleep_timens");
  parse("kernel", "kernel_wait.txt", 23878, &s);
  assert_int_equal(s.place, DR_PLACE_WAIT);
  /* Without /proc/PID/stack (not root): the wait channel alone. */
  memset(&s, 0, sizeof(s));
  snprintf(s.tool, sizeof(s.tool), "kernel wchan");
  assert_int_equal(dr_stack_parse("kernel", "state S\nwchan do_epoll_wait\n"
                                  "threads:\ntid 7 (x) S do_epoll_wait\n",
                                  7, &s), 0);
  assert_int_equal(s.n_frames, 1);
  assert_int_equal(s.place, DR_PLACE_WAIT);
  assert_string_equal(s.where, "kernel: do_epoll_wait");
  assert_int_equal(dr_stack_parse("kernel", "state D\nwchan 0\n", 7, &s), 0);
  assert_int_equal(s.place, DR_PLACE_IO);
  assert_int_equal(dr_stack_parse("kernel", "state R\nwchan 0\n", 7, &s), 0);
  assert_int_equal(s.place, DR_PLACE_CODE);
}

static void test_bad_input(void **state) {
  (void)state;
  dr_stack_t s;
  memset(&s, 0, sizeof(s));
  assert_int_equal(dr_stack_parse("py-spy", "Error: Failed to find python "
                                  "version from target process\n", 5, &s),
                   -ENODATA);
  assert_int_equal(dr_stack_parse("py-spy", "", 5, &s), -ENODATA);
  assert_int_equal(dr_stack_parse("py-spy", "Thread 5 (idle)\n", 5, &s),
                   -ENODATA);
  assert_int_equal(dr_stack_parse("eu-stack", "eu-stack: dwfl_linux_proc_"
                                  "attach pid 5: Operation not permitted\n",
                                  5, &s), -ENODATA);
  assert_int_equal(dr_stack_parse("gdb", "ptrace: Operation not permitted.\n",
                                  5, &s), -ENODATA);
  assert_int_equal(dr_stack_parse("kernel", "", 5, &s), -ENODATA);
  assert_int_equal(dr_stack_parse("lldb", "x", 5, &s), -EINVAL);
  assert_int_equal(dr_stack_parse("gdb", NULL, 5, &s), -ENODATA);
  /* Lines cut short, odd frames: parsed without reading past them. */
  assert_int_equal(dr_stack_parse("py-spy", "Thread 5 (active): \"MainThread\"\n"
                                  "    f (\n    g (a.py:x)\n    (b.py:2)\n"
                                  "    h (c.py:3)\n", 5, &s), 0);
  assert_int_equal(s.place, DR_PLACE_CODE); /* active */
  assert_int_equal(dr_stack_parse("gdb", "#0  0x1 in\n#1  f (\n#2 \n", 5, &s),
                   0);
  char big[DR_STACK_MAX_FRAMES * 40 + 100];
  size_t o = (size_t)snprintf(big, sizeof(big), "TID 5:\n");
  for (int i = 0; i < DR_STACK_MAX_FRAMES + 5; i++)
    o += (size_t)snprintf(big + o, sizeof(big) - o, "#%d  0x1 f%d\n", i, i);
  assert_int_equal(dr_stack_parse("eu-stack", big, 5, &s), 0);
  assert_int_equal(s.n_frames, DR_STACK_MAX_FRAMES);
}

/* Python's --locals lines and other threads stay out of the main thread. */
static void test_pyspy_locals(void **state) {
  (void)state;
  const char *text =
      "Process 9: python3 x.py\n\n"
      "Thread 10 (idle): \"Thread-1\"\n"
      "    run (/usr/lib/python3.11/threading.py:975)\n"
      "Thread 9 (idle): \"MainThread\"\n"
      "    load (/srv/job/data.py:17)\n"
      "        Arguments:\n"
      "            path: \"/x\"\n"
      "    main (/srv/job/train.py:40)\n"
      "    <module> (/srv/job/train.py:50)\n";
  dr_stack_t s;
  memset(&s, 0, sizeof(s));
  assert_int_equal(dr_stack_parse("py-spy", text, 9, &s), 0);
  assert_int_equal(s.n_frames, 3);
  assert_string_equal(s.where, "load at data.py:17");
}

/* The call on the program's line names what it waits in. */
static void test_source_line(void **state) {
  (void)state;
  char dir[] = "/tmp/test_stacks_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof(path), "%s/train.py", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("import time\ndef load_batch():\n    time.sleep(3600)  # (x)\n", f);
  fclose(f);
  char text[512];
  snprintf(text, sizeof(text), "Thread 4 (idle): \"MainThread\"\n"
           "    load_batch (%s:3)\n    <module> (%s:9)\n", path, path);
  dr_stack_t s;
  memset(&s, 0, sizeof(s));
  assert_int_equal(dr_stack_parse("py-spy", text, 4, &s), 0);
  assert_string_equal(s.where, "time.sleep <- load_batch at train.py:3");
  unlink(path);
  rmdir(dir);
}

static void test_group(void **state) {
  (void)state;
  char out[512];
  dr_rank_where_t in[8];
  for (uint32_t r = 0; r < 8; r++)
    in[r] = (dr_rank_where_t){7 - r, "all_reduce <- backward at train.py:41"};
  in[4].where = "time.sleep <- load_batch at train.py:17"; /* rank 3 */
  assert_int_equal(dr_stacks_group(in, 8, "; ", out, sizeof(out)), 2);
  assert_string_equal(out, "ranks 0-2, 4-7: all_reduce <- backward at "
                           "train.py:41; rank 3: time.sleep <- load_batch at "
                           "train.py:17");
  /* Groups of one size: the lowest rank first; no place is "unknown". */
  dr_rank_where_t two[] = {{9, "B"}, {4, NULL}, {2, "A"}, {5, ""}};
  assert_int_equal(dr_stacks_group(two, 4, "\n", out, sizeof(out)), 3);
  assert_string_equal(out, "ranks 4-5: unknown\nrank 2: A\nrank 9: B");
  /* A rank given twice counts once; ranks across nodes. */
  dr_rank_where_t dup[] = {{100000, "X"}, {3, "X"}, {3, "X"}, {99999, "X"}};
  assert_int_equal(dr_stacks_group(dup, 4, "; ", out, sizeof(out)), 1);
  assert_string_equal(out, "ranks 3, 99999-100000: X");
  /* Too small: cut with "...". */
  char small[24];
  dr_stacks_group(in, 8, "; ", small, sizeof(small));
  assert_int_equal(strlen(small), sizeof(small) - 1);
  assert_string_equal(small + sizeof(small) - 4, "...");
  assert_int_equal(dr_stacks_group(in, 0, "; ", out, sizeof(out)), 0);
  assert_string_equal(out, "");
}

static void test_ranks_format(void **state) {
  (void)state;
  char out[64];
  uint32_t r[] = {0, 1, 2, 5, 7, 8};
  assert_string_equal(dr_ranks_format(r, 6, out, sizeof(out)), "0-2, 5, 7-8");
  assert_string_equal(dr_ranks_format(r, 1, out, sizeof(out)), "0");
  char tiny[6];
  dr_ranks_format(r, 6, tiny, sizeof(tiny));
  assert_string_equal(tiny + 2, "...");
}

/* ---- collection from real processes -------------------------------------- */

static pid_t sleeper(void) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct timespec ts = {30, 0};
    nanosleep(&ts, NULL);
    _exit(0);
  }
  /* Until it sleeps: its state says so. */
  for (int i = 0; i < 500; i++) {
    char path[64], buf[256] = "";
    snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      if (fgets(buf, sizeof(buf), f) == NULL)
        buf[0] = '\0';
      fclose(f);
    }
    if (strstr(buf, "nanosleep") != NULL)
      break;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  return pid;
}

static void end_child(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static void test_collect_kernel(void **state) {
  (void)state;
  pid_t pid = sleeper();
  setenv("DDPRUN_STACK_TOOLS", "kernel", 1);
  dr_stack_t s;
  assert_int_equal(dr_stacks_collect(pid, 0, 2000, &s), 0);
  unsetenv("DDPRUN_STACK_TOOLS");
  assert_int_equal(s.pid, pid);
  assert_true(strncmp(s.tool, "kernel", 6) == 0);
  assert_int_equal(s.place, DR_PLACE_SLEEP);
  assert_non_null(strstr(s.text, "threads:"));
  assert_true(strncmp(s.where, "kernel: ", 8) == 0);
  dr_stack_free(&s);
  assert_null(s.text);
  end_child(pid);
  assert_int_equal(dr_stacks_collect(pid, 0, 500, &s), -ESRCH);
  assert_int_equal(dr_stacks_collect(0, 0, 500, &s), -ESRCH);
}

/* With whatever tools this host has: a stack, and the sleep found. */
static void test_collect_default(void **state) {
  (void)state;
  pid_t pid = sleeper();
  dr_stack_t s;
  assert_int_equal(dr_stacks_collect(pid, -1, 10000, &s), 0);
  assert_false(dr_stacks_is_python(pid));
  print_message("tool: %s; where: %s; missing: %s\n", s.tool, s.where,
                s.missing);
  assert_int_equal(s.place, DR_PLACE_SLEEP);
  dr_stack_free(&s);
  end_child(pid);
}

/* No tool on PATH: said, and the kernel's view taken. */
static void test_collect_no_tools(void **state) {
  (void)state;
  pid_t pid = sleeper();
  char *old = strdup(getenv("PATH") != NULL ? getenv("PATH") : "");
  setenv("PATH", "/nonexistent", 1);
  dr_stack_t s;
  assert_int_equal(dr_stacks_collect(pid, 1, 2000, &s), 0);
  assert_string_equal(s.missing, "py-spy not found on PATH nor beside the "
                                 "program's python (pip install "
                                 "'ddprun[stacks]', or pip install py-spy); "
                                 "eu-stack not found on PATH");
  assert_true(strncmp(s.tool, "kernel", 6) == 0);
  dr_stack_free(&s);
  assert_int_equal(dr_stacks_collect(pid, 0, 2000, &s), 0);
  assert_string_equal(s.missing, "eu-stack not found on PATH; gdb not found "
                                 "on PATH");
  dr_stack_free(&s);
  setenv("PATH", old, 1);
  free(old);
  end_child(pid);
}

/* py-spy off PATH, beside the Python the process runs (its argv[0]'s
 * directory, as a virtual environment's bin/ holds both). */
static void test_pyspy_beside_python(void **state) {
  (void)state;
  char dir[] = "/tmp/test_stacks_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char spy[128], py[128];
  snprintf(spy, sizeof(spy), "%s/py-spy", dir);
  FILE *f = fopen(spy, "w");
  assert_non_null(f);
  fputs("#!/bin/sh\n"
        "[ \"$1\" = --version ] && { echo 'py-spy 0.0.1'; exit 0; }\n"
        "printf 'Process 1: python3 job.py\\nPython v3.11.2\\n\\n"
        "Thread 1 (idle): \"MainThread\"\\n    wait (job.py:7)\\n"
        "    main (job.py:9)\\n'\n", f);
  fclose(f);
  chmod(spy, 0755);
  snprintf(py, sizeof(py), "%s/python3", dir);
  assert_int_equal(symlink("/bin/sleep", py), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    execl(py, py, "30", (char *)NULL);
    _exit(127);
  }
  /* Until it runs as python3: its cmdline says so. */
  for (int i = 0; i < 500; i++) {
    char path[64], buf[256] = "";
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    FILE *c = fopen(path, "r");
    if (c != NULL) {
      size_t k = fread(buf, 1, sizeof(buf) - 1, c);
      buf[k] = '\0';
      fclose(c);
    }
    if (strcmp(buf, py) == 0)
      break;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  char *old = strdup(getenv("PATH") != NULL ? getenv("PATH") : "");
  setenv("PATH", "/nonexistent", 1);
  setenv("DDPRUN_STACK_TOOLS", "py-spy", 1);
  dr_stack_t s;
  assert_int_equal(dr_stacks_collect(pid, 1, 5000, &s), 0);
  print_message("tool: %s; where: %s; missing: %s\n", s.tool, s.where,
                s.missing);
  assert_true(strncmp(s.tool, "py-spy", 6) == 0);
  assert_string_equal(s.missing, "");
  dr_stack_free(&s);
  unsetenv("DDPRUN_STACK_TOOLS");
  setenv("PATH", old, 1);
  free(old);
  end_child(pid);
  unlink(spy);
  unlink(py);
  rmdir(dir);
}

/* A tool that never ends is killed at the deadline, and the kernel's view
 * taken within it; a tool that prints nonsense is said to have failed. */
static void test_collect_timeout(void **state) {
  (void)state;
  char dir[] = "/tmp/test_stacks_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof(path), "%s/eu-stack", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("#!/bin/sh\nexec /bin/sleep 30\n", f);
  fclose(f);
  chmod(path, 0755);
  snprintf(path, sizeof(path), "%s/gdb", dir);
  f = fopen(path, "w");
  assert_non_null(f);
  fputs("#!/bin/sh\necho 'ptrace: Operation not permitted.'\n", f);
  fclose(f);
  chmod(path, 0755);
  pid_t pid = sleeper();
  char *old = strdup(getenv("PATH") != NULL ? getenv("PATH") : "");
  setenv("PATH", dir, 1);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  dr_stack_t s;
  setenv("DDPRUN_STACK_TOOLS", "eu-stack,gdb", 1);
  assert_int_equal(dr_stacks_collect(pid, 0, 400, &s), 0);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double took = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  assert_true(took < 2.0);
  print_message("missing: %s\n", s.missing);
  assert_non_null(strstr(s.missing, "eu-stack timed out after 0."));
  assert_non_null(strstr(s.missing, "no time left for gdb"));
  assert_true(strncmp(s.tool, "kernel", 6) == 0);
  dr_stack_free(&s);
  setenv("DDPRUN_STACK_TOOLS", "gdb", 1);
  assert_int_equal(dr_stacks_collect(pid, 0, 2000, &s), 0);
  assert_string_equal(s.missing,
                      "gdb failed: ptrace: Operation not permitted.");
  dr_stack_free(&s);
  unsetenv("DDPRUN_STACK_TOOLS");
  setenv("PATH", old, 1);
  free(old);
  end_child(pid);
  snprintf(path, sizeof(path), "%s/eu-stack", dir);
  unlink(path);
  snprintf(path, sizeof(path), "%s/gdb", dir);
  unlink(path);
  rmdir(dir);
}

static void test_collect_all(void **state) {
  (void)state;
  pid_t a = sleeper(), b = sleeper();
  dr_stack_req_t req[3] = {{a, 0}, {0, 0}, {b, 0}};
  dr_stack_t out[3];
  setenv("DDPRUN_STACK_TOOLS", "kernel", 1);
  assert_int_equal(dr_stacks_collect_all(req, 3, 2000, out), 2);
  unsetenv("DDPRUN_STACK_TOOLS");
  assert_int_equal(out[0].pid, a);
  assert_int_equal(out[2].pid, b);
  assert_int_equal(out[0].place, DR_PLACE_SLEEP);
  assert_int_equal(out[1].n_frames, 0);
  for (int i = 0; i < 3; i++)
    dr_stack_free(&out[i]);
  end_child(a);
  end_child(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pyspy_sleep),
      cmocka_unit_test(test_pyspy_wait),
      cmocka_unit_test(test_pyspy_short_names),
      cmocka_unit_test(test_pyspy_native),
      cmocka_unit_test(test_eustack_python),
      cmocka_unit_test(test_gdb_python),
      cmocka_unit_test(test_train),
      cmocka_unit_test(test_kernel),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_pyspy_locals),
      cmocka_unit_test(test_source_line),
      cmocka_unit_test(test_group),
      cmocka_unit_test(test_ranks_format),
      cmocka_unit_test(test_collect_kernel),
      cmocka_unit_test(test_collect_default),
      cmocka_unit_test(test_collect_no_tools),
      cmocka_unit_test(test_pyspy_beside_python),
      cmocka_unit_test(test_collect_timeout),
      cmocka_unit_test(test_collect_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
