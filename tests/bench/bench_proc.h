/* Child processes and scratch files of the launch benchmarks
 * (launch_bench, restart_bench, nodeloss_bench): a ddprun started with an
 * exec check and a pidfd, waited for with a deadline, stopped with a grace;
 * a private directory with two output files and a stamp file; the median of
 * the runs; the path of a program next to the benchmark. */
#ifndef DR_BENCH_PROC_H
#define DR_BENCH_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

/* Reaps cs[0..n) (n <= 8) as they exit (recording reaped_ns) until all are reaped:
 * 0, -ETIMEDOUT at deadline_ns, -EINTR on SIGINT/SIGTERM, or -errno. */
int bench_children_wait(bench_child_t *cs, size_t n, int64_t deadline_ns);
/* SIGTERM and SIGCONT, up to grace_ms, then SIGKILL; reaps every child. */
void bench_children_stop(bench_child_t *cs, size_t n, int grace_ms);

/* "PROG: --- output of NAME ---" and the last 4 KiB fd holds, on stderr. */
void bench_show_output(const char *prog, const char *name, int fd);

/* $TMPDIR/PROG.XXXXXX with out.0, out.1 (open, appended) and stamps. */
typedef struct {
  char dir[4096 - 32]; /* room for "/stamps" and "/out.N" after it */
  char stamps[4096];
  char out_path[2][4096];
  int out_fd[2];
} bench_scratch_t;

int bench_scratch_open(bench_scratch_t *s, const char *prog, char *err,
                       size_t err_len);
void bench_scratch_close(bench_scratch_t *s);
/* Before a run: empties the output files. in == NULL: removes the stamp
 * file; else creates it empty and *in is an inotify descriptor that
 * becomes readable when it is written. 0 or -errno. */
int bench_scratch_reset(bench_scratch_t *s, int *in);

/* Sorts v[0..n) in place (n >= 1) and returns its median. */
double bench_median(double *v, size_t n);

/* Fills an empty dst (PATH_MAX) with NAME next to this executable, or
 * with this executable itself when name is NULL. 0 or a negative code. */
int bench_default_path(char *dst, const char *name);

#endif /* DR_BENCH_PROC_H */
