/* What the stack tools' frames say a process is doing: which frames are
 * waits, sleeps, collectives or plumbing (the interpreter's, the C and
 * C++ runtimes'), which Python files are libraries, and the kind of place
 * of a whole stack. Pure text; see stacks.h. */
#include "stacks.h"
#include "stacks_internal.h"

#include <string.h>
#include <strings.h>

/* The name as libc's waits are compared: leading underscores and glibc's
 * internal prefixes dropped ("__GI___clock_nanosleep" -> "clock_nanosleep"). */
static const char *plain(const char *name) {
  for (;;) {
    while (*name == '_')
      name++;
    if (dr__stacks_starts(name, "GI_"))
      name += 3;
    else if (dr__stacks_starts(name, "libc_"))
      name += 5;
    else
      return name;
  }
}

static int name_in(const char *name, const char *const *list, int prefix) {
  for (size_t i = 0; list[i] != NULL; i++)
    if (prefix ? dr__stacks_starts(name, list[i]) : strcmp(name, list[i]) == 0)
      return 1;
  return 0;
}

/* DR_PLACE_SLEEP or DR_PLACE_WAIT for a blocking call of libc or of the
 * C++ runtime, 0 for anything else. */
dr_place_t dr__stacks_wait_kind(const char *func) {
  static const char *const sleeps[] = {
      "clock_nanosleep", "nanosleep", "usleep", "sleep",
      "std::this_thread::sleep_for", "std::this_thread::sleep_until", NULL};
  static const char *const wait_prefixes[] = {
      "futex", "lll_lock_wait", "pthread_cond_", "pthread_mutex_lock",
      "pthread_mutex_timedlock", "pthread_mutex_clocklock", "pthread_join",
      "pthread_clockjoin", "pthread_timedjoin", "pthread_rwlock_", "sem_wait",
      "sem_timedwait", "sem_clockwait", "do_futex_wait", "epoll_wait",
      "epoll_pwait", "poll", "ppoll", "select", "pselect",
      "std::condition_variable",
      "std::_V2::condition_variable", "std::__condvar", "std::mutex::lock",
      "std::thread::join", "std::future", "std::__basic_future", NULL};
  static const char *const waits[] = {
      "read", "recv", "recvmsg", "recvfrom", "accept", "accept4", "connect",
      "waitpid", "wait4", "waitid", "syscall", "pause", "sigwait",
      "sigtimedwait", "sigwaitinfo", "sigsuspend", "msgrcv", "semop",
      "semtimedop", "read_nocancel", "pause_nocancel", NULL};
  const char *p = plain(func);
  if (name_in(p, sleeps, 0) || dr__stacks_starts(p, "clock_nanosleep"))
    return DR_PLACE_SLEEP;
  if (name_in(func, wait_prefixes, 1) || name_in(p, wait_prefixes, 1) ||
      name_in(p, waits, 0))
    return DR_PLACE_WAIT;
  return 0;
}

/* Frames of the interpreter, the C library's start-up and thread entry,
 * and of C++ library plumbing: never where a program "is". */
int dr__stacks_plumbing(const char *func) {
  static const char *const prefixes[] = {
      "_Py", "Py", "py", "_py", "cfunction_", "method_vectorcall",
      "vectorcall", "_vectorcall", "slot_tp_", "builtin_", "run_mod",
      "run_eval_code", "pymain", "object_vacall", "_start", "__libc_start",
      "start_thread", "clone", "__clone", "std::", "__gnu_cxx::",
      "_M_invoke", "<", NULL};
  if (func[0] == '\0' || dr__stacks_starts(func, "0x") ||
      strcmp(func, "??") == 0)
    return 1;
  return name_in(func, prefixes, 1);
}

static int has_ci(const char *s, const char *needle) {
  size_t n = strlen(needle);
  for (; *s != '\0'; s++)
    if (strncasecmp(s, needle, n) == 0)
      return 1;
  return 0;
}

/* A native frame of a collective or of a wait for one. */
static int native_collective(const char *func) {
  static const char *const needles[] = {
      "allreduce", "all_reduce", "allgather", "all_gather", "reducescatter",
      "reduce_scatter", "broadcast", "bcast", "barrier", "alltoall",
      "all_to_all", "nccl", "gloo::", "c10d::", "mpi_", "dr_pg_",
      "dr_work_wait", "reducer::", NULL};
  for (size_t i = 0; needles[i] != NULL; i++)
    if (has_ci(func, needles[i]))
      return 1;
  return 0;
}

