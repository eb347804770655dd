/* PyTorch's flight recorder, read for a hang report. Every process group
 * of a PyTorch program records its last collectives with sequence numbers
 * (TORCH_FR_BUFFER_SIZE, which ddprun sets for its workers). The first
 * Python process of a rank (ddprun's start-up hook, pyboot.h) writes its
 * record as JSON (torch._C._distributed_c10d._dump_nccl_trace_json or
 * _dump_fr_trace_json) to DDPRUN_FR_DUMP when the agent creates
 * DDPRUN_FR_DUMP.request: the hook's thread does it, so a rank blocked in
 * a collective answers too. This reads the dumps and says which
 * collective each rank reached and who is missing. */
#ifndef DR_FR_H
#define DR_FR_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int have;            /* a dump was read */
  char why[160];       /* why not, when have is 0 and one was asked for */
  uint64_t seq;        /* the newest collective's sequence number */
  char name[64];       /* its profiling name: "gloo:all_reduce", ... */
  char state[24];      /* "scheduled", "started", "completed" */
  int done;            /* the process group completed it */
  char pg[64];         /* its process group's name */
} dr_fr_rank_t;

/* Asks for a dump: creates path.request (path: DDPRUN_FR_DUMP), removing
 * an older dump first. 0 or -errno. */
int dr_fr_request(const char *path);

/* Waits until path is there or deadline_ms (dr_mono_ms) passes, then
 * reads it into *out (out->why says what went wrong). 1 when read. */
int dr_fr_collect(const char *path, uint64_t deadline_ms, dr_fr_rank_t *out);

/* Reads one dump's text. 0, or -1 with out->why set. */
int dr_fr_parse(const char *json, size_t len, dr_fr_rank_t *out);

/* What the dumps of ranks[0..n) (global ranks in rank_ids) say, in one
 * line into out: "rank 0 in #4 gloo:barrier, rank 1 in #4 gloo:broadcast:
 * the ranks disagree at #4"; "" when no rank's dump was read. */
void dr_fr_verdict(const dr_fr_rank_t *ranks, const uint32_t *rank_ids,
                   size_t n, char *out, size_t len);

#endif /* DR_FR_H */
