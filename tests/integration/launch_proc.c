/* The launch harness' processes: ddprun started with a cleaned
 * environment and its output in files, waited for through pidfds, its
 * output read and waited for, and its exit asserted. See
 * launch_harness.h. */
#include "launch_harness.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_internal.h"
#include "launch_internal.h"

#if !defined(DR_DDPRUN_PATH) || !defined(DR_PROBE_PATH)
#error "DR_DDPRUN_PATH and DR_PROBE_PATH must name the binaries under test"
#endif

extern char **environ;

#define DR_L_READ_MAX (64u << 20)

const char *dr_l_ddprun_path(void) { return DR_DDPRUN_PATH; }
const char *dr_l_probe_path(void) { return DR_PROBE_PATH; }

/* ---- files ------------------------------------------------------------- */

/* Reads a whole file; NULL when it cannot be opened. Caller frees. */
static char *slurp(const char *path, size_t *n_out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf != NULL) {
    if (cap - n < 2) {
      char *nb = cap < DR_L_READ_MAX ? realloc(buf, cap * 2) : NULL;
      if (nb == NULL)
        break;
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  close(fd);
  if (buf != NULL)
    buf[n] = '\0';
  if (n_out != NULL)
    *n_out = n;
  return buf;
}

static size_t count_of(const char *hay, const char *needle) {
  size_t c = 0, len = strlen(needle);
  for (const char *p = strstr(hay, needle); p != NULL;
       p = strstr(p + len, needle))
    c++;
  return c;
}

size_t dr_l_count_lines(const char *s) {
  size_t n = 0;
  const char *p = s;
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
    if (len > 0)
      n++;
    p += len;
    if (*p == '\n')
      p++;
  }
  return n;
}

/* ---- processes --------------------------------------------------------- */

void dr__l_reap(dr_l_proc_t *p) {
  int st = 0;
  pid_t r;
  do
    r = waitpid(p->pid, &st, 0);
  while (r < 0 && errno == EINTR);
  p->reaped = 1;
  p->status = r == p->pid ? st : 0;
  p->t_end = dr_h_now_ms();
}

int dr_l_wait_all(dr_l_proc_t *const *p, size_t n, int timeout_ms) {
  double deadline = dr_h_now_ms() + timeout_ms;
  for (;;) {
    struct pollfd pfd[DR_L_MAX_PROCS];
    dr_l_proc_t *who[DR_L_MAX_PROCS];
    size_t k = 0;
    for (size_t i = 0; i < n && k < DR_L_MAX_PROCS; i++) {
      if (p[i]->reaped)
        continue;
      pfd[k].fd = p[i]->pidfd;
      pfd[k].events = POLLIN;
      pfd[k].revents = 0;
      who[k++] = p[i];
    }
    if (k == 0)
      return 0;
    int left = dr__h_ms_left(deadline);
    int r = poll(pfd, k, left);
    if (r < 0 && errno != EINTR)
      return -errno;
    for (size_t i = 0; r > 0 && i < k; i++)
      if (pfd[i].revents != 0)
        dr__l_reap(who[i]);
    if (r == 0 && left == 0)
      return -ETIMEDOUT;
  }
}

int dr_l_wait(dr_l_proc_t *p, int timeout_ms) {
  return dr_l_wait_all(&p, 1, timeout_ms);
}

int dr_l_code(const dr_l_proc_t *p) {
  if (WIFEXITED(p->status))
    return WEXITSTATUS(p->status);
  if (WIFSIGNALED(p->status))
    return 128 + WTERMSIG(p->status);
  return -1;
}

double dr_l_elapsed_ms(const dr_l_proc_t *p) { return p->t_end - p->t_start; }

const char *dr_l_out(dr_l_proc_t *p) {
  free(p->out);
  p->out = slurp(p->out_path, NULL);
  if (p->out == NULL)
    p->out = strdup("");
  return p->out != NULL ? p->out : "";
}

const char *dr_l_err(dr_l_proc_t *p) {
  free(p->err);
  p->err = slurp(p->err_path, NULL);
  if (p->err == NULL)
    p->err = strdup("");
  return p->err != NULL ? p->err : "";
}

