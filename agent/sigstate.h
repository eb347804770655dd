/* What a process does with a signal, from /proc/PID/status: used to hold
 * a forwarded signal until a worker is ready for it (sighold.c). */
#ifndef DR_SIGSTATE_H
#define DR_SIGSTATE_H

#include <sys/types.h>

/* 1 when SIG's default action ends a process and a handler can be waited
 * for (not SIGKILL, not the ignored or stopping signals). */
int dr_sig_default_ends(int sig);

/* What a process does with a signal now. */
enum {
  DR_SIG_DEFAULT = 0, /* the default action */
  DR_SIG_HANDLED = 1, /* caught or ignored */
  DR_SIG_BLOCKED = 2  /* blocked, neither caught nor ignored: for good
                         (sigwait, signalfd), or for a moment (a shell or
                         posix_spawn blocks every signal around a fork) */
};

/* From /proc/PID/status: a DR_SIG_* value, or -errno (-ENOENT: gone). */
int dr_proc_sig_ready(pid_t pid, int sig);

/* The same from the status file's TEXT; -EINVAL when a mask is missing
 * or malformed or SIG is out of range. */
int dr_proc_status_sig_ready(const char *text, int sig);

#endif /* DR_SIGSTATE_H */
