/* `ddprun status --env`: every node's environment summary, as its JOIN
 * carried it, in JOB_STATUS's env records (wire.h, "Records"), one per
 * node record and in their order. A node the server has no summary of (a
 * place taken back by a RESUME after the server restarted or took the job
 * over) gets an empty text. */
#include "server_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* What the summaries of one answer may take together: well within a
 * client's frame cap beside the stacks' share (32 MiB) and the nodes and
 * ranks. Past 1,024 nodes each is cut to its share, at the end of a
 * line: at 12,500 nodes, some 670 bytes, the first lines of each. */
#define ENV_REPLY_MAX_BYTES (8u << 20)

/* The first bytes of n's summary within share, ending with a whole line
 * where one fits. */
static dr_bytes_t env_text(const dr_node_t *n, size_t share) {
  dr_bytes_t t = {(const uint8_t *)n->env, n->env != NULL ? n->env_len : 0};
  if (t.len <= share)
    return t;
  uint32_t k = (uint32_t)share;
  while (k > 0 && t.p[k - 1] != '\n')
    k--;
  t.len = k > 0 ? k : (uint32_t)share;
  return t;
}

int dr__status_env_recs(const dr_server_t *s, const dr_node_rec_t *nodes,
                        size_t n_nodes, dr_env_rec_t **out) {
  const dr_rdzv_t *r = &s->rdzv;
  *out = NULL;
  if (n_nodes != r->n_round + r->n_waiting)
    return -EINVAL; /* not the nodes collected from this core */
  dr_env_rec_t *v = malloc((n_nodes > 0 ? n_nodes : 1) * sizeof(*v));
  if (v == NULL)
    return -ENOMEM;
  size_t share = ENV_REPLY_MAX_BYTES / (n_nodes > 0 ? n_nodes : 1);
  if (share > DR_ENV_SUMMARY_MAX)
    share = DR_ENV_SUMMARY_MAX;
  for (size_t i = 0; i < n_nodes; i++) {
    const dr_node_t *n = i < r->n_round ? r->round[i]
                                        : r->waiting[i - r->n_round];
    v[i].node_rank = nodes[i].node_rank;
    v[i].text = env_text(n, share);
  }
  *out = v;
  return 0;
}
