#include "bench_server.h"

#include "errors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t bench_stop_requested;

/* Interval between looks at the port file; the server writes it once. */
#define PORT_POLL_NS 2000000

int64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void nap_ns(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  nanosleep(&ts, NULL);
}

int bench_raise_nofile(uint64_t *limit) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return -errno;
  if (rl.rlim_cur != rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
      return -errno;
  }
  if (limit != NULL)
    *limit = (uint64_t)rl.rlim_cur;
  return 0;
}

int bench_default_server_path(char *out, size_t out_len) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n < 0)
    return -errno;
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash == NULL)
    return DR_EBADARG;
  *slash = '\0';
  if ((size_t)snprintf(out, out_len, "%s/ddprun-rdzv", self) >= out_len)
    return -ENAMETOOLONG;
  return 0;
}

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

static void remove_dir(bench_server_t *s) {
  if (s->dir[0] == '\0')
    return;
  DIR *d = opendir(s->dir);
  if (d != NULL) {
    /* The server may leave its temporary port file behind if it died
     * between writing and renaming it. */
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
        unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
  }
  rmdir(s->dir);
  s->dir[0] = '\0';
}

/* Reads the port file: 1 with *port when complete, 0 when not there yet. */
static int read_port_file(const char *path, uint16_t *port) {
  char text[32];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : -errno;
  ssize_t n = read(fd, text, sizeof(text) - 1);
  int err = errno;
  close(fd);
  if (n < 0)
    return -err;
  text[n] = '\0';
  if (n == 0 || text[n - 1] != '\n')
    return 0;
  char *end;
  errno = 0;
  unsigned long v = strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\n' || v == 0 || v > 65535)
    return DR_EBADARG;
  *port = (uint16_t)v;
  return 1;
}

int bench_server_start(bench_server_t *s, const char *path,
                       const char *const *extra, int64_t deadline_ns,
                       char *errbuf, size_t errbuf_len) {
  const char *argv[64];
  size_t argc = 0;
  int exec_pipe[2];
  int rc;

  memset(s, 0, sizeof(*s));
  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || tmp[0] == '\0')
    tmp = "/tmp";
  if ((size_t)snprintf(s->dir, sizeof(s->dir), "%s/ddprun-bench.XXXXXX",
                       tmp) >= sizeof(s->dir) - sizeof("/port")) {
    snprintf(errbuf, errbuf_len, "TMPDIR %.64s... is too long", tmp);
    s->dir[0] = '\0';
    return -ENAMETOOLONG;
  }
  if (mkdtemp(s->dir) == NULL) {
    rc = -errno;
    snprintf(errbuf, errbuf_len, "mkdtemp() in %s failed (%d: %s)", tmp,
             errno, strerror(errno));
    s->dir[0] = '\0';
    return rc;
  }
  if ((size_t)snprintf(s->port_file, sizeof(s->port_file), "%s/port",
                       s->dir) >= sizeof(s->port_file)) {
    remove_dir(s);
    return -ENAMETOOLONG;
  }

  argv[argc++] = path;
  argv[argc++] = "--host";
  argv[argc++] = "127.0.0.1";
  argv[argc++] = "--port";
  argv[argc++] = "0";
  argv[argc++] = "--port-file";
  argv[argc++] = s->port_file;
  argv[argc++] = "--rdzv-id";
  argv[argc++] = "bench";
  for (size_t i = 0; extra != NULL && extra[i] != NULL && argc < 60; i++)
    argv[argc++] = extra[i];
  argv[argc++] = "--log-level";
  argv[argc++] = "warn";
  argv[argc] = NULL;

  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    rc = -errno;
    snprintf(errbuf, errbuf_len, "pipe2() failed (%d: %s)", errno,
             strerror(errno));
    remove_dir(s);
    return rc;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    rc = -errno;
    snprintf(errbuf, errbuf_len, "fork() failed (%d: %s)", errno,
             strerror(errno));
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    remove_dir(s);
    return rc;
  }
  if (pid == 0) {
    int err;
    close(exec_pipe[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    /* Results go to stdout; the server's chatter belongs on stderr. */
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execv(path, (char *const *)argv);
    err = errno;
    (void)!write(exec_pipe[1], &err, sizeof(err));
    _exit(127);
  }
  close(exec_pipe[1]);
  s->pid = pid;

  int exec_err = 0;
  ssize_t n;
  do
    n = read(exec_pipe[0], &exec_err, sizeof(exec_err));
  while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n == (ssize_t)sizeof(exec_err)) {
    snprintf(errbuf, errbuf_len, "execv() of %s failed (%d: %s)", path,
             exec_err, strerror(exec_err));
    waitpid(pid, NULL, 0);
    s->pid = 0;
    remove_dir(s);
    return -exec_err;
  }

  for (;;) {
    uint16_t port = 0;
    rc = read_port_file(s->port_file, &port);
    if (rc == 1) {
      s->port = port;
      return 0;
    }
    if (rc < 0) {
      snprintf(errbuf, errbuf_len, "reading port file %s failed (%s)",
               s->port_file, dr_strerror(rc));
      break;
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      char how[64];
      bench_describe_status(status, how, sizeof(how));
      snprintf(errbuf, errbuf_len,
               "%s %s before writing its port file %s", path, how,
               s->port_file);
      s->pid = 0;
      remove_dir(s);
      return DR_EREMOTE;
    }
    if (bench_stop_requested) {
      snprintf(errbuf, errbuf_len, "interrupted while waiting for %s", path);
      rc = -EINTR;
      break;
    }
    if (bench_now_ns() >= deadline_ns) {
      snprintf(errbuf, errbuf_len,
               "%s did not write its port file %s before the deadline", path,
               s->port_file);
      rc = -ETIMEDOUT;
      break;
    }
    nap_ns(PORT_POLL_NS);
  }
  char ignored[16];
  bench_server_stop(s, 0, ignored, sizeof(ignored));
  return rc;
}

int bench_server_stop(bench_server_t *s, int grace_ms, char *errbuf,
                      size_t errbuf_len) {
  int rc = 0;
  if (s->pid > 0) {
    int status = 0;
    int sent = SIGTERM;
    pid_t got = 0;
    kill(s->pid, SIGTERM);
    int64_t give_up = bench_now_ns() + (int64_t)grace_ms * 1000000;
    while ((got = waitpid(s->pid, &status, WNOHANG)) == 0 &&
           bench_now_ns() < give_up)
      nap_ns(PORT_POLL_NS);
    if (got == 0) {
      sent = SIGKILL;
      kill(s->pid, SIGKILL);
      while ((got = waitpid(s->pid, &status, 0)) < 0 && errno == EINTR)
        ;
    }
    if (got == s->pid && WIFSIGNALED(status) && WTERMSIG(status) != sent &&
        WTERMSIG(status) != SIGTERM) {
      char how[64];
      bench_describe_status(status, how, sizeof(how));
      snprintf(errbuf, errbuf_len, "ddprun-rdzv (pid %d) %s", (int)s->pid,
               how);
      rc = DR_EREMOTE;
    }
    s->pid = 0;
  }
  remove_dir(s);
  return rc;
}
