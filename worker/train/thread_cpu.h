/* What one thread of this process got from the CPUs: its on-CPU time, how
 * long it sat runnable without a CPU (time lost to competition for the
 * cores), and its context switches, voluntary (it blocked: a sleep, a
 * futex, a read; each one is a later wake-up) and involuntary (it was
 * preempted while it still had work). Counters only grow; a figure over
 * an interval is the difference of two samples (dr_thread_cpu_sub).
 *
 * Two ways to sample:
 *   - the calling thread itself (dr_thread_cpu_self): CPU time from
 *     CLOCK_THREAD_CPUTIME_ID (ns, exact also while it runs), context
 *     switches from getrusage(RUSAGE_THREAD), the run-queue wait and the
 *     number of times it got a CPU from /proc/thread-self/schedstat;
 *   - another thread of this process by its kernel thread id
 *     (dr_thread_cpu_of): /proc/self/task/TID/schedstat (on-CPU ns,
 *     run-queue wait ns, timeslices) and /proc/self/task/TID/status
 *     (voluntary_ctxt_switches, nonvoluntary_ctxt_switches). The kernel
 *     brings a thread's on-CPU time up to date when it leaves the CPU:
 *     exact for a thread that is asleep, up to one scheduler tick behind
 *     for one that runs. Without schedstat the CPU time comes from
 *     /proc/self/task/TID/stat (utime + stime, in clock ticks: 10 ms
 *     steps) and the wait is not measured.
 *
 * What could not be read is left out of `have`, with a one-line reason;
 * each costs a few microseconds (an open, a read and a close per /proc
 * file). Any thread may call these; nothing is shared between calls.
 */
#ifndef DR_THREAD_CPU_H
#define DR_THREAD_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Bits of dr_thread_cpu_t.have. */
enum {
  DR_TCPU_CPU = 1u << 0,    /* cpu_ns */
  DR_TCPU_WAIT = 1u << 1,   /* wait_ns and slices */
  DR_TCPU_CS = 1u << 2,     /* vol_cs and invol_cs */
  DR_TCPU_COARSE = 1u << 3  /* cpu_ns in clock ticks (10 ms steps) */
};

typedef struct {
  uint64_t cpu_ns;   /* user + system time on a CPU */
  uint64_t wait_ns;  /* runnable, waiting on a run queue for a CPU */
  uint64_t slices;   /* times it was put on a CPU */
  uint64_t vol_cs;   /* it blocked (each one a later wake-up) */
  uint64_t invol_cs; /* it was preempted */
  unsigned have;     /* DR_TCPU_* bits: which fields were measured */
} dr_thread_cpu_t;

/* The kernel thread id of the calling thread (gettid). */
pid_t dr_thread_cpu_tid(void);

/* Samples the calling thread. 0 when every field was measured, else
 * -errno of the first part that was not, with why (may be NULL) saying
 * which, e.g. "cannot read /proc/thread-self/schedstat (No such file or
 * directory): run-queue wait not measured". *out is filled either way. */
int dr_thread_cpu_self(dr_thread_cpu_t *out, char *why, size_t why_len);

/* Samples thread tid of this process, as dr_thread_cpu_self. A thread
 * that has exited: -ENOENT and have == 0. */
int dr_thread_cpu_of(pid_t tid, dr_thread_cpu_t *out, char *why,
                     size_t why_len);

/* *d := b - a, field by field (a counter that went backwards gives 0);
 * d->have := what both measured. */
void dr_thread_cpu_sub(const dr_thread_cpu_t *b, const dr_thread_cpu_t *a,
                       dr_thread_cpu_t *d);

/* Internal, for tests: the parsers of the /proc files' text. 0, or
 * -EINVAL when the text does not hold the fields. */
int dr__thread_cpu_parse_schedstat(const char *text, dr_thread_cpu_t *out);
int dr__thread_cpu_parse_status(const char *text, dr_thread_cpu_t *out);
/* utime + stime of a stat line, in clock ticks. */
int dr__thread_cpu_parse_stat(const char *text, uint64_t *ticks);

#endif /* DR_THREAD_CPU_H */
