/* Preemption: SIGUSR1 (Slurm's #SBATCH --signal, forwarded by ddprun)
 * asks train to stop at the next step boundary with a checkpoint and exit
 * DR_TRAIN_EPREEMPTED, which ddprun never restarts and exits with, so
 * that the batch script can requeue the job.
 *
 * Ranks see the signal at different times, possibly in different steps:
 * after every step each rank adds its flag into a one-float all-reduce,
 * and all ranks stop after the same step when any rank was signalled. The
 * all-reduce runs after the gradients' and costs one small collective per
 * step. */
#include "train.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>


static volatile sig_atomic_t requested;

static void on_sigusr1(int sig) {
  (void)sig;
  requested = 1;
}

int dr_train_preempt_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  return sigaction(SIGUSR1, &sa, NULL);
}

/* The first rank to exit makes its agent stop the others: no rank leaves
 * before rank 0 has said why the job stops. */
static int stop_together(dr_run_t *r) {
  char err[256] = "";
  int rc = dr_pg_barrier_sync(r->pg, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "preemption barrier", rc, err);
  return DR_TRAIN_EPREEMPTED;
}

int dr_train_preempt_after_step(dr_run_t *r, uint64_t done) {
  float flag = requested ? 1.0f : 0.0f;
  char err[256] = "";
  int rc = dr_pg_allreduce_sync(r->pg, &flag, 1, DR_PG_SUM, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "preemption check", rc, err);
  /* The last step ends the run anyway, with its final report. */
  if (flag == 0.0f || done == r->total_steps)
    return 0;
  const dr_train_config_t *c = &r->c;
  if (c->ckpt_dir == NULL) {
    if (r->rank == 0)
      fprintf(stderr, "train: SIGUSR1 on %.0f rank(s): stopping after step "
              "%" PRIu64 " without a checkpoint (no --ckpt-dir); exit %d "
              "(preempted)\n", flag, done, DR_TRAIN_EPREEMPTED);
    return stop_together(r);
  }
  /* Written now, or, when --ckpt-every made one of this step, that one
   * waited for. */
  rc = dr_train_ckpt_save(r, done);
  if (rc != 0)
    return rc;
  if (r->rank == 0)
    fprintf(stderr, "train: SIGUSR1 on %.0f rank(s): stopping after step "
            "%" PRIu64 " with its checkpoint in %s; exit %d (preempted: "
            "resume by running the job again)\n",
            flag, done, c->ckpt_dir, DR_TRAIN_EPREEMPTED);
  return stop_together(r);
}
