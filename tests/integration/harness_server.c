/* The harness' server process: ddprun-rdzv started as a child with its
 * port file watched, waited for through a pidfd, and stopped with
 * escalation, its exit and its log judged. See harness.h. */
#include "harness.h"
#include "harness_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef DR_RDZV_PATH
#error "DR_RDZV_PATH must name the ddprun-rdzv binary"
#endif

extern char **environ;

int dr__h_pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, pid, 0);
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

/* Marks every descriptor from 3 up close-on-exec (async-signal-safe). */
static void cloexec_from_3(void) {
#if defined(SYS_close_range) && defined(CLOSE_RANGE_CLOEXEC)
  if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) == 0)
    return;
#endif
  for (int fd = 3; fd < 4096; fd++)
    fcntl(fd, F_SETFD, FD_CLOEXEC);
}

#define DR_H_PORT_WAIT_MS 15000

struct dr_h_server {
  pid_t pid;
  int pidfd; /* -1 where pidfd_open() is unavailable */
  int reaped;
  int status; /* waitpid() status once reaped */
  int sent_kill;
  uint16_t port;
  char run_id[256];
  char port_path[300];
  char log_path[300];
};

const char *dr_h_status_str(int status, char *buf, size_t n_bytes) {
  if (WIFEXITED(status)) {
    snprintf(buf, n_bytes, "exited with code %d", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    const char *name = sigabbrev_np(WTERMSIG(status));
    snprintf(buf, n_bytes, "killed by signal SIG%s%s",
             name != NULL ? name : "?",
             WCOREDUMP(status) ? " (core dumped)" : "");
  } else {
    snprintf(buf, n_bytes, "status 0x%x", (unsigned)status);
  }
  return buf;
}

static int has_arg(const char *const *args, const char *name) {
  for (size_t i = 0; args != NULL && args[i] != NULL; i++)
    if (strcmp(args[i], name) == 0)
      return 1;
  return 0;
}

static const char *arg_value(const char *const *args, const char *name) {
  for (size_t i = 0; args != NULL && args[i] != NULL; i++)
    if (strcmp(args[i], name) == 0)
      return args[i + 1];
  return NULL;
}

static size_t count(const char *const *v) {
  size_t n = 0;
  while (v != NULL && v[n] != NULL)
    n++;
  return n;
}

/* 1 when the entry "K=V" of environ names the same variable as one in
 * extra, or is DDPRUN_SECRET (which a test passes only on purpose). */
static int env_overridden(const char *entry, const char *const *extra) {
  if (strncmp(entry, "DDPRUN_SECRET=", 14) == 0)
    return 1;
  const char *eq = strchr(entry, '=');
  size_t klen = eq != NULL ? (size_t)(eq - entry) : strlen(entry);
  for (size_t i = 0; extra != NULL && extra[i] != NULL; i++)
    if (strncmp(extra[i], entry, klen) == 0 && extra[i][klen] == '=')
      return 1;
  return 0;
}

/* Reads "PORT\n" from path: 1 and *port when complete, 0 otherwise. */
static int read_port_file(const char *path, uint16_t *port) {
  char buf[32];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 1 || buf[n - 1] != '\n')
    return 0;
  buf[n] = '\0';
  char *end = NULL;
  unsigned long v = strtoul(buf, &end, 10);
  if (end != buf + n - 1 || v == 0 || v > 65535)
    return 0;
  *port = (uint16_t)v;
  return 1;
}

static void reap(dr_h_server_t *s) {
  int st;
  pid_t r;
  do
    r = waitpid(s->pid, &st, 0);
  while (r < 0 && errno == EINTR);
  s->reaped = 1;
  s->status = r == s->pid ? st : 0;
}

int dr_h_server_wait(dr_h_server_t *s, int timeout_ms, int *status) {
  double deadline = dr_h_now_ms() + timeout_ms;
  while (!s->reaped) {
    if (s->pidfd >= 0) {
      struct pollfd p = {s->pidfd, POLLIN, 0};
      int r = poll(&p, 1, dr__h_ms_left(deadline));
      if (r < 0 && errno == EINTR)
        continue;
      if (r > 0) {
        reap(s);
        break;
      }
    } else {
      int st;
      pid_t r = waitpid(s->pid, &st, WNOHANG);
      if (r == s->pid) {
        s->reaped = 1;
        s->status = st;
        break;
      }
      if (dr__h_ms_left(deadline) > 0)
        dr_h_sleep_ms(2);
    }
    if (dr__h_ms_left(deadline) == 0 && !s->reaped)
      return -ETIMEDOUT;
  }
  if (status != NULL)
    *status = s->status;
  return 0;
}

