/* The agent's checkpoint plane (--ckpt-dir; docs/ddprun.md, "Checkpoints
 * in node memory"): the directory and its peer server set up before the
 * first JOIN, which says the port and the newest step; each checkpoint the
 * workers rename into DIR copied to the next nodes of the assignment; and
 * before a round's workers start, the round's newest checkpoint fetched
 * from a node that holds it when this one lacks it.
 *
 * The copies run on the plane's threads (ckpt_xfer.h, ckpt_peer.h); the
 * loop only decides and reports. */
#include "agent_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ckpt_peer.h"
#include "ckpt_store.h"
#include "ckpt_watch.h"
#include "ckpt_xfer.h"
#include "errors.h"
#include "events.h"
#include "log.h"

/* The longest wait on a peer without progress. */
#define PEER_TIMEOUT_MS 10000

struct dr_ckpt_plane {
  dr_ckpt_store_t *store;
  dr_ckpt_srv_t *srv;
  dr_xfer_t *xfer;
  dr_ckpt_watch_t *watch;
  dr_ckpt_ctx_t ctx;
  int stop_fd;
  int keep_store;       /* a thread that would not end may still use it */
  uint64_t restore_id;  /* the fetch the workers wait for, 0: none */
  uint64_t restore_ms;  /* when it was asked for (loop ms) */
};

/* ---- reports ------------------------------------------------------------ */

const char *dr__size_text(uint64_t bytes, char *out, size_t n) {
  if (bytes >= (1ull << 30))
    snprintf(out, n, "%.2f GiB", bytes / 1073741824.0);
  else if (bytes >= (1ull << 20))
    snprintf(out, n, "%.1f MiB", bytes / 1048576.0);
  else
    snprintf(out, n, "%" PRIu64 " bytes", bytes);
  return out;
}

static void pushed(dr_agent_t *ag, const dr_xfer_job_t *j) {
  (void)ag;
  char size[32];
  if (j->superseded) {
    DR_SAY(DR_LOG_DEBUG, "checkpoint %s not copied: a newer one is queued",
           j->name);
    return;
  }
  for (size_t i = 0; i < j->n_peers; i++) {
    const dr_xfer_peer_t *p = &j->peers[i];
    if (p->rc == -ECANCELED)
      continue; /* ddprun is stopping */
    if (p->rc == DR_ENOTFOUND) {
      /* Pruned (by the workers or by --ckpt-keep) before its turn: the
       * newer ones that replaced it are copied in theirs. */
      DR_SAY(DR_LOG_DEBUG, "checkpoint %s was removed before it could be "
             "copied", j->name);
      return;
    }
    if (p->rc != 0)
      DR_SAY(DR_LOG_WARN, "checkpoint %s was not copied to node %u "
             "(%s:%u): %s", j->name, p->node_rank, p->addr, p->port, p->why);
    else
      DR_SAY(DR_LOG_DEBUG, "checkpoint %s copied to node %u (%s:%u): %s in "
             "%.2f s", j->name, p->node_rank, p->addr, p->port,
             dr__size_text(j->moved.bytes, size, sizeof(size)), j->ms / 1000.0);
  }
}

/* The restore the workers wait for is over: say how, then start them. */
static void restored(dr_agent_t *ag, const dr_xfer_job_t *j) {
  struct dr_ckpt_plane *p = ag->ckpt;
  p->restore_id = 0;
  char size[32];
  if (j->served >= 0) {
    const dr_xfer_peer_t *h = &j->peers[j->served];
    DR_SAY(DR_LOG_INFO, "restored checkpoint %s (step %" PRIu64 ") from "
           "node %u (%s:%u): %s in %.2f s", j->moved.name, j->step,
           h->node_rank, h->addr, h->port,
           dr__size_text(j->moved.bytes, size, sizeof(size)), j->ms / 1000.0);
    dr_events_emit(ag->events, "restore", ",\"step\":%" PRIu64 ",\"from\":%u"
                   ",\"bytes\":%" PRIu64 ",\"ms\":%" PRIu64, j->step,
                   h->node_rank, j->moved.bytes, j->ms);
  } else if (!j->have_it) {
    char text[1500];
    size_t len = 0;
    text[0] = '\0';
    for (size_t i = 0; i < j->n_peers && len < sizeof(text); i++) {
      const dr_xfer_peer_t *h = &j->peers[i];
      int k = snprintf(text + len, sizeof(text) - len, "%snode %u (%s:%u): "
                       "%s", i > 0 ? "; " : "", h->node_rank, h->addr,
                       h->port, h->rc == 1 ? "not tried" : h->why);
      if (k > 0)
        len += (size_t)k;
    }
    uint64_t have = dr_ckpt_store_newest(p->store);
    char now[64] = "no checkpoint";
    if (have != DR_NONE)
      snprintf(now, sizeof(now), "step %" PRIu64, have);
    DR_SAY(DR_LOG_WARN, "cannot restore checkpoint step %" PRIu64 ": %s; "
           "starting the workers with %s in %s", j->step, text, now,
           dr_ckpt_store_dir(p->store));
  }
  if (ag->state == DR_AG_RUNNING && ag->w == NULL && ag->have_asg)
    dr__agent_spawn(ag);
}

