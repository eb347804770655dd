/* Internals of the integration-test harnesses, shared by their files:
 * harness.h's (harness_clock.c, harness_server.c, harness_log.c,
 * harness_raw.c, harness_client.c, harness_fixture.c, harness_proto.c)
 * and launch_harness.h's, which is built on it. */
#ifndef DR_HARNESS_INTERNAL_H
#define DR_HARNESS_INTERNAL_H

#include <sys/types.h>

/* Milliseconds left until deadline (dr_h_now_ms), rounded up so that a
 * poll() does not wake a fraction of a millisecond early and spin. */
int dr__h_ms_left(double deadline);

/* pidfd_open(pid, 0), or -1 with errno (ENOSYS where the kernel headers
 * lack it). Through syscall(): the libc wrappers are newer than the
 * kernel calls. */
int dr__h_pidfd_open(pid_t pid);

/* 1 when the log at path contains needle (read up to its cap). */
int dr__h_log_has(const char *path, const char *needle);

#endif /* DR_HARNESS_INTERNAL_H */
