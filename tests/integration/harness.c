#include "harness.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef DR_RDZV_PATH
#error "DR_RDZV_PATH must name the ddprun-rdzv binary"
#endif

extern char **environ;

/* Through syscall(): the libc wrappers are newer than the kernel calls. */
static int pidfd_open_(pid_t pid) {
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
#define DR_H_LOG_MAX (4u << 20) /* bytes of a log we are ready to read */

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

/* ---- clocks ------------------------------------------------------------ */

double dr_h_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void dr_h_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Milliseconds left until deadline, rounded up so that a poll() does not
 * wake a fraction of a millisecond early and spin. */
static int ms_left(double deadline) {
  double left = deadline - dr_h_now_ms();
  if (left <= 0)
    return 0;
  return left > INT_MAX ? INT_MAX : (int)left + 1;
}

/* ---- the server process ------------------------------------------------- */

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
      int r = poll(&p, 1, ms_left(deadline));
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
      if (ms_left(deadline) > 0)
        dr_h_sleep_ms(2);
    }
    if (ms_left(deadline) == 0 && !s->reaped)
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
  s->pidfd = pidfd_open_(pid);
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
    if (ms_left(deadline) == 0) {
      fprintf(stderr, "harness: no port file %s within %d ms\n", s->port_path,
              DR_H_PORT_WAIT_MS);
      dr_h_log_dump(s->log_path, 40);
      rc = -ETIMEDOUT;
      break;
    }
    struct pollfd p[2] = {{ino, POLLIN, 0}, {s->pidfd, POLLIN, 0}};
    /* Without a pidfd an early exit is noticed within 50 ms. */
    int wait = s->pidfd >= 0 ? ms_left(deadline) : 50;
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

/* Reads a whole log (up to DR_H_LOG_MAX). Caller frees. */
static char *read_log(const char *path, size_t *n_out) {
  *n_out = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap + 1);
  while (buf != NULL) {
    if (n == cap) {
      if (cap >= DR_H_LOG_MAX)
        break;
      char *nb = realloc(buf, cap * 2 + 1);
      if (nb == NULL)
        break;
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  close(fd);
  if (buf != NULL) {
    buf[n] = '\0';
    *n_out = n;
  }
  return buf;
}

static int log_has(const char *path, const char *needle) {
  size_t n;
  char *log = read_log(path, &n);
  int found = log != NULL && memmem(log, n, needle, strlen(needle)) != NULL;
  free(log);
  return found;
}

int dr_h_log_contains(const dr_h_server_t *s, const char *needle,
                      int timeout_ms) {
  double deadline = dr_h_now_ms() + timeout_ms;
  int ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (ino >= 0)
    inotify_add_watch(ino, s->log_path, IN_MODIFY);
  int found;
  while (!(found = log_has(s->log_path, needle)) && ms_left(deadline) > 0) {
    if (ino < 0) {
      dr_h_sleep_ms(5);
      continue;
    }
    struct pollfd p = {ino, POLLIN, 0};
    if (poll(&p, 1, ms_left(deadline)) > 0) {
      char ev[4096];
      while (read(ino, ev, sizeof(ev)) > 0) {
      }
    }
  }
  if (ino >= 0)
    close(ino);
  return found;
}

void dr_h_log_dump(const char *log_path, int max_lines) {
  size_t n;
  char *log = read_log(log_path, &n);
  if (log == NULL)
    return;
  size_t start = n;
  int lines = 0;
  while (start > 0) {
    if (log[start - 1] == '\n' && start != n && ++lines >= max_lines)
      break;
    start--;
  }
  fprintf(stderr, "---- %s (last %d lines) ----\n%s%s---- end ----\n", log_path,
          max_lines, log + start, n > 0 && log[n - 1] != '\n' ? "\n" : "");
  free(log);
}

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
  if (log_has(s->log_path, "Sanitizer") ||
      log_has(s->log_path, "runtime error:")) {
    fprintf(stderr, "harness: ddprun-rdzv reported a sanitizer error\n");
    bad = 1;
  }
  if (bad)
    dr_h_log_dump(s->log_path, 200);
  server_free(s);
  return bad ? -1 : 0;
}

