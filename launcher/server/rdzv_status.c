/* What the job's status says, and to whom.
 *
 * A forming round tells its waiting nodes who is in and what it still
 * needs (ROUND_STATUS): first once it has waited a heartbeat interval (a
 * round that completes at once says nothing), then on every change of its
 * members at most once per interval, and every two intervals while nothing
 * changes (intervals that grow with the round past 512 nodes), so that
 * each waiting agent can say so and knows it when its join times out.
 *
 * Each agent reports its workers (RANKS: pid, state, last progress step,
 * step rate) when they change, at most once per heartbeat interval; the
 * server keeps the last report with the node and answers STATUS from what
 * it holds. A STATUS that asks for stacks (DR_STATUS_STACKS) is answered
 * once every running node has sent its workers' stacks (STACKS, answered
 * by STACK_DUMP) or at its deadline, whichever comes first; the ranks of a
 * node that did not answer say so. One that asks for the nodes'
 * environment summaries (DR_STATUS_ENV) gets what their JOINs carried
 * (rdzv_status_env.c). Connections and messages grow with nodes, never
 * with ranks.
 *
 * Collecting stacks stops every worker for a moment, so it is shared and
 * bounded: one collection at a time for the job, which every STATUS that
 * asks meanwhile joins; an answer in which every node answered serves
 * every asker of the same generation for STACKS_REUSE_MS; and a connection
 * has at most one such STATUS waiting (another is refused at once). */
#include "server_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "log.h"
#include "grow.h"

#define STACKS_WAIT_DEFAULT_MS 10000u
#define STACKS_WAIT_MIN_MS 100u
#define STACKS_WAIT_MAX_MS 60000u
/* What the stacks of all ranks may take in one answer, well within a
 * client's frame cap: with many ranks, each text is cut to its share. */
#define STACKS_REPLY_MAX_BYTES (32u << 20)
/* How long a collection's answer serves later askers. */
#define STACKS_REUSE_MS 2000u

/* One node asked for its stacks, as it was when asked. */
typedef struct {
  uint32_t node_rank, nproc, first_rank;
  int asked;            /* STACKS sent: it had a connection */
  int answered;
  dr_list_t dump;       /* the answer's records, in data */
  uint8_t *data;
  char host[256];
  char why[360];        /* for its ranks when there is no answer */
} stk_node_t;

/* A STATUS that waits for the collection. */
typedef struct {
  dr_conn_t *client; /* NULL once it went away */
  uint32_t req;
  uint32_t flags;    /* its DR_STATUS_* */
} stk_asker_t;

/* A collection of the running generation's stacks: in flight (s->stacks),
 * then its answer kept for reuse (s->stacks_done). */
typedef struct dr_stacks_job {
  uint64_t id, gen;
  stk_asker_t *askers;
  size_t n_askers, cap_askers;
  uint64_t asked_ms, deadline_ms, done_ms;
  size_t n, n_asked, n_answered;
  dr_stack_rec_t *recs; /* the answer, once done */
  size_t n_recs;
  stk_node_t node[];
} dr_stacks_job_t;

static uint64_t hb_interval_ms(const dr_server_t *s) {
  uint64_t every = s->cfg.heartbeat_timeout_ms / 3;
  return every > 0 ? every : 1;
}

/* ---- the forming round ------------------------------------------------- */

static dr_node_rec_t forming_rec(const dr_node_t *n, uint64_t now) {
  dr_node_rec_t x;
  memset(&x, 0, sizeof(x));
  x.node_rank = n->req_rank != DR_NONE ? (uint32_t)n->req_rank : DR_NO_RANK;
  x.nproc = n->nproc;
  x.first_rank = DR_NO_RANK;
  x.state = DR_NS_FORMING;
  x.hb_age_ms = n->peer != NULL ? now - n->peer->last_seen_ms : DR_NONE;
  x.report_age_ms = DR_NONE;
  x.host = dr_str(n->host);
  return x;
}

