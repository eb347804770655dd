/* What a process does with a signal, from /proc/PID/status: used to hold
 * a forwarded signal until a worker is ready for it (sighold.c). */
#ifndef DR_SIGSTATE_H
#define DR_SIGSTATE_H

#include <sys/types.h>

/* 1 when SIG's default action ends a process and a handler can be waited
 * for (not SIGKILL, not the ignored or stopping signals). */
int dr_sig_default_ends(int sig);

/* From /proc/PID/status: 1 when the process catches, ignores or blocks
 * SIG, 0 when SIG would take its default action, -errno (-ENOENT: gone). */
int dr_proc_sig_ready(pid_t pid, int sig);

/* The same from the status file's TEXT; -EINVAL when a mask is missing
 * or malformed or SIG is out of range. */
int dr_proc_status_sig_ready(const char *text, int sig);

#endif /* DR_SIGSTATE_H */
