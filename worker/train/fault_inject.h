/* Fault injection of train, for tests: the environment variables that
 * make train stop, wait or mispredict at a known point, so that a test can
 * catch a job there (tests/ckpt, tests/recovery, tests/deploy, tests/plan,
 * tests/gpu rely on them). This file and fault_inject.c are their one
 * place: the table there documents each, and `train --help` prints it.
 *
 *   DDPRUN_CKPT_TEST_DELAY_MS=MS[@STEP]  hold a checkpoint before its rename
 *                                        (the writer thread; steps go on)
 *   DDPRUN_CKPT_TEST_KILL_AT=STEP[:RANK] SIGKILL after a step's checkpoint
 *                                        (once it and any being written
 *                                        are complete)
 *   DDPRUN_PLAN_TEST_SCALE=X             scale the bucket planner's
 *                                        prediction
 *   DDPRUN_DATA_TEST_DELAY_MS=MS:RANK    rank RANK's batches load MS ms
 *                                        slower
 *   DDPRUN_MEM_TEST_RANK0_MIB=N          rank 0 touches N MiB more (its
 *                                        peak memory above the others')
 *   DDPRUN_COLL_TEST_EXTRA=RANK@STEP     rank RANK issues an extra
 *                                        all-reduce at step STEP
 *                                        (collectives out of step)
 *   DDPRUN_SPIN_TEST=RANK@STEP           rank RANK busy-loops forever at
 *                                        step STEP (a busy, stuck rank)
 *   DDPRUN_OVERFLOW_TEST=RANK@STEP[:N]   rank RANK's gradient holds an
 *                                        infinity at step STEP (and the
 *                                        N - 1 after it)
 *   DDPRUN_OVERFLOW_TEST_SUM=STEP        every rank's gradient holds a
 *                                        value finite in fp16 whose fp16
 *                                        sum overflows, at step STEP
 *   DDPRUN_SMOKE_TEST_BREAK=ckpt         --smoke: a bit of the checkpoint
 *                                        read back flipped
 *   DDPRUN_SHM_TEST_TAKEN=N              shared-memory names found taken
 *   DDPRUN_SHM_TEST_KILL=TAG[:RANK]      SIGKILL right after creating a
 *                                        shared-memory segment
 *
 * The last two act where the segments are made, in proto/os/shm_name.c
 * (the process group's rings are not train's own); they are listed here
 * for train --help.
 *
 * They are read once per process, at the first call of any function here
 * (train's main calls dr_fault_init first). Unset or empty, each is off
 * and train runs as it would without it; each one announces itself on
 * stdout or stderr when it acts.
 */
#ifndef DR_FAULT_INJECT_H
#define DR_FAULT_INJECT_H

#include <stdint.h>

/* Reads the variables (at most once per process; later calls do
 * nothing). */
void dr_fault_init(void);

/* DDPRUN_CKPT_TEST_DELAY_MS: the milliseconds to hold the checkpoint of
 * step before its rename; 0 for none. */
long dr_fault_ckpt_delay_ms(uint64_t step);

/* DDPRUN_CKPT_TEST_KILL_AT: 1 when rank must kill itself now that done
 * steps are done. */
int dr_fault_kill_due(uint32_t rank, uint64_t done);

/* DDPRUN_CKPT_TEST_KILL_AT: 1 when some rank, this one or another, kills
 * itself now that done steps are done (every rank has the variable), so
 * that every rank first lets the checkpoint being written complete. */
int dr_fault_kill_step(uint64_t done);

/* DDPRUN_PLAN_TEST_SCALE: the factor for the planner's prediction; 0 for
 * none. */
double dr_fault_plan_scale(void);

/* DDPRUN_DATA_TEST_DELAY_MS: on its rank, sleeps the milliseconds (in a
 * batch's loading); nothing elsewhere or without it. */
void dr_fault_data_delay(uint32_t rank);

/* DDPRUN_MEM_TEST_RANK0_MIB: on rank 0, allocates N MiB, writes every
 * page of it and frees it, so that rank 0's peak resident memory is that
 * much above the other ranks'. Nothing on other ranks or without it. */
void dr_fault_mem_touch(uint32_t rank);

/* DDPRUN_COLL_TEST_EXTRA: 1 when rank must issue its extra all-reduce
 * as it begins the step of index step (0 for the first; STEP - 1), on
 * the job's first attempt; announces it on stderr then. */
int dr_fault_coll_extra_due(uint32_t rank, uint64_t step);

/* DDPRUN_SPIN_TEST: on its rank, as it begins the step of index step
 * (STEP - 1), on the job's first attempt, announces itself on stderr and
 * spins on the CPU forever (until a signal ends the process); returns at
 * once elsewhere. */
void dr_fault_spin(uint32_t rank, uint64_t step);

/* DDPRUN_OVERFLOW_TEST, DDPRUN_OVERFLOW_TEST_SUM: the value that the
 * first gradient element of rank's first bucket takes at the step of
 * index step, before the overflow checks and the compression: +inf, or
 * 60000 x world (60000 after the pre-division by the world size, finite
 * in fp16; the sum of two is not); 0 for none. Announced on stderr. */
float dr_fault_overflow_value(uint32_t rank, uint32_t world, uint64_t step);

/* DDPRUN_SMOKE_TEST_BREAK: 1 when it names check ("ckpt"), so that
 * --smoke finds that check failing. */
int dr_fault_smoke_break(const char *check);

/* The variables for train --help: *n entries, static. */
typedef struct {
  const char *name;    /* "DDPRUN_CKPT_TEST_KILL_AT" */
  const char *value;   /* its syntax: "STEP[:RANK]" */
  const char *meaning; /* one sentence or two */
} dr_fault_var_t;
const dr_fault_var_t *dr_fault_vars(int *n);

#endif /* DR_FAULT_INJECT_H */