int dr_l_wait_output(dr_l_proc_t *p, int stream, const char *needle,
                     size_t count, int timeout_ms) {
  const char *path = stream == 2 ? p->err_path : p->out_path;
  double deadline = dr_h_now_ms() + timeout_ms;
  int ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (ino < 0 || inotify_add_watch(ino, path, IN_MODIFY | IN_CLOSE_WRITE) < 0) {
    int e = -errno;
    if (ino >= 0)
      close(ino);
    return e;
  }
  int rc;
  for (;;) {
    /* The watch exists before this read, so a write after it wakes us. */
    char *text = slurp(path, NULL);
    size_t have = text != NULL ? count_of(text, needle) : 0;
    free(text);
    if (have >= count) {
      rc = 0;
      break;
    }
    if (p->reaped) {
      rc = -ECHILD;
      break;
    }
    int left = dr__h_ms_left(deadline);
    if (left == 0) {
      rc = -ETIMEDOUT;
      break;
    }
    struct pollfd pfd[2] = {{ino, POLLIN, 0}, {p->pidfd, POLLIN, 0}};
    int r = poll(pfd, 2, left);
    if (r > 0 && (pfd[0].revents & POLLIN)) {
      char ev[4096];
      while (read(ino, ev, sizeof(ev)) > 0) {
      }
    }
    if (r > 0 && pfd[1].revents != 0)
      dr__l_reap(p); /* one more look at the output, then -ECHILD */
  }
  close(ino);
  return rc;
}

static void dump_tail(const char *what, const char *path, size_t max_bytes) {
  size_t n = 0;
  char *text = slurp(path, &n);
  if (text == NULL)
    return;
  const char *start = text;
  if (n > max_bytes) {
    start = text + n - max_bytes;
    const char *nl = strchr(start, '\n');
    if (nl != NULL)
      start = nl + 1;
  }
  fprintf(stderr, "---- %s %s (%zu bytes%s) ----\n%s%s---- end ----\n", what,
          path, n, start != text ? ", tail" : "", start,
          n > 0 && text[n - 1] != '\n' ? "\n" : "");
  free(text);
}

void dr_l_dump(dr_l_proc_t *p) {
  char why[80] = "still running";
  if (p->reaped)
    dr_h_status_str(p->status, why, sizeof(why));
  fprintf(stderr, "==== %s (pid %d): %s ====\n", p->name, (int)p->pid, why);
  dump_tail("stdout", p->out_path, 3000);
  dump_tail("stderr", p->err_path, 6000);
}

void dr_l_expect_exit(dr_l_proc_t *p, int code, int timeout_ms) {
  if (dr_l_wait(p, timeout_ms) != 0)
    fail_msg("%s still running after %d ms (expected exit code %d)", p->name,
             timeout_ms, code);
  if (dr_l_code(p) != code) {
    char why[80];
    fail_msg("%s %s, expected exit code %d", p->name,
             dr_h_status_str(p->status, why, sizeof(why)), code);
  }
}

/* 1 when a variable of the test's environment must not reach ddprun: the
 * options (PET_*), ddprun's and torchelastic's own, and the contract that
 * ddprun itself sets, so that what a probe prints comes from ddprun. */
static int env_dropped(const char *entry) {
  static const char *const prefixes[] = {"PET_", "DDPRUN_", "TORCHELASTIC_"};
  static const char *const names[] = {
      "RANK",       "LOCAL_RANK",       "WORLD_SIZE",  "LOCAL_WORLD_SIZE",
      "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",   "ROLE_WORLD_SIZE",
      "ROLE_NAME",  "MASTER_ADDR",      "MASTER_PORT", "OMP_NUM_THREADS"};
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
    if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0)
      return 1;
  const char *eq = strchr(entry, '=');
  size_t klen = eq != NULL ? (size_t)(eq - entry) : strlen(entry);
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strlen(names[i]) == klen && strncmp(entry, names[i], klen) == 0)
      return 1;
  return 0;
}

