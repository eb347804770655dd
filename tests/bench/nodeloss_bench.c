/* nodeloss_bench: how long the survivors take to stop their workers when a
 * node of the job is lost.
 *
 *   nodeloss_bench [--mode kill|stop] [--nproc 4] [--runs 5] [--timeout 30]
 *                  [--ddprun PATH] [--server PATH]
 *
 * Per run: ddprun-rdzv (--nnodes 2, default heartbeat settings, port 0,
 * --replacement-timeout 0: the job ends rather than waiting for a new node)
 * and two ddprun (--nnodes 2 --nproc-per-node N, is_host=0, default
 * heartbeat_timeout) on 127.0.0.1, whose workers are this program in its
 * worker mode: each stamps itself into a file and waits. Once all 2N have
 * stamped, the workers of each ddprun are told apart by their parent pid,
 * t0 is read, and the second ddprun gets
 *
 *   kill  SIGKILL: its connection closes at once (the server sees EOF);
 *   stop  SIGSTOP: a host that vanished without closing anything, found
 *         only by the missing heartbeats.
 *
 * "stopped" is when the last of the survivor's N workers has exited (its
 * pidfd turns readable), minus t0; "exit" is when the surviving ddprun was
 * reaped. The survivor must exit 3 (the job needs both nodes), and every
 * worker of the lost node must be gone within 5 s of its agent's death
 * (SIGKILL for a stopped agent, after the measurement). Prints one line per
 * run, then
 *
 *   nodeloss_bench mode=M nproc=N runs=R median_ms=.. min_ms=.. max_ms=..
 *                  median_exit_ms=..
 *
 * A median over the target (3 s) is reported on stderr; the exit status
 * (0, 1 when a run failed, 2 on bad usage) reflects only the checks.
 *
 *   nodeloss_bench --worker FILE
 *
 * The worker (bench_stamp_worker): appends "COUNT RANK NANOSECONDS PID\n"
 * to FILE in one write(), then waits for a signal, at most
 * DDPRUN_BENCH_TIMEOUT seconds (alarm()).
 */
#include "bench_job.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"

#define MAX_NPROC 256
#define MAX_RUNS 1000
#define VICTIMS_GONE_MS 5000
#define TARGET_MS 3000.0

enum { MODE_KILL, MODE_STOP };

static const char USAGE[] =
    "usage: nodeloss_bench [--mode kill|stop] [--nproc N] [--runs R] "
    "[--timeout S]\n"
    "                      [--ddprun PATH] [--server PATH]\n"
    "defaults: --mode kill --nproc 4 --runs 5 --timeout 30 (seconds "
    "per run); programs next to nodeloss_bench\n";

/* The parent of pid, from /proc/PID/stat; 0 when unknown. */
static pid_t parent_of(long pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  char state;
  int ppid;
  if (p == NULL || sscanf(p + 1, " %c %d", &state, &ppid) != 2)
    return 0;
  return (pid_t)ppid;
}

/* The workers, told apart by their parent: a pidfd each, the survivor's
 * in surv[0..*n_surv), the lost node's in lost[0..*n_lost). */
typedef struct {
  int surv[MAX_NPROC], lost[MAX_NPROC];
  size_t n_surv, n_lost;
} workers_t;

static int sort_workers(const bench_repeat_t *b, const bench_job_t *j,
                        const bench_stamp_t *st, workers_t *w, char *err,
                        size_t err_len) {
  for (uint32_t i = 0; i < 2 * b->nproc; i++) {
    pid_t pp = parent_of(st[i].pid);
    int fd = bench_pidfd_open((pid_t)st[i].pid);
    if (fd < 0 || (pp != j->node[0].pid && pp != j->node[1].pid)) {
      snprintf(err, err_len, "worker %ld (RANK %ld) is not a child of "
               "either ddprun", st[i].pid, st[i].rank);
      if (fd >= 0)
        close(fd);
      return DR_EBADARG;
    }
    if (pp == j->node[0].pid && w->n_surv < b->nproc) {
      w->surv[w->n_surv++] = fd;
    } else if (pp == j->node[1].pid && w->n_lost < b->nproc) {
      w->lost[w->n_lost++] = fd;
    } else {
      close(fd);
      snprintf(err, err_len, "more than %u workers under one ddprun",
               b->nproc);
      return DR_EBADARG;
    }
  }
  return 0;
}

/* Signals the lost node's agent: fig[0] to when the survivor's workers
 * are all gone, fig[1] to the survivor's exit (which must be code 3).
 * Then the lost node's workers must follow its SIGKILLed agent. */
