#include "launch_harness.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
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

#if !defined(DR_DDPRUN_PATH) || !defined(DR_PROBE_PATH)
#error "DR_DDPRUN_PATH and DR_PROBE_PATH must name the binaries under test"
#endif

extern char **environ;

#define DR_L_REAP_MS 10000      /* waiting for a SIGKILLed child */
#define DR_L_STRAY_WAIT_MS 1500 /* for processes of a test to go */
#define DR_L_READ_MAX (64u << 20)

const char *dr_l_ddprun_path(void) { return DR_DDPRUN_PATH; }
const char *dr_l_probe_path(void) { return DR_PROBE_PATH; }

static int pidfd_open_(pid_t pid) {
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, pid, 0);
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

/* Milliseconds left until deadline, rounded up so a poll() does not wake a
 * fraction of a millisecond early and spin. */
static int ms_left(double deadline) {
  double left = deadline - dr_h_now_ms();
  if (left <= 0)
    return 0;
  return left > INT_MAX ? INT_MAX : (int)left + 1;
}

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

static void reap(dr_l_proc_t *p) {
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
    int left = ms_left(deadline);
    int r = poll(pfd, k, left);
    if (r < 0 && errno != EINTR)
      return -errno;
    for (size_t i = 0; r > 0 && i < k; i++)
      if (pfd[i].revents != 0)
        reap(who[i]);
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
    int left = ms_left(deadline);
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
      reap(p); /* one more look at the output, then -ECHILD */
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
  p->pidfd = pidfd_open_(p->pid);
  if (p->pidfd < 0) {
    int err = errno;
    pid_t pid = p->pid;
    kill(pid, SIGKILL);
    reap(p);
    free(p);
    fail_msg("pidfd_open(%d) failed: %s", (int)pid, strerror(err));
  }
  fx->procs[fx->n_procs++] = p;
  return p;
}

static void proc_free(dr_l_proc_t *p) {
  if (p->pidfd >= 0)
    close(p->pidfd);
  free(p->out);
  free(p->err);
  free(p);
}

/* ---- ports ----------------------------------------------------------------
 */

static int bound_socket(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(sa);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

uint16_t dr_l_free_port(void) {
  uint16_t port = 0;
  int fd = bound_socket(&port);
  if (fd < 0)
    return 0;
  close(fd);
  return port;
}

uint16_t dr_l_hold_listening_port(dr_l_fixture_t *fx) {
  assert_true(fx->n_fds < DR_L_MAX_FDS);
  uint16_t port = 0;
  int fd = bound_socket(&port);
  assert_true(fd >= 0);
  assert_int_equal(listen(fd, 8), 0);
  fx->fds[fx->n_fds++] = fd;
  return port;
}

/* ---- /proc -----------------------------------------------------------------
 */

/* 1 when one of the NUL-separated arguments in buf equals marker. */
static int has_marker(const char *buf, size_t n, const char *marker) {
  size_t mlen = strlen(marker);
  for (size_t i = 0; i < n;) {
    size_t len = strnlen(buf + i, n - i);
    if (len == mlen && memcmp(buf + i, marker, mlen) == 0)
      return 1;
    i += len + 1;
  }
  return 0;
}

size_t dr_l_marker_pids(const char *marker, pid_t *pids, size_t max) {
  DIR *d = opendir("/proc");
  if (d == NULL)
    return 0;
  size_t found = 0;
  pid_t self = getpid();
  struct dirent *e;
  char path[64], buf[16384];
  while ((e = readdir(d)) != NULL) {
    char *end = NULL;
    long pid = strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self)
      continue;
    snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n > 0 && has_marker(buf, (size_t)n, marker)) {
      if (found < max)
        pids[found] = (pid_t)pid;
      found++;
    }
  }
  closedir(d);
  return found;
}

size_t dr_l_wait_marker_gone(const char *marker, int timeout_ms) {
  double deadline = dr_h_now_ms() + timeout_ms;
  pid_t pids[256];
  for (;;) {
    size_t n = dr_l_marker_pids(marker, pids, 256);
    if (n == 0 || ms_left(deadline) == 0)
      return n;
    /* Wait for the ones seen to exit, then look again. */
    for (size_t i = 0; i < n && i < 256; i++) {
      int fd = pidfd_open_(pids[i]);
      if (fd < 0)
        continue;
      struct pollfd p = {fd, POLLIN, 0};
      while (poll(&p, 1, ms_left(deadline)) < 0 && errno == EINTR) {
      }
      close(fd);
    }
  }
}

/* ---- the fixture ------------------------------------------------------- */