static void server_free(dr_h_server_t *s) {
  if (s->pidfd >= 0)
    close(s->pidfd);
  free(s);
}

/* Builds argv and envp for the child; everything is allocated before
 * fork() because the child of a threaded process may only call
 * async-signal-safe functions. */
static int build_exec(dr_h_server_t *s, const char *const *args,
                      const char *const *env, char ***argv_out,
                      char ***envp_out) {
  size_t n_args = count(args);
  char **argv = calloc(n_args + 16, sizeof(*argv));
  size_t n_env = 0;
  while (environ[n_env] != NULL)
    n_env++;
  char **envp = calloc(n_env + count(env) + 1, sizeof(*envp));
  if (argv == NULL || envp == NULL) {
    free(argv);
    free(envp);
    return -ENOMEM;
  }
  size_t a = 0;
  argv[a++] = (char *)DR_RDZV_PATH;
  argv[a++] = (char *)"--host";
  argv[a++] = (char *)DR_H_ADDR;
  argv[a++] = (char *)"--port";
  argv[a++] = (char *)"0";
  argv[a++] = (char *)"--port-file";
  argv[a++] = s->port_path;
  if (!has_arg(args, "--rdzv-id")) {
    argv[a++] = (char *)"--rdzv-id";
    argv[a++] = (char *)DR_H_RUN_ID;
  }
  if (!has_arg(args, "--log-level")) {
    argv[a++] = (char *)"--log-level";
    argv[a++] = (char *)"info";
  }
  /* A fixed-size job that loses a node stops at once, as these tests of
   * other rules expect; the wait for a replacement has its own tests. */
  if (!has_arg(args, "--replacement-timeout")) {
    argv[a++] = (char *)"--replacement-timeout";
    argv[a++] = (char *)"0";
  }
  for (size_t i = 0; i < n_args; i++)
    argv[a++] = (char *)args[i];
  argv[a] = NULL;

  size_t e = 0;
  for (size_t i = 0; i < n_env; i++)
    if (!env_overridden(environ[i], env))
      envp[e++] = environ[i];
  for (size_t i = 0; env != NULL && env[i] != NULL; i++)
    envp[e++] = (char *)env[i];
  envp[e] = NULL;
  *argv_out = argv;
  *envp_out = envp;
  return 0;
}

static pid_t spawn(char **argv, char **envp, int log_fd, int null_fd,
                   int *exec_err) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0)
    return -errno;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = -errno;
    close(pfd[0]);
    close(pfd[1]);
    return e;
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL);
    /* The server must not outlive a test process that is killed. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    /* No descriptor of the test (a client socket) may stay open in the
     * server: it would keep that connection alive after the test closes
     * it. The exec-error pipe is close-on-exec already. */
    cloexec_from_3();
    execve(argv[0], argv, envp);
    int e = errno;
    ssize_t w = write(pfd[1], &e, sizeof(e));
    (void)w;
    _exit(127);
  }
  close(pfd[1]);
  int e = 0;
  ssize_t r;
  do
    r = read(pfd[0], &e, sizeof(e));
  while (r < 0 && errno == EINTR);
  close(pfd[0]);
  *exec_err = r == (ssize_t)sizeof(e) ? e : 0;
  return pid;
}