/* A Python frame of a library (site-packages, the standard library, a
 * frozen module). With py-spy's short file names a library file is a
 * relative path with a directory ("torch/_tensor.py"), a script a bare
 * name. */
int dr__stacks_py_library(const char *file) {
  if (file[0] == '<')
    return 1;
  if (file[0] != '/')
    return strchr(file, '/') != NULL;
  return strstr(file, "/site-packages/") != NULL ||
         strstr(file, "/dist-packages/") != NULL ||
         strstr(file, "/lib/python") != NULL ||
         strstr(file, "/lib/pypy") != NULL;
}

int dr__stacks_py_collective(const dr_frame_t *f) {
  static const char *const files[] = {
      "torch/distributed/", "torch/nn/parallel/", "torch/autograd/",
      "deepspeed/comm/", "horovod/", "mpi4py/", NULL};
  static const char *const funcs[] = {
      "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
      "reduce_scatter", "reduce_scatter_tensor", "broadcast",
      "broadcast_object_list", "barrier", "monitored_barrier", "all_to_all",
      "all_to_all_single", "reduce", "gather", "scatter", "allreduce",
      "Allreduce", "Barrier", "Bcast", "Allgather", NULL};
  for (size_t i = 0; files[i] != NULL; i++)
    if (strstr(f->file, files[i]) != NULL)
      return 1;
  const char *dot = strrchr(f->func, '.');
  return name_in(dot != NULL ? dot + 1 : f->func, funcs, 0);
}

/* The kernel's function names of a blocked task. */
dr_place_t dr__stacks_kernel_kind(const char *fn) {
  if (strstr(fn, "nanosleep") != NULL || strstr(fn, "nsleep") != NULL)
    return DR_PLACE_SLEEP;
  static const char *const waits[] = {
      "futex", "ep_poll", "epoll", "do_sys_poll", "poll_schedule", "do_select",
      "core_sys_select", "sk_wait", "tcp_recv", "inet_csk_accept", "unix_",
      "pipe_read", "pipe_wait", "wait_woken", "do_wait", "sigsuspend",
      "do_sigtimedwait", "schedule_timeout", "sys_pause", NULL};
  for (size_t i = 0; waits[i] != NULL; i++)
    if (strstr(fn, waits[i]) != NULL)
      return DR_PLACE_WAIT;
  return 0;
}

dr_place_t dr__stacks_native_place(const dr_stack_t *s) {
  dr_place_t wait = 0;
  size_t meaningful = 0;
  for (size_t i = 0; i < s->n_frames && meaningful < 6; i++) {
    const dr_frame_t *f = &s->frames[i];
    if (f->python)
      break;
    dr_place_t k = dr__stacks_wait_kind(f->func);
    if (k != 0) {
      if (wait == 0 && meaningful == 0)
        wait = k;
      continue;
    }
    if (native_collective(f->func))
      return DR_PLACE_COLLECTIVE;
    if (dr__stacks_plumbing(f->func))
      continue;
    meaningful++;
  }
  return wait != 0 ? wait : DR_PLACE_CODE;
}

const dr_frame_t *dr__stacks_innermost_python(const dr_stack_t *s) {
  for (size_t i = 0; i < s->n_frames; i++)
    if (s->frames[i].python)
      return &s->frames[i];
  return NULL;
}

void dr_stack_refine(dr_stack_t *s, char state, const char *wchan) {
  if (s->place == DR_PLACE_COLLECTIVE)
    return;
  if (state == 'D') {
    s->place = DR_PLACE_IO;
    return;
  }
  if (s->place != DR_PLACE_UNKNOWN)
    return;
  if (state == 'R') {
    s->place = DR_PLACE_CODE;
    return;
  }
  dr_place_t k = wchan != NULL ? dr__stacks_kernel_kind(wchan) : 0;
  if (k != 0)
    s->place = k;
}

const char *dr_place_name(dr_place_t p) {
  switch (p) {
  case DR_PLACE_COLLECTIVE: return "in a collective";
  case DR_PLACE_WAIT: return "waiting";
  case DR_PLACE_SLEEP: return "sleeping";
  case DR_PLACE_IO: return "in disk I/O";
  case DR_PLACE_CODE: return "running";
  default: return "unknown";
  }
}
