/* Start and stop of ddprun-rdzv for the benchmarks; see bench_server.h. */
#include "bench_server.h"

#include "errors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Interval between looks at the port file; the server writes it once. */
#define PORT_POLL_NS 2000000

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

  /* Results go to stdout; the server's chatter belongs on stderr. */
  bench_child_t c = {.out_fd = STDERR_FILENO, .name = "ddprun-rdzv"};
  rc = bench_child_start(&c, (char *const *)argv, errbuf, errbuf_len);
  s->pid = c.pid;
  if (c.pidfd >= 0)
    close(c.pidfd); /* reaped by pid, below and in bench_server_stop */
  if (rc != 0) {
    char ignored[16];
    bench_server_stop(s, 0, ignored, sizeof(ignored));
    return rc;
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
    if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
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

int bench_server_open(bench_server_t *s, const char *prog, const char *path,
                      const char *const *extra, int64_t deadline_ns) {
  char err[PATH_MAX + 256];
  bench_install_signals();
  int rc = bench_raise_nofile(NULL);
  if (rc != 0)
    fprintf(stderr, "%s: raising RLIMIT_NOFILE failed (%s)\n", prog,
            dr_strerror(rc));
  rc = bench_server_start(s, path, extra, deadline_ns, err, sizeof(err));
  if (rc != 0)
    fprintf(stderr, "%s: %s\n", prog, err);
  return rc;
}