static int measure(const bench_repeat_t *b, bench_job_t *j, workers_t *w,
                   int64_t deadline, double fig[2], char *err,
                   size_t err_len) {
  int64_t t0 = bench_now_ns(), t_stopped = t0;
  kill(j->node[1].pid, b->mode == MODE_KILL ? SIGKILL : SIGSTOP);
  int rc = bench_pidfds_wait(w->surv, w->n_surv, deadline, &t_stopped);
  if (rc != 0)
    snprintf(err, err_len, "the survivor's workers still run (%s)",
             dr_strerror(rc));
  if (rc == 0) {
    fig[0] = bench_ms(t0, t_stopped);
    rc = bench_children_finish(&j->node[0], 1, deadline, err, err_len);
  }
  if (rc == 0) {
    fig[1] = bench_ms(t0, j->node[0].reaped_ns);
    rc = bench_child_check(&j->node[0], 3, err, err_len);
  }
  /* The lost agent's workers go with it (its watchdog, their parent-
   * death signal). */
  if (j->node[1].pid > 0)
    kill(j->node[1].pid, SIGKILL);
  if (bench_children_wait(&j->node[1], 1,
                          bench_now_ns() + BENCH_STOP_GRACE_MS * 1000000LL) !=
          0 &&
      rc == 0) {
    snprintf(err, err_len, "the lost ddprun survived SIGKILL");
    rc = -ETIMEDOUT;
  }
  int64_t t_gone = 0;
  int grc = bench_pidfds_wait(w->lost, w->n_lost,
                              bench_now_ns() + VICTIMS_GONE_MS * 1000000LL,
                              &t_gone);
  if (grc != 0 && rc == 0) {
    snprintf(err, err_len, "workers of the lost node still run %d ms after "
             "its agent died", VICTIMS_GONE_MS);
    rc = grc;
  }
  return rc;
}

static int run_once(const bench_repeat_t *b, bench_scratch_t *s, uint32_t run,
                    double fig[2], char *err, size_t err_len) {
  /* No wait for a replacement node: the survivor exits 3 at once. */
  static const char *const server_args[] = {"--replacement-timeout", "0",
                                            NULL};
  static const char *const ddprun_args[] = {"--stop-grace", "2", NULL};
  const bench_job_spec_t spec = {server_args, ddprun_args,
                                 {"ddprun (survivor)", "ddprun (lost)"}, 1};
  static bench_stamp_t st[2 * MAX_NPROC];
  workers_t w = {.n_surv = 0};
  int64_t deadline = bench_now_ns() + (int64_t)(b->timeout_s * 1e9);
  bench_job_t j;
  int rc = bench_job_start(&j, b, &spec, s, deadline, NULL, err, err_len);
  if (rc == 0)
    rc = bench_stamps_wait(j.stamps_in, s->stamps, 0, 2 * b->nproc, st,
                           deadline, err, err_len);
  if (rc == 0)
    rc = sort_workers(b, &j, st, &w, err, err_len);
  if (rc == 0)
    rc = measure(b, &j, &w, deadline, fig, err, err_len);
  bench_pidfds_close(w.surv, w.n_surv);
  bench_pidfds_close(w.lost, w.n_lost);
  rc = bench_job_end(&j, b, s, rc, err, err_len);
  if (rc == 0)
    printf("run %u: %s of an agent: the survivor's %u workers stopped after "
           "%.2f ms, it exited after %.2f ms\n", run + 1,
           b->mode == MODE_KILL ? "SIGKILL" : "SIGSTOP", b->nproc, fig[0],
           fig[1]);
  return rc;
}

static void report(const bench_repeat_t *b, const bench_summary_t fig[2]) {
  printf("nodeloss_bench mode=%s nproc=%u runs=%u median_ms=%.2f "
         "min_ms=%.2f max_ms=%.2f median_exit_ms=%.2f\n",
         b->modes[b->mode], b->nproc, b->runs, fig[0].median, fig[0].min,
         fig[0].max, fig[1].median);
  bench_check_target("nodeloss_bench", "", fig[0].median, TARGET_MS);
}

int main(int argc, char **argv) {
  static const char *const modes[] = {"kill", "stop", NULL};
  static bench_repeat_t b = {
      .prog = "nodeloss_bench", .usage = USAGE, .modes = modes,
      .mode = MODE_KILL, .max_nproc = MAX_NPROC, .max_runs = MAX_RUNS,
      .min_timeout_s = 5, .run = run_once, .report = report, .nproc = 4,
      .runs = 5};
  return bench_repeat_main(&b, argc, argv);
}
