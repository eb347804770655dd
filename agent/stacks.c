/* Taking a process's stacks with the tools this host has (py-spy,
 * eu-stack, gdb), each bounded by a deadline, else the kernel's view
 * (/proc/PID/stack, /proc/PID/wchan). See stacks.h. */
#include "stacks.h"
#include "mono.h"
#include "fs.h"
#include "grow.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_OUTPUT (1u << 20) /* a tool's output kept, bytes */

typedef enum { T_PYSPY, T_EUSTACK, T_GDB, T_KERNEL, T_END } tool_t;

static const char *const tool_names[] = {"py-spy", "eu-stack", "gdb",
                                         "kernel"};

/* The tools to try for a program, in order, ending with T_END: the
 * default order, or DDPRUN_STACK_TOOLS's (the kernel's view always last). */
static void tool_order(int is_python, tool_t *out) {
  const char *env = getenv("DDPRUN_STACK_TOOLS");
  size_t n = 0;
  if (env != NULL && env[0] != '\0') {
    char tmp[128];
    snprintf(tmp, sizeof(tmp), "%s", env);
    for (char *save = NULL, *t = strtok_r(tmp, ", ", &save); t != NULL;
         t = strtok_r(NULL, ", ", &save))
      for (int k = 0; k < T_KERNEL; k++)
        if (strcmp(t, tool_names[k]) == 0 && n < T_KERNEL)
          out[n++] = (tool_t)k;
  } else if (is_python) {
    out[n++] = T_PYSPY;
    out[n++] = T_EUSTACK;
  } else {
    out[n++] = T_EUSTACK;
    out[n++] = T_GDB;
  }
  out[n++] = T_KERNEL;
  out[n] = T_END;
}

/* py-spy where a pip install put it without PATH knowing: beside the
 * Python the process runs (its argv[0], when a path: a virtual
 * environment's bin/), and in the bin/ of the environment this ddprun was
 * installed into by pip (its program lies in
 * <env>/lib/pythonX.Y/site-packages/ddprun.scripts/; `pip install
 * ddprun[stacks]` puts py-spy in <env>/bin). 0 and the path, or -ENOENT. */
static int find_pyspy_beside(pid_t pid, char *out, size_t n) {
  char p[600], arg0[512];
  snprintf(p, sizeof(p), "/proc/%d/cmdline", (int)pid);
  FILE *f = fopen(p, "re");
  if (f != NULL) {
    size_t k = fread(arg0, 1, sizeof(arg0) - 1, f);
    fclose(f);
    arg0[k] = '\0';
    char *slash = strrchr(arg0, '/');
    if (slash != NULL && arg0[0] == '/') {
      *slash = '\0';
      if (snprintf(out, n, "%s/py-spy", arg0) < (int)n &&
          access(out, X_OK) == 0)
        return 0;
    }
  }
  char self[512];
  ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (k <= 0)
    return -ENOENT;
  self[k] = '\0';
  /* .../lib/pythonX.Y/site-packages/ddprun.scripts/ddprun: up four */
  for (int up = 0; up < 4; up++) {
    char *slash = strrchr(self, '/');
    if (slash == NULL)
      return -ENOENT;
    *slash = '\0';
    if (up == 0 && strcmp(strrchr(self, '/') != NULL ? strrchr(self, '/') + 1
                                                     : self,
                          "ddprun.scripts") != 0)
      return -ENOENT;
  }
  if (snprintf(out, n, "%s/bin/py-spy", self) < (int)n &&
      access(out, X_OK) == 0)
    return 0;
  return -ENOENT;
}

/* ---- running a tool ------------------------------------------------------ */

typedef struct {
  pid_t child;  /* the tool, 0 when none runs */
  int fd;       /* its stdout and stderr, -1 when closed */
  char *buf;
  size_t len, cap;
  int truncated;
} run_t;

/* The environment of a tool: this one without DEBUGINFOD_URLS, so that no
 * tool stops to download debug information. Returns a malloc'd array
 * (one block) or NULL. */
