/* Reading what probe workers printed through ddprun, and checking it
 * against the environment contract of DESIGN.md. */
#ifndef DR_LAUNCH_PROBE_H
#define DR_LAUNCH_PROBE_H

#include <stddef.h>

#include "launch_harness.h"

#define DR_LP_UNSET (-999999) /* a number the probe printed as UNSET */
#define DR_LP_MAX 64          /* probes one check handles */

/* One PROBE line, as forwarded by ddprun: "[rankP]:PROBE k=v ...". */
typedef struct {
  long prefix_rank; /* P of the [rankP]: prefix ddprun added */
  size_t node;      /* index of the ddprun process it came from */
  long rank, local_rank, world, local_world;
  long group_rank, group_world, role_rank, role_world;
  char role[64];
  char master_addr[128];
  long master_port;
  long restart, max_restarts;
  char run_id[128];
  char agent_store[16];
  char omp[16];
  long pid;
  long port_free;
  long gen, node_rank, nnodes;
  char endpoint[160];
  char bootstrap[32];
  char error_file[320];
  char torch_error_file[320];
} dr_lp_t;

/* Parses every PROBE line of text (ddprun's stdout) into out[n..max) with
 * node set to node; returns the new count. Fails the test on a PROBE line
 * it cannot read. */
size_t dr_lp_parse(const char *text, size_t node, dr_lp_t *out, size_t n,
                   size_t max);

/* What a job should have given its workers. */
typedef struct {
  long nnodes;
  long nproc;         /* per node */
  const char *run_id; /* NULL: any, the same on every rank */
  const char *role;   /* ROLE_NAME */
  long max_restarts;
  const char *master_addr; /* NULL: any, the same on every rank */
  long master_port;        /* 0: any, the same on every rank */
  const char *omp;         /* OMP_NUM_THREADS as printed ("1", "UNSET") */
  const long *node_ranks;  /* per ddprun process, or NULL: any */
} dr_lp_expect_t;

/* Checks the contract over the probes of all nodes of one job; fails the
 * test naming the first violation. */
void dr_lp_check(const dr_lp_t *p, size_t n, const dr_lp_expect_t *e);

#endif /* DR_LAUNCH_PROBE_H */