static void push_round_status(dr_server_t *s, uint64_t now) {
  dr_rdzv_t *r = &s->rdzv;
  dr_round_fig_t fig;
  dr_rdzv_round_figures(r, now, &fig);
  dr_node_rec_t nodes[DR_ROUND_NODES_MAX];
  uint32_t missing[DR_ROUND_MISSING_MAX];
  size_t n_nodes = 0, n_missing = 0;
  for (size_t i = 0; i < r->n_round && n_nodes < DR_ROUND_NODES_MAX; i++)
    nodes[n_nodes++] = forming_rec(r->round[i], now);
  for (uint32_t k = 0; fig.is_static && k < fig.need_to &&
                       n_missing < DR_ROUND_MISSING_MAX;
       k++)
    if (r->rank_holder[k] == NULL)
      missing[n_missing++] = k;
  dr_round_status_t st;
  memset(&st, 0, sizeof(st));
  st.gen = r->gen;
  st.joined = fig.joined;
  st.min_nodes = r->cfg.min_nodes;
  st.max_nodes = r->cfg.max_nodes;
  st.needed = fig.needed;
  st.waited_ms = fig.waited_ms;
  st.last_call_ms = fig.last_call_ms;
  st.n_missing = fig.n_missing;
  /* Encoded once, copied to each node. */
  dr_buf_t frame;
  dr_buf_init(&frame);
  if (dr_enc_round_status(&frame, 0, &st, nodes, n_nodes, missing,
                          n_missing) != 0) {
    dr_buf_free(&frame);
    return;
  }
  for (size_t i = 0; i < r->n_round; i++) {
    dr_node_t *n = r->round[i];
    if (n->peer == NULL || n->join_req == 0)
      continue;
    if (dr_buf_append(&s->out, frame.data, frame.len) == 0)
      dr__conn_send(dr__conn_of(n->peer));
  }
  dr_buf_free(&frame);
  s->round_sent_seq = r->round_seq;
  s->round_sent_ms = now;
}

static void round_sweep(dr_server_t *s, uint64_t now) {
  dr_rdzv_t *r = &s->rdzv;
  if (r->state != DR_JOB_FORMING || r->n_round == 0 || r->forming_ms == 0)
    return;
  if (s->round_forming_ms != r->forming_ms) {
    s->round_forming_ms = r->forming_ms;
    s->round_sent_ms = 0; /* a new round says nothing for an interval */
  }
  uint64_t every = hb_interval_ms(s);
  if (now - r->forming_ms < every)
    return;
  /* A large round changes all the time as it forms, and each push goes to
   * every node in it: its pushes are spaced out with its size (an
   * interval more per 512 nodes). */
  every *= 1 + r->n_round / 512;
  int changed = r->round_seq != s->round_sent_seq;
  if (s->round_sent_ms != 0 &&
      now - s->round_sent_ms < (changed ? every : 2 * every))
    return;
  push_round_status(s, now);
}

/* ---- what the agents report -------------------------------------------- */

static void handle_ranks(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_rdzv_t *r = &s->rdzv;
  dr_node_t *n = c->rp.node;
  dr_ranks_t q;
  if (dr_msg_ranks(m, &q) != 0) {
    DR_DEBUG("ignoring a malformed RANKS from %s", c->rp.addr);
    return;
  }
  if (n == NULL || r->state != DR_JOB_RUNNING || q.gen != r->gen ||
      n->detached || q.ranks.count != n->nproc)
    return; /* of another generation, or of another shape: not this one's */
  if (n->n_ranks != q.ranks.count) {
    size_t want = q.ranks.count > 0 ? q.ranks.count : 1;
    dr_rank_rec_t *p = realloc(n->ranks, want * sizeof(*p));
    if (p == NULL)
      return;
    n->ranks = p;
    n->n_ranks = q.ranks.count;
  }
  uint32_t pos = 0;
  for (uint32_t i = 0; dr_rank_rec_next(&q.ranks, &pos, &n->ranks[i]); i++)
    n->ranks[i].node_rank = n->node_rank;
  n->ranks_ms = dr__now_ms(s);
}

/* ---- answering STATUS --------------------------------------------------- */

