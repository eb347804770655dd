/* Progress slots: how a worker tells its agent, cheaply, that it is still
 * making progress. The agent creates a small file of one 64-byte slot per
 * local rank in its private directory and names it in the worker's
 * environment (DDPRUN_PROGRESS_FILE); the worker maps it and stores its step
 * count in its slot (LOCAL_RANK) after every step. The agent polls the
 * slots: a worker whose count stopped changing for --hang-timeout seconds
 * is treated as failed. Workers that never report are never judged. */
#ifndef DR_PROGRESS_H
#define DR_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#define DR_PROGRESS_SLOT_BYTES 64

typedef struct {
  uint64_t seq;  /* increases with every report; 0 = never reported */
  uint64_t step; /* the worker's own step count */
} dr_progress_sample_t;

typedef struct dr_progress dr_progress_t;

/* Agent side: creates (or reuses) path with n slots, zeroed. */
int dr_progress_create(const char *path, uint32_t n, dr_progress_t **out);
/* Zeroes slot i (before a worker starts in it). */
void dr_progress_reset(dr_progress_t *p, uint32_t i);
dr_progress_sample_t dr_progress_read(const dr_progress_t *p, uint32_t i);
void dr_progress_close(dr_progress_t **p);

/* Worker side: maps DDPRUN_PROGRESS_FILE and picks slot LOCAL_RANK.
 * Returns NULL (and reports nothing) when not run by ddprun. */
dr_progress_t *dr_progress_attach_env(void);
void dr_progress_report(dr_progress_t *p, uint64_t step);

#endif /* DR_PROGRESS_H */
