/* train --smoke: the self-check a new user runs first, alone or under
 * ddprun. A short run (DR_TRAIN_SMOKE_STEPS unless --steps; every other
 * setting as given, but it never resumes and writes no checkpoint but its
 * own) followed by four checks, each one line on rank 0's stdout:
 *
 *   smoke: steps: 20 steps ran, loss 2.7712 -> 2.5183: ok
 *   smoke: checkpoint: step 20 written to DIR/ckpt-0000000020.bin and read
 *          back: 12345 parameter and 24690 optimizer-state floats
 *          bit-identical (148140 bytes, CRC-32 0x...): ok
 *   smoke: evaluation: 4096 held-out samples, loss 2.5, accuracy 0.2: ok
 *   smoke: loss fell: ...: ok
 *   smoke: all 4 checks passed
 *
 * (a check that fails ends in FAILED, one that could not run in "not
 * run", and the last line names them). The checks:
 *  - steps: every step ran (a step that fails stops the run as it would
 *    stop any, with its message; the later checks then do not run);
 *  - checkpoint: the checkpoint of the last step, written as every
 *    checkpoint is (train_ckpt_save.c), is read back by rank 0 and its
 *    parameters and optimizer state compared, byte for byte, with the
 *    state that was written (the live state: nothing changes after the
 *    last step). It goes to a new directory (train-smoke.XXXXXX) under
 *    --ckpt-dir when one is given (never among the job's own checkpoints,
 *    which it would resume from, replace or prune), else under $TMPDIR or
 *    /tmp, and that directory is removed afterwards;
 *  - evaluation: the run's evaluation (dr_train_evaluate) covered at
 *    least one held-out sample and gave a finite loss and an accuracy in
 *    [0, 1];
 *  - loss fell: the loss of step 1 (its own log line, averaged over the
 *    ranks) is above the final loss (the mean of the last --log-every
 *    window, averaged over the ranks, as the final line reports it), both
 *    finite; one step has nothing to compare and fails.
 * Then the run's own final report (done: and final lines, the weights
 * checked equal on every rank), and the verdict. The ranks agree on every
 * check: the checkpoint's verdict is broadcast from rank 0. */
#ifndef DR_TRAIN_SMOKE_H
#define DR_TRAIN_SMOKE_H

#include "train.h"

/* Every rank, once the process group is up and before anything reads
 * --ckpt-dir: rank 0 makes the checkpoint's directory and every rank
 * takes it as --ckpt-dir, with --ckpt-every 0. A directory that cannot
 * be made fails the checkpoint check later, not the run now. Returns an
 * exit code (a failed broadcast or allocation). */
int dr_train_smoke_open(dr_run_t *r);

/* Every rank, instead of the loop, the evaluation and the final report:
 * see the top. 0 when every check held, else DR_TRAIN_EFAIL. */
int dr_train_smoke_run(dr_run_t *r);

/* On every way out, after dr_train_ckpt_close (no write in flight): rank
 * 0 removes the directory and what is in it. Frees the state. */
void dr_train_smoke_close(dr_run_t *r);

#endif /* DR_TRAIN_SMOKE_H */