static uint64_t age(uint64_t now, uint64_t then) {
  return then != 0 && now > then ? now - then : 0;
}

static dr_node_rec_t node_rec(const dr_server_t *s, const dr_node_t *n,
                              uint32_t first, uint64_t now) {
  const dr_rdzv_t *r = &s->rdzv;
  dr_node_rec_t x = forming_rec(n, now);
  if (r->state == DR_JOB_FORMING)
    return x;
  x.node_rank = n->node_rank;
  x.first_rank = first;
  x.state = n->detached    ? DR_NS_DETACHED
            : n->succeeded ? DR_NS_SUCCEEDED
                           : DR_NS_RUNNING;
  x.report_age_ms = n->ranks_ms != 0 ? age(now, n->ranks_ms) : DR_NONE;
  return x;
}

/* The nodes and ranks the reply lists, into arrays the caller frees. */
static int collect(const dr_server_t *s, uint64_t now, dr_node_rec_t **nodes,
                   size_t *n_nodes, dr_rank_rec_t **ranks, size_t *n_ranks) {
  const dr_rdzv_t *r = &s->rdzv;
  size_t nn = r->n_round + r->n_waiting, nr = 0;
  for (size_t i = 0; r->state != DR_JOB_FORMING && i < r->n_round; i++)
    nr += r->round[i]->n_ranks;
  *nodes = malloc((nn > 0 ? nn : 1) * sizeof(**nodes));
  *ranks = malloc((nr > 0 ? nr : 1) * sizeof(**ranks));
  if (*nodes == NULL || *ranks == NULL) {
    free(*nodes);
    free(*ranks);
    return -ENOMEM;
  }
  size_t k = 0, j = 0;
  uint32_t first = 0;
  for (size_t i = 0; i < r->n_round; i++) {
    const dr_node_t *n = r->round[i];
    (*nodes)[k++] = node_rec(s, n, first, now);
    first += n->nproc;
    for (uint32_t q = 0; r->state != DR_JOB_FORMING && q < n->n_ranks; q++) {
      dr_rank_rec_t x = n->ranks[q];
      /* The age when it arrived, plus the time since. */
      if (x.step_age_ms != DR_NONE)
        x.step_age_ms += age(now, n->ranks_ms);
      (*ranks)[j++] = x;
    }
  }
  for (size_t i = 0; i < r->n_waiting; i++) {
    dr_node_rec_t x = forming_rec(r->waiting[i], now);
    x.state = DR_NS_WAITING;
    (*nodes)[k++] = x;
  }
  *n_nodes = k;
  *n_ranks = j;
  return 0;
}

/* The JOB_STATUS to request req of c: with stacks when collected, with
 * the nodes' summaries when flags ask for them. */
static void send_job_status(dr_server_t *s, dr_conn_t *c, uint32_t req,
                            uint32_t flags, const dr_stack_rec_t *stacks,
                            size_t n_stacks) {
  const dr_rdzv_t *r = &s->rdzv;
  uint64_t now = dr__now_ms(s);
  dr_node_rec_t *nodes;
  dr_rank_rec_t *ranks;
  dr_env_rec_t *envs = NULL;
  size_t n_nodes, n_ranks;
  if (collect(s, now, &nodes, &n_nodes, &ranks, &n_ranks) != 0) {
    dr__conn_send_error(c, req, -ENOMEM, "out of memory");
    return;
  }
  int rc = (flags & DR_STATUS_ENV)
               ? dr__status_env_recs(s, nodes, n_nodes, &envs)
               : 0;
  if (rc != 0) {
    free(nodes);
    free(ranks);
    dr__conn_send_error(c, req, rc, "cannot list the nodes' environment "
                        "summaries (%s)", dr_strerror(rc));
    return;
  }
  dr_job_status_t js;
  memset(&js, 0, sizeof(js));
  js.gen = r->gen;
  js.state = r->state == DR_JOB_FORMING   ? DR_JS_FORMING
             : r->state == DR_JOB_RUNNING ? DR_JS_RUNNING
                                          : DR_JS_DONE;
  js.restarts_used = r->restarts_used;
  js.max_restarts = s->cfg.max_restarts;
  js.min_nodes = s->cfg.min_nodes;
  js.max_nodes = s->cfg.max_nodes;
  js.exit_code = r->state == DR_JOB_DONE ? (uint64_t)(uint32_t)r->exit_code
                                         : DR_NONE;
  js.reason = dr_str(r->state == DR_JOB_DONE ? r->stop_reason : "");
  js.elapsed_ms = r->state == DR_JOB_FORMING ? age(now, r->forming_ms)
                                             : age(now, r->state_ms);
  rc = dr_enc_job_status(&s->out, req, &js, nodes, n_nodes, ranks, n_ranks,
                         stacks, n_stacks, envs, envs != NULL ? n_nodes : 0);
  free(nodes);
  free(ranks);
  free(envs);
  if (rc == 0)
    dr__conn_send(c);
  else
    dr__conn_send_error(c, req, rc, "cannot encode the job's status (%s)",
                        dr_strerror(rc));
}