static void on_job_done(void *arg, dr_xfer_job_t *j) {
  dr_agent_t *ag = arg;
  if (j->kind == DR_XFER_PUSH)
    pushed(ag, j);
  else if (ag->ckpt->restore_id == j->id)
    restored(ag, j);
  free(j);
}

/* ---- new checkpoints ---------------------------------------------------- */

/* Copies name to the first --ckpt-replicas replicas of the assignment. */
static void replicate(dr_agent_t *ag, const char *name) {
  struct dr_ckpt_plane *p = ag->ckpt;
  if (!ag->have_asg || ag->o->ckpt_replicas == 0)
    return;
  dr_xfer_job_t *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return;
  j->kind = DR_XFER_PUSH;
  snprintf(j->name, sizeof(j->name), "%s", name);
  j->origin = ag->asg.node_rank;
  for (size_t i = 0; i < ag->asg.n_peers &&
                     j->n_peers < ag->o->ckpt_replicas &&
                     j->n_peers < DR_PEERS_MAX;
       i++) {
    const dr_peer_t *q = &ag->asg.peers[i];
    if (!(q->roles & DR_PEER_REPLICA) || q->port == 0 || q->port > 65535)
      continue;
    dr_xfer_peer_t *x = &j->peers[j->n_peers++];
    snprintf(x->addr, sizeof(x->addr), "%s", q->addr);
    x->port = (uint16_t)q->port;
    x->node_rank = q->node_rank;
  }
  if (j->n_peers == 0) {
    free(j);
    return;
  }
  dr_xfer_submit(p->xfer, j);
}

static void on_renamed(void *arg, const char *name) {
  dr_agent_t *ag = arg;
  struct dr_ckpt_plane *p = ag->ckpt;
  dr__persist_nudge(ag); /* any checkpoint, a peer's copy too */
  if (name == NULL) {
    /* Events were lost: the newest of this node's own stands for them (a
     * peer that holds it says so before any byte moves). */
    dr_ckpt_item_t *a;
    size_t n;
    if (dr_ckpt_store_list(p->store, &a, &n) != 0)
      return;
    for (size_t i = 0; i < n; i++)
      if (a[i].origin == DR_CKPT_LOCAL) {
        replicate(ag, a[i].name);
        break;
      }
    free(a);
    return;
  }
  if (!dr_ckpt_store_claim(p->store, name))
    return; /* a copy this node took in from a peer */
  DR_SAY(DR_LOG_DEBUG, "new checkpoint %s in %s", name,
         dr_ckpt_store_dir(p->store));
  uint64_t step;
  dr_ckpt_store_retain(p->store,
                       dr_ckpt_name_step(name, &step) == 1 ? step : UINT64_MAX);
  replicate(ag, name);
}

/* ---- the agent's calls --------------------------------------------------- */

int dr__ckpt_start(dr_agent_t *ag) {
  const dr_agent_opts_t *o = ag->o;
  if (o->ckpt_dir == NULL)
    return 0;
  struct dr_ckpt_plane *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    DR_SAY(DR_LOG_ERROR, "out of memory");
    return -1;
  }
  ag->ckpt = p;
  p->stop_fd = -1;
  char err[600];
  int rc = dr_ckpt_store_open(o->ckpt_dir, o->ckpt_keep, &p->store, err,
                              sizeof(err));
  if (rc != 0) {
    DR_SAY(DR_LOG_ERROR, "%s", err);
    return -1;
  }
  p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (p->stop_fd < 0) {
    DR_SAY(DR_LOG_ERROR, "eventfd() failed (%s)", strerror(errno));
    return -1;
  }
  dr_ckpt_ctx_t ctx = {p->store,         o->rdzv_id,        ag->cfg->hostname,
                       ag->cfg->secret,  ag->cfg->secret_len, p->stop_fd,
                       PEER_TIMEOUT_MS};
  p->ctx = ctx;
  const char *what = "listen for checkpoint peers";
  if ((rc = dr_ckpt_srv_start(&p->ctx, 0, &p->srv)) == 0) {
    what = "start the checkpoint transfers";
    rc = dr_xfer_start(&ag->loop, &p->ctx, o->ckpt_rate, on_job_done, ag,
                       &p->xfer);
  }
  if (rc == 0) {
    what = "watch --ckpt-dir (inotify)";
    rc = dr_ckpt_watch_start(&ag->loop, o->ckpt_dir, on_renamed, ag,
                             &p->watch);
  }
  if (rc != 0) {
    DR_SAY(DR_LOG_ERROR, "cannot %s: %s", what, dr_strerror(rc));
    return -1;
  }
  uint64_t newest = dr_ckpt_store_newest(p->store);
  char step[32] = "none", rate[48] = "no cap";
  if (newest != DR_NONE)
    snprintf(step, sizeof(step), "%" PRIu64, newest);
  if (o->ckpt_rate != 0)
    snprintf(rate, sizeof(rate), "%.1f MiB/s", o->ckpt_rate / 1048576.0);
  char copies[96] = "not copied to other nodes";
  if (o->ckpt_replicas > 0)
    snprintf(copies, sizeof(copies), "%u cop%s of each on the next nodes "
             "(%s)", o->ckpt_replicas, o->ckpt_replicas == 1 ? "y" : "ies",
             rate);
  char persist[4200] = "";
  if (o->ckpt_persist != NULL)
    snprintf(persist, sizeof(persist), "; the newest persisted to %s at "
             "most every %.0f s by node 0", o->ckpt_persist,
             o->ckpt_persist_every_ms / 1000.0);
  DR_SAY(DR_LOG_INFO, "checkpoints in %s (newest step: %s), %s%s; peers "
         "served on port %u", o->ckpt_dir, step, copies, persist,
         dr_ckpt_srv_port(p->srv));
  /* After the watch: a restore from --ckpt-persist is renamed in as a
   * copy, which the watch knows from the workers' own. */
  return dr__persist_start(ag, p->store);
}