int dr_l_setup(void **state) {
  static unsigned serial;
  dr_l_fixture_t *fx = calloc(1, sizeof(*fx));
  if (fx == NULL)
    return -1;
  const char *tmp = getenv("TMPDIR");
  snprintf(fx->dir, sizeof(fx->dir), "%s/ddprun-ltest-XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(fx->dir) == NULL) {
    fprintf(stderr, "harness: mkdtemp(%s) failed (%s)\n", fx->dir,
            strerror(errno));
    free(fx);
    return -1;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(fx->marker, sizeof(fx->marker), "ddprun-ltest-%d-%u-%ld",
           (int)getpid(), serial++, (long)(ts.tv_nsec ^ ts.tv_sec));
  signal(SIGPIPE, SIG_IGN);
  *state = fx;
  return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static int sanitizer_report(const char *text) {
  return strstr(text, "ERROR: AddressSanitizer") != NULL ||
         strstr(text, "ERROR: LeakSanitizer") != NULL ||
         strstr(text, "runtime error:") != NULL ||
         strstr(text, "WARNING: ThreadSanitizer") != NULL;
}

int dr_l_teardown(void **state) {
  dr_l_fixture_t *fx = *state;
  int rc = 0;
  for (size_t i = 0; i < fx->n_procs; i++) {
    dr_l_proc_t *p = fx->procs[i];
    if (!p->reaped) {
      if (fx->passed)
        fprintf(stderr, "harness: %s (pid %d) still running at teardown\n",
                p->name, (int)p->pid);
      kill(p->pid, SIGKILL);
      if (dr_l_wait(p, DR_L_REAP_MS) != 0)
        reap(p);
    }
  }
  if (fx->srv != NULL && !fx->passed)
    dr_h_log_dump(dr_h_server_log_path(fx->srv), 60);
  if (dr_h_server_stop(&fx->srv, 3000) != 0)
    rc = -1;

  /* Whatever carries the marker now was left behind by ddprun. */
  size_t left = dr_l_wait_marker_gone(fx->marker, DR_L_STRAY_WAIT_MS);
  if (left > 0) {
    pid_t pids[256];
    size_t n = dr_l_marker_pids(fx->marker, pids, 256);
    for (size_t i = 0; i < n && i < 256; i++) {
      fprintf(stderr,
              "harness: process %d of this test outlived ddprun; "
              "killing it\n",
              (int)pids[i]);
      kill(pids[i], SIGKILL);
    }
    dr_l_wait_marker_gone(fx->marker, DR_L_STRAY_WAIT_MS);
    rc = -1;
  }

  for (size_t i = 0; i < fx->n_procs; i++) {
    dr_l_proc_t *p = fx->procs[i];
    if (sanitizer_report(dr_l_err(p))) {
      fprintf(stderr, "harness: %s reported a sanitizer error\n", p->name);
      rc = -1;
    }
    if (!fx->passed || rc != 0)
      dr_l_dump(p);
    proc_free(p);
  }
  for (size_t i = 0; i < fx->n_fds; i++)
    close(fx->fds[i]);
  nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(fx);
  *state = NULL;
  return rc;
}

uint16_t dr_l_rdzv(dr_l_fixture_t *fx, const char *const *args) {
  assert_null(fx->srv);
  const char *argv[32];
  size_t n = 0;
  int has_level = 0;
  for (size_t i = 0; args != NULL && args[i] != NULL && n < 28; i++) {
    has_level |= strcmp(args[i], "--log-level") == 0;
    argv[n++] = args[i];
  }
  if (!has_level) {
    argv[n++] = "--log-level";
    argv[n++] = "warn";
  }
  argv[n] = NULL;
  int rc = dr_h_server_start(fx->dir, argv, NULL, &fx->srv);
  if (rc != 0)
    fail_msg("starting ddprun-rdzv failed: %s", dr_err_name(rc));
  return dr_h_server_port(fx->srv);
}

const char *dr_l_path(dr_l_fixture_t *fx, const char *name) {
  static char path[600];
  snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
  return path;
}

const char *dr_l_write_file(dr_l_fixture_t *fx, const char *name,
                            const char *content, int mode) {
  const char *path = dr_l_path(fx, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  assert_true(fd >= 0);
  size_t len = strlen(content);
  assert_int_equal(write(fd, content, len), (ssize_t)len);
  close(fd);
  return path;
}

int dr_l_main(const char *group, const struct CMUnitTest *tests, size_t n,
              int argc, char **argv) {
  if (argc > 2) {
    fprintf(stderr, "usage: %s [TEST]\n", argv[0]);
    return 2;
  }
  if (argc == 2) {
    size_t i = 0;
    while (i < n && strcmp(tests[i].name, argv[1]) != 0)
      i++;
    if (i == n) {
      fprintf(stderr, "%s: no test named '%s'\n", argv[0], argv[1]);
      return 2;
    }
    return _cmocka_run_group_tests(group, &tests[i], 1, NULL, NULL);
  }
  return _cmocka_run_group_tests(group, tests, n, NULL, NULL);
}
