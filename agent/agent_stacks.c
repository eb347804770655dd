/* The workers' stacks for `ddprun status --stacks`: the server asks
 * (STACKS), the agent collects them off the loop, on libuv's thread pool,
 * and answers with one STACK_DUMP. */
#include "agent_internal.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "stacks.h"

/* The most one rank's stack may take in a STACK_DUMP (a record must fit
 * the server's blob cap with its header), and all of them (well within
 * the server's frame cap). */
#define STACK_TEXT_MAX (60u * 1024u)
/* How long the workers' stacks for one STACKS request may take, in all:
 * below the server's default wait for them (10 s). */
#define STACKS_BUDGET_MS 5000
#define STACK_DUMP_MAX (32u << 20)

/* One STACKS request: its workers' pids, collected off the loop. */
typedef struct {
  uv_work_t req;
  dr_agent_t *ag;
  uint64_t id;
  uint32_t n;
  struct {
    dr_stack_rec_t rec;
    int collect;   /* alive: its stack is collected */
    char *text;    /* STACK_TEXT_MAX bytes, or NULL */
    char why[300]; /* when it is not collected */
  } r[];
} stacks_work_t;

static void stacks_work(uv_work_t *req) {
  stacks_work_t *sw = req->data;
  dr_stack_req_t *reqs = calloc(sw->n + 1, sizeof(*reqs));
  dr_stack_t *out = calloc(sw->n + 1, sizeof(*out));
  if (reqs == NULL || out == NULL) {
    for (uint32_t i = 0; i < sw->n; i++)
      if (sw->r[i].collect) {
        sw->r[i].rec.code = ENOMEM;
        snprintf(sw->r[i].why, sizeof(sw->r[i].why), "out of memory");
      }
    free(reqs);
    free(out);
    return;
  }
  /* Every live worker's at once: the tools run side by side. */
  for (uint32_t i = 0; i < sw->n; i++)
    reqs[i] = (dr_stack_req_t){sw->r[i].collect ? (pid_t)sw->r[i].rec.pid
                                                : 0, -1};
  dr_stacks_collect_all(reqs, sw->n, STACKS_BUDGET_MS, out);
  for (uint32_t i = 0; i < sw->n; i++) {
    if (!sw->r[i].collect)
      continue;
    if (out[i].tool[0] == '\0' && out[i].text == NULL) {
      sw->r[i].rec.code = out[i].missing[0] != '\0' ? ENODATA : ESRCH;
      snprintf(sw->r[i].why, sizeof(sw->r[i].why), "%s",
               out[i].missing[0] != '\0' ? out[i].missing
                                         : "the process is gone");
      continue;
    }
    sw->r[i].text = malloc(STACK_TEXT_MAX);
    if (sw->r[i].text == NULL) {
      sw->r[i].rec.code = ENOMEM;
      snprintf(sw->r[i].why, sizeof(sw->r[i].why), "out of memory");
      continue;
    }
    dr_stack_format(&out[i], NULL, sw->r[i].text, STACK_TEXT_MAX);
  }
  for (uint32_t i = 0; i < sw->n; i++)
    dr_stack_free(&out[i]);
  free(reqs);
  free(out);
}

static void stacks_done(uv_work_t *req, int status) {
  stacks_work_t *sw = req->data;
  dr_stack_rec_t *recs = calloc(sw->n > 0 ? sw->n : 1, sizeof(*recs));
  if (recs != NULL && status == 0) {
    size_t share = STACK_DUMP_MAX / (sw->n > 0 ? sw->n : 1);
    for (uint32_t i = 0; i < sw->n; i++) {
      recs[i] = sw->r[i].rec;
      recs[i].text = dr_str(sw->r[i].text != NULL ? sw->r[i].text
                                                  : sw->r[i].why);
      if (recs[i].text.len > share) /* the innermost frames come first */
        recs[i].text.len = (uint32_t)share;
    }
    dr_buf_t b;
    dr_buf_init(&b);
    dr_enc_stack_dump(&b, 0, sw->id, recs, sw->n);
    dr__agent_send(sw->ag, &b);
  }
  free(recs);
  for (uint32_t i = 0; i < sw->n; i++)
    free(sw->r[i].text);
  free(sw);
}

/* The server asks for the workers' stacks: collected on libuv's pool, so
 * that the heartbeats go on meanwhile; answered with STACK_DUMP id. */
void dr__agent_on_stacks_request(dr_agent_t *ag, uint64_t id) {
  uint32_t n = ag->w != NULL && ag->have_asg ? ag->nproc : 0;
  stacks_work_t *sw = calloc(1, sizeof(*sw) + n * sizeof(sw->r[0]));
  if (sw == NULL)
    return; /* the server's deadline answers for this node */
  sw->ag = ag;
  sw->id = id;
  sw->n = n;
  sw->req.data = sw;
  DR_SAY(DR_LOG_DEBUG, "collecting the stacks of %u ranks for the server "
          "(request %llu)", n, (unsigned long long)id);
  for (uint32_t i = 0; i < n; i++) {
    dr_worker_t *w = &ag->w[i];
    sw->r[i].rec.rank = ag->asg.first_rank + i;
    sw->r[i].rec.node_rank = ag->asg.node_rank;
    sw->r[i].rec.pid = w->pid > 0 ? (uint32_t)w->pid : 0;
    sw->r[i].collect = w->pid > 0 && w->alive;
    if (!sw->r[i].collect) {
      sw->r[i].rec.code = ESRCH;
      snprintf(sw->r[i].why, sizeof(sw->r[i].why), "rank %u is not "
               "running (%s)", sw->r[i].rec.rank,
               dr_rank_state_name(dr__agent_rank_state(ag, w)));
    }
  }
  if (uv_queue_work(&ag->loop, &sw->req, stacks_work, stacks_done) != 0) {
    for (uint32_t i = 0; i < n; i++)
      if (sw->r[i].collect) {
        sw->r[i].collect = 0;
        sw->r[i].rec.code = EAGAIN;
        snprintf(sw->r[i].why, sizeof(sw->r[i].why), "cannot start the "
                 "collection");
      }
    stacks_done(&sw->req, 0);
  }
}
