/* Child processes of the benchmarks that start ddprun (launch_bench,
 * restart_bench, nodeloss_bench): a child started with an exec check and a
 * pidfd, waited for with a deadline, checked, stopped with a grace; other
 * processes (workers) waited for through their pidfds. */
#ifndef DR_BENCH_PROC_H
#define DR_BENCH_PROC_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Installs SIGINT/SIGTERM handlers that only set bench_stop_requested,
 * without SA_RESTART so blocking calls return EINTR. SIGPIPE is ignored
 * (a child gets it back at its default). */
void bench_install_signals(void);
extern volatile sig_atomic_t bench_stop_requested;

/* Describes a wait() status: "exited with code 3", "killed by signal
 * SIGSEGV (core dumped)". */
void bench_describe_status(int status, char *out, size_t out_len);

/* How long a child stopped with SIGTERM has before SIGKILL. */
#define BENCH_STOP_GRACE_MS 2000

/* One child. Set name and out_fd (borrowed) before starting it. */
typedef struct {
  pid_t pid;         /* 0 once reaped */
  int pidfd;         /* -1 once reaped */
  int exec_fd;       /* read end of the close-on-exec pipe until confirmed */
  int status;        /* waitpid() status once reaped */
  int64_t reaped_ns; /* bench_now_ns() when reaped */
  int out_fd;        /* stdout and stderr of the child */
  const char *name;
  const char *path;  /* argv[0], borrowed from the caller */
} bench_child_t;

/* pidfd_open(2), which glibc 2.36 does not wrap. */
int bench_pidfd_open(pid_t pid);

/* Forks argv[0] with stdout and stderr on c->out_fd; the child dies with
 * this process (PR_SET_PDEATHSIG). bench_child_confirm then says whether
 * exec succeeded: forking several before confirming any starts them close
 * together. 0, or a negative code with the reason in err. */
int bench_child_fork(bench_child_t *c, char *const argv[], char *err,
                     size_t err_len);
/* Waits for the exec (or its failure, then reaps) and opens the pidfd. */
int bench_child_confirm(bench_child_t *c, char *err, size_t err_len);
/* Both. */
int bench_child_start(bench_child_t *c, char *const argv[], char *err,
                      size_t err_len);

/* Reaps cs[0..n) (n <= 8) as they exit (recording reaped_ns) until all are
 * reaped: 0, -ETIMEDOUT at deadline_ns, -EINTR on SIGINT/SIGTERM, or
 * -errno. */
int bench_children_wait(bench_child_t *cs, size_t n, int64_t deadline_ns);
/* SIGTERM and SIGCONT, up to grace_ms, then SIGKILL; reaps every child. */
void bench_children_stop(bench_child_t *cs, size_t n, int grace_ms);

/* Waits for cs[0..n) as bench_children_wait does; when they do not all
 * exit, says why in err ("NAME did not exit in time") and stops them all. */
int bench_children_finish(bench_child_t *cs, size_t n, int64_t deadline_ns,
                          char *err, size_t err_len);
/* 0 when the reaped c exited with code; else DR_EREMOTE, with "NAME exited
 * with code 1" (", not with code 3" when code is not 0) in err. */
int bench_child_check(const bench_child_t *c, int code, char *err,
                      size_t err_len);

/* "PROG: --- output of NAME ---" and the last 4 KiB fd holds, on stderr. */
void bench_show_output(const char *prog, const char *name, int fd);

/* Waits until every pidfd in fds[0..n) (n <= BENCH_MAX_PIDFDS; -1 entries
 * are skipped) is readable, its process gone, closing each then;
 * *last_ns gets when the last one was seen. 0, -ETIMEDOUT at deadline_ns,
 * -EINTR on SIGINT/SIGTERM, or -errno. */
#define BENCH_MAX_PIDFDS 1024
int bench_pidfds_wait(int *fds, size_t n, int64_t deadline_ns,
                      int64_t *last_ns);
/* Closes those still open. */
void bench_pidfds_close(int *fds, size_t n);

#endif /* DR_BENCH_PROC_H */
