/* Taking a running generation back after the server restarted, so that a
 * crash or restart of the control plane costs no training step.
 *
 * An agent that loses its connection while its workers run keeps them
 * running, connects again and sends RESUME: its generation, node rank,
 * nnodes, world size, restart count, and the generation's resume token,
 * random bytes the server gave every node of the generation in its ASSIGN
 * (never printed; the run id, by contrast, is in every local user's `ps`).
 *
 * A server whose --state-file says the generation runs knows its token and
 * who held each place: each node claims its place and is answered OK when
 * its RESUME matches what the server knows of that place (the token, the
 * host, the workers); once all have, the generation runs on as if the
 * server had never left. A node that has not claimed its place by the
 * deadline is lost, as a silent node would be.
 *
 * A server with no record of the job (started afresh) knows no token, so
 * the first RESUME must not define the job: it holds every RESUME (a
 * claim) until the resume window ends, and then takes back the generation
 * that exactly one token claims whole (every node rank of it, with the same
 * generation, nnodes and world size). Claims of any other token are
 * refused. Without one such token (a node is gone, or claims conflict) no
 * generation is taken back: every claimant restarts into a new round, as
 * after a lost node, without spending the budget. A stranger who can reach
 * the port without a secret can so cost a restart, never take a place.
 *
 * A RESUME that does not fit (another generation, a place taken or out of
 * range, another shape, another token or host) is answered DR_ESTALE: that
 * node stops its workers and joins the next round, as every node does
 * after a failure. Fields out of any job's bounds are refused outright. */
#include "rdzv_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "errors.h"
#include "events.h"
#include "log.h"
#include "grow.h"

static uint64_t resume_window_ms(const dr_rdzv_t *r) {
  return dr_rdzv_resume_window_ms(r);
}

int dr__resume_expect(dr_rdzv_t *r, uint64_t gen, uint32_t nnodes,
                      uint32_t world, const uint8_t *token) {
  for (uint32_t i = 0; i < nnodes; i++) {
    dr_node_t *n = calloc(1, sizeof(*n));
    if (n == NULL || dr__rdzv_round_push(r, n) != 0) {
      free(n);
      return -ENOMEM;
    }
    n->detached = 1;
    n->node_rank = i;
    n->prev_rank = i;
    n->req_rank = DR_NONE;
    snprintf(n->host, sizeof(n->host), "unknown host");
  }
  r->gen = gen;
  r->state = DR_JOB_RUNNING;
  r->state_ms = r->now;
  r->resuming = 1;
  r->resume_world = world;
  r->resume_deadline = r->now + resume_window_ms(r);
  memcpy(r->token, token, sizeof(r->token));
  r->token_known = 1;
  return 0;
}

/* The answer that sends the node to the next round: DR_ESTALE, its
 * generation is not one this server can go on with. */
