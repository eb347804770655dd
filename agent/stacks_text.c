/* Reading the stack tools' output: the main thread's frames, what they
 * say the process is doing, a one-line place, and places grouped over
 * ranks. Pure text; see stacks.h. */
#include "stacks.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small string helpers ---------------------------------------------- */

/* snprintf for text that may be cut: places and labels are bounded. */
static void cut(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cut(char *out, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, n, fmt, ap);
  va_end(ap);
}

static void copy(char *dst, size_t n, const char *s, size_t len) {
  if (n == 0)
    return;
  if (len >= n)
    len = n - 1;
  memcpy(dst, s, len);
  dst[len] = '\0';
}

static int starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

static const char *skip_blanks(const char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  return s;
}

/* The length of the line at s, without its newline. */
static size_t line_len(const char *s) {
  const char *nl = strchr(s, '\n');
  return nl != NULL ? (size_t)(nl - s) : strlen(s);
}

static const char *next_line(const char *s) {
  const char *nl = strchr(s, '\n');
  return nl != NULL ? nl + 1 : NULL;
}

static const char *base_name(const char *path) {
  const char *b = strrchr(path, '/');
  return b != NULL ? b + 1 : path;
}

/* A C or C++ name without its parameter list and symbol version:
 * "pthread_cond_wait@@GLIBC_2.3.2" -> "pthread_cond_wait",
 * "std::condition_variable::wait(std::unique_lock<std::mutex>&)" ->
 * "std::condition_variable::wait". Parentheses inside template arguments
 * and "(anonymous namespace)" stay. */
static void native_name(char *name) {
  char *at = strchr(name, '@');
  if (at != NULL)
    *at = '\0';
  int depth = 0;
  for (char *p = name; *p != '\0'; p++) {
    if (*p == '<')
      depth++;
    else if (*p == '>' && depth > 0)
      depth--;
    else if (*p == '(' && depth == 0 && !starts(p, "(anonymous namespace)") &&
             p != name) {
      *p = '\0';
      break;
    }
  }
  size_t l = strlen(name);
  while (l > 0 && name[l - 1] == ' ')
    name[--l] = '\0';
}

/* ---- what a frame is ----------------------------------------------------- */

/* The name as libc's waits are compared: leading underscores and glibc's
 * internal prefixes dropped ("__GI___clock_nanosleep" -> "clock_nanosleep"). */
static const char *plain(const char *name) {
  for (;;) {
    while (*name == '_')
      name++;
    if (starts(name, "GI_"))
      name += 3;
    else if (starts(name, "libc_"))
      name += 5;
    else
      return name;
  }
}

static int name_in(const char *name, const char *const *list, int prefix) {
  for (size_t i = 0; list[i] != NULL; i++)
    if (prefix ? starts(name, list[i]) : strcmp(name, list[i]) == 0)
      return 1;
  return 0;
}

/* DR_PLACE_SLEEP or DR_PLACE_WAIT for a blocking call of libc or of the
 * C++ runtime, 0 for anything else. */
static dr_place_t wait_kind(const char *func) {
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
  if (name_in(p, sleeps, 0) || starts(p, "clock_nanosleep"))
    return DR_PLACE_SLEEP;
  if (name_in(func, wait_prefixes, 1) || name_in(p, wait_prefixes, 1) ||
      name_in(p, waits, 0))
    return DR_PLACE_WAIT;
  return 0;
}

/* Frames of the interpreter, the C library's start-up and thread entry,
 * and of C++ library plumbing: never where a program "is". */
