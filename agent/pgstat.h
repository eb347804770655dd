/* The CPU time, memory and state of process groups, read from /proc: what
 * the agent judges a worker by when it does not report progress (stall.h),
 * and each rank's health as `ddprun status` shows it (agent_ranks.c).
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
  uint64_t rss_bytes;  /* resident bytes of every member, summed (stat's
                          rss field times the page size): pages that
                          members share (a forked DataLoader worker's
                          copy-on-write pages) count once per member, as
                          top's RES summed over them would */
} dr_pgstat_t;

/* One /proc/PID/stat line, parsed. */
typedef struct {
  char state;
  pid_t pgrp;
  uint64_t ticks;     /* utime + stime */
  uint64_t rss_pages; /* field 24; 0 when the line stops before it */
} dr_pgstat_proc_t;

/* Scans root ("/proc" when NULL; a test's fake tree otherwise) once and
 * fills out[i] for process group pgids[i] (n of them; out[i] is zeroed
 * when the group has no live member). Returns 0, or -errno when root
 * cannot be read. One pass over root for all the groups: open and read
 * one small file per process of the host. */
int dr_pgstat_scan(const char *root, const pid_t *pgids, size_t n,
                   dr_pgstat_t *out);

/* The process group of pid (from root/PID/stat), or -1. */
pid_t dr_pgstat_pgrp(const char *root, pid_t pid);

/* Parses one /proc/PID/stat line: 0, or -EINVAL for a malformed line
 * (one that stops before stime). */
int dr_pgstat_parse_proc(const char *line, dr_pgstat_proc_t *out);

/* The same for the three fields the stall rule needs. */
int dr_pgstat_parse(const char *line, char *state, pid_t *pgrp,
                    uint64_t *ticks);

/* ---- a group's use over time ---------------------------------------------
 *
 * Fed one scan of a group per sample, with the time it was taken: its
 * resident memory now and at most, and its CPU use over the last
 * DR_PGSTAT_CPU_WINDOW_MS or so. */
#define DR_PGSTAT_CPU_WINDOW_MS 2000u
#define DR_PGSTAT_UNKNOWN UINT64_MAX

typedef struct {
  uint64_t rss_bytes;      /* at the last sample that found members;
                              DR_PGSTAT_UNKNOWN before one */
  uint64_t rss_peak_bytes; /* the most of any sample; DR_PGSTAT_UNKNOWN */
  uint32_t cpu_milli;      /* thousandths of one CPU over the window that
                              ended last; UINT32_MAX before one */
  int live;                /* the last sample found members */
  /* The window that runs: its start and the group's ticks then. */
  uint64_t win_ms, win_ticks;
  int win_open;
} dr_pgstat_use_t;

/* A new group (a worker just started): nothing known. */
void dr_pgstat_use_init(dr_pgstat_use_t *u);

/* One sample g of the group at now_ms (a monotonic clock), with the
 * kernel's clock ticks per second (sysconf(_SC_CLK_TCK)). A group that
 * lost members between two samples loses their ticks from its sum: the
 * window's use is then taken as 0 where it would be negative, and the
 * next window is exact again. */
void dr_pgstat_use_sample(dr_pgstat_use_t *u, const dr_pgstat_t *g,
                          uint64_t now_ms, long clk_tck);

/* ---- the kernel's OOM killer --------------------------------------------- */

/* How many processes the kernel's OOM killer has killed since boot, on
 * the whole host (root/vmstat's oom_kill, root "/proc" when NULL; counts
 * a cgroup's memory limit too): 0 and *out, -ENOENT where the kernel does
 * not count them (before Linux 4.13), or -errno. */
int dr_pgstat_oom_kills(const char *root, uint64_t *out);

/* The same from a cgroup v2 memory.events file (its oom_kill line counts
 * the kills in the cgroup and below it): 0 and *out, -ENOENT, or -errno. */
int dr_pgstat_cgroup_oom_kills(const char *events_path, uint64_t *out);

#endif /* DR_PGSTAT_H */