/* ---- stacks ------------------------------------------------------------- */

static void job_free(dr_stacks_job_t **jp) {
  dr_stacks_job_t *j = *jp;
  if (j == NULL)
    return;
  for (size_t i = 0; i < j->n; i++)
    free(j->node[i].data);
  free(j->askers);
  free(j->recs);
  free(j);
  *jp = NULL;
}

static int asker_add(dr_stacks_job_t *j, dr_conn_t *c, uint32_t req,
                     uint32_t flags) {
  stk_asker_t *p = dr_grow(j->askers, &j->cap_askers, j->n_askers + 1,
                           sizeof(*p), 4);
  if (p == NULL)
    return -ENOMEM;
  j->askers = p;
  j->askers[j->n_askers++] = (stk_asker_t){c, req, flags};
  c->status_waiting++;
  return 0;
}

/* The pid the node last reported for rank, 0 when unknown. */
static uint32_t pid_of(const dr_server_t *s, const dr_stacks_job_t *j,
                       const stk_node_t *sn, uint32_t rank) {
  const dr_rdzv_t *r = &s->rdzv;
  if (r->gen != j->gen || sn->node_rank >= r->n_round)
    return 0;
  const dr_node_t *n = r->round[sn->node_rank];
  for (uint32_t i = 0; i < n->n_ranks; i++)
    if (n->ranks[i].rank == rank)
      return n->ranks[i].pid;
  return 0;
}

/* Every rank's stack, or why it has none, into j->recs. 0 or -ENOMEM. */
static int job_records(dr_server_t *s, dr_stacks_job_t *j) {
  size_t n = 0;
  for (size_t i = 0; i < j->n; i++)
    n += j->node[i].answered ? j->node[i].dump.count : j->node[i].nproc;
  dr_stack_rec_t *recs = malloc((n > 0 ? n : 1) * sizeof(*recs));
  if (recs == NULL)
    return -ENOMEM;
  uint64_t now = dr__now_ms(s);
  size_t k = 0;
  for (size_t i = 0; i < j->n; i++) {
    stk_node_t *sn = &j->node[i];
    if (sn->answered) {
      uint32_t pos = 0;
      while (dr_stack_rec_next(&sn->dump, &pos, &recs[k])) {
        recs[k].node_rank = sn->node_rank;
        k++;
      }
      continue;
    }
    char why[sizeof(sn->why)];
    if (!sn->asked)
      snprintf(why, sizeof(why), "node %u ('%s') has no connection to the "
               "server", sn->node_rank, sn->host);
    else if (s->rdzv.gen != j->gen || s->rdzv.state != DR_JOB_RUNNING)
      snprintf(why, sizeof(why), "generation %" PRIu64 " ended before node "
               "%u ('%s') answered", j->gen, sn->node_rank, sn->host);
    else
      snprintf(why, sizeof(why), "node %u ('%s') did not answer within "
               "%.1f s", sn->node_rank, sn->host,
               (double)(now - j->asked_ms) / 1000.0);
    memcpy(sn->why, why, sizeof(why));
    for (uint32_t q = 0; q < sn->nproc; q++) {
      uint32_t rank = sn->first_rank + q;
      dr_stack_rec_t x = {rank, sn->node_rank, pid_of(s, j, sn, rank),
                          (uint32_t)(sn->asked ? ETIMEDOUT : ENOTCONN),
                          dr_str(sn->why)};
      recs[k++] = x;
    }
  }
  size_t share = STACKS_REPLY_MAX_BYTES / (k > 0 ? k : 1);
  for (size_t i = 0; i < k; i++)
    if (recs[i].text.len > share) /* the innermost frames come first */
      recs[i].text.len = (uint32_t)share;
  j->recs = recs;
  j->n_recs = k;
  return 0;
}

