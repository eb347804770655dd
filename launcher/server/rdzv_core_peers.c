/* The checkpoints' peers of a running generation's nodes (rdzv_core.h):
 * each node's next replicas and, for a node that lacks the newest
 * checkpoint, the next holders of it. The round's nodes with a checkpoint
 * port and its holders are indexed once, as the round completes, so that
 * an ASSIGN costs a binary search and not a walk over the round: at
 * 12,500 nodes without checkpoints the walk for each of them had doubled
 * the time to assign them all. */
#include "rdzv_internal.h"

#include <stdlib.h>

/* The record of node k in out[0..*n), added with role when missing. */
static void add_peer(const dr_rdzv_t *r, size_t k, uint32_t role,
                     dr_peer_rec_t *out, size_t *n, size_t max) {
  const dr_node_t *x = r->round[k];
  for (size_t i = 0; i < *n; i++)
    if (out[i].node_rank == x->node_rank) {
      out[i].roles |= role;
      return;
    }
  if (*n == max)
    return;
  dr_peer_rec_t p = {x->node_rank, x->ckpt_port, role, x->ckpt_step,
                     dr_str(x->addr)};
  out[(*n)++] = p;
}

void dr__rdzv_peers_index(dr_rdzv_t *r) {
  size_t nn = r->n_round;
  uint64_t newest = r->asg.ckpt_step;
  r->n_ck_ports = r->n_ck_holders = 0;
  if (nn > r->cap_ck) {
    uint32_t *a = realloc(r->ck_ports, nn * sizeof(*a));
    uint32_t *b = a != NULL ? realloc(r->ck_holders, nn * sizeof(*b)) : NULL;
    if (a != NULL)
      r->ck_ports = a;
    if (b == NULL) {
      r->ck_indexed = 0; /* dr_rdzv_peers walks the round instead */
      return;
    }
    r->ck_holders = b;
    r->cap_ck = nn;
  }
  for (size_t k = 0; k < nn; k++) {
    const dr_node_t *x = r->round[k];
    if (x->ckpt_port == 0)
      continue;
    r->ck_ports[r->n_ck_ports++] = (uint32_t)k;
    if (newest != DR_NONE && x->ckpt_step == newest)
      r->ck_holders[r->n_ck_holders++] = (uint32_t)k;
  }
  r->ck_indexed = 1;
  r->ck_gen = r->gen;
}

void dr__rdzv_peers_free(dr_rdzv_t *r) {
  free(r->ck_ports);
  free(r->ck_holders);
  r->ck_ports = r->ck_holders = NULL;
  r->n_ck_ports = r->n_ck_holders = r->cap_ck = 0;
  r->ck_indexed = 0;
}

/* Adds up to limit of the nodes listed in idx[0..n) (ascending round
 * indices), the first after `self` on, cyclically, self excepted. */
static void add_next(const dr_rdzv_t *r, const uint32_t *idx, size_t n,
                     size_t self, size_t limit, uint32_t role,
                     dr_peer_rec_t *out, size_t *n_out, size_t max) {
  size_t lo = 0, hi = n;
  while (lo < hi) { /* the first entry above self */
    size_t mid = lo + (hi - lo) / 2;
    if (idx[mid] <= self)
      lo = mid + 1;
    else
      hi = mid;
  }
  size_t added = 0;
  for (size_t i = 0; i < n && added < limit; i++) {
    size_t k = idx[(lo + i) % n];
    if (k == self)
      continue;
    add_peer(r, k, role, out, n_out, max);
    added++;
  }
}

size_t dr_rdzv_peers(const dr_rdzv_t *r, uint32_t node_rank,
                     dr_peer_rec_t *out, size_t max) {
  size_t nn = r->n_round, n = 0;
  if (r->state != DR_JOB_RUNNING || node_rank >= nn)
    return 0;
  uint64_t newest = r->asg.ckpt_step;
  int lacks = newest != DR_NONE && r->round[node_rank]->ckpt_step != newest;
  /* The index is the round's only if made for this generation: one taken
   * back after a restart of the server (a state file, claims) has none. */
  if (r->ck_indexed && r->ck_gen == r->gen && r->cap_ck >= nn) {
    add_next(r, r->ck_ports, r->n_ck_ports, node_rank, DR_PEERS_REPLICAS,
             DR_PEER_REPLICA, out, &n, max);
    if (lacks)
      add_next(r, r->ck_holders, r->n_ck_holders, node_rank,
               DR_PEERS_HOLDERS, DR_PEER_HOLDER, out, &n, max);
    return n;
  }
  /* No index (it could not be allocated): the walk. */
  size_t replicas = 0;
  for (size_t d = 1; d < nn && replicas < DR_PEERS_REPLICAS; d++) {
    size_t k = (node_rank + d) % nn;
    if (r->round[k]->ckpt_port == 0)
      continue;
    add_peer(r, k, DR_PEER_REPLICA, out, &n, max);
    replicas++;
  }
  if (!lacks)
    return n;
  size_t holders = 0;
  for (size_t d = 1; d < nn && holders < DR_PEERS_HOLDERS; d++) {
    size_t k = (node_rank + d) % nn;
    if (r->round[k]->ckpt_step != newest || r->round[k]->ckpt_port == 0)
      continue;
    add_peer(r, k, DR_PEER_HOLDER, out, &n, max);
    holders++;
  }
  return n;
}
