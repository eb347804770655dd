/* The agent's watchdog: a small process, started before any thread, that
 * outlives a SIGKILLed agent just long enough to SIGKILL the process
 * groups of its workers (the parent-death signal reaches only direct
 * children, not what a worker started), to remove the agent's private
 * directory and the /dev/shm entries of its workers' prefix
 * (proto/os/shm_name.h). The agent tells it what to clean through a
 * close-on-exec pipe; end of file without a "done" record means the agent
 * died. */
#ifndef DR_WATCHDOG_H
#define DR_WATCHDOG_H

#include <sys/types.h>

/* Forks the watchdog (call while the process has one thread). Returns the
 * write end of its pipe (and *pid), or -errno. */
int dr_watchdog_start(pid_t *pid);

/* Records to clean up; errors are ignored (the watchdog is best effort,
 * the agent's own clean-up comes first). fd < 0 is a no-op. */
void dr_watchdog_add_group(int fd, pid_t pgid);
void dr_watchdog_remove_group(int fd, pid_t pgid);
void dr_watchdog_set_dir(int fd, const char *path);
void dr_watchdog_set_shm_prefix(int fd, const char *prefix);

/* Normal exit: tells the watchdog to leave everything alone, closes *fd
 * (sets it to -1) and reaps the watchdog, which exits at once. */
void dr_watchdog_stop(int *fd, pid_t pid);

#endif /* DR_WATCHDOG_H */
