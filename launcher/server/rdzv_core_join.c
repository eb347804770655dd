/* JOIN: the refusals, a node's record, a place in the forming round or in
 * the wait for the next one. Rounds themselves are in rdzv_core.c. */
#include "rdzv_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "events.h"
#include "log.h"

/* ---- requests ---------------------------------------------------------- */

static dr_node_t *holder_of(dr_rdzv_t *r, uint64_t rank) {
  if (r->state == DR_JOB_FORMING)
    return r->rank_holder[rank];
  for (size_t i = 0; i < r->n_round; i++)
    if (r->round[i]->req_rank == rank)
      return r->round[i];
  for (size_t i = 0; i < r->n_waiting; i++)
    if (r->waiting[i]->req_rank == rank)
      return r->waiting[i];
  return NULL;
}

/* b as a C string in out[cap], cut to fit (no format: one per JOIN). */
static void copy_str(char *out, size_t cap, dr_bytes_t b) {
  size_t n = b.len < cap - 1 ? b.len : cap - 1;
  memcpy(out, b.p, n);
  out[n] = '\0';
}

static dr_node_t *node_new(dr_rdzv_t *r, dr_rdzv_peer_t *p,
                           const dr_join_t *j, uint32_t req) {
  dr_node_t *n = calloc(1, sizeof(*n));
  if (n == NULL)
    return NULL;
  if (j->bootstrap_offer.len > 0) {
    n->boot = malloc(j->bootstrap_offer.len);
    if (n->boot == NULL) {
      free(n);
      return NULL;
    }
    memcpy(n->boot, j->bootstrap_offer.p, j->bootstrap_offer.len);
    n->boot_len = j->bootstrap_offer.len;
  }
  if (j->env.len > 0) {
    n->env = malloc(j->env.len);
    if (n->env == NULL) {
      free(n->boot);
      free(n);
      return NULL;
    }
    memcpy(n->env, j->env.p, j->env.len);
    n->env_len = j->env.len;
  }
  /* Printable, for the log and the events: an interface name is. */
  size_t k = 0;
  for (uint32_t i = 0; i < j->socket_ifname.len &&
                       k + 1 < sizeof(n->socket_ifname); i++) {
    uint8_t c = j->socket_ifname.p[i];
    n->socket_ifname[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  n->socket_ifname[k] = '\0';
  n->peer = p;
  n->prev_rank = p->prev_rank;
  n->join_req = req;
  n->arrival = ++r->arrivals;
  copy_str(n->host, sizeof(n->host), j->host);
  if (j->addr.len > 0)
    copy_str(n->addr, sizeof(n->addr), j->addr);
  else
    copy_str(n->addr, sizeof(n->addr), dr_str(p->ip));
  n->nproc = j->nproc;
  n->req_rank = j->node_rank;
  n->port_offer = j->master_port_offer;
  n->ckpt_port = j->ckpt_port;
  n->ckpt_step = j->ckpt_step;
  n->standby_port = j->standby_port;
  n->hosts_server = j->hosts_server != 0;
  return n;
}

int dr__rdzv_refuse_if_done(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req) {
  if (r->state != DR_JOB_DONE)
    return 0;
  dr__rdzv_error(r, p, req, DR_ESTOPPED, "job '%s' has ended (exit code "
                 "%d): %s", r->cfg.run_id, r->exit_code, r->stop_reason);
  return 1;
}

int dr__rdzv_is_run(const dr_rdzv_t *r, dr_bytes_t run_id) {
  return run_id.len == strlen(r->cfg.run_id) &&
         memcmp(run_id.p, r->cfg.run_id, run_id.len) == 0;
}

/* The refusals of a JOIN, in the order they are checked; 1 when refused. */
static int join_refused(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                        const dr_join_t *j, const char *host) {
  if (j->nproc == 0 || j->master_port_offer > 65535) {
    dr__rdzv_error(r, p, req, DR_EBADARG,
                   "JOIN needs nproc >= 1 and a port offer <= 65535");
    return 1;
  }
  if (j->nproc > DR_MAX_NPROC) {
    dr__rdzv_error(r, p, req, DR_EBADARG, "node '%s' asked for nproc %u; at "
                   "most %u workers per node", host, j->nproc, DR_MAX_NPROC);
    return 1;
  }
  if (dr__rdzv_refuse_if_done(r, p, req))
    return 1;
  if (!dr__rdzv_is_run(r, j->run_id)) {
    dr__rdzv_error(r, p, req, DR_ERUNID, "node '%s' joined with run id "
                   "'%.*s'; this job is '%s'", host, (int)j->run_id.len,
                   (const char *)j->run_id.p, r->cfg.run_id);
    return 1;
  }
  if (p->node != NULL || p->claiming) {
    dr__rdzv_error(r, p, req, DR_ESEQUENCE, "this connection already "
                   "joined generation %" PRIu64, r->gen);
    return 1;
  }
  if (j->node_rank != DR_NONE && j->node_rank >= r->cfg.max_nodes) {
    dr__rdzv_error(r, p, req, DR_EBADRANK, "node '%s' asked for node rank %"
                   PRIu64 ", but the job has at most %u nodes (ranks 0..%u)",
                   host, j->node_rank, r->cfg.max_nodes,
                   r->cfg.max_nodes - 1);
    return 1;
  }
  if (!r->cfg.allow_mixed_nproc && r->job_nproc != 0 &&
      j->nproc != r->job_nproc) {
    dr__rdzv_error(r, p, req, DR_ENPROC, "node '%s' has nproc-per-node %u; "
                   "the job's other nodes have %u", host, j->nproc,
                   r->job_nproc);
    return 1;
  }
  if (j->node_rank != DR_NONE) {
    dr_node_t *h = holder_of(r, j->node_rank);
    if (h != NULL) {
      dr__rdzv_error(r, p, req, DR_EDUPRANK, "node rank %" PRIu64 " "
                     "requested by '%s' is already held by '%s' (%s)",
                     j->node_rank, host, h->host, dr__rdzv_node_peer(h));
      return 1;
    }
  }
  size_t members = r->n_round + r->n_waiting;
  if (members >= r->cfg.max_nodes) {
    dr__rdzv_error(r, p, req, DR_EFULL, "job '%s' already has its maximum "
                   "of %u nodes; node '%s' is not needed", r->cfg.run_id,
                   r->cfg.max_nodes, host);
    return 1;
  }
  /* The world over every member and this node, summed only when it may
   * be over the bound: never a pass over the members per JOIN, which
   * would make a round of N nodes cost N^2. */
  uint64_t most = j->nproc > r->nproc_max ? j->nproc : r->nproc_max;
  uint64_t world = (uint64_t)(members + 1) * most;
  if (world > DR_MAX_WORLD) {
    world = j->nproc;
    for (size_t i = 0; i < r->n_round; i++)
      world += r->round[i]->nproc;
    for (size_t i = 0; i < r->n_waiting; i++)
      world += r->waiting[i]->nproc;
  }
  if (world > DR_MAX_WORLD) {
    dr__rdzv_error(r, p, req, DR_EFULL, "node '%s' with nproc %u would make "
                   "the job's world size %" PRIu64 ", over the bound of %u "
                   "ranks", host, j->nproc, world, DR_MAX_WORLD);
    return 1;
  }
  return 0;
}

void dr_rdzv_join(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                  const dr_join_t *j, uint64_t now) {
  r->now = now;
  char host[256];
  copy_str(host, sizeof(host), j->host);
  if (join_refused(r, p, req, j, host) || dr__term_refuse(r, p, req, j->term)) {
    r->joins_refused++;
    return;
  }
  dr_node_t *n = node_new(r, p, j, req);
  int rc = n == NULL ? -ENOMEM
           : r->state == DR_JOB_FORMING
               ? dr__rdzv_list_push(&r->round, &r->n_round, &r->cap_round, n)
               : dr__rdzv_list_push(&r->waiting, &r->n_waiting, &r->cap_waiting, n);
  if (rc != 0) {
    if (n != NULL)
      dr__rdzv_node_free(n);
    dr__rdzv_error(r, p, req, -ENOMEM, "out of memory");
    r->joins_refused++;
    return;
  }
  p->node = n;
  if (r->job_nproc == 0)
    r->job_nproc = j->nproc;
  if (j->nproc > r->nproc_max)
    r->nproc_max = j->nproc;
  if (r->cfg.events) {
    char ehost[300];
    dr__rdzv_event(r, r->state == DR_JOB_FORMING ? "join" : "node_joined",
                   ",\"gen\":%" PRIu64 ",\"node_host\":\"%s\",\"peer\":\"%s\","
                   "\"nproc\":%u", r->gen,
                   dr_json_escape(n->host, ehost, sizeof(ehost)), p->addr,
                   n->nproc);
  }
  if (r->state == DR_JOB_FORMING) {
    if (n->req_rank != DR_NONE)
      r->rank_holder[n->req_rank] = n;
    DR_DEBUG("node '%s' (%s) joined round %" PRIu64 " (%zu of %u)", n->host,
             p->addr, r->gen, r->n_round, r->cfg.max_nodes);
    dr__rdzv_round_changed(r);
    dr__rdzv_update_last_call(r);
    dr__rdzv_try_complete(r);
    return;
  }
  if (r->claiming)
    return; /* taken in once the claims are decided (rdzv_core_resume.c) */
  char reason[512];
  snprintf(reason, sizeof(reason),
           "node '%s' (%s) joined; restarting to take it in", n->host,
           p->addr);
  dr__rdzv_restart_all(r, reason);
}