/* ---- raw connections ---------------------------------------------------- */

int dr_h_raw_connect(dr_h_raw_t *r, uint16_t port) {
  r->len = 0;
  r->drop = 0;
  r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r->fd < 0)
    return -errno;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, DR_H_ADDR, &sa.sin_addr);
  int one = 1;
  setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int rc;
  do
    rc = connect(r->fd, (struct sockaddr *)&sa, sizeof(sa));
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    rc = -errno;
    close(r->fd);
    r->fd = -1;
    return rc;
  }
  return 0;
}

int dr_h_raw_send(dr_h_raw_t *r, const void *p, size_t n_bytes) {
  const uint8_t *b = p;
  while (n_bytes > 0) {
    ssize_t w = send(r->fd, b, n_bytes, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -errno;
    b += w;
    n_bytes -= (size_t)w;
  }
  return 0;
}

int dr_h_raw_send_buf(dr_h_raw_t *r, dr_buf_t *b) {
  int rc = b->err != 0 ? b->err : dr_h_raw_send(r, b->data, b->len);
  dr_buf_reset(b);
  return rc;
}

int dr_h_raw_recv(dr_h_raw_t *r, int timeout_ms, dr_msg_t *msg) {
  double deadline = dr_h_now_ms() + timeout_ms;
  if (r->drop > 0) {
    memmove(r->buf, r->buf + r->drop, r->len - r->drop);
    r->len -= r->drop;
    r->drop = 0;
  }
  dr_limits_t lim = dr_limits_default();
  dr_decoder_t d;
  dr_decoder_init(&d, &lim);
  d.authed = 1;
  for (;;) {
    if (r->len > 0) {
      size_t consumed = 0, need = 0;
      int err = 0;
      dr_decode_status_t st =
          dr_decode(&d, r->buf, r->len, msg, &consumed, &need, &err);
      if (st == DR_DECODE_OK) {
        r->drop = consumed;
        return 0;
      }
      if (st == DR_DECODE_ERROR)
        return err;
      if (need > sizeof(r->buf))
        return DR_ETOOBIG;
    }
    struct pollfd p = {r->fd, POLLIN, 0};
    int pr = poll(&p, 1, ms_left(deadline));
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0)
      return -errno;
    if (pr == 0)
      return -ETIMEDOUT;
    ssize_t n = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return DR_ECLOSED;
    if (n < 0)
      return -errno;
    r->len += (size_t)n;
  }
}

