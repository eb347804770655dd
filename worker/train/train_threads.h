/* Where the compute thread's time goes when the communication thread runs
 * beside it: per step, for train's compute thread (the one that runs the
 * step loop) and the process group's communication thread, the CPU time,
 * the time spent runnable without a CPU (run-queue wait: lost to
 * competition for the cores) and the voluntary and involuntary context
 * switches (thread_cpu.h).
 *
 * On with --trace or --thread-stats. A step's figures run from its start
 * to the next step's start (the last: to the end of the loop), so the
 * per-step work between steps (trace flush, logging, checkpoints) counts
 * in the step before it. The compute thread samples itself; the
 * communication thread is read through /proc/self/task/TID, at step
 * starts, where its queue is empty and it sleeps, so its on-CPU figure is
 * exact. BLAS worker threads (OMP_NUM_THREADS > 1) are not counted.
 *
 * In the trace, at each step's start: counter events "cpu ms", "run-queue
 * wait ms", "voluntary switches" and "involuntary switches", each with
 * the series "compute" and (world > 1) "comm". In the final line, the
 * means per step over the steps this run executed:
 *   compute_cpu_ms compute_wait_ms compute_vol_cs compute_invol_cs
 *   comm_cpu_ms comm_wait_ms comm_vol_cs comm_invol_cs thread_sample_us
 * (comm_* are 0 in a world of 1, which has no communication thread; a
 * figure that could not be measured is "-", with a one-line warning on
 * stderr; thread_sample_us is what the sampling itself cost per step). */
#ifndef DR_TRAIN_THREADS_H
#define DR_TRAIN_THREADS_H

#include <stddef.h>
#include <stdint.h>

#include "train.h"

/* Sets r->threads when --trace or --thread-stats asks, and takes the
 * first samples. Returns an exit code (out of memory). */
int dr_train_threads_open(dr_run_t *r);

/* At monotonic time now_us, the start of a step or the end of the loop:
 * the first call takes the first samples; each later one closes the
 * figures of the interval since the previous mark (its counters go into
 * the trace at that mark's time). Nothing when off. */
void dr_train_threads_mark(dr_run_t *r, uint64_t now_us);

/* " compute_cpu_ms=X ..." (the keys above) for the final line; "" when
 * off. Returns buf. */
const char *dr_train_threads_final(const dr_run_t *r, char *buf, size_t n);

void dr_train_threads_free(dr_run_t *r);

#endif /* DR_TRAIN_THREADS_H */
