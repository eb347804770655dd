/* Child processes and scratch files of the launch benchmarks; see
 * bench_proc.h. */
#include "bench_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

#include "bench_server.h"
#include "errors.h"

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

int bench_children_wait(bench_child_t *cs, size_t n, int64_t deadline_ns) {
  if (n > 8)
    return -EINVAL;
  for (;;) {
    struct pollfd pfd[8];
    size_t idx[8];
    nfds_t k = 0;
    for (size_t i = 0; i < n && k < 8; i++)
      if (cs[i].pid > 0 && cs[i].pidfd >= 0) {
        pfd[k].fd = cs[i].pidfd;
        pfd[k].events = POLLIN;
        pfd[k].revents = 0;
        idx[k++] = i;
      }
    if (k == 0)
      return 0;
    int64_t left = deadline_ns - bench_now_ns();
    if (left <= 0 || bench_stop_requested)
      return bench_stop_requested ? -EINTR : -ETIMEDOUT;
    int r = poll(pfd, k, (int)(left / 1000000) + 1);
    if (r < 0 && errno != EINTR)
      return -errno;
    int64_t now = bench_now_ns();
    for (nfds_t j = 0; r > 0 && j < k; j++) {
      bench_child_t *c = &cs[idx[j]];
      if (pfd[j].revents != 0 &&
          waitpid(c->pid, &c->status, WNOHANG) == c->pid) {
        c->reaped_ns = now;
        c->pid = 0;
        close(c->pidfd);
        c->pidfd = -1;
      }
    }
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

int bench_scratch_open(bench_scratch_t *s, const char *prog, char *err,
                       size_t err_len) {
  memset(s, 0, sizeof(*s));
  s->out_fd[0] = s->out_fd[1] = -1;
  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || tmp[0] == '\0')
    tmp = "/tmp";
  if ((size_t)snprintf(s->dir, sizeof(s->dir), "%s/%s.XXXXXX", tmp, prog) >=
      sizeof(s->dir)) {
    snprintf(err, err_len, "TMPDIR %.64s... is too long", tmp);
    s->dir[0] = '\0';
    return -ENAMETOOLONG;
  }
  if (mkdtemp(s->dir) == NULL) {
    int e = errno;
    snprintf(err, err_len, "mkdtemp() in %s failed (%d: %s)", tmp, e,
             strerror(e));
    s->dir[0] = '\0';
    return -e;
  }
  snprintf(s->stamps, sizeof(s->stamps), "%s/stamps", s->dir);
  for (int i = 0; i < 2; i++) {
    snprintf(s->out_path[i], sizeof(s->out_path[i]), "%s/out.%d", s->dir, i);
    s->out_fd[i] = open(s->out_path[i],
                        O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                        0600);
    if (s->out_fd[i] < 0) {
      int e = errno;
      snprintf(err, err_len, "open() of %s failed (%d: %s)", s->out_path[i],
               e, strerror(e));
      return -e;
    }
  }
  return 0;
}

void bench_scratch_close(bench_scratch_t *s) {
  for (int i = 0; i < 2; i++) {
    if (s->out_fd[i] >= 0)
      close(s->out_fd[i]);
    s->out_fd[i] = -1;
    if (s->out_path[i][0] != '\0')
      unlink(s->out_path[i]);
  }
  if (s->stamps[0] != '\0')
    unlink(s->stamps);
  if (s->dir[0] != '\0')
    rmdir(s->dir);
  s->dir[0] = '\0';
}

int bench_scratch_reset(bench_scratch_t *s, int *in) {
  for (int i = 0; i < 2; i++)
    if (ftruncate(s->out_fd[i], 0) != 0)
      return -errno;
  if (in == NULL)
    return unlink(s->stamps) != 0 && errno != ENOENT ? -errno : 0;
  int fd = open(s->stamps, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  close(fd);
  *in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (*in < 0)
    return -errno;
  if (inotify_add_watch(*in, s->stamps, IN_MODIFY) < 0) {
    int e = -errno;
    close(*in);
    *in = -1;
    return e;
  }
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *v, size_t n) {
  qsort(v, n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int bench_default_path(char *dst, const char *name) {
  if (dst[0] != '\0')
    return 0;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n < 0)
    return -errno;
  self[n] = '\0';
  if (name == NULL) {
    memcpy(dst, self, (size_t)n + 1);
    return 0;
  }
  char *slash = strrchr(self, '/');
  if (slash == NULL)
    return DR_EBADARG;
  *slash = '\0';
  if ((size_t)snprintf(dst, PATH_MAX, "%s/%s", self, name) >= PATH_MAX)
    return -ENAMETOOLONG;
  return 0;
}