static char **tool_env(void) {
  size_t n = 0;
  while (environ[n] != NULL)
    n++;
  char **env = malloc((n + 1) * sizeof(*env));
  if (env == NULL)
    return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "DEBUGINFOD_URLS=", 16) != 0)
      env[k++] = environ[i];
  env[k] = NULL;
  return env;
}

static int run_start(run_t *r, const char *path, char *const argv[]) {
  memset(r, 0, sizeof(*r));
  r->fd = -1;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0)
    return -errno;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  /* Its own process group (killed whole at the deadline), default signal
   * dispositions and an empty mask: the agent ignores SIGPIPE and blocks
   * signals in some threads. */
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
                                    POSIX_SPAWN_SETPGROUP);
  char **env = tool_env();
  int rc = env == NULL ? ENOMEM
                       : posix_spawn(&r->child, path, &fa, &at, argv, env);
  free(env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(p[1]);
  if (rc != 0) {
    close(p[0]);
    r->child = 0;
    return -rc;
  }
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  r->fd = p[0];
  return 0;
}

/* Reads what is there; 1 at end of file. */
static int run_read(run_t *r) {
  for (;;) {
    char chunk[16384];
    ssize_t n = read(r->fd, chunk, sizeof(chunk));
    if (n == 0)
      return 1;
    if (n < 0)
      return errno == EINTR ? run_read(r) : errno == EAGAIN ? 0 : 1;
    size_t keep = (size_t)n;
    if (r->len + keep > MAX_OUTPUT) {
      keep = MAX_OUTPUT - r->len;
      r->truncated = 1;
    }
    char *b = dr_grow(r->buf, &r->cap, r->len + keep + 1, 1, 16384);
    if (b == NULL)
      return 1;
    r->buf = b;
    memcpy(r->buf + r->len, chunk, keep);
    r->len += keep;
    r->buf[r->len] = '\0';
  }
}

/* Ends the tool: killed when still running. The exit status is not used:
 * a caller that reaps with waitpid(-1) may have taken it (ECHILD). */
static void run_end(run_t *r, int kill_it) {
  if (r->fd >= 0)
    close(r->fd);
  r->fd = -1;
  if (r->child > 0) {
    if (kill_it)
      kill(-r->child, SIGKILL);
    int st;
    while (waitpid(r->child, &st, 0) < 0 && errno == EINTR)
      ;
  }
  r->child = 0;
}

/* Runs argv to its end or until deadline (CLOCK_MONOTONIC ms): 0 and the
 * output in *out (malloc'd), -ETIMEDOUT, or -errno of the start. */
static int run_tool(const char *path, char *const argv[], uint64_t deadline,
                    char **out) {
  run_t r;
  int rc = run_start(&r, path, argv);
  if (rc != 0)
    return rc;
  int eof = 0;
  while (!eof) {
    uint64_t now = dr_mono_ms();
    if (now >= deadline)
      break;
    struct pollfd p = {.fd = r.fd, .events = POLLIN};
    int n = poll(&p, 1, (int)(deadline - now));
    if (n < 0 && errno != EINTR)
      break;
    if (n > 0)
      eof = run_read(&r);
  }
  run_end(&r, !eof);
  if (!eof) {
    free(r.buf);
    return -ETIMEDOUT;
  }
  *out = r.buf != NULL ? r.buf : strdup("");
  return *out != NULL ? 0 : -ENOMEM;
}

/* ---- the tools ----------------------------------------------------------- */

static pthread_mutex_t version_mu = PTHREAD_MUTEX_INITIALIZER;
static char pyspy_path[512], pyspy_version[48];
static int pyspy_checked;

