/* Spawning a worker: fork, a new process group, a parent-death signal,
 * pipes for its output, and exec failure reported synchronously through a
 * close-on-exec pipe (so a missing program is an error here, not a child
 * that exits at once). */
#include "agent_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs.h"

int dr_resolve_exec(const char *prog, char **path) {
  char buf[PATH_MAX];
  *path = NULL;
  int rc = dr_find_program(prog, getenv("PATH"), buf, sizeof(buf));
  if (rc != 0)
    return rc;
  *path = strdup(buf);
  return *path != NULL ? 0 : -ENOMEM;
}

/* In the child: never returns. Only async-signal-safe calls. */
static void child(const dr_spawn_req_t *r, pid_t parent, int out_w, int err_w,
                  int report_w) {
  int e[2] = {DR_SPAWN_SETUP, 0};
  if (setpgid(0, 0) != 0)
    goto fail;
  /* Die with the agent; and if it died before prctl took effect, now. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
    goto fail;
  if (getppid() != parent)
    _exit(127);
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP)
      signal(s, SIG_DFL);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 ||
      dup2(err_w, 2) < 0)
    goto fail;
  e[0] = DR_SPAWN_BIND;
  if (r->bind != NULL && dr_bind_apply_child(r->bind) != 0)
    goto fail;
  e[0] = DR_SPAWN_EXEC;
  execve(r->path, r->argv, r->envp);
fail:
  e[1] = errno;
  while (write(report_w, e, sizeof(e)) < 0 && errno == EINTR)
    ;
  _exit(127);
}

int dr_spawn(const dr_spawn_req_t *r, pid_t *pid, int *out_fd, int *err_fd,
             int *stage) {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, rep[2] = {-1, -1};
  int rc = 0;
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      pipe2(rep, O_CLOEXEC) != 0) {
    rc = -errno;
    goto done;
  }
  pid_t parent = getpid();
  pid_t p = fork();
  if (p < 0) {
    rc = -errno;
    *stage = DR_SPAWN_FORK;
    goto done;
  }
  if (p == 0)
    child(r, parent, out[1], err[1], rep[1]);
  close(rep[1]);
  rep[1] = -1;
  /* EOF: exec succeeded (the pipe closed on exec). Data: the step that
   * failed and its errno. */
  int report[2] = {0, 0};
  ssize_t n;
  do
    n = read(rep[0], report, sizeof(report));
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof(report)) {
    while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
      ;
    *stage = report[0];
    rc = -report[1];
    goto done;
  }
  /* The child ran setpgid() before exec, so its group exists now. */
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  *pid = p;
  *out_fd = out[0];
  *err_fd = err[0];
  out[0] = err[0] = -1;
done:
  for (int i = 0; i < 2; i++) {
    if (out[i] >= 0)
      close(out[i]);
    if (err[i] >= 0)
      close(err[i]);
    if (rep[i] >= 0)
      close(rep[i]);
  }
  return rc;
}