/* Answers every asker of the collection, which is then kept for reuse. */
static void job_finish(dr_server_t *s, dr_stacks_job_t *j) {
  s->stacks = NULL;
  int rc = job_records(s, j);
  for (size_t i = 0; i < j->n_askers; i++) {
    dr_conn_t *c = j->askers[i].client;
    if (c == NULL)
      continue;
    c->status_waiting--;
    if (rc != 0)
      dr__conn_send_error(c, j->askers[i].req, rc, "out of memory");
    else
      send_job_status(s, c, j->askers[i].req, j->askers[i].flags, j->recs,
                      j->n_recs);
  }
  j->n_askers = 0;
  job_free(&s->stacks_done);
  /* Only a whole answer serves again: a node that did not answer may
   * answer the next collection. */
  if (rc == 0 && j->n_asked == j->n && j->n_answered == j->n) {
    j->done_ms = dr__now_ms(s);
    s->stacks_done = j;
  } else {
    job_free(&j);
  }
}

static void start_stacks(dr_conn_t *c, uint32_t req, uint32_t flags,
                         uint64_t wait_ms) {
  dr_server_t *s = c->srv;
  dr_rdzv_t *r = &s->rdzv;
  uint64_t now = dr__now_ms(s);
  if (c->status_waiting > 0) {
    dr__conn_send_error(c, req, DR_ESEQUENCE, "this connection already "
                        "waits for the stacks of a STATUS; one at a time");
    return;
  }
  dr_stacks_job_t *d = s->stacks_done;
  if (d != NULL && d->gen == r->gen && now - d->done_ms < STACKS_REUSE_MS) {
    send_job_status(s, c, req, flags, d->recs, d->n_recs);
    return;
  }
  if (s->stacks != NULL && s->stacks->gen == r->gen) {
    if (asker_add(s->stacks, c, req, flags) != 0)
      dr__conn_send_error(c, req, -ENOMEM, "out of memory");
    return;
  }
  if (s->stacks != NULL) /* of an ended generation: answered as it is */
    job_finish(s, s->stacks);
  dr_stacks_job_t *j =
      calloc(1, sizeof(*j) + r->n_round * sizeof(j->node[0]));
  if (j == NULL || asker_add(j, c, req, flags) != 0) {
    job_free(&j);
    dr__conn_send_error(c, req, -ENOMEM, "out of memory");
    return;
  }
  if (wait_ms == 0)
    wait_ms = STACKS_WAIT_DEFAULT_MS;
  wait_ms = wait_ms < STACKS_WAIT_MIN_MS   ? STACKS_WAIT_MIN_MS
            : wait_ms > STACKS_WAIT_MAX_MS ? STACKS_WAIT_MAX_MS
                                           : wait_ms;
  j->id = ++s->stacks_next_id;
  j->gen = r->gen;
  j->asked_ms = now;
  j->deadline_ms = now + wait_ms;
  j->n = r->n_round;
  uint32_t first = 0;
  for (size_t i = 0; i < r->n_round; i++) {
    dr_node_t *n = r->round[i];
    stk_node_t *sn = &j->node[i];
    sn->node_rank = n->node_rank;
    sn->nproc = n->nproc;
    sn->first_rank = first;
    first += n->nproc;
    snprintf(sn->host, sizeof(sn->host), "%s", n->host);
    if (n->peer == NULL || n->detached)
      continue;
    if (dr_enc_stacks(&s->out, 0, j->id, j->gen) == 0)
      dr__conn_send(dr__conn_of(n->peer));
    sn->asked = 1;
    j->n_asked++;
  }
  s->stacks = j;
  if (j->n_asked == 0)
    job_finish(s, j);
}

