/* Internals of `ddprun status`, shared by its files: status_cmd.c (the
 * command line and the request), status_report.c (the answer decoded, the
 * slowest rank found), status_text.c (the tables), status_stacks.c (the
 * ranks grouped by where their stacks are), status_env.c (the nodes'
 * environment summaries) and status_json.c (--json).
 *
 * Everything shown comes from the server, which holds what the agents
 * report over their own connections, and is taken as untrusted: its texts
 * are read only within their lengths (they carry no NUL) and printed with
 * control bytes escaped, so that a broken or hostile server can neither
 * read this process's memory out nor drive the user's terminal. */
#ifndef DR_STATUS_INTERNAL_H
#define DR_STATUS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* The command line, parsed. */
typedef struct {
  char host[256];
  uint16_t port;
  const char *run_id;
  const char *secret_file;
  int stacks, json, env;
  uint32_t timeout_ms, stacks_ms;
} dr_status_args_t;

/* A STATUS answer, decoded. Its records borrow the message's bytes: valid
 * while the message is. */
typedef struct {
  dr_job_status_t js;
  dr_node_rec_t *nodes;
  dr_rank_rec_t *ranks;
  dr_stack_rec_t *stacks;
  dr_env_rec_t *envs; /* none, or one per node, envs[i] nodes[i]'s */
  size_t n_nodes, n_ranks, n_stacks, n_envs;
  int slowest; /* index into ranks, -1: none */
  double behind; /* its steps behind the fastest, at one moment */
  uint64_t rss_median; /* of the ranks whose RSS is known; DR_NONE: fewer
                          than two of them */
  int have_gpu;        /* some rank has a GPU figure (NVML on its node) */
} dr_status_report_t;

/* A rank is named when its RSS is more than this fraction above the
 * median of the job's ranks, a GPU when more than this fraction of its
 * memory is in use. */
#define DR_STATUS_RSS_ABOVE 0.10
#define DR_STATUS_GPU_FULL 0.90

/* status_report.c */

/* Decodes m into r and names the slowest rank. 0, DR_EFIELD or -ENOMEM;
 * free r with dr__status_report_free whatever it returns. */
int dr__status_decode(const dr_msg_t *m, dr_status_report_t *r);
void dr__status_report_free(dr_status_report_t *r);
/* 1 when x's step is not advancing (stopped, or unchanged for long). */
int dr__status_stale(const dr_rank_rec_t *x);
/* How far x's RSS is above the job's median, as a fraction (0.24: 24%
 * above), when it is more than DR_STATUS_RSS_ABOVE; else 0. */
double dr__status_rss_above(const dr_status_report_t *r,
                            const dr_rank_rec_t *x);
/* The fraction of the memory of x's GPU in use, when it is more than
 * DR_STATUS_GPU_FULL; else 0. */
double dr__status_gpu_full(const dr_rank_rec_t *x);
/* The node of that node rank, not one waiting for the next round; or
 * NULL. */
const dr_node_rec_t *dr__status_node_of(const dr_status_report_t *r,
                                        uint32_t node_rank);

/* status_text.c */

/* The tables on stdout: the job, its nodes, its ranks and the slowest,
 * then (with --stacks) the stacks. */
void dr__status_print_table(const dr_status_args_t *a,
                            const dr_status_report_t *r);
/* "2.1 GiB", "245 MiB", "812 KiB"; "-" for DR_NONE. Returns out. */
const char *dr__status_size(uint64_t bytes, char *out, size_t n);
/* A host for a table cell: printable, cut to fit; returns out. */
const char *dr__status_host_cell(dr_bytes_t h, char *out, size_t n);
/* A text of lines from the server on stdout: each line escaped after
 * indent, each ended by a newline (the last one too, when the text lacks
 * it). */
void dr__status_put_lines(const char *indent, const void *p, size_t n_bytes);

/* status_stacks.c */

/* The ranks grouped by where they are, over every node, then each one's
 * full stacks, on stdout. */
void dr__status_print_stacks(const dr_status_report_t *r);
/* Where rank x is, from its stack's "where:" line, else why none. out
 * holds the server's bytes as they are: escape them where printed. */
void dr__status_stack_where(const dr_stack_rec_t *x, char *out, size_t n);

/* status_env.c */

/* Node nodes[i]'s summary: its text, or NULL when the server has none
 * (it took the job over since the node joined). */
const dr_bytes_t *dr__status_env_of(const dr_status_report_t *r, size_t i);
/* Each node's summary on stdout, "node N (HOST):" then its lines. */
void dr__status_print_env(const dr_status_report_t *r);

/* status_json.c */

/* The report as one JSON object on stdout. */
void dr__status_print_json(const dr_status_args_t *a,
                           const dr_status_report_t *r);

#endif /* DR_STATUS_INTERNAL_H */
