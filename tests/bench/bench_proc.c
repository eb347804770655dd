/* Child processes of the benchmarks that start ddprun; see bench_proc.h. */
#include "bench_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_stats.h"
#include "errors.h"

volatile sig_atomic_t bench_stop_requested;

void bench_describe_status(int status, char *out, size_t out_len) {
  if (WIFEXITED(status))
    snprintf(out, out_len, "exited with code %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(out, out_len, "killed by signal %s%s",
             sigabbrev_np(WTERMSIG(status)) != NULL
                 ? sigabbrev_np(WTERMSIG(status))
                 : "?",
             WCOREDUMP(status) ? " (core dumped)" : "");
  else
    snprintf(out, out_len, "wait status 0x%x", (unsigned)status);
}

static void on_stop_signal(int sig) {
  (void)sig;
  bench_stop_requested = 1;
}

void bench_install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, NULL);
}

int bench_pidfd_open(pid_t pid) {
  return (int)syscall(SYS_pidfd_open, pid, 0);
}

int bench_child_fork(bench_child_t *c, char *const argv[], char *err,
                     size_t err_len) {
  int p[2];
  c->pid = 0;
  c->pidfd = -1;
  c->exec_fd = -1;
  c->path = argv[0];
  if (pipe2(p, O_CLOEXEC) != 0) {
    int e = errno;
    snprintf(err, err_len, "pipe2() failed (%d: %s)", e, strerror(e));
    return -e;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    snprintf(err, err_len, "fork() of %s failed (%d: %s)", c->name, e,
             strerror(e));
    close(p[0]);
    close(p[1]);
    return -e;
  }
  if (pid == 0) {
    close(p[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    /* bench_install_signals ignores SIGPIPE, which exec would keep. */
    signal(SIGPIPE, SIG_DFL);
    dup2(c->out_fd, STDOUT_FILENO);
    dup2(c->out_fd, STDERR_FILENO);
    execv(argv[0], argv);
    int e = errno;
    (void)!write(p[1], &e, sizeof(e));
    _exit(127);
  }
  close(p[1]);
  c->pid = pid;
  c->exec_fd = p[0];
  return 0;
}

static void reap_blocking(bench_child_t *c) {
  if (c->pid <= 0)
    return;
  while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR)
    ;
  c->reaped_ns = bench_now_ns();
  c->pid = 0;
  if (c->pidfd >= 0)
    close(c->pidfd);
  c->pidfd = -1;
}

int bench_child_confirm(bench_child_t *c, char *err, size_t err_len) {
  int exec_err = 0;
  ssize_t n;
  do
    n = read(c->exec_fd, &exec_err, sizeof(exec_err));
  while (n < 0 && errno == EINTR);
  close(c->exec_fd);
  c->exec_fd = -1;
  if (n == (ssize_t)sizeof(exec_err)) {
    snprintf(err, err_len, "cannot execute %s '%.200s' (%d: %s)", c->name,
             c->path, exec_err, strerror(exec_err));
    reap_blocking(c);
    return -exec_err;
  }
  c->pidfd = bench_pidfd_open(c->pid);
  if (c->pidfd < 0) {
    int e = errno;
    snprintf(err, err_len, "pidfd_open() of %s (pid %d) failed (%d: %s)",
             c->name, (int)c->pid, e, strerror(e));
    return -e;
  }
  return 0;
}

int bench_child_start(bench_child_t *c, char *const argv[], char *err,
                      size_t err_len) {
  int rc = bench_child_fork(c, argv, err, err_len);
  return rc != 0 ? rc : bench_child_confirm(c, err, err_len);
}

/* One poll() of the pidfds fds[0..n) (-1 entries skipped) with its
 * revents in pfd[0..n): 1, or 0 when none is left open, -ETIMEDOUT at
 * deadline_ns, -EINTR on SIGINT/SIGTERM, -errno. */
static int poll_pidfds(const int *fds, size_t n, int64_t deadline_ns,
                       struct pollfd *pfd) {
  size_t open = 0;
  for (size_t i = 0; i < n; i++) {
    pfd[i] = (struct pollfd){fds[i], POLLIN, 0};
    open += fds[i] >= 0;
  }
  if (open == 0)
    return 0;
  int64_t left = deadline_ns - bench_now_ns();
  if (left <= 0 || bench_stop_requested)
    return bench_stop_requested ? -EINTR : -ETIMEDOUT;
  if (poll(pfd, (nfds_t)n, (int)(left / 1000000) + 1) < 0 && errno != EINTR)
    return -errno;
  return 1;
}

int bench_children_wait(bench_child_t *cs, size_t n, int64_t deadline_ns) {
  if (n > 8)
    return -EINVAL;
  for (;;) {
    int fds[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    struct pollfd pfd[8];
    for (size_t i = 0; i < n; i++)
      fds[i] = cs[i].pid > 0 ? cs[i].pidfd : -1;
    int rc = poll_pidfds(fds, n, deadline_ns, pfd);
    if (rc <= 0)
      return rc;
    int64_t now = bench_now_ns();
    for (size_t i = 0; i < n; i++) {
      bench_child_t *c = &cs[i];
      if (fds[i] >= 0 && pfd[i].revents != 0 &&
          waitpid(c->pid, &c->status, WNOHANG) == c->pid) {
        c->reaped_ns = now;
        c->pid = 0;
        close(c->pidfd);
        c->pidfd = -1;
      }
    }
  }
}

int bench_pidfds_wait(int *fds, size_t n, int64_t deadline_ns,
                      int64_t *last_ns) {
  if (n > BENCH_MAX_PIDFDS)
    return -EINVAL;
  struct pollfd pfd[BENCH_MAX_PIDFDS];
  for (;;) {
    int rc = poll_pidfds(fds, n, deadline_ns, pfd);
    if (rc <= 0)
      return rc;
    int64_t now = bench_now_ns();
    for (size_t i = 0; i < n; i++)
      if (fds[i] >= 0 && pfd[i].revents != 0) {
        close(fds[i]);
        fds[i] = -1;
        *last_ns = now;
      }
  }
}

void bench_pidfds_close(int *fds, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (fds[i] >= 0) {
      close(fds[i]);
      fds[i] = -1;
    }
}

void bench_children_stop(bench_child_t *cs, size_t n, int grace_ms) {
  for (size_t i = 0; i < n; i++) {
    if (cs[i].exec_fd >= 0) {
      close(cs[i].exec_fd);
      cs[i].exec_fd = -1;
    }
    if (cs[i].pid > 0) {
      kill(cs[i].pid, SIGTERM);
      kill(cs[i].pid, SIGCONT);
    }
  }
  /* A child without a pidfd (fork not confirmed) is reaped below. */
  bench_children_wait(cs, n, bench_now_ns() + (int64_t)grace_ms * 1000000);
  for (size_t i = 0; i < n; i++) {
    if (cs[i].pid > 0 && waitpid(cs[i].pid, &cs[i].status, WNOHANG) == 0) {
      kill(cs[i].pid, SIGKILL);
      reap_blocking(&cs[i]);
    }
    cs[i].pid = 0;
    if (cs[i].pidfd >= 0)
      close(cs[i].pidfd);
    cs[i].pidfd = -1;
  }
}

int bench_children_finish(bench_child_t *cs, size_t n, int64_t deadline_ns,
                          char *err, size_t err_len) {
  int rc = bench_children_wait(cs, n, deadline_ns);
  if (rc == 0)
    return 0;
  const char *name = "?";
  for (size_t i = 0; i < n; i++)
    if (cs[i].pid > 0) {
      name = cs[i].name;
      break;
    }
  snprintf(err, err_len, "%s did not exit in time (%s)", name,
           rc == -EINTR      ? "interrupted"
           : rc == -ETIMEDOUT ? "timed out"
                              : strerror(-rc));
  bench_children_stop(cs, n, BENCH_STOP_GRACE_MS);
  return rc;
}

int bench_child_check(const bench_child_t *c, int code, char *err,
                      size_t err_len) {
  if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == code)
    return 0;
  char how[64];
  bench_describe_status(c->status, how, sizeof(how));
  if (code == 0)
    snprintf(err, err_len, "%s %s", c->name, how);
  else
    snprintf(err, err_len, "%s %s, not with code %d", c->name, how, code);
  return DR_EREMOTE;
}

void bench_show_output(const char *prog, const char *name, int fd) {
  char buf[4096];
  off_t end = lseek(fd, 0, SEEK_END);
  if (end <= 0)
    return;
  off_t from = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
  if (n <= 0)
    return;
  buf[n] = '\0';
  fprintf(stderr, "%s: --- output of %s%s ---\n%s%s", prog, name,
          from > 0 ? " (tail)" : "", buf, buf[n - 1] == '\n' ? "" : "\n");
}