/* py-spy's "py-spy 0.4.3" from --version, checked once per path. */
static int pyspy_usable(const char *path, uint64_t deadline, char *version,
                        size_t n) {
  pthread_mutex_lock(&version_mu);
  int ok = pyspy_checked && strcmp(pyspy_path, path) == 0;
  pthread_mutex_unlock(&version_mu);
  if (!ok) {
    char *text = NULL;
    char *const argv[] = {(char *)path, "--version", NULL};
    if (run_tool(path, argv, deadline, &text) != 0 ||
        strncmp(text, "py-spy ", 7) != 0) {
      free(text);
      return -ENOEXEC;
    }
    text[strcspn(text, "\n")] = '\0';
    pthread_mutex_lock(&version_mu);
    snprintf(pyspy_path, sizeof(pyspy_path), "%s", path);
    snprintf(pyspy_version, sizeof(pyspy_version), "%.40s", text);
    pyspy_checked = 1;
    pthread_mutex_unlock(&version_mu);
    free(text);
  }
  pthread_mutex_lock(&version_mu);
  snprintf(version, n, "%s", pyspy_version);
  pthread_mutex_unlock(&version_mu);
  return 0;
}

/* Adds to what was missing or failed (cut when it does not fit). */
static void note(dr_stack_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(dr_stack_t *s, const char *fmt, ...) {
  size_t l = strlen(s->missing);
  if (l + 3 >= sizeof(s->missing))
    return;
  if (l > 0) {
    memcpy(s->missing + l, "; ", 3);
    l += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->missing + l, sizeof(s->missing) - l, fmt, ap);
  va_end(ap);
}

/* Appends to text[cap] at *o (cut when it does not fit). */
static void append(char *text, size_t cap, size_t *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *text, size_t cap, size_t *o, const char *fmt, ...) {
  if (*o + 1 >= cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(text + *o, cap - *o, fmt, ap);
  va_end(ap);
  if (w > 0)
    *o += (size_t)w < cap - *o ? (size_t)w : cap - *o - 1;
}

/* The first line of a tool's complaint, for the note. */
static void first_line(const char *text, char *out, size_t n) {
  while (*text == '\n' || *text == ' ')
    text++;
  snprintf(out, n, "%.*s", (int)strcspn(text, "\n"), text);
  if (out[0] == '\0')
    snprintf(out, n, "no output");
}

static int read_small(const char *path, char *out, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  ssize_t k = read(fd, out, n - 1);
  int e = errno;
  close(fd);
  if (k < 0)
    return -e;
  out[k] = '\0';
  return (int)k;
}

/* The state letter and name of a task from its stat file. */
static char task_state(const char *stat_path, char *comm, size_t n) {
  char buf[512];
  if (read_small(stat_path, buf, sizeof(buf)) <= 0)
    return '\0';
  char *open = strchr(buf, '(');
  char *close = strrchr(buf, ')');
  if (open == NULL || close == NULL || close < open || close[1] != ' ')
    return '\0';
  if (comm != NULL)
    snprintf(comm, n, "%.*s", (int)(close - open - 1), open + 1);
  return close[2];
}

/* One tool on pid: 0 with s filled, or a negative code with a note. */
static int try_tool(tool_t t, pid_t pid, uint64_t deadline, dr_stack_t *s) {
  char path[512], pidstr[24], label[48];
  snprintf(pidstr, sizeof(pidstr), "%d", (int)pid);
  if (dr_find_program(tool_names[t], getenv("PATH"), path, sizeof(path)) != 0 &&
      (t != T_PYSPY || find_pyspy_beside(pid, path, sizeof(path)) != 0)) {
    note(s, "%s not found on PATH%s", tool_names[t],
         t == T_PYSPY ? " nor beside the program's python (pip install "
                        "'ddprun[stacks]', or pip install py-spy)"
                      : "");
    return -ENOENT;
  }
  snprintf(label, sizeof(label), "%s", tool_names[t]);
  if (t == T_PYSPY && pyspy_usable(path, deadline, label, sizeof(label)) != 0) {
    note(s, "%s --version failed", path);
    return -ENOEXEC;
  }
  char *const pyspy[] = {path, "dump", "--full-filenames", "--pid", pidstr,
                         NULL};
  char *const eustack[] = {path, "-p", pidstr, NULL};
  char *const gdb[] = {path, "-nx", "-batch", "-p", pidstr,
                       "-iex", "set debuginfod enabled off",
                       "-ex", "thread apply all bt", NULL};
  char *const *argv = t == T_PYSPY ? pyspy : t == T_EUSTACK ? eustack : gdb;
  uint64_t started = dr_mono_ms();
  char stat_path[64];
  snprintf(stat_path, sizeof(stat_path), "/proc/%d/stat", (int)pid);
  char before = task_state(stat_path, NULL, 0);
  char *text = NULL;
  int rc = run_tool(path, argv, deadline, &text);
  if (rc == -ETIMEDOUT) {
    /* A tracer killed while it attached can leave its tracee stopped
     * (the SIGSTOP of PTRACE_ATTACH): let a process run again that was
     * not stopped before, or it would look stopped to the hang watch. */
    char after = task_state(stat_path, NULL, 0);
    if (before != 'T' && before != 't' && (after == 'T' || after == 't'))
      kill(pid, SIGCONT);
    char secs[24];
    snprintf(secs, sizeof(secs), "%.1f", (double)(dr_mono_ms() - started) / 1000);
    note(s, "%s timed out after %s s", tool_names[t], secs);
    return rc;
  }
  if (rc != 0) {
    note(s, "%s could not start (%s)", tool_names[t], strerror(-rc));
    return rc;
  }
  snprintf(s->tool, sizeof(s->tool), "%s", label);
  rc = dr_stack_parse(tool_names[t], text, pid, s);
  if (rc != 0) {
    char why[160];
    first_line(text, why, sizeof(why));
    note(s, "%s failed: %s", tool_names[t], why);
    s->tool[0] = '\0';
    free(text);
    return rc;
  }
  free(s->text);
  s->text = text;
  return 0;
}

/* The kernel's view, written as dr_stack_parse("kernel") reads it. */
static int kernel_view(pid_t pid, dr_stack_t *s) {
  char path[64], wchan[128] = "", stack[8192] = "";
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  char state = task_state(path, NULL, 0);
  if (state == '\0')
    return -ESRCH;
  snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
  read_small(path, wchan, sizeof(wchan));
  snprintf(path, sizeof(path), "/proc/%d/stack", (int)pid);
  int have_stack = read_small(path, stack, sizeof(stack)) > 0;
  size_t cap = 16384 + strlen(stack);
  char *text = malloc(cap);
  if (text == NULL)
    return -ENOMEM;
  size_t o = 0;
  wchan[strcspn(wchan, "\n")] = '\0';
  append(text, cap, &o, "state %c\nwchan %s\n%s", state,
         wchan[0] != '\0' ? wchan : "0", stack);
  if (o > 0 && text[o - 1] != '\n')
    append(text, cap, &o, "\n");
  append(text, cap, &o, "threads:\n");
  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || o + 200 >= cap)
      continue;
    char tp[320], comm[64] = "", tw[128] = "";
    snprintf(tp, sizeof(tp), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
    char ts = task_state(tp, comm, sizeof(comm));
    snprintf(tp, sizeof(tp), "/proc/%d/task/%s/wchan", (int)pid, e->d_name);
    read_small(tp, tw, sizeof(tw));
    append(text, cap, &o, "tid %s (%s) %c %s\n", e->d_name, comm,
           ts != '\0' ? ts : '?', tw[0] != '\0' ? tw : "0");
  }
  if (d != NULL)
    closedir(d);
  snprintf(s->tool, sizeof(s->tool), "%s",
           have_stack ? "kernel stack" : "kernel wchan");
  int rc = dr_stack_parse("kernel", text, pid, s);
  free(s->text);
  s->text = text;
  if (!have_stack && geteuid() != 0)
    note(s, "/proc/PID/stack needs root");
  return rc;
}

/* The kernel's state and wait channel of the main thread. */
typedef struct {
  char state;
  char wchan[128];
} kstate_t;

static void kernel_state(pid_t pid, kstate_t *k) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  k->state = task_state(path, NULL, 0);
  snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
  k->wchan[0] = '\0';
  read_small(path, k->wchan, sizeof(k->wchan));
}

