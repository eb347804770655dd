#include "watchdog.h"

#include "shm_name.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

enum { OP_ADD = 1, OP_REMOVE = 2, OP_DIR = 3, OP_DONE = 4, OP_SHM = 5 };

typedef struct {
  int32_t op;
  int32_t arg; /* a process group, or the length of the path that follows */
} record_t;

#define MAX_GROUPS 4096

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

static int read_full(int fd, void *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

static void watch(int fd) {
  static pid_t groups[MAX_GROUPS];
  static char dir[4096], shm[128];
  size_t n = 0;
  for (;;) {
    record_t rec;
    if (read_full(fd, &rec, sizeof(rec)) != 0)
      break; /* the agent is gone */
    if (rec.op == OP_DONE)
      _exit(0);
    if (rec.op == OP_ADD && n < MAX_GROUPS) {
      groups[n++] = rec.arg;
    } else if (rec.op == OP_REMOVE) {
      for (size_t i = 0; i < n; i++)
        if (groups[i] == rec.arg) {
          groups[i] = groups[--n];
          break;
        }
    } else if (rec.op == OP_DIR && rec.arg > 0 &&
               (size_t)rec.arg < sizeof(dir)) {
      if (read_full(fd, dir, (size_t)rec.arg) != 0)
        break;
      dir[rec.arg] = '\0';
    } else if (rec.op == OP_SHM && rec.arg > 0 &&
               (size_t)rec.arg < sizeof(shm)) {
      if (read_full(fd, shm, (size_t)rec.arg) != 0)
        break;
      shm[rec.arg] = '\0';
    }
  }
  for (size_t i = 0; i < n; i++)
    kill(-groups[i], SIGKILL);
  if (dir[0] != '\0')
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (shm[0] != '\0')
    dr_shm_remove_prefix(shm);
  _exit(0);
}

int dr_watchdog_start(pid_t *out_pid) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0)
    return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int e = -errno;
    close(p[0]);
    close(p[1]);
    return e;
  }
  if (pid == 0) {
    /* Its own group, deaf to the terminal's signals: it must outlive a
     * signal sent to the agent's group. */
    setpgid(0, 0);
    prctl(PR_SET_NAME, "ddprun-watchdog");
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    close(p[1]);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
    }
    if (p[0] != 3) {
      dup2(p[0], 3);
      close(p[0]);
    }
    close_range(4, ~0u, 0);
    watch(3);
  }
  close(p[0]);
  *out_pid = pid;
  return p[1];
}

static void send_rec(int fd, int32_t op, int32_t arg, const void *extra,
                     size_t n) {
  if (fd < 0)
    return;
  char buf[sizeof(record_t) + 4096];
  record_t rec = {op, arg};
  if (n > sizeof(buf) - sizeof(rec))
    return;
  memcpy(buf, &rec, sizeof(rec));
  if (n > 0)
    memcpy(buf + sizeof(rec), extra, n);
  /* Records are smaller than PIPE_BUF: one write() each. */
  ssize_t w;
  do
    w = write(fd, buf, sizeof(rec) + n);
  while (w < 0 && errno == EINTR);
}

void dr_watchdog_add_group(int fd, pid_t pgid) {
  send_rec(fd, OP_ADD, (int32_t)pgid, NULL, 0);
}

void dr_watchdog_remove_group(int fd, pid_t pgid) {
  send_rec(fd, OP_REMOVE, (int32_t)pgid, NULL, 0);
}

void dr_watchdog_set_dir(int fd, const char *path) {
  size_t n = strlen(path);
  if (n < 4000)
    send_rec(fd, OP_DIR, (int32_t)n, path, n);
}

void dr_watchdog_set_shm_prefix(int fd, const char *prefix) {
  size_t n = strlen(prefix);
  if (n < 128)
    send_rec(fd, OP_SHM, (int32_t)n, prefix, n);
}

void dr_watchdog_stop(int *fd, pid_t pid) {
  if (*fd < 0)
    return;
  send_rec(*fd, OP_DONE, 0, NULL, 0);
  close(*fd);
  *fd = -1;
  if (pid > 0)
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
      ;
}
