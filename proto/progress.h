/* Progress slots: how a worker tells its agent, cheaply, that it is still
 * making progress. The agent creates a small file of one slot per local
 * rank in its private directory and names it in the worker's environment
 * (DDPRUN_PROGRESS_FILE); the worker maps it, marks its slot (LOCAL_RANK)
 * as reporting, and stores its step count there after every step. The
 * agent polls the slots: with --hang-timeout S, a worker whose count
 * stopped changing for S seconds has hung. A worker that never marks its
 * slot is judged by the CPU time of its processes instead (agent/stall.h).
 *
 * The layout, which other languages write too (python/ddprun_progress;
 * docs/ddprun.md, "Hangs"): slot i is the DR_PROGRESS_SLOT_BYTES bytes at
 * offset i * DR_PROGRESS_SLOT_BYTES, in the host's byte order, every field
 * naturally aligned:
 *
 *   offset 0   uint64 seq     increases with every report; 0 = none yet
 *   offset 8   uint64 step    the worker's own step count
 *   offset 16  uint32 flags   DR_PROGRESS_REPORTS once the worker mapped
 *                             its slot and will report
 *   offset 20  zero           reserved
 *
 * The worker stores step, then seq with release order; the agent loads seq
 * with acquire order, then step, so that a new seq comes with its step (or
 * a later one). The agent zeroes a slot before a worker starts in it. */
#ifndef DR_PROGRESS_H
#define DR_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#define DR_PROGRESS_SLOT_BYTES 64
#define DR_PROGRESS_OFF_SEQ 0
#define DR_PROGRESS_OFF_STEP 8
#define DR_PROGRESS_OFF_FLAGS 16
#define DR_PROGRESS_REPORTS 1u

typedef struct {
  uint64_t seq;   /* increases with every report; 0 = never reported */
  uint64_t step;  /* the worker's own step count */
  uint32_t flags; /* DR_PROGRESS_REPORTS: judged by its reports */
} dr_progress_sample_t;

typedef struct dr_progress dr_progress_t;

/* Agent side: creates (or reuses) path with n slots, zeroed. */
int dr_progress_create(const char *path, uint32_t n, dr_progress_t **out);
/* Zeroes slot i (before a worker starts in it). */
void dr_progress_reset(dr_progress_t *p, uint32_t i);
dr_progress_sample_t dr_progress_read(const dr_progress_t *p, uint32_t i);
void dr_progress_close(dr_progress_t **p);

/* Worker side: maps DDPRUN_PROGRESS_FILE, picks slot LOCAL_RANK and marks
 * it DR_PROGRESS_REPORTS. Returns NULL (and reports nothing) when not run
 * by ddprun. */
dr_progress_t *dr_progress_attach_env(void);
void dr_progress_report(dr_progress_t *p, uint64_t step);

#endif /* DR_PROGRESS_H */