int dr_h_raw_wait_closed(dr_h_raw_t *r, int timeout_ms) {
  double deadline = dr_h_now_ms() + timeout_ms;
  uint8_t sink[4096];
  for (;;) {
    struct pollfd p = {r->fd, POLLIN, 0};
    int pr = poll(&p, 1, ms_left(deadline));
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      return -ETIMEDOUT;
    ssize_t n = recv(r->fd, sink, sizeof(sink), 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return 0;
    if (n < 0)
      return -errno;
  }
}

void dr_h_raw_close(dr_h_raw_t *r) {
  if (r->fd >= 0)
    close(r->fd);
  r->fd = -1;
}

/* ---- clients ------------------------------------------------------------ */

int dr_h_client_open(const dr_h_server_t *s, const char *run_id,
                     const char *host, const void *secret, size_t secret_len,
                     dr_client_t **out, char *errbuf, size_t errbuf_len) {
  dr_client_opts_t o;
  memset(&o, 0, sizeof(o));
  o.host = DR_H_ADDR;
  o.port = s->port;
  o.run_id = run_id != NULL ? run_id : s->run_id;
  o.client_host = host;
  o.secret = secret;
  o.secret_len = secret_len;
  o.connect_timeout_ms = 5000;
  o.io_timeout_ms = 10000;
  if (errbuf != NULL && errbuf_len > 0)
    errbuf[0] = '\0';
  return dr_client_open(&o, out, errbuf, errbuf_len);
}

void dr_h_join_fill(dr_join_t *j, const char *run_id, const char *host,
                    const char *addr, uint32_t nproc, uint64_t node_rank,
                    uint32_t master_port_offer, const char *bootstrap_offer) {
  memset(j, 0, sizeof(*j));
  j->run_id = dr_str(run_id);
  j->host = dr_str(host);
  j->addr = dr_str(addr);
  j->nproc = nproc;
  j->node_rank = node_rank;
  j->master_port_offer = master_port_offer;
  j->bootstrap_offer = dr_str(bootstrap_offer);
}

static void copy_bytes(char *dst, size_t cap, dr_bytes_t b) {
  size_t n = b.len < cap - 1 ? b.len : cap - 1;
  memcpy(dst, b.p, n);
  dst[n] = '\0';
}

int dr_h_order_from_msg(const dr_msg_t *m, dr_h_order_t *o) {
  memset(o, 0, sizeof(*o));
  o->t_ms = dr_h_now_ms();
  if (m->type == DR_MSG_RESTART && m->n_fields == 3) {
    o->type = DR_MSG_RESTART;
    o->gen = m->f[0].u;
    o->restart_count = (uint32_t)m->f[1].u;
    copy_bytes(o->reason, sizeof(o->reason), m->f[2].b);
    return 0;
  }
  if (m->type == DR_MSG_STOP && m->n_fields == 2) {
    o->type = DR_MSG_STOP;
    o->exit_code = (int)(int64_t)m->f[0].u;
    copy_bytes(o->reason, sizeof(o->reason), m->f[1].b);
    return 0;
  }
  return DR_EUNEXPECTED;
}

/* Hands out what is queued or readable on a's client without waiting.
 * Returns 0 (with a->order filled when an order came) or an error. */
static int agent_drain(dr_h_agent_t *a) {
  for (;;) {
    dr_msg_t m;
    int rc = dr_client_recv(a->c, 0, &m);
    if (rc == -ETIMEDOUT)
      return 0;
    if (rc != 0)
      return rc;
    if (m.type == DR_MSG_HEARTBEAT) {
      a->server_hbs++;
      continue;
    }
    return dr_h_order_from_msg(&m, &a->order);
  }
}

int dr_h_agents_run(dr_h_agent_t *a, size_t n, int hb_every_ms,
                    int timeout_ms) {
  double deadline = dr_h_now_ms() + timeout_ms;
  struct pollfd p[DR_H_MAX_CLIENTS];
  if (n > DR_H_MAX_CLIENTS)
    return DR_EBADARG;
  for (;;) {
    double now = dr_h_now_ms();
    double next_hb = deadline;
    size_t n_poll = 0;
    for (size_t i = 0; i < n; i++) {
      if (a[i].silent || a[i].order.type != 0)
        continue;
      if (hb_every_ms > 0 && now - a[i].last_hb >= hb_every_ms) {
        int rc = dr_client_heartbeat(a[i].c, a[i].gen);
        if (rc != 0) {
          /* The server may have pushed an order and closed: keep it. */
          if (agent_drain(&a[i]) == 0 && a[i].order.type != 0)
            continue;
          return a[i].rc = rc;
        }
        a[i].last_hb = now;
      }
      int rc = agent_drain(&a[i]);
      if (rc != 0)
        return a[i].rc = rc;
      if (a[i].order.type != 0)
        continue;
      if (hb_every_ms > 0 && a[i].last_hb + hb_every_ms < next_hb)
        next_hb = a[i].last_hb + hb_every_ms;
      p[n_poll].fd = dr_client_fd(a[i].c);
      p[n_poll].events = POLLIN;
      p[n_poll].revents = 0;
      n_poll++;
    }
    if (n_poll == 0)
      return 0;
    if (ms_left(deadline) == 0)
      return -ETIMEDOUT;
    int r = poll(p, n_poll, ms_left(next_hb));
    if (r < 0 && errno != EINTR)
      return -errno;
  }
}

int dr_h_no_order(dr_client_t *c, dr_h_order_t *o) {
  const char *const keys[] = {"dr-h-probe"};
  int all = 0;
  int check_rc = dr_client_check(c, 0, keys, 1, &all);
  dr_h_agent_t a;
  memset(&a, 0, sizeof(a));
  a.c = c;
  int rc = agent_drain(&a);
  if (a.order.type != 0) {
    *o = a.order;
    return 1;
  }
  return check_rc != 0 ? check_rc : rc;
}

/* ---- the fixture -------------------------------------------------------- */

int dr_h_setup(void **state) {
  dr_h_fixture_t *fx = calloc(1, sizeof(*fx));
  if (fx == NULL)
    return -1;
  const char *tmp = getenv("TMPDIR");
  snprintf(fx->dir, sizeof(fx->dir), "%s/ddprun-itest-XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(fx->dir) == NULL) {
    fprintf(stderr, "harness: mkdtemp(%s) failed (%s)\n", fx->dir,
            strerror(errno));
    free(fx);
    return -1;
  }
  dr_buf_init(&fx->buf);
  pthread_mutex_init(&fx->lock, NULL);
  pthread_cond_init(&fx->cond, NULL);
  /* Writes to a connection the server closed must fail, not kill us. */
  signal(SIGPIPE, SIG_IGN);
  *state = fx;
  return 0;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d != NULL) {
    struct dirent *e;
    char path[600];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

int dr_h_teardown(void **state) {
  dr_h_fixture_t *fx = *state;
  int rc = 0;
  /* Stopping the server first ends every wait a thread may be in. */
  if (fx->srv != NULL && !fx->passed)
    dr_h_log_dump(fx->log_path, 60);
  if (dr_h_server_stop(&fx->srv, 3000) != 0)
    rc = -1;
  dr_h_join_threads(fx);
  for (size_t i = 0; i < fx->n_joins; i++) {
    if (fx->joins[i]->rc == 0)
      dr_assignment_free(&fx->joins[i]->a);
    free(fx->joins[i]);
  }
  for (size_t i = 0; i < fx->n_clients; i++)
    dr_client_close(&fx->clients[i]);
  for (size_t i = 0; i < fx->n_raws; i++) {
    dr_h_raw_close(fx->raws[i]);
    free(fx->raws[i]);
  }
  dr_buf_free(&fx->buf);
  remove_dir(fx->dir);
  pthread_cond_destroy(&fx->cond);
  pthread_mutex_destroy(&fx->lock);
  free(fx);
  *state = NULL;
  return rc;
}

void dr_h_start(dr_h_fixture_t *fx, const char *const *args,
                const char *const *env) {
  assert_null(fx->srv);
  int rc = dr_h_server_start(fx->dir, args, env, &fx->srv);
  if (rc != 0)
    fail_msg("starting ddprun-rdzv failed: %s", dr_err_name(rc));
  snprintf(fx->log_path, sizeof(fx->log_path), "%s",
           dr_h_server_log_path(fx->srv));
}

const char *dr_h_write_file(dr_h_fixture_t *fx, const char *name,
                            const char *content) {
  static char path[600];
  snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  size_t n = strlen(content);
  assert_int_equal(write(fd, content, n), (ssize_t)n);
  close(fd);
  return path;
}

static dr_client_t *open_owned(dr_h_fixture_t *fx, const char *host,
                               const char *secret) {
  assert_non_null(fx->srv);
  assert_true(fx->n_clients < DR_H_MAX_CLIENTS);
  dr_client_t *c = NULL;
  char err[512];
  int rc = dr_h_client_open(fx->srv, NULL, host, secret,
                            secret != NULL ? strlen(secret) : 0, &c, err,
                            sizeof(err));
  if (rc != 0)
    fail_msg("dr_client_open(host %s) failed: %s (%s)", host, dr_err_name(rc),
             err);
  fx->clients[fx->n_clients++] = c;
  return c;
}

dr_client_t *dr_h_open(dr_h_fixture_t *fx, const char *host) {
  return open_owned(fx, host, NULL);
}

dr_client_t *dr_h_open_secret(dr_h_fixture_t *fx, const char *host,
                              const char *secret) {
  return open_owned(fx, host, secret);
}

void dr_h_close(dr_h_fixture_t *fx, dr_client_t **c) {
  for (size_t i = 0; i < fx->n_clients; i++) {
    if (fx->clients[i] == *c) {
      dr_client_close(&fx->clients[i]);
      break;
    }
  }
  *c = NULL;
}

dr_h_raw_t *dr_h_raw(dr_h_fixture_t *fx) {
  assert_non_null(fx->srv);
  assert_true(fx->n_raws < DR_H_MAX_RAW);
  dr_h_raw_t *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  r->fd = -1;
  fx->raws[fx->n_raws++] = r;
  int rc = dr_h_raw_connect(r, dr_h_server_port(fx->srv));
  if (rc != 0)
    fail_msg("connect() to %s:%u failed (%s)", DR_H_ADDR,
             (unsigned)dr_h_server_port(fx->srv), strerror(-rc));
  return r;
}

int dr_h_thread(dr_h_fixture_t *fx, void *(*fn)(void *), void *arg) {
  if (fx->n_threads >= DR_H_MAX_THREADS)
    return -EAGAIN;
  int rc = pthread_create(&fx->threads[fx->n_threads], NULL, fn, arg);
  if (rc != 0)
    return -rc;
  fx->n_threads++;
  return 0;
}

void dr_h_join_threads(dr_h_fixture_t *fx) {
  for (; fx->n_joined < fx->n_threads; fx->n_joined++)
    pthread_join(fx->threads[fx->n_joined], NULL);
}

typedef struct {
  dr_h_fixture_t *fx;
  dr_h_join_t *jt;
} join_arg_t;

static void *join_main(void *arg) {
  join_arg_t ja = *(join_arg_t *)arg;
  free(arg);
  dr_h_join_t *jt = ja.jt;
  jt->t_sent = dr_h_now_ms();
  int rc = dr_client_join(jt->c, &jt->j, jt->wait_ms, &jt->a);
  jt->t_done = dr_h_now_ms();
  if (rc != 0)
    snprintf(jt->errmsg, sizeof(jt->errmsg), "%s", dr_client_errmsg(jt->c));
  pthread_mutex_lock(&ja.fx->lock);
  jt->rc = rc;
  jt->done = 1;
  pthread_cond_broadcast(&ja.fx->cond);
  pthread_mutex_unlock(&ja.fx->lock);
  return NULL;
}

dr_h_join_t *dr_h_join_async(dr_h_fixture_t *fx, dr_client_t *c,
                             const dr_join_t *j, int wait_ms) {
  assert_true(fx->n_joins < DR_H_MAX_THREADS);
  dr_h_join_t *jt = calloc(1, sizeof(*jt));
  assert_non_null(jt);
  jt->c = c;
  jt->j = *j;
  jt->wait_ms = wait_ms;
  jt->rc = -EINPROGRESS;
  fx->joins[fx->n_joins++] = jt;
  join_arg_t *ja = malloc(sizeof(*ja));
  assert_non_null(ja);
  ja->fx = fx;
  ja->jt = jt;
  int rc = dr_h_thread(fx, join_main, ja);
  if (rc != 0) {
    free(ja);
    jt->rc = rc;
    jt->done = 1;
    fail_msg("pthread_create() failed (%s)", strerror(-rc));
  }
  return jt;
}

dr_h_join_t *dr_h_join_wait_any(dr_h_fixture_t *fx, dr_h_join_t *const *jts,
                                size_t n, int timeout_ms) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  dr_h_join_t *found = NULL;
  pthread_mutex_lock(&fx->lock);
  for (;;) {
    for (size_t i = 0; i < n && found == NULL; i++)
      if (jts[i]->done)
        found = jts[i];
    if (found != NULL ||
        pthread_cond_timedwait(&fx->cond, &fx->lock, &dl) == ETIMEDOUT)
      break;
  }
  for (size_t i = 0; i < n && found == NULL; i++)
    if (jts[i]->done)
      found = jts[i];
  pthread_mutex_unlock(&fx->lock);
  return found;
}