int dr_h_server_start(const char *dir, const char *const *args,
                      const char *const *env, dr_h_server_t **out) {
  *out = NULL;
  dr_h_server_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return -ENOMEM;
  s->pidfd = -1;
  const char *rid = arg_value(args, "--rdzv-id");
  snprintf(s->run_id, sizeof(s->run_id), "%s", rid != NULL ? rid : DR_H_RUN_ID);
  snprintf(s->port_path, sizeof(s->port_path), "%s/port", dir);
  snprintf(s->log_path, sizeof(s->log_path), "%s/server.log", dir);
  unlink(s->port_path);

  char **argv = NULL, **envp = NULL;
  int rc = build_exec(s, args, env, &argv, &envp);
  if (rc != 0) {
    free(s);
    return rc;
  }
  int log_fd = open(s->log_path,
                    O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (log_fd < 0 || null_fd < 0 || ino < 0 ||
      inotify_add_watch(ino, dir, IN_CLOSE_WRITE | IN_MOVED_TO) < 0) {
    rc = -errno;
    fprintf(stderr, "harness: preparing %s failed (%s)\n", dir, strerror(-rc));
    goto out;
  }
  int exec_err = 0;
  pid_t pid = spawn(argv, envp, log_fd, null_fd, &exec_err);
  if (pid < 0) {
    rc = pid;
    fprintf(stderr, "harness: fork() failed (%s)\n", strerror(-rc));
    goto out;
  }
  s->pid = pid;
  s->pidfd = dr__h_pidfd_open(pid);
  if (exec_err != 0) {
    reap(s);
    rc = -exec_err;
    fprintf(stderr, "harness: execve(%s) failed (%d: %s)\n", DR_RDZV_PATH,
            exec_err, strerror(exec_err));
    goto out;
  }

  double deadline = dr_h_now_ms() + DR_H_PORT_WAIT_MS;
  for (;;) {
    if (read_port_file(s->port_path, &s->port)) {
      rc = 0;
      break;
    }
    int st;
    if (dr_h_server_wait(s, 0, &st) == 0) {
      char why[64];
      fprintf(stderr, "harness: ddprun-rdzv %s before writing %s\n",
              dr_h_status_str(st, why, sizeof(why)), s->port_path);
      dr_h_log_dump(s->log_path, 40);
      rc = -ECHILD;
      break;
    }
    if (dr__h_ms_left(deadline) == 0) {
      fprintf(stderr, "harness: no port file %s within %d ms\n", s->port_path,
              DR_H_PORT_WAIT_MS);
      dr_h_log_dump(s->log_path, 40);
      rc = -ETIMEDOUT;
      break;
    }
    struct pollfd p[2] = {{ino, POLLIN, 0}, {s->pidfd, POLLIN, 0}};
    /* Without a pidfd an early exit is noticed within 50 ms. */
    int wait = s->pidfd >= 0 ? dr__h_ms_left(deadline) : 50;
    if (poll(p, s->pidfd >= 0 ? 2 : 1, wait) > 0 && (p[0].revents & POLLIN)) {
      char ev[4096];
      while (read(ino, ev, sizeof(ev)) > 0) {
      }
    }
  }
  if (rc != 0) {
    if (!s->reaped) {
      kill(s->pid, SIGKILL);
      reap(s);
    }
  }
out:
  if (log_fd >= 0)
    close(log_fd);
  if (null_fd >= 0)
    close(null_fd);
  if (ino >= 0)
    close(ino);
  free(argv);
  free(envp);
  if (rc != 0) {
    server_free(s);
    return rc;
  }
  *out = s;
  return 0;
}

uint16_t dr_h_server_port(const dr_h_server_t *s) { return s->port; }
const char *dr_h_server_run_id(const dr_h_server_t *s) { return s->run_id; }
pid_t dr_h_server_pid(const dr_h_server_t *s) { return s->pid; }
const char *dr_h_server_log_path(const dr_h_server_t *s) { return s->log_path; }

int dr_h_server_stop(dr_h_server_t **sp, int grace_ms) {
  dr_h_server_t *s = *sp;
  if (s == NULL)
    return 0;
  *sp = NULL;
  int bad = 0;
  char why[64];
  if (!s->reaped) {
    kill(s->pid, SIGTERM);
    if (dr_h_server_wait(s, grace_ms, NULL) != 0) {
      fprintf(stderr,
              "harness: ddprun-rdzv (pid %d) still running %d ms after "
              "SIGTERM; sending SIGKILL\n",
              (int)s->pid, grace_ms);
      kill(s->pid, SIGKILL);
      s->sent_kill = 1;
      bad = 1;
      if (dr_h_server_wait(s, 10000, NULL) != 0)
        reap(s);
    }
  }
  if (WIFSIGNALED(s->status) && WTERMSIG(s->status) != SIGTERM &&
      !(WTERMSIG(s->status) == SIGKILL && s->sent_kill)) {
    fprintf(stderr, "harness: ddprun-rdzv (pid %d) %s\n", (int)s->pid,
            dr_h_status_str(s->status, why, sizeof(why)));
    bad = 1;
  }
  if (dr__h_log_has(s->log_path, "Sanitizer") ||
      dr__h_log_has(s->log_path, "runtime error:")) {
    fprintf(stderr, "harness: ddprun-rdzv reported a sanitizer error\n");
    bad = 1;
  }
  if (bad)
    dr_h_log_dump(s->log_path, 200);
  server_free(s);
  return bad ? -1 : 0;
}
