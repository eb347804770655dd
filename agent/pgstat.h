/* The CPU time and state of process groups, read from /proc: what the
 * agent judges a worker by when it does not report progress (stall.h).
 * A worker's group is the worker and every descendant that stayed in its
 * process group (ddprun starts each worker as a group leader); members
 * that moved to a group of their own are not counted. */
#ifndef DR_PGSTAT_H
#define DR_PGSTAT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
  uint64_t cpu_ticks;  /* utime + stime of every member (clock ticks; a
                          process's figure covers all its threads) */
  uint32_t n_members;  /* live members (zombies excluded) */
  uint32_t members_id; /* a hash of the members' pids: changes with them */
  int stopped;         /* a member is stopped (state T or t) */
  int job_stopped;     /* a member is stopped by a signal (state T, not
                          a tracer's t): SIGCONT wakes it */
  int disk_wait;       /* a member is in uninterruptible sleep (state D) */
  char leader_state;   /* the leader's state letter, '\0' when it is gone */
} dr_pgstat_t;

/* Scans root ("/proc" when NULL; a test's fake tree otherwise) once and
 * fills out[i] for process group pgids[i] (n of them; out[i] is zeroed
 * when the group has no live member). Returns 0, or -errno when root
 * cannot be read. */
int dr_pgstat_scan(const char *root, const pid_t *pgids, size_t n,
                   dr_pgstat_t *out);

/* The process group of pid (from root/PID/stat), or -1. */
pid_t dr_pgstat_pgrp(const char *root, pid_t pid);

/* Parses one /proc/PID/stat line: state, pgrp and utime+stime. 0, or
 * -EINVAL for a malformed line. */
int dr_pgstat_parse(const char *line, char *state, pid_t *pgrp,
                    uint64_t *ticks);

#endif /* DR_PGSTAT_H */
