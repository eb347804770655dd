/* Test hooks of bind.c: where it reads /proc and /sys, and which CPUs it
 * believes this process may use. Not for the agent; not thread-safe. */
#ifndef DR_BIND_INTERNAL_H
#define DR_BIND_INTERNAL_H

#include <sched.h>

/* Prefixes every /proc and /sys path bind.c reads with root ("/tmp/x"
 * reads /tmp/x/proc/driver/nvidia/gpus). NULL or "" restores the real
 * paths. root is copied; paths longer than PATH_MAX - 64 are refused
 * (the real paths are kept) and -ENAMETOOLONG returned; else 0. */
int dr__bind_set_root(const char *root);

/* Replaces sched_getaffinity() for dr_bind_count_cpus() and
 * dr_bind_plan() with *set; NULL restores it. set is copied. */
void dr__bind_set_cpus(const cpu_set_t *set);

#endif /* DR_BIND_INTERNAL_H */