/* Adds the kernel's view of the main thread to what a tool said (py-spy
 * sees no native frame: is it sleeping or waiting?): as it was before the
 * tool attached (a tool's ptrace stop, and the restarted system call after
 * it, change both for a moment), else as it is now. */
static void refine(pid_t pid, const kstate_t *before, dr_stack_t *s) {
  dr_stack_refine(s, before->state, before->wchan);
  if (s->place != DR_PLACE_UNKNOWN)
    return;
  kstate_t now;
  kernel_state(pid, &now);
  dr_stack_refine(s, now.state, now.wchan);
}

int dr_stacks_is_python(pid_t pid) {
  char path[64], exe[512];
  snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
  ssize_t n = readlink(path, exe, sizeof(exe) - 1);
  if (n <= 0)
    return 0;
  exe[n] = '\0';
  const char *b = strrchr(exe, '/');
  b = b != NULL ? b + 1 : exe;
  return strncmp(b, "python", 6) == 0 || strncmp(b, "pypy", 4) == 0;
}

/* One process, tools in order, within the deadline. */
static int collect_one(pid_t pid, int is_python, uint64_t deadline,
                       dr_stack_t *out) {
  memset(out, 0, sizeof(*out));
  out->pid = pid;
  if (pid <= 0)
    return -ESRCH;
  if (is_python < 0)
    is_python = dr_stacks_is_python(pid);
  tool_t order[T_END + 1];
  tool_order(is_python, order);
  kstate_t before;
  kernel_state(pid, &before);
  for (size_t i = 0; order[i] != T_END; i++) {
    if (order[i] == T_KERNEL)
      return kernel_view(pid, out) == 0 ? 0 : kill(pid, 0) != 0 ? -ESRCH
                                                                : -ENODATA;
    if (dr_mono_ms() >= deadline) {
      note(out, "no time left for %s%s", tool_names[order[i]], "");
      continue;
    }
    if (try_tool(order[i], pid, deadline, out) == 0) {
      refine(pid, &before, out);
      dr_stack_describe(out);
      return 0;
    }
  }
  return -ENODATA;
}