static int plumbing(const char *func) {
  static const char *const prefixes[] = {
      "_Py", "Py", "py", "_py", "cfunction_", "method_vectorcall",
      "vectorcall", "_vectorcall", "slot_tp_", "builtin_", "run_mod",
      "run_eval_code", "pymain", "object_vacall", "_start", "__libc_start",
      "start_thread", "clone", "__clone", "std::", "__gnu_cxx::",
      "_M_invoke", "<", NULL};
  if (func[0] == '\0' || starts(func, "0x") || strcmp(func, "??") == 0)
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
static int py_library(const char *file) {
  if (file[0] == '<')
    return 1;
  if (file[0] != '/')
    return strchr(file, '/') != NULL;
  return strstr(file, "/site-packages/") != NULL ||
         strstr(file, "/dist-packages/") != NULL ||
         strstr(file, "/lib/python") != NULL ||
         strstr(file, "/lib/pypy") != NULL;
}

static int py_collective(const dr_frame_t *f) {
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

/* ---- parsers ------------------------------------------------------------ */

static dr_frame_t *add_frame(dr_stack_t *s) {
  if (s->n_frames >= DR_STACK_MAX_FRAMES)
    return NULL;
  dr_frame_t *f = &s->frames[s->n_frames++];
  memset(f, 0, sizeof(*f));
  return f;
}

/* "    func (file:line)" (Python) or "    func (library)" (native). */
static void pyspy_frame(dr_stack_t *s, const char *l, size_t len) {
  char buf[600];
  copy(buf, sizeof(buf), l, len);
  char *open = strstr(buf, " (");
  for (char *p = open; p != NULL; p = strstr(p + 1, " ("))
    open = p; /* the last one: C++ names hold parentheses */
  size_t bl = strlen(buf);
  if (open == NULL || bl == 0 || buf[bl - 1] != ')')
    return;
  buf[bl - 1] = '\0';
  *open = '\0';
  const char *loc = open + 2;
  dr_frame_t *f = add_frame(s);
  if (f == NULL)
    return;
  const char *colon = strrchr(loc, ':');
  if (colon != NULL && colon[1] != '\0' &&
      strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
    f->python = 1;
    f->line = atoi(colon + 1);
    copy(f->file, sizeof(f->file), loc, (size_t)(colon - loc));
    copy(f->func, sizeof(f->func), buf, strlen(buf));
  } else {
    copy(f->file, sizeof(f->file), loc, strlen(loc));
    copy(f->func, sizeof(f->func), buf, strlen(buf));
    native_name(f->func);
  }
}

/* py-spy dump: "Thread TID (idle|active): "NAME"" headers, frames indented
 * four spaces (deeper lines are --locals). The main thread is the one whose
 * id is the pid, else "MainThread", else the first. */
static int parse_pyspy(const char *text, pid_t pid, dr_stack_t *s,
                       int *active) {
  const char *best = NULL;
  int best_score = 0;
  for (const char *l = text; l != NULL; l = next_line(l)) {
    if (!starts(l, "Thread "))
      continue;
    long tid = strtol(l + 7, NULL, 0);
    size_t len = line_len(l);
    int score = tid == (long)pid                             ? 3
                : memmem(l, len, "\"MainThread\"", 12) != NULL ? 2
                                                             : 1;
    if (score > best_score) {
      best_score = score;
      best = l;
    }
  }
  if (best == NULL)
    return -ENODATA;
  *active = memmem(best, line_len(best), "(active", 7) != NULL;
  for (const char *l = next_line(best); l != NULL; l = next_line(l)) {
    size_t len = line_len(l);
    if (len < 5 || !starts(l, "    "))
      break;
    if (l[4] == ' ')
      continue;
    pyspy_frame(s, l + 4, len - 4);
  }
  return s->n_frames > 0 ? 0 : -ENODATA;
}

/* eu-stack: "TID N:" headers, "#K  0xADDR NAME" frames (NAME may be
 * absent), optionally "    FILE:LINE" under a frame (-s). */
static int parse_eustack(const char *text, pid_t pid, dr_stack_t *s) {
  int in_main = 0, seen = 0;
  for (const char *l = text; l != NULL; l = next_line(l)) {
    size_t len = line_len(l);
    if (starts(l, "TID ")) {
      in_main = strtol(l + 4, NULL, 10) == (long)pid;
      seen |= in_main;
      continue;
    }
    if (!in_main)
      continue;
    if (l[0] == '#') {
      const char *p = l + 1;
      while (isdigit((unsigned char)*p))
        p++;
      p = skip_blanks(p);
      if (starts(p, "0x"))
        while (*p != '\0' && *p != ' ' && *p != '\n')
          p++;
      p = skip_blanks(p);
      dr_frame_t *f = add_frame(s);
      if (f == NULL)
        break;
      size_t nl = len - (size_t)(p - l);
      const char *dash = memmem(p, nl, " - ", 3); /* -m: " - /lib/x.so" */
      copy(f->func, sizeof(f->func), p, dash != NULL ? (size_t)(dash - p) : nl);
      native_name(f->func);
    } else if (s->n_frames > 0 && starts(l, "    ")) {
      dr_frame_t *f = &s->frames[s->n_frames - 1];
      char buf[300];
      const char *b = skip_blanks(l);
      copy(buf, sizeof(buf), b, len - (size_t)(b - l));
      char *colon = strrchr(buf, ':');
      if (colon != NULL) {
        f->line = atoi(colon + 1);
        *colon = '\0';
        copy(f->file, sizeof(f->file), buf, strlen(buf));
      }
    }
  }
  return seen && s->n_frames > 0 ? 0 : -ENODATA;
}

/* gdb "thread apply all bt": "Thread N (Thread 0x... (LWP TID) "name"):"
 * headers; frames "#K  [0xADDR in ]NAME (ARGS) [at FILE:LINE | from LIB]";
 * inlined frames have no address. */
static int parse_gdb(const char *text, pid_t pid, dr_stack_t *s) {
  char lwp[40];
  snprintf(lwp, sizeof(lwp), "(LWP %d)", (int)pid);
  int in_main = 0, seen = 0, single = strstr(text, "(LWP ") == NULL;
  for (const char *l = text; l != NULL; l = next_line(l)) {
    size_t len = line_len(l);
    if (starts(l, "Thread ")) {
      in_main = memmem(l, len, lwp, strlen(lwp)) != NULL;
      seen |= in_main;
      continue;
    }
    if (l[0] != '#' || !(in_main || single))
      continue;
    seen = 1;
    char buf[1200];
    copy(buf, sizeof(buf), l, len);
    char *p = buf + 1;
    while (isdigit((unsigned char)*p))
      p++;
    p = (char *)skip_blanks(p);
    if (starts(p, "0x")) {
      char *in = strstr(p, " in ");
      if (in == NULL)
        continue;
      p = in + 4;
    }
    dr_frame_t *f = add_frame(s);
    if (f == NULL)
      break;
    char *at = strstr(p, " at ");
    char *from = strstr(p, " from ");
    char *tail = at != NULL ? at : from;
    if (tail != NULL) {
      *tail = '\0';
      const char *loc = tail + (at != NULL ? 4 : 6);
      const char *colon = at != NULL ? strrchr(loc, ':') : NULL;
      if (colon != NULL) {
        f->line = atoi(colon + 1);
        copy(f->file, sizeof(f->file), loc, (size_t)(colon - loc));
      } else {
        copy(f->file, sizeof(f->file), loc, strlen(loc));
      }
    }
    /* The name ends at the argument list: " (" outside template brackets. */
    int depth = 0;
    for (char *q = p; *q != '\0'; q++) {
      if (*q == '<')
        depth++;
      else if (*q == '>' && depth > 0)
        depth--;
      else if (depth == 0 && q[0] == ' ' && q[1] == '(') {
        *q = '\0';
        break;
      }
    }
    copy(f->func, sizeof(f->func), p, strlen(p));
    native_name(f->func);
  }
  return seen && s->n_frames > 0 ? 0 : -ENODATA;
}

/* The kernel's view as stacks.c writes it: "state C", "wchan NAME", then
 * the main thread's /proc/PID/stack lines "[<0>] name+0x../0x..", then
 * "threads:" and one line per thread. */
static int parse_kernel(const char *text, dr_stack_t *s, char *state,
                        char *wchan, size_t wchan_n) {
  for (const char *l = text; l != NULL; l = next_line(l)) {
    size_t len = line_len(l);
    if (starts(l, "threads:"))
      break;
    if (starts(l, "state ") && len > 6) {
      *state = l[6];
    } else if (starts(l, "wchan ")) {
      copy(wchan, wchan_n, l + 6, len - 6);
    } else if (starts(l, "[<")) {
      const char *p = memchr(l, ']', len);
      if (p == NULL)
        continue;
      p = skip_blanks(p + 1);
      size_t nl = len - (size_t)(p - l);
      const char *plus = memchr(p, '+', nl);
      dr_frame_t *f = add_frame(s);
      if (f == NULL)
        break;
      copy(f->func, sizeof(f->func), p, plus != NULL ? (size_t)(plus - p) : nl);
    }
  }
  if (s->n_frames == 0 && wchan[0] != '\0' && strcmp(wchan, "0") != 0) {
    dr_frame_t *f = add_frame(s);
    if (f != NULL)
      copy(f->func, sizeof(f->func), wchan, strlen(wchan));
  }
  return s->n_frames > 0 || *state != '\0' ? 0 : -ENODATA;
}

/* ---- place --------------------------------------------------------------- */

/* The kernel's function names of a blocked task. */
static dr_place_t kernel_kind(const char *fn) {
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

static dr_place_t native_place(const dr_stack_t *s) {
  dr_place_t wait = 0;
  size_t meaningful = 0;
  for (size_t i = 0; i < s->n_frames && meaningful < 6; i++) {
    const dr_frame_t *f = &s->frames[i];
    if (f->python)
      break;
    dr_place_t k = wait_kind(f->func);
    if (k != 0) {
      if (wait == 0 && meaningful == 0)
        wait = k;
      continue;
    }
    if (native_collective(f->func))
      return DR_PLACE_COLLECTIVE;
    if (plumbing(f->func))
      continue;
    meaningful++;
  }
  return wait != 0 ? wait : DR_PLACE_CODE;
}

static const dr_frame_t *innermost_python(const dr_stack_t *s) {
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
  dr_place_t k = wchan != NULL ? kernel_kind(wchan) : 0;
  if (k != 0)
    s->place = k;
}

int dr_stack_parse(const char *tool, const char *text, pid_t pid,
                   dr_stack_t *out) {
  out->n_frames = 0;
  out->place = DR_PLACE_UNKNOWN;
  out->where[0] = '\0';
  if (text == NULL)
    return -ENODATA;
  int rc, active = 0;
  char state = '\0', wchan[128] = "";
  if (starts(tool, "py-spy")) {
    rc = parse_pyspy(text, pid, out, &active);
    if (rc == 0) {
      const dr_frame_t *py = innermost_python(out);
      if (py != NULL && py_collective(py))
        out->place = DR_PLACE_COLLECTIVE;
      else if (out->n_frames > 0 && !out->frames[0].python)
        out->place = native_place(out); /* --native */
      else if (active)
        out->place = DR_PLACE_CODE;
    }
  } else if (starts(tool, "eu-stack") || starts(tool, "gdb")) {
    rc = starts(tool, "gdb") ? parse_gdb(text, pid, out)
                             : parse_eustack(text, pid, out);
    if (rc == 0)
      out->place = native_place(out);
  } else if (starts(tool, "kernel")) {
    rc = parse_kernel(text, out, &state, wchan, sizeof(wchan));
    if (rc == 0) {
      for (size_t i = 0; i < out->n_frames && out->place == 0; i++)
        out->place = kernel_kind(out->frames[i].func);
      dr_stack_refine(out, state, wchan);
    }
  } else {
    rc = -EINVAL;
  }
  if (rc == 0)
    dr_stack_describe(out);
  return rc;
}

/* ---- the place in one line ----------------------------------------------- */

/* The call on a source line, to say what a frame is waiting in: the first
 * dotted name followed by '(' before any comment ("    time.sleep(3600)"
 * -> "time.sleep"). Only absolute paths: the agent's working directory is
 * not the program's. */
static int call_on_line(const char *file, int line, char *out, size_t n) {
  if (file[0] != '/' || line <= 0)
    return -1;
  FILE *fp = fopen(file, "r");
  if (fp == NULL)
    return -1;
  char buf[1024];
  int k = 0, found = 0;
  while (fgets(buf, sizeof(buf), fp) != NULL)
    if (++k == line) {
      found = 1;
      break;
    }
  fclose(fp);
  if (!found)
    return -1;
  char *hash = strchr(buf, '#');
  if (hash != NULL)
    *hash = '\0';
  for (const char *p = buf + 1; *p != '\0'; p++) {
    if (*p != '(')
      continue;
    const char *b = p;
    while (b > buf && (isalnum((unsigned char)b[-1]) || b[-1] == '_' ||
                       b[-1] == '.'))
      b--;
    while (b < p && (*b == '.' || isdigit((unsigned char)*b)))
      b++;
    if (p > b) {
      copy(out, n, b, (size_t)(p - b));
      return 0;
    }
  }
  return -1;
}

/* The program's own frames are those under the directory of its script:
 * the outermost Python frame that is not a library's. Packages elsewhere
 * (a pip --target directory, a virtual environment) are libraries. */
static int py_user(const dr_frame_t *f, const char *root, size_t root_len) {
  if (py_library(f->file))
    return 0;
  if (root_len == 0)
    return strchr(f->file, '/') == NULL;
  return strncmp(f->file, root, root_len) == 0 && f->file[root_len] == '/';
}

static void describe_python(dr_stack_t *s) {
  const dr_frame_t *inner = innermost_python(s);
  const char *root = "";
  size_t root_len = 0;
  for (size_t i = s->n_frames; i-- > 0;)
    if (s->frames[i].python && !py_library(s->frames[i].file)) {
      root = s->frames[i].file;
      const char *slash = strrchr(root, '/');
      root_len = slash != NULL ? (size_t)(slash - root) : 0;
      break;
    }
  const dr_frame_t *user = NULL;
  for (size_t i = 0; i < s->n_frames && user == NULL; i++)
    if (s->frames[i].python && py_user(&s->frames[i], root, root_len))
      user = &s->frames[i];
  if (user == NULL) {
    cut(s->where, sizeof(s->where), "%s at %s:%d", inner->func,
        base_name(inner->file), inner->line);
    return;
  }
  /* What the program's frame is in: the innermost native frame that
   * matters (py-spy --native), else the innermost library frame, else the
   * call on its source line. */
  char callee[128] = "";
  for (size_t i = 0; i < s->n_frames && !s->frames[i].python; i++)
    if (wait_kind(s->frames[i].func) == 0 && !plumbing(s->frames[i].func)) {
      cut(callee, sizeof(callee), "%s", s->frames[i].func);
      break;
    }
  if (callee[0] == '\0' && inner != user)
    cut(callee, sizeof(callee), "%s", inner->func);
  else if (callee[0] == '\0')
    call_on_line(user->file, user->line, callee, sizeof(callee));
  cut(s->where, sizeof(s->where), "%s%s%s at %s:%d", callee,
      callee[0] != '\0' ? " <- " : "", user->func, base_name(user->file),
      user->line);
}

static void describe_native(dr_stack_t *s, int kernel) {
  const dr_frame_t *m[2] = {NULL, NULL};
  const dr_frame_t *wait = NULL;
  size_t k = 0;
  for (size_t i = 0; i < s->n_frames && k < 2; i++) {
    const dr_frame_t *f = &s->frames[i];
    if (!kernel && wait_kind(f->func) != 0) {
      if (wait == NULL)
        wait = f;
      continue;
    }
    if (!kernel && plumbing(f->func))
      continue;
    m[k++] = f;
  }
  if (m[0] == NULL)
    m[0] = wait != NULL ? wait : s->n_frames > 0 ? &s->frames[0] : NULL;
  if (m[0] == NULL)
    return;
  char loc[300] = "";
  if (m[0]->line > 0)
    cut(loc, sizeof(loc), " at %s:%d", base_name(m[0]->file),
             m[0]->line);
  /* Where the wait itself says nothing ("main"), say that it sleeps: a
   * rank asleep in main is not with its peers polling in main. */
  int say_sleep = !kernel && wait != NULL &&
                  wait_kind(wait->func) == DR_PLACE_SLEEP &&
                  strstr(m[0]->func, "sleep") == NULL;
  cut(s->where, sizeof(s->where), "%s%s%s%s%s%s", kernel ? "kernel: " : "",
      m[0]->func, loc, m[1] != NULL ? " <- " : "",
      m[1] != NULL ? m[1]->func : "", say_sleep ? " (sleeping)" : "");
}

void dr_stack_describe(dr_stack_t *s) {
  s->where[0] = '\0';
  if (s->n_frames == 0)
    return;
  if (innermost_python(s) != NULL)
    describe_python(s);
  else
    describe_native(s, starts(s->tool, "kernel"));
}

/* ---- grouping ------------------------------------------------------------ */

char *dr_ranks_format(const uint32_t *ranks, size_t n, char *out,
                      size_t out_n) {
  size_t o = 0;
  if (out_n == 0)
    return out;
  out[0] = '\0';
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
      j++;
    int w = j > i ? snprintf(out + o, out_n - o, "%s%u-%u", i ? ", " : "",
                             ranks[i], ranks[j])
                  : snprintf(out + o, out_n - o, "%s%u", i ? ", " : "",
                             ranks[i]);
    if (w < 0 || (size_t)w >= out_n - o) {
      if (out_n >= 4)
        memcpy(out + out_n - 4, "...", 4);
      return out;
    }
    o += (size_t)w;
    i = j + 1;
  }
  return out;
}

static const char *where_of(const dr_rank_where_t *r) {
  return r->where != NULL && r->where[0] != '\0' ? r->where : "unknown";
}

static int by_where_rank(const void *a, const void *b) {
  const dr_rank_where_t *x = a, *y = b;
  int c = strcmp(where_of(x), where_of(y));
  if (c != 0)
    return c;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

typedef struct {
  size_t first, n; /* a run of the sorted entries */
  uint32_t low;
} group_t;

static int by_size_low(const void *a, const void *b) {
  const group_t *x = a, *y = b;
  if (x->n != y->n)
    return x->n > y->n ? -1 : 1;
  return x->low < y->low ? -1 : x->low > y->low;
}

size_t dr_stacks_group(const dr_rank_where_t *in, size_t n_in,
                       const char *sep, char *out, size_t n) {
  if (n > 0)
    out[0] = '\0';
  if (n_in == 0)
    return 0;
  dr_rank_where_t *v = malloc(n_in * sizeof(*v));
  group_t *g = malloc(n_in * sizeof(*g));
  uint32_t *ranks = malloc(n_in * sizeof(*ranks));
  char *list = malloc(8 * n_in + 16);
  size_t n_groups = 0;
  if (v == NULL || g == NULL || ranks == NULL || list == NULL)
    goto done;
  memcpy(v, in, n_in * sizeof(*v));
  qsort(v, n_in, sizeof(*v), by_where_rank);
  for (size_t i = 0; i < n_in;) {
    size_t j = i;
    while (j < n_in && strcmp(where_of(&v[j]), where_of(&v[i])) == 0)
      j++;
    g[n_groups++] = (group_t){i, j - i, v[i].rank};
    i = j;
  }
  qsort(g, n_groups, sizeof(*g), by_size_low);
  size_t o = 0;
  for (size_t k = 0; k < n_groups && n > 0; k++) {
    size_t m = 0;
    for (size_t i = 0; i < g[k].n; i++)
      if (m == 0 || ranks[m - 1] != v[g[k].first + i].rank)
        ranks[m++] = v[g[k].first + i].rank; /* a rank given twice: once */
    dr_ranks_format(ranks, m, list, 8 * n_in + 16);
    int w = snprintf(out + o, n - o, "%s%s %s: %s", k > 0 ? sep : "",
                     m > 1 ? "ranks" : "rank", list, where_of(&v[g[k].first]));
    if (w < 0 || (size_t)w >= n - o) {
      if (n >= 4)
        memcpy(out + n - 4, "...", 4);
      n_groups = k + 1;
      break;
    }
    o += (size_t)w;
  }
done:
  free(v);
  free(g);
  free(ranks);
  free(list);
  return n_groups;
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