static void handle_stack_dump(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_stack_dump_t d;
  if (dr_msg_stack_dump(m, &d) != 0) {
    DR_DEBUG("ignoring a malformed STACK_DUMP from %s", c->rp.addr);
    return;
  }
  dr_stacks_job_t *j = s->stacks;
  dr_node_t *n = c->rp.node;
  if (j == NULL || j->id != d.id || n == NULL || j->gen != s->rdzv.gen ||
      n->node_rank >= j->n)
    return; /* too late: answered already */
  stk_node_t *sn = &j->node[n->node_rank];
  if (!sn->asked || sn->answered)
    return;
  sn->data = malloc(d.stacks.len > 0 ? d.stacks.len : 1);
  if (sn->data == NULL)
    return;
  if (d.stacks.len > 0)
    memcpy(sn->data, d.stacks.p, d.stacks.len);
  sn->dump.count = d.stacks.count;
  sn->dump.p = sn->data;
  sn->dump.len = d.stacks.len;
  sn->answered = 1;
  if (++j->n_answered == j->n_asked)
    job_finish(s, j);
}

static void handle_status(dr_conn_t *c, const dr_msg_t *m) {
  dr_status_req_t q;
  if (c->srv->rdzv.cfg.standby) {
    dr__conn_send_error(c, m->req_id, DR_ESTANDBY, "this is a standby "
                        "rendezvous server: it serves the job only once its "
                        "server is lost and this node takes it over; ask "
                        "the job's server (its endpoint, or where its "
                        "nodes say the rendezvous moved)");
    return;
  }
  if (dr_msg_status(m, &q) != 0) {
    dr__conn_send_error(c, m->req_id, DR_EBADARG,
                        "STATUS with flags this server does not know");
    return;
  }
  if ((q.flags & DR_STATUS_STACKS) && c->srv->rdzv.state == DR_JOB_RUNNING)
    start_stacks(c, m->req_id, q.flags, q.wait_ms);
  else
    send_job_status(c->srv, c, m->req_id, q.flags, NULL, 0);
}

void dr__status_handle(dr_conn_t *c, const dr_msg_t *m) {
  switch (m->type) {
  case DR_MSG_RANKS:
    handle_ranks(c, m);
    break;
  case DR_MSG_STATUS:
    handle_status(c, m);
    break;
  default: /* STACK_DUMP */
    handle_stack_dump(c, m);
    break;
  }
}

void dr__status_drop_conn(dr_conn_t *c) {
  dr_stacks_job_t *j = c->srv->stacks;
  for (size_t i = 0; j != NULL && i < j->n_askers; i++)
    if (j->askers[i].client == c)
      j->askers[i].client = NULL; /* collected on, answered to no one */
  c->status_waiting = 0;
}

/* 1 while the collection has an asker still connected. */
static int job_wanted(const dr_stacks_job_t *j) {
  for (size_t i = 0; i < j->n_askers; i++)
    if (j->askers[i].client != NULL)
      return 1;
  return 0;
}

void dr__status_sweep(dr_server_t *s, uint64_t now) {
  round_sweep(s, now);
  dr_stacks_job_t *j = s->stacks;
  if (j != NULL && (now >= j->deadline_ms || !job_wanted(j) ||
                    s->rdzv.gen != j->gen ||
                    s->rdzv.state != DR_JOB_RUNNING))
    job_finish(s, j);
  if (s->stacks_done != NULL &&
      (now - s->stacks_done->done_ms >= STACKS_REUSE_MS ||
       s->stacks_done->gen != s->rdzv.gen))
    job_free(&s->stacks_done);
}

void dr__status_free(dr_server_t *s) {
  job_free(&s->stacks);
  job_free(&s->stacks_done);
}