static size_t count(const char *const *v) {
  size_t n = 0;
  while (v != NULL && v[n] != NULL)
    n++;
  return n;
}

/* Forks and execs argv with envp, stdout and stderr to the given files.
 * An exec failure is reported here, through a close-on-exec pipe. */
static int spawn(char **argv, char **envp, int out_fd, int err_fd, pid_t *pid) {
  int rep[2];
  if (pipe2(rep, O_CLOEXEC) != 0)
    return -errno;
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    int e = -errno;
    close(rep[0]);
    close(rep[1]);
    return e;
  }
  pid_t parent = getpid();
  pid_t p = fork();
  if (p < 0) {
    int e = -errno;
    close(rep[0]);
    close(rep[1]);
    close(null_fd);
    return e;
  }
  if (p == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL); /* SIG_IGN would survive exec */
    /* ddprun must not outlive a test process that is killed; its workers
     * then die with it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    if (dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
      _exit(127);
    execve(argv[0], argv, envp);
    int e = errno;
    ssize_t w = write(rep[1], &e, sizeof(e));
    (void)w;
    _exit(127);
  }
  close(rep[1]);
  close(null_fd);
  int e = 0;
  ssize_t r;
  do
    r = read(rep[0], &e, sizeof(e));
  while (r < 0 && errno == EINTR);
  close(rep[0]);
  if (r == (ssize_t)sizeof(e)) {
    while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {
    }
    return -e;
  }
  *pid = p;
  return 0;
}

dr_l_proc_t *dr_l_ddprun(dr_l_fixture_t *fx, const char *name,
                         const char *const *args, const char *const *env) {
  assert_true(fx->n_procs < DR_L_MAX_PROCS);
  dr_l_proc_t *p = calloc(1, sizeof(*p));
  assert_non_null(p);
  p->pidfd = -1;
  snprintf(p->name, sizeof(p->name), "%s", name);
  snprintf(p->out_path, sizeof(p->out_path), "%s/%s.out", fx->dir, name);
  snprintf(p->err_path, sizeof(p->err_path), "%s/%s.err", fx->dir, name);

  size_t n_args = count(args), n_env = count((const char *const *)environ);
  char **argv = calloc(n_args + 2, sizeof(*argv));
  char **envp = calloc(n_env + count(env) + 1, sizeof(*envp));
  assert_non_null(argv);
  assert_non_null(envp);
  argv[0] = (char *)DR_DDPRUN_PATH;
  for (size_t i = 0; i < n_args; i++)
    argv[i + 1] = (char *)args[i];
  size_t e = 0;
  for (size_t i = 0; i < n_env; i++)
    if (!env_dropped(environ[i]))
      envp[e++] = environ[i];
  for (size_t i = 0; env != NULL && env[i] != NULL; i++)
    envp[e++] = (char *)env[i];

  int out_fd =
      open(p->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int err_fd =
      open(p->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out_fd < 0 || err_fd < 0)
    fail_msg("cannot create %s or %s: %s", p->out_path, p->err_path,
             strerror(errno));
  p->t_start = dr_h_now_ms();
  int rc = spawn(argv, envp, out_fd, err_fd, &p->pid);
  close(out_fd);
  close(err_fd);
  free(argv);
  free(envp);
  if (rc != 0) {
    free(p);
    fail_msg("cannot start %s: %s", DR_DDPRUN_PATH, strerror(-rc));
  }
  p->pidfd = dr__h_pidfd_open(p->pid);
  if (p->pidfd < 0) {
    int err = errno;
    pid_t pid = p->pid;
    kill(pid, SIGKILL);
    dr__l_reap(p);
    free(p);
    fail_msg("pidfd_open(%d) failed: %s", (int)pid, strerror(err));
  }
  fx->procs[fx->n_procs++] = p;
  return p;
}

void dr__l_proc_free(dr_l_proc_t *p) {
  if (p->pidfd >= 0)
    close(p->pidfd);
  free(p->out);
  free(p->err);
  free(p);
}