static void send_restart(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void send_restart(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                         const char *fmt, ...) {
  char reason[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  DR_INFO("%s (%s): %s", p->host, p->addr, reason);
  dr__rdzv_error(r, p, req, DR_ESTALE, "%s", reason);
}

/* 1 when every place of the resuming generation is claimed. */
static int all_claimed(const dr_rdzv_t *r) {
  for (size_t i = 0; i < r->n_round; i++)
    if (r->round[i]->detached)
      return 0;
  return 1;
}

/* n's place goes to cl's connection, answered OK. */
static void claim(dr_rdzv_t *r, dr_node_t *n, const dr_claim_t *cl) {
  dr_rdzv_peer_t *p = cl->peer;
  n->peer = p;
  n->detached = 0;
  n->nproc = cl->nproc;
  n->arrival = ++r->arrivals;
  memcpy(n->host, cl->host, sizeof(n->host));
  snprintf(n->addr, sizeof(n->addr), "%s", p->ip);
  p->node = n;
  p->last_seen_ms = r->now;
  /* The budget is never reset by a restart or a move of the server: a
   * claim may raise what was used, never lower it. */
  if (cl->restart_count > r->restarts_used)
    r->restarts_used = cl->restart_count;
  if (r->job_nproc == 0)
    r->job_nproc = cl->nproc;
  if (cl->nproc > r->nproc_max)
    r->nproc_max = cl->nproc;
  dr__rdzv_order(r, DR_RDZV_RESUMED, p)->req = cl->req;
  char ehost[300];
  dr__rdzv_event(r, "resume",
                 ",\"gen\":%" PRIu64 ",\"node_rank\":%u,\"node_host\":\"%s\"",
                 r->gen, n->node_rank,
                 dr_json_escape(n->host, ehost, sizeof(ehost)));
  if (!all_claimed(r))
    return;
  uint32_t world = 0;
  for (size_t i = 0; i < r->n_round; i++)
    world += r->round[i]->nproc;
  r->resuming = 0;
  if (world != r->resume_world) {
    char reason[200];
    snprintf(reason, sizeof(reason), "the resumed nodes add up to %u "
             "workers, not the generation's %u", world, r->resume_world);
    dr__rdzv_restart_all(r, reason);
    return;
  }
  dr__rdzv_order(r, DR_RDZV_SAVE, NULL);
  dr__rdzv_event(r, "resumed",
                 ",\"gen\":%" PRIu64 ",\"nnodes\":%zu,\"world_size\":%u",
                 r->gen, r->n_round, world);
  DR_INFO("generation %" PRIu64 " taken back: all %zu nodes still run it "
          "(world size %u); no restart", r->gen, r->n_round, world);
}

/* After a claim: a takeover loses the old server's place once the others
 * are claimed (rdzv_core_term.c). */
static void claimed(dr_rdzv_t *r, dr_node_t *n, const dr_claim_t *cl) {
  claim(r, n, cl);
  dr__term_tick(r, r->now);
}

/* A RESUME within every job's bounds and this server's: 0, or
 * DR_EBADARG with the reason sent. */
static int check_bounds(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                        const dr_resume_t *q) {
  const dr_rdzv_config_t *cfg = &r->cfg;
  char why[200] = "";
  if (q->gen == 0 || q->gen > DR_MAX_GEN)
    snprintf(why, sizeof(why), "generation %" PRIu64 " is not in 1..%llu",
             q->gen, (unsigned long long)DR_MAX_GEN);
  else if (q->nnodes == 0 || q->nnodes > cfg->max_nodes)
    snprintf(why, sizeof(why), "nnodes %u is not in 1..%u", q->nnodes,
             cfg->max_nodes);
  else if (q->node_rank >= q->nnodes)
    snprintf(why, sizeof(why), "node rank %u is not below nnodes %u",
             q->node_rank, q->nnodes);
  else if (q->nproc == 0 || q->nproc > DR_MAX_NPROC)
    snprintf(why, sizeof(why), "nproc %u is not in 1..%u", q->nproc,
             DR_MAX_NPROC);
  else if (q->world_size < q->nnodes || q->world_size < q->nproc ||
           q->world_size > DR_MAX_WORLD)
    snprintf(why, sizeof(why), "world size %u does not fit %u nodes of "
             "which this one has %u workers (at most %u ranks)",
             q->world_size, q->nnodes, q->nproc, DR_MAX_WORLD);
  else if (q->restart_count > cfg->max_restarts)
    snprintf(why, sizeof(why), "restart count %u is over the job's budget "
             "of %u", q->restart_count, cfg->max_restarts);
  if (why[0] == '\0')
    return 0;
  dr__rdzv_error(r, p, req, DR_EBADARG, "RESUME refused: %s", why);
  return DR_EBADARG;
}

/* The host as the state file keeps it: one word of printable ASCII. */
static void host_word(const char *in, size_t len, char *out, size_t cap) {
  size_t n = len < cap - 1 ? len : cap - 1;
  for (size_t i = 0; i < n; i++)
    out[i] = in[i] <= ' ' || in[i] > '~' ? '?' : in[i];
  out[n] = '\0';
}

/* 1 when the place held host (or the server never knew who held it). */
static int host_fits(const dr_node_t *n, const char *host) {
  char a[256], b[256];
  host_word(n->host, strlen(n->host), a, sizeof(a));
  host_word(host, strlen(host), b, sizeof(b));
  return strcmp(n->host, "unknown host") == 0 || strcmp(a, "?") == 0 ||
         strcmp(a, b) == 0;
}

/* A server that knows the generation's token: the place is claimed now,
 * or refused. */
static void resume_known(dr_rdzv_t *r, const dr_claim_t *cl) {
  dr_rdzv_peer_t *c = cl->peer;
  if (r->state != DR_JOB_RUNNING || !r->resuming || cl->gen != r->gen) {
    send_restart(r, c, cl->req, "generation %" PRIu64 " is not running on "
                 "this server (it is at generation %" PRIu64 "%s); stop the "
                 "workers and join", cl->gen, r->gen,
                 r->state == DR_JOB_FORMING ? ", forming" : "");
    return;
  }
  if (cl->nnodes != r->n_round || cl->world != r->resume_world) {
    send_restart(r, c, cl->req, "node %u reports %u nodes and world size %u; "
                 "generation %" PRIu64 " has %zu and %u", cl->node_rank,
                 cl->nnodes, cl->world, r->gen, r->n_round, r->resume_world);
    return;
  }
  if (!dr_auth_equal(cl->token, r->token, sizeof(r->token))) {
    DR_WARN("node '%s' (%s) claimed node rank %u of generation %" PRIu64
            " without its resume token: refused (the place stays free for "
            "its node)", c->host, c->addr, cl->node_rank, r->gen);
    dr__rdzv_error(r, c, cl->req, DR_ESTALE, "this RESUME does not carry "
                        "generation %" PRIu64 "'s resume token; stop the "
                        "workers and join", r->gen);
    return;
  }
  dr_node_t *n = r->round[cl->node_rank];
  if (!n->detached) {
    send_restart(r, c, cl->req, "node rank %u of generation %" PRIu64 " is "
                 "already held by '%s'", cl->node_rank, r->gen, n->host);
    return;
  }
  if (!host_fits(n, cl->host)) {
    send_restart(r, c, cl->req, "node rank %u of generation %" PRIu64 " was "
                 "held by '%s', not '%s'", cl->node_rank, r->gen, n->host,
                 cl->host);
    return;
  }
  if (n->nproc != 0 && n->nproc != cl->nproc) {
    send_restart(r, c, cl->req, "node rank %u of generation %" PRIu64 " had "
                 "%u workers, not %u", cl->node_rank, r->gen, n->nproc,
                 cl->nproc);
    return;
  }
  claimed(r, n, cl);
}

/* ---- claims held by a server that knows no token ------------------------ */

static int claim_push(dr_rdzv_t *r, const dr_claim_t *cl) {
  dr_claim_t *p = dr_grow(r->claims, &r->cap_claims, r->n_claims + 1,
                          sizeof(*p), 16);
  if (p == NULL)
    return -ENOMEM;
  r->claims = p;
  r->claims[r->n_claims++] = *cl;
  cl->peer->claiming = 1;
  return 0;
}

/* Claims of one generation's shape and token sort together, by rank. */
static int cmp_claim(const void *pa, const void *pb) {
  const dr_claim_t *a = pa, *b = pb;
  if (a->gen != b->gen)
    return a->gen < b->gen ? -1 : 1;
  if (a->nnodes != b->nnodes)
    return a->nnodes < b->nnodes ? -1 : 1;
  if (a->world != b->world)
    return a->world < b->world ? -1 : 1;
  int t = memcmp(a->token, b->token, sizeof(a->token));
  if (t != 0)
    return t;
  return a->node_rank < b->node_rank ? -1 : a->node_rank > b->node_rank;
}

static int same_group(const dr_claim_t *a, const dr_claim_t *b) {
  return a->gen == b->gen && a->nnodes == b->nnodes && a->world == b->world &&
         memcmp(a->token, b->token, sizeof(a->token)) == 0;
}

/* The end of the group that starts at i in sorted claims; *whole is 1
 * when its distinct node ranks are every rank of its nnodes. */
static size_t group_end(const dr_claim_t *cl, size_t n, size_t i, int *whole) {
  size_t j = i, ranks = 0;
  for (; j < n && same_group(&cl[i], &cl[j]); j++)
    ranks += j == i || cl[j].node_rank != cl[j - 1].node_rank;
  *whole = ranks == cl[i].nnodes;
  return j;
}

/* Takes back the generation that claims [b, e) hold whole; the rest of
 * the claims are refused. */
static void adopt(dr_rdzv_t *r, dr_claim_t *cl, size_t n, size_t b,
                  size_t e) {
  uint32_t used = r->restarts_used;
  for (size_t i = b; i < e; i++)
    if (cl[i].restart_count > used)
      used = cl[i].restart_count;
  r->restarts_used = used;
  if (dr__resume_expect(r, cl[b].gen, cl[b].nnodes, cl[b].world,
                        cl[b].token) != 0) {
    dr__rdzv_stop(r, 1, "out of memory taking back the running generation");
    return;
  }
  DR_WARN("job '%s': generation %" PRIu64 " taken back from the claims of "
          "its %u nodes (world size %u, restarts used %u of %u)",
          r->cfg.run_id, cl[b].gen, cl[b].nnodes, cl[b].world, used,
          r->cfg.max_restarts);
  for (size_t i = 0; i < n; i++) {
    int mine = i >= b && i < e && (i == b || cl[i].node_rank !=
                                                 cl[i - 1].node_rank);
    if (r->state != DR_JOB_RUNNING || !r->resuming || !mine) {
      send_restart(r, cl[i].peer, cl[i].req, "generation %" PRIu64 " was taken "
                   "back by the nodes that hold it whole, not with this "
                   "claim; stop the workers and join", cl[b].gen);
      continue;
    }
    claim(r, r->round[cl[i].node_rank], &cl[i]);
  }
}

/* At the end of the resume window: the one token that claims a generation
 * whole takes it back; with none, or more than one, every claimant
 * restarts into a new round (no budget spent). */
static void decide(dr_rdzv_t *r) {
  dr_claim_t *cl = r->claims;
  size_t n = r->n_claims;
  r->claims = NULL;
  r->n_claims = r->cap_claims = 0;
  r->claiming = 0;
  for (size_t i = 0; i < n; i++)
    cl[i].peer->claiming = 0;
  qsort(cl, n, sizeof(*cl), cmp_claim);
  size_t n_whole = 0, wb = 0, we = 0;
  uint64_t gen = r->gen;
  uint32_t used = r->restarts_used;
  for (size_t i = 0; i < n;) {
    int whole;
    size_t e = group_end(cl, n, i, &whole);
    if (whole) {
      n_whole++;
      wb = i;
      we = e;
    }
    for (size_t k = i; k < e; k++) {
      gen = cl[k].gen > gen ? cl[k].gen : gen;
      used = cl[k].restart_count > used ? cl[k].restart_count : used;
    }
    i = e;
  }
  if (n_whole == 1) {
    adopt(r, cl, n, wb, we);
  } else {
    /* Back to the claims' newest generation, whose successor forms; the
     * budget is never reset by a restart of the server. */
    r->gen = gen;
    r->restarts_used = used;
    r->claims = cl;
    r->n_claims = r->cap_claims = n;
    for (size_t i = 0; i < n; i++)
      cl[i].peer->claiming = 1;
    cl = NULL;
    char reason[300];
    snprintf(reason, sizeof(reason), "no generation to take back after the "
             "server's restart: %s within %" PRIu64 " ms",
             n_whole == 0 ? "no resume token claimed every node rank"
                          : "more than one resume token claimed every node "
                            "rank",
             resume_window_ms(r));
    dr__rdzv_restart_all(r, reason);
  }
  free(cl);
  if (r->state == DR_JOB_RUNNING)
    dr__rdzv_take_waiting(r);
}

void dr__resume_end_claims(dr_rdzv_t *r, int code, const char *reason) {
  for (size_t i = 0; i < r->n_claims; i++) {
    dr_claim_t *cl = &r->claims[i];
    cl->peer->claiming = 0;
    dr__rdzv_error(r, cl->peer, cl->req, code, "%s; stop the workers and "
                   "join", reason);
  }
  free(r->claims);
  r->claims = NULL;
  r->n_claims = r->cap_claims = 0;
  r->claiming = 0;
}

void dr__resume_drop_peer(dr_rdzv_t *r, dr_rdzv_peer_t *p) {
  if (!p->claiming)
    return;
  for (size_t i = 0; i < r->n_claims; i++)
    if (r->claims[i].peer == p) {
      r->claims[i] = r->claims[--r->n_claims];
      break;
    }
  p->claiming = 0;
}

void dr__resume_free(dr_rdzv_t *r) {
  free(r->claims);
  r->claims = NULL;
  r->n_claims = r->cap_claims = 0;
}

/* The first RESUME into a server with no record of the job: it runs a
 * generation that the claims will name, or none. */
static void begin_claims(dr_rdzv_t *r, const dr_claim_t *cl) {
  uint64_t now = r->now;
  r->gen = cl->gen;
  r->state = DR_JOB_RUNNING;
  r->state_ms = now;
  r->resuming = 1;
  r->claiming = 1;
  r->token_known = 0;
  r->resume_world = cl->world;
  r->resume_deadline = now + resume_window_ms(r);
  DR_WARN("job '%s': node %u ('%s') resumes generation %" PRIu64 " into a "
          "server with no record of the job; every RESUME is held for %" PRIu64
          " ms, then the generation that one resume token claims whole is "
          "taken back", r->cfg.run_id, cl->node_rank, cl->host, cl->gen,
          resume_window_ms(r));
}

void dr_rdzv_resume(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                    const dr_resume_t *q, uint64_t now) {
  r->now = now;
  if (check_bounds(r, p, req, q) != 0)
    return;
  if (dr__rdzv_refuse_if_done(r, p, req))
    return;
  if (!dr__rdzv_is_run(r, q->run_id)) {
    dr__rdzv_error(r, p, req, DR_ERUNID, "node '%s' resumed with another "
                   "run id than this job's", p->host);
    return;
  }
  if (p->node != NULL || p->claiming) {
    dr__rdzv_error(r, p, req, DR_ESEQUENCE, "this connection is already a "
                   "node of generation %" PRIu64, r->gen);
    return;
  }
  if (dr__term_refuse(r, p, req, q->term))
    return;
  dr_claim_t cl = {p, req, q->gen, q->node_rank, q->nnodes, q->world_size,
                   q->nproc, q->restart_count, {0}, {0}};
  memcpy(cl.token, q->resume_token, sizeof(cl.token));
  host_word((const char *)q->host.p, q->host.len, cl.host, sizeof(cl.host));
  if (r->state == DR_JOB_FORMING && r->n_round == 0 && r->n_waiting == 0 &&
      r->rounds_completed == 0 && !r->state_loaded &&
      q->nnodes >= r->cfg.min_nodes)
    begin_claims(r, &cl);
  if (!r->claiming) {
    resume_known(r, &cl);
    return;
  }
  if (claim_push(r, &cl) != 0)
    dr__rdzv_error(r, p, req, -ENOMEM, "out of memory");
  /* Answered when the window ends (dr__resume_tick). */
}

void dr__resume_tick(dr_rdzv_t *r, uint64_t now) {
  /* The deadline counts from the loop's wake-up after a stall too. */
  uint64_t deadline = r->resume_deadline;
  if (r->woke_ms + resume_window_ms(r) > deadline)
    deadline = r->woke_ms + resume_window_ms(r);
  if (r->claiming && now > deadline)
    decide(r);
  while (r->state == DR_JOB_RUNNING && r->resuming && now > deadline) {
    dr_node_t *gone = NULL;
    for (size_t i = 0; i < r->n_round && gone == NULL; i++)
      if (r->round[i]->detached)
        gone = r->round[i];
    if (gone == NULL) {
      r->resuming = 0;
      break;
    }
    char why[160];
    snprintf(why, sizeof(why), "did not resume within %" PRIu64 " ms of "
             "the server's restart", resume_window_ms(r));
    DR_WARN("node %u of generation %" PRIu64 " %s", gone->node_rank, r->gen,
            why);
    dr__rdzv_node_lost(r, gone, why);
  }
}

int dr_rdzv_restore(dr_rdzv_t *r, const dr_rdzv_saved_t *st, uint64_t now) {
  r->now = now;
  r->state_loaded = 1;
  r->restarts_used = st->restarts_used;
  if (!st->running) {
    /* A generation that was forming, or one no token can take back: its
     * nodes join again, into a new one. */
    r->gen = st->gen + 1;
    return 0;
  }
  if (dr__resume_expect(r, st->gen, st->nnodes, st->world, st->token) != 0)
    return -ENOMEM;
  /* The places keep who held them: a RESUME must match, and a node that
   * never comes back is named by its host. */
  for (uint32_t i = 0; i < st->nnodes; i++) {
    r->round[i]->nproc = st->nprocs[i];
    if (st->nprocs[i] > r->nproc_max)
      r->nproc_max = st->nprocs[i];
    snprintf(r->round[i]->host, sizeof(r->round[i]->host), "%s",
             st->hosts[i]);
  }
  return 0;
}
