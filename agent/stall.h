/* The stall rule of --hang-timeout S, apart from /proc and the event loop
 * so that it can be tested on made-up samples (docs/ddprun.md, "Hangs").
 *
 * Progress. A rank that reports (its progress slot is marked, as train and
 * python/ddprun_progress do) progresses when its report count changes. Any
 * other rank progresses while its processes (its process group) use CPU
 * time, or its GPU is busy: it is quiet once they have used less than 1% of
 * one CPU (at least 2 clock ticks) over the last S seconds and its GPU ran
 * nothing; a rank quiet for S is stalled. The 1% absorbs the wake-ups of
 * threads that wait (PyTorch's and train's waiting ranks use 0 to 1 tick a
 * second).
 *
 * The culprit. Among the stalled ranks of a node, named at once:
 *   1. a rank whose processes are stopped (SIGSTOP, a debugger);
 *   2. a rank sleeping or in disk I/O, by its stack or state;
 *   3. a rank busy on the CPU (25% of a CPU or more over the last 2 s),
 *      unless its stack is in a collective (a rank that spins while it
 *      waits);
 *   4. a rank that is not in a collective while another local rank is;
 *   and, though not stalled itself,
 *   5. a rank that does not report and is busy outside a collective while
 *      a local peer is stalled and idle (the peers wait for it).
 * Otherwise every stalled rank waits (in a collective, or on something the
 * stacks do not name): the culprit may be on another node, whose agent
 * names it first; the rank quiet longest is named once it has been quiet
 * for the waiting time (1.5 S plus the time allowed for stacks). */
#ifndef DR_STALL_H
#define DR_STALL_H

#include <stddef.h>
#include <stdint.h>

#include "pgstat.h"
#include "stacks.h"

#define DR_STALL_RING 64
#define DR_STALL_BUSY_PCT 25     /* of one CPU: busy */
#define DR_STALL_BUSY_OVER_MS 2000

typedef struct {
  uint32_t timeout_ms; /* S */
  long hz;             /* clock ticks per second */
} dr_stall_cfg_t;

/* One rank's recent CPU use: a ring of (time, activity) samples. Activity
 * counts the clock ticks its processes used, plus the allowance whenever
 * its members changed (a process started or ended: something happened). */
typedef struct {
  uint64_t t_ms[DR_STALL_RING];
  uint64_t act[DR_STALL_RING];
  unsigned head, n;      /* newest at head - 1 */
  uint64_t act_now, now_ms, start_ms;
  uint64_t prev_ticks;
  uint32_t prev_members, prev_id;
  int have_prev;
  uint64_t gpu_busy_ms;  /* the last sample with its GPU busy; 0: never */
  int stopped, disk_wait;
  char leader_state;
} dr_stall_t;

/* The CPU a quiet rank may still use over S, in clock ticks. */
uint64_t dr_stall_allowance(const dr_stall_cfg_t *c);

void dr_stall_start(dr_stall_t *s, uint64_t now_ms);
/* Adds a sample taken at now_ms; gpu_busy: 1 busy, 0 not or unknown. */
void dr_stall_sample(dr_stall_t *s, const dr_stall_cfg_t *c, uint64_t now_ms,
                     const dr_pgstat_t *g, int gpu_busy);
/* How long the rank has used less than the allowance (and no GPU), to the
 * resolution of the samples. */
uint64_t dr_stall_quiet_ms(const dr_stall_t *s, const dr_stall_cfg_t *c);
/* Percent of one CPU its processes used over about the last over_ms. */
unsigned dr_stall_cpu_pct(const dr_stall_t *s, const dr_stall_cfg_t *c,
                          uint64_t over_ms);

/* ---- the verdict -------------------------------------------------------- */

typedef enum {
  DR_WHY_NONE = 0,
  DR_WHY_STOPPED,
  DR_WHY_SLEEPING,
  DR_WHY_DISK,
  DR_WHY_BUSY,
  DR_WHY_OFF_COLLECTIVE,
  DR_WHY_BUSY_PEERS_WAIT,
  DR_WHY_WAITED
} dr_stall_why_t;

typedef struct {
  int alive;
  int reports;       /* judged by its reports */
  uint64_t quiet_ms; /* no progress for this long (0: not judged yet) */
  int stopped, disk_wait, busy;
  dr_place_t place;  /* from its stack; DR_PLACE_UNKNOWN without one */
} dr_rank_view_t;

typedef struct {
  int stalled;       /* how many ranks are stalled */
  int named;         /* the index of the rank named, or -1 */
  dr_stall_why_t why;
} dr_verdict_t;

/* Applies the rules to n ranks. wait_ms: when a waiting rank is named.
 * lenient (--hang-timeout auto): a busy rank is at work, never a culprit
 * (rules 3 and 5 are off: a long evaluation or checkpoint on one rank
 * while the others wait is not a hang), and a waiting rank is named only
 * when every rank is stalled. */
dr_verdict_t dr_stall_judge(const dr_rank_view_t *v, size_t n,
                            uint64_t timeout_ms, uint64_t wait_ms,
                            int lenient);

/* "stopped (SIGSTOP or a debugger)", ... */
const char *dr_stall_why_text(dr_stall_why_t why);

#endif /* DR_STALL_H */
