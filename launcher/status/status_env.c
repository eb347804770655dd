/* `ddprun status --env`: each node's environment summary as its agent
 * read it at its start (GPUs, each local rank's binding, NCCL,
 * InfiniBand/RoCE, the NCCL and torch variables) and its JOIN carried it
 * to the server: the same lines it printed on its own console, side by
 * side for every node. */
#include <stdio.h>

#include "status_internal.h"

const dr_bytes_t *dr__status_env_of(const dr_status_report_t *r, size_t i) {
  if (i >= r->n_envs || r->envs[i].text.len == 0)
    return NULL;
  return &r->envs[i].text;
}

void dr__status_print_env(const dr_status_report_t *r) {
  for (size_t i = 0; i < r->n_nodes; i++) {
    const dr_node_rec_t *x = &r->nodes[i];
    char node[16], host[DR_HOST_MAX + 1];
    if (x->node_rank == DR_NO_RANK)
      snprintf(node, sizeof(node), "-");
    else
      snprintf(node, sizeof(node), "%u", x->node_rank);
    printf("node %s (%s)%s:\n", node,
           dr__status_host_cell(x->host, host, sizeof(host)),
           x->state == DR_NS_WAITING ? ", waiting for the next round" : "");
    const dr_bytes_t *t = dr__status_env_of(r, i);
    if (t == NULL)
      printf("  (not known to this server)\n");
    else
      dr__status_put_lines("  ", t->p, t->len);
  }
}