void dr__ckpt_join(dr_agent_t *ag, dr_join_t *j) {
  j->ckpt_port = 0;
  j->ckpt_step = DR_NONE;
  if (ag->ckpt == NULL || ag->ckpt->srv == NULL)
    return;
  j->ckpt_port = dr_ckpt_srv_port(ag->ckpt->srv);
  j->ckpt_step = dr_ckpt_store_newest(ag->ckpt->store);
}

int dr__ckpt_on_assign(dr_agent_t *ag) {
  struct dr_ckpt_plane *p = ag->ckpt;
  if (p == NULL)
    return 0;
  p->restore_id = 0; /* a restore of an earlier round starts nothing */
  dr__persist_on_assign(ag);
  dr_ckpt_srv_set_node_rank(p->srv, ag->asg.node_rank);
  uint64_t want = ag->asg.ckpt_step, have = dr_ckpt_store_newest(p->store);
  if (want == DR_NONE || (have != DR_NONE && have >= want))
    return 0;
  dr_xfer_job_t *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return 0;
  j->kind = DR_XFER_FETCH;
  j->step = want;
  for (size_t i = 0; i < ag->asg.n_peers && j->n_peers < DR_PEERS_MAX; i++) {
    const dr_peer_t *q = &ag->asg.peers[i];
    if (!(q->roles & DR_PEER_HOLDER) || q->port == 0 || q->port > 65535)
      continue;
    dr_xfer_peer_t *x = &j->peers[j->n_peers++];
    snprintf(x->addr, sizeof(x->addr), "%s", q->addr);
    x->port = (uint16_t)q->port;
    x->node_rank = q->node_rank;
  }
  if (j->n_peers == 0) {
    DR_SAY(DR_LOG_WARN, "cannot restore checkpoint step %" PRIu64 ": no "
           "node that holds it serves checkpoints; starting the workers "
           "with what %s holds", want, dr_ckpt_store_dir(p->store));
    free(j);
    return 0;
  }
  DR_SAY(DR_LOG_DEBUG, "fetching checkpoint step %" PRIu64 " from node %u "
         "(%s:%u)%s before the workers start", want, j->peers[0].node_rank,
         j->peers[0].addr, j->peers[0].port,
         j->n_peers > 1 ? " or the next holder" : "");
  p->restore_ms = uv_now(&ag->loop);
  p->restore_id = dr_xfer_submit(p->xfer, j);
  return 1;
}

uint64_t dr__ckpt_newest(dr_agent_t *ag) {
  return ag->ckpt != NULL && ag->ckpt->store != NULL
             ? dr_ckpt_store_newest(ag->ckpt->store)
             : DR_NONE;
}

void dr__ckpt_stop(dr_agent_t *ag) {
  struct dr_ckpt_plane *p = ag->ckpt;
  if (p == NULL)
    return;
  /* First: the last copy at the job's end reads the directory. */
  p->keep_store = dr__persist_stop(ag);
  if (p->stop_fd >= 0) {
    uint64_t one = 1;
    /* Every wait of every transfer ends at once. */
    if (write(p->stop_fd, &one, sizeof(one)) != sizeof(one))
      DR_SAY(DR_LOG_DEBUG, "eventfd write failed (%s)", strerror(errno));
  }
  dr_ckpt_watch_stop(&p->watch);
  dr_xfer_stop(&p->xfer);
  dr_ckpt_srv_stop(&p->srv);
}

void dr__ckpt_free(dr_agent_t *ag) {
  struct dr_ckpt_plane *p = ag->ckpt;
  if (p == NULL)
    return;
  dr__persist_free(ag);
  if (!p->keep_store)
    dr_ckpt_store_close(&p->store);
  if (p->stop_fd >= 0)
    close(p->stop_fd);
  free(p);
  ag->ckpt = NULL;
}