int dr_stacks_collect(pid_t pid, int is_python, int timeout_ms,
                      dr_stack_t *out) {
  return collect_one(pid, is_python,
                     dr_mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0),
                     out);
}

typedef struct {
  const dr_stack_req_t *req;
  uint64_t deadline;
  dr_stack_t *out;
  int rc;
  int started;
} job_t;

static void *job_main(void *arg) {
  job_t *j = arg;
  j->rc = collect_one(j->req->pid, j->req->is_python, j->deadline, j->out);
  return NULL;
}

size_t dr_stacks_collect_all(const dr_stack_req_t *reqs, size_t n,
                             int timeout_ms, dr_stack_t *out) {
  uint64_t deadline = dr_mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
  job_t *jobs = calloc(n > 0 ? n : 1, sizeof(*jobs));
  pthread_t *th = calloc(n > 0 ? n : 1, sizeof(*th));
  size_t got = 0;
  if (jobs == NULL || th == NULL) {
    for (size_t i = 0; i < n; i++)
      got += collect_one(reqs[i].pid, reqs[i].is_python, deadline,
                         &out[i]) == 0;
    free(jobs);
    free(th);
    return got;
  }
  /* One thread per process, so that one slow tool does not hold up the
   * others; where a thread cannot start, its process is done here. */
  for (size_t i = 0; i < n; i++) {
    jobs[i] = (job_t){&reqs[i], deadline, &out[i], -ENODATA, 0};
    if (pthread_create(&th[i], NULL, job_main, &jobs[i]) == 0)
      jobs[i].started = 1;
    else
      job_main(&jobs[i]);
  }
  for (size_t i = 0; i < n; i++) {
    if (jobs[i].started)
      pthread_join(th[i], NULL);
    got += jobs[i].rc == 0;
  }
  free(jobs);
  free(th);
  return got;
}

void dr_stack_free(dr_stack_t *s) {
  if (s == NULL)
    return;
  free(s->text);
  s->text = NULL;
}
