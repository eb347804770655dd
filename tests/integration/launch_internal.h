/* Internals of launch_harness.h, shared by its files: launch_proc.c (the
 * processes and their output), launch_ports.c, launch_marker.c (a test's
 * processes found in /proc) and launch_fixture.c. */
#ifndef DR_LAUNCH_INTERNAL_H
#define DR_LAUNCH_INTERNAL_H

#include "launch_harness.h"

/* Waits for p (blocking) and records its status and exit time. */
void dr__l_reap(dr_l_proc_t *p);
/* Closes p's pidfd and frees p with its captured output. */
void dr__l_proc_free(dr_l_proc_t *p);

#endif /* DR_LAUNCH_INTERNAL_H */
