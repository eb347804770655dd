/* The persist tier (--ckpt-persist DIR2; docs/ddprun.md, "Checkpoints in
 * node memory"): the agent of node rank 0 of the running generation
 * copies the newest checkpoint of --ckpt-dir to DIR2, at most once per
 * --ckpt-persist-every and only when DIR2 holds none as new; a copy that
 * fails is a warning, said once per reason until one goes through again,
 * never a failure of the job; a job that ends well, or is preempted (exit
 * 75: every node may be gone before it runs again), gets a last copy. At
 * start, a node whose directory holds no checkpoint copies DIR2's newest
 * in before its first JOIN, which then says it.
 *
 * The copies run on their own thread (ckpt_persister.h); the loop only
 * decides when, and reports. */
#include "agent_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_persister.h"
#include "errors.h"
#include "events.h"
#include "exit_codes.h"
#include "log.h"

/* How long a job that ended well or was preempted waits for its last
 * copy (Slurm's grace after SIGUSR1 is typically minutes). */
#define LAST_BOUND_MS 120000u
/* Distinct reasons a failing copy is warned of, at most, until one goes
 * through again. */
#define SAID_MAX 8

struct dr_persist_plane {
  dr_persister_t *th;
  uv_timer_t timer;   /* the next copy's due time */
  int active;         /* node rank 0 of the running generation */
  int busy;           /* a copy is queued or under way */
  int want;           /* DIR may hold one newer than DIR2 */
  int restoring;      /* the restore before the first JOIN runs */
  int ending;         /* the agent stops: no new copy */
  int copied;         /* a copy was tried since the start: last_ms holds */
  uint64_t last_ms;   /* loop time the last copy that counts began */
  uint64_t job_ms;    /* loop time the copy under way was asked for */
  char said[SAID_MAX][sizeof(((dr_persist_res_t *)0)->why)];
  size_t n_said;
};

static const char *dir2(const dr_agent_t *ag) { return ag->o->ckpt_persist; }

static void kick(dr_agent_t *ag);

static void on_timer(uv_timer_t *t) { kick(t->data); }

/* Asks for a copy when one is wanted and due; else, when only the period
 * holds it back, comes back then. */
static void kick(dr_agent_t *ag) {
  struct dr_persist_plane *p = ag->persist;
  if (!p->active || p->busy || !p->want || p->restoring || p->ending)
    return;
  uint64_t now = uv_now(&ag->loop), period = ag->o->ckpt_persist_every_ms;
  if (p->copied && now < p->last_ms + period) {
    uv_timer_start(&p->timer, on_timer, p->last_ms + period - now, 0);
    return;
  }
  dr_persist_job_t *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return; /* the next checkpoint asks again */
  j->kind = DR_PERSIST_COPY;
  p->busy = 1;
  p->want = 0;
  p->job_ms = now;
  dr_persister_submit(p->th, j);
}

/* 1 when why was said since the last copy that went through; else 0,
 * and it counts as said from now on. */
static int said_before(struct dr_persist_plane *p, const char *why) {
  for (size_t i = 0; i < p->n_said; i++)
    if (strcmp(p->said[i], why) == 0)
      return 1;
  if (p->n_said < SAID_MAX)
    snprintf(p->said[p->n_said++], sizeof(p->said[0]), "%s", why);
  return 0;
}

/* A failure, warned of once per reason. */
static void warn_once(dr_agent_t *ag, const dr_persist_job_t *j) {
  if (said_before(ag->persist, j->res.why)) {
    DR_SAY(DR_LOG_DEBUG, "checkpoint %s (step %" PRIu64 ") not persisted "
           "to --ckpt-persist %s: %s (as before)", j->res.name, j->res.step,
           dir2(ag), j->res.why);
    return;
  }
  DR_SAY(DR_LOG_WARN, "cannot persist checkpoint %s (step %" PRIu64 ") to "
         "--ckpt-persist %s: %s; the job goes on, and the copy is tried "
         "again in %.0f s", j->res.name, j->res.step, dir2(ag), j->res.why,
         ag->o->ckpt_persist_every_ms / 1000.0);
}

static void said_copy(dr_agent_t *ag, const dr_persist_job_t *j,
                      const char *when) {
  char size[32];
  DR_SAY(DR_LOG_INFO, "persisted checkpoint %s (step %" PRIu64 ") to "
         "--ckpt-persist %s%s: %s in %.2f s", j->res.name, j->res.step,
         dir2(ag), when, dr__size_text(j->res.bytes, size, sizeof(size)),
         j->ms / 1000.0);
  dr_events_emit(ag->events, "persist", ",\"step\":%" PRIu64 ",\"bytes\":%"
                 PRIu64 ",\"ms\":%" PRIu64 ",\"at_end\":%s", j->res.step,
                 j->res.bytes, j->ms, when[0] != '\0' ? "true" : "false");
}

static void copied(dr_agent_t *ag, const dr_persist_job_t *j) {
  struct dr_persist_plane *p = ag->persist;
  p->busy = 0;
  if (j->rc == 0 || (j->rc < 0 && j->rc != DR_ENOTFOUND &&
                     j->rc != -ECANCELED)) {
    p->copied = 1; /* a copy, or a failure, holds the next one back */
    p->last_ms = p->job_ms;
  }
  if (j->rc == 0) {
    p->n_said = 0;
    said_copy(ag, j, "");
  } else if (j->rc == DR_ENOTFOUND) {
    /* Pruned before it was whole: a newer one took its place. */
    DR_SAY(DR_LOG_DEBUG, "checkpoint %s was removed before it could be "
           "persisted", j->res.name);
    p->want = 1;
  } else if (j->rc < 0 && j->rc != -ECANCELED) {
    warn_once(ag, j);
    p->want = 1;
  }
  kick(ag);
}

