/* This process's peak memory, for train's summary and final lines. */
#ifndef DR_PEAK_MEM_H
#define DR_PEAK_MEM_H

#include <stdint.h>

/* The peak resident set size of this process so far, in bytes: VmHWM of
 * /proc/self/status, or getrusage's ru_maxrss where that is missing; 0
 * when neither answers. Memory freed since still counts; the kernel's
 * figure is approximate (its per-CPU counters lag by some hundred KiB). */
uint64_t dr_peak_rss_bytes(void);

#endif /* DR_PEAK_MEM_H */