/* The restore before the first JOIN is over: say how, then join. */
static void restored(dr_agent_t *ag, const dr_persist_job_t *j) {
  struct dr_persist_plane *p = ag->persist;
  char size[32];
  p->restoring = 0;
  if (j->rc == 0) {
    DR_SAY(DR_LOG_INFO, "restored checkpoint %s (step %" PRIu64 ") from "
           "--ckpt-persist %s: %s in %.2f s%s%s", j->res.name, j->res.step,
           dir2(ag), dr__size_text(j->res.bytes, size, sizeof(size)),
           j->ms / 1000.0, j->res.why[0] != '\0' ? "; a newer one: " : "",
           j->res.why);
    dr_events_emit(ag->events, "persist_restore", ",\"step\":%" PRIu64
                   ",\"bytes\":%" PRIu64 ",\"ms\":%" PRIu64, j->res.step,
                   j->res.bytes, j->ms);
  } else if (j->rc == 1) {
    DR_SAY(DR_LOG_DEBUG, "--ckpt-persist %s holds no checkpoint to restore",
           dir2(ag));
  } else {
    DR_SAY(DR_LOG_WARN, "cannot restore a checkpoint from --ckpt-persist "
           "%s: %s; starting without one", dir2(ag), j->res.why);
  }
  if (dr__agent_session_start(ag) != 0) {
    dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_CONFIG);
    dr__agent_finish(ag);
  }
}

static void on_done(void *arg, dr_persist_job_t *j) {
  dr_agent_t *ag = arg;
  if (j->kind == DR_PERSIST_RESTORE)
    restored(ag, j);
  else
    copied(ag, j);
  free(j);
}

int dr__persist_start(dr_agent_t *ag, struct dr_ckpt_store *store) {
  if (ag->o->ckpt_persist == NULL)
    return 0;
  struct dr_persist_plane *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    DR_SAY(DR_LOG_ERROR, "out of memory");
    return -1;
  }
  ag->persist = p;
  uv_timer_init(&ag->loop, &p->timer);
  p->timer.data = ag;
  dr_persist_cfg_t cfg = {store, dir2(ag), ag->cfg->hostname,
                          ag->o->ckpt_keep};
  int rc = dr_persister_start(&ag->loop, &cfg, on_done, ag, &p->th);
  if (rc != 0) {
    DR_SAY(DR_LOG_ERROR, "cannot start the copies to --ckpt-persist: %s",
           dr_strerror(rc));
    return -1;
  }
  if (dr_ckpt_store_newest(store) != DR_NONE)
    return 0;
  dr_persist_job_t *j = calloc(1, sizeof(*j));
  if (j == NULL) {
    DR_SAY(DR_LOG_ERROR, "out of memory");
    return -1;
  }
  j->kind = DR_PERSIST_RESTORE;
  p->restoring = 1;
  dr_persister_submit(p->th, j);
  return 1;
}

void dr__persist_on_assign(dr_agent_t *ag) {
  struct dr_persist_plane *p = ag->persist;
  if (p == NULL)
    return;
  int was = p->active;
  p->active = ag->asg.node_rank == 0;
  if (p->active && !was) {
    p->want = 1; /* DIR2 may lack what this node holds */
    kick(ag);
  }
}

void dr__persist_nudge(dr_agent_t *ag) {
  struct dr_persist_plane *p = ag->persist;
  if (p == NULL)
    return;
  p->want = 1;
  kick(ag);
}

/* The job ended well, or was preempted: DIR2 gets the newest checkpoint if
 * it lacks it. */
static void last_copy(dr_agent_t *ag) {
  dr_persist_job_t j;
  int rc = dr_persister_last(ag->persist->th, LAST_BOUND_MS, &j);
  if (rc == 0 && j.rc == 0) {
    said_copy(ag, &j, " at the job's end");
  } else if (rc == 0 && j.rc == 1) {
    if (j.res.name[0] != '\0')
      DR_SAY(DR_LOG_DEBUG, "--ckpt-persist %s holds the newest checkpoint "
             "(step %" PRIu64 ") at the job's end", dir2(ag), j.res.step);
  } else if (rc == -ETIMEDOUT || j.rc == -ETIMEDOUT || j.rc == -ECANCELED) {
    DR_SAY(DR_LOG_WARN, "the newest checkpoint is not persisted to "
           "--ckpt-persist %s at the job's end: no copy ended within "
           "%u s", dir2(ag), LAST_BOUND_MS / 1000);
  } else {
    DR_SAY(DR_LOG_WARN, "the newest checkpoint %s (step %" PRIu64 ") is "
           "not persisted to --ckpt-persist %s at the job's end: %s",
           j.res.name, j.res.step, dir2(ag), rc != 0 ? dr_strerror(rc)
                                                    : j.res.why);
  }
}

static void close_cb(uv_handle_t *h) { (void)h; }

int dr__persist_stop(dr_agent_t *ag) {
  struct dr_persist_plane *p = ag->persist;
  if (p == NULL || p->ending)
    return 0;
  p->ending = 1;
  uv_close((uv_handle_t *)&p->timer, close_cb);
  if (p->th != NULL && p->active && ag->stop.cause == DR_END_SERVER &&
      (ag->stop.exit_code == 0 || ag->stop.exit_code == DR_EXIT_PREEMPTED))
    last_copy(ag);
  if (dr_persister_stop(&p->th) != 0) {
    DR_SAY(DR_LOG_WARN, "a copy to --ckpt-persist %s did not stop; "
           "exiting without it", dir2(ag));
    return 1;
  }
  return 0;
}

void dr__persist_free(dr_agent_t *ag) {
  free(ag->persist);
  ag->persist = NULL;
}
