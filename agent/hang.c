/* --hang-timeout: the watch of the local workers. Every poll samples each
 * rank's progress (its slot, when it reports), the CPU time and state of
 * its process group, and its GPU; stall.h decides who is stalled and who
 * is to blame. Once a rank has stalled, every local rank's stack is taken
 * (off the loop, on libuv's thread pool) before the verdict: the stacks
 * help name the culprit, and go to the failure summary and to stack.txt
 * beside the rank's logs. The verdict goes to the agent, which acts on
 * it. */
#include "agent_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "events.h"
#include "fr.h"
#include "log.h"
#include "nvml.h"
#include "pgstat.h"
#include "progress.h"
#include "stacks.h"
#include "stall.h"
#include "mono.h"

typedef struct {
  pid_t pid;      /* the worker this state is of; 0 before one started */
  dr_stall_t cpu;
} hang_rank_t;

typedef struct {
  uv_work_t req;
  struct dr_hang *h;
  uint64_t episode;
  size_t n;
  int timeout_ms;
  dr_stack_req_t *reqs;
  dr_stack_t *out;
  uint64_t took_ms;
  /* PyTorch's flight recorder of each rank whose program offers a dump
   * (fr.h): its path ("" when none), what it said. */
  char (*fr_path)[1024];
  dr_fr_rank_t *fr;
} collect_t;

struct dr_hang {
  dr_agent_t *ag;
  dr_hang_verdict_cb on_verdict;
  dr_stall_cfg_t cfg;
  uint32_t n;
  hang_rank_t *r;
  pid_t *pgids;
  dr_pgstat_t *ps;
  dr_rank_view_t *views;
  uint64_t episode;   /* bumped when a stall begins or ends */
  int stalled;        /* in a stall: a rank is stalled */
  int suspect;        /* a rank has been quiet for half the timeout */
  int collecting;     /* a collection of this agent is in flight */
  collect_t *done;    /* the stacks of this stall, or NULL */
  int budget_ms;      /* what collecting the stacks may take */
  uint64_t wait_ms;   /* when a waiting rank is named */
  int said_cpu;       /* said how ranks that do not report are judged */
  dr_nvml_t *nvml;
  int nvml_tried;
  pid_t *busy_pgrp;   /* process groups of the processes NVML saw busy */
  /* --hang-timeout auto: the floor, the longest time between two reports
   * of a rank seen so far, the timeout in force (eff_ms) and whether the
   * ranks' wait for another node was said in this episode. */
  int lenient;
  uint64_t floor_ms, slowest_ms, eff_ms;
  uint64_t wait_said;
};

/* --hang-timeout auto's floor for a program that reports its steps; twice
 * that for one judged by CPU time. NCCL's own timeout is 10 minutes: the
 * floor comes before it. */
#define AUTO_FLOOR_MS 300000u
/* ... and the multiple of the slowest step. */
#define AUTO_STEPS 10u

static void tick(struct dr_hang *h);

/* ---- the stacks, off the loop ---------------------------------------- */

static void collect_free(collect_t *c) {
  if (c == NULL)
    return;
  for (size_t i = 0; i < c->n; i++)
    dr_stack_free(&c->out[i]);
  free(c->reqs);
  free(c->out);
  free(c->fr_path);
  free(c->fr);
  free(c);
}

static void collect_work(uv_work_t *req) {
  collect_t *c = req->data;
  uint64_t t0 = dr_mono_ms();
  /* The dumps are asked for first: the programs write them while the
   * stacks are taken. */
  for (size_t i = 0; i < c->n; i++)
    if (c->fr_path[i][0] != '\0' && dr_fr_request(c->fr_path[i]) != 0)
      c->fr_path[i][0] = '\0';
  dr_stacks_collect_all(c->reqs, c->n, c->timeout_ms, c->out);
  uint64_t deadline = t0 + (uint64_t)c->timeout_ms;
  if (deadline < dr_mono_ms() + 500)
    deadline = dr_mono_ms() + 500;
  for (size_t i = 0; i < c->n; i++)
    if (c->fr_path[i][0] != '\0')
      dr_fr_collect(c->fr_path[i], deadline, &c->fr[i]);
  c->took_ms = dr_mono_ms() - t0;
}

static void collect_done(uv_work_t *req, int status) {
  collect_t *c = req->data;
  struct dr_hang *h = c->h;
  h->collecting = 0;
  if (status != 0 || c->episode != h->episode) {
    collect_free(c);
    return;
  }
  collect_free(h->done);
  h->done = c;
  tick(h); /* judge now, with the stacks */
}

/* Where worker w's flight recorder dump goes (env.c's DDPRUN_FR_DUMP),
 * when its program offers one (the Python start-up hook made path.ready,
 * pyboot.h); else
 * "". */
static void fr_path_of(const dr_worker_t *w, char *out, size_t n) {
  char ready[1200];
  out[0] = '\0';
  if (!w->alive)
    return;
  dr_env_fr_dump_path(w->error_file, out, n);
  snprintf(ready, sizeof(ready), "%s.ready", out);
  if (out[0] == '\0' || access(ready, F_OK) != 0)
    out[0] = '\0';
}

/* Starts taking every live worker's stack (req[i] is local rank i, pid 0
 * for the dead). */
static void collect_start(struct dr_hang *h) {
  dr_agent_t *ag = h->ag;
  collect_t *c = calloc(1, sizeof(*c));
  if (c != NULL) {
    c->reqs = calloc(h->n, sizeof(*c->reqs));
    c->out = calloc(h->n, sizeof(*c->out));
    c->fr_path = calloc(h->n, sizeof(*c->fr_path));
    c->fr = calloc(h->n, sizeof(*c->fr));
  }
  if (c == NULL || c->reqs == NULL || c->out == NULL || c->fr_path == NULL ||
      c->fr == NULL) {
    collect_free(c);
    return;
  }
  c->h = h;
  c->episode = h->episode;
  c->n = h->n;
  c->timeout_ms = h->budget_ms;
  c->req.data = c;
  for (uint32_t i = 0; i < h->n; i++) {
    c->reqs[i].pid = ag->w[i].alive ? ag->w[i].pid : 0;
    c->reqs[i].is_python = -1;
    fr_path_of(&ag->w[i], c->fr_path[i], sizeof(c->fr_path[i]));
  }
  /* A dead worker's request is answered at once: no such process. */
  if (uv_queue_work(&ag->loop, &c->req, collect_work, collect_done) != 0) {
    collect_free(c);
    return;
  }
  h->collecting = 1;
}

/* The stack of local rank i when it is still the same process. */
static const dr_stack_t *stack_of(struct dr_hang *h, uint32_t i) {
  if (h->done == NULL || i >= h->done->n)
    return NULL;
  const dr_stack_t *s = &h->done->out[i];
  return s->pid != 0 && s->pid == h->ag->w[i].pid ? s : NULL;
}

/* ---- the verdict --------------------------------------------------------- */

/* The tools used and what was missing, once each, for the summary. */
static void tools_line(struct dr_hang *h, char *out, size_t n) {
  char used[160] = "", missing[300] = "";
  for (uint32_t i = 0; i < h->n; i++) {
    const dr_stack_t *s = stack_of(h, i);
    if (s == NULL)
      continue;
    if (s->tool[0] != '\0' && strstr(used, s->tool) == NULL)
      snprintf(used + strlen(used), sizeof(used) - strlen(used), "%s%s",
               used[0] != '\0' ? ", " : "", s->tool);
    if (s->missing[0] != '\0' && missing[0] == '\0')
      snprintf(missing, sizeof(missing), "%s", s->missing);
  }
  snprintf(out, n, "stacks by %s%s%s", used[0] != '\0' ? used : "no tool",
           missing[0] != '\0' ? "; " : "", missing);
}

/* Writes every rank's stack to stack.txt beside its logs; the directory of
 * the last one written into dir. */
static void write_stacks(struct dr_hang *h, char *dir, size_t n) {
  dr_agent_t *ag = h->ag;
  dir[0] = '\0';
  for (uint32_t i = 0; i < h->n; i++) {
    const dr_stack_t *s = stack_of(h, i);
    char d[900], path[1000];
    if (s == NULL || dr__workers_kept_dir(ag, &ag->w[i], d, sizeof(d)) != 0)
      continue;
    snprintf(path, sizeof(path), "%s/stack.txt", d);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
      DR_SAY(DR_LOG_WARN, "cannot write %s (%s)", path, strerror(errno));
      continue;
    }
    char who[96];
    snprintf(who, sizeof(who), "rank %u (local rank %u, pid %d)",
             ag->w[i].rank, i, (int)s->pid);
    size_t cap = (s->text != NULL ? strlen(s->text) : 0) + 2048;
    char *text = malloc(cap);
    if (text != NULL) {
      size_t len = dr_stack_format(s, who, text, cap);
      fwrite(text, 1, len, f);
      free(text);
    }
    fclose(f);
    snprintf(dir, n, "%s", d);
  }
}

/* Writes the stacks beside the logs and says where this node's ranks are,
 * grouped: "where the ranks of this node are (TOOLS)SUFFIX:", a line per
 * group, and where the full stacks are. The directory, the tools line and
 * the groups are left in dir, tools and groups. */
static void say_where(struct dr_hang *h, const char *suffix, char *dir,
                      size_t dir_n, char *tools, size_t tools_n,
                      char *groups, size_t groups_n) {
  dr_agent_t *ag = h->ag;
  write_stacks(h, dir, dir_n);
  tools_line(h, tools, tools_n);
  groups[0] = '\0';
  dr_rank_where_t *rw = calloc(h->n, sizeof(*rw));
  size_t m = 0;
  for (uint32_t k = 0; rw != NULL && k < h->n; k++) {
    if (!ag->w[k].alive)
      continue;
    const dr_stack_t *s = stack_of(h, k);
    rw[m++] = (dr_rank_where_t){ag->w[k].rank,
                                s != NULL && s->where[0] ? s->where
                                                         : "no stack"};
  }
  dr_stacks_group(rw, m, "\n", groups, groups_n);
  free(rw);
  DR_SAY(DR_LOG_ERROR, "where the ranks of this node are (%s)%s:", tools,
         suffix);
  for (const char *p = groups; *p != '\0';) {
    size_t len = strcspn(p, "\n");
    DR_SAY(DR_LOG_ERROR, "  %.*s", (int)len, p);
    p += len + (p[len] == '\n');
  }
  if (dir[0] != '\0') {
    char *slash = strrchr(dir, '/');
    if (slash != NULL)
      *slash = '\0';
    DR_SAY(DR_LOG_ERROR, "full stacks: %s/<rank>/stack.txt", dir);
  }
}

/* What the local ranks' flight recorders say, said on one line and left
 * in out ("" when no rank offered a dump). */
static void fr_line(struct dr_hang *h, char *out, size_t n) {
  out[0] = '\0';
  if (h->done == NULL)
    return;
  uint32_t *ids = calloc(h->n, sizeof(*ids));
  if (ids == NULL)
    return;
  for (uint32_t i = 0; i < h->n; i++)
    ids[i] = h->ag->w[i].rank;
  dr_fr_verdict(h->done->fr, ids, h->done->n, out, n);
  free(ids);
  if (out[0] != '\0')
    DR_SAY(DR_LOG_ERROR, "flight recorder (PyTorch): %s", out);
}

static void declare(struct dr_hang *h, const dr_verdict_t *vd) {
  dr_agent_t *ag = h->ag;
  uint32_t i = (uint32_t)vd->named;
  dr_worker_t *w = &ag->w[i];
  const dr_rank_view_t *v = &h->views[i];
  double S = h->eff_ms / 1000.0;
  char how[160];
  if (h->lenient)
    snprintf(how, sizeof(how), "--hang-timeout auto: %.0f s", S);
  else
    snprintf(how, sizeof(how), "--hang-timeout %.1f s", S);
  double quiet = v->quiet_ms / 1000.0;
  if (vd->why == DR_WHY_BUSY_PEERS_WAIT) /* its peers' silence */
    for (uint32_t k = 0; k < h->n; k++)
      if (h->views[k].alive && h->views[k].quiet_ms / 1000.0 > quiet)
        quiet = h->views[k].quiet_ms / 1000.0;
  const dr_stack_t *st = stack_of(h, i);
  char first[400];
  if (v->reports)
    snprintf(first, sizeof(first), "hung: no progress for %.1f s after step "
             "%llu (%s): %s", quiet, (unsigned long long)w->progress_step,
             how, dr_stall_why_text(vd->why));
  else if (vd->why == DR_WHY_BUSY_PEERS_WAIT)
    snprintf(first, sizeof(first), "hung: busy while its peers made no "
             "progress for %.1f s (%s; judged by CPU time)", quiet, how);
  else
    snprintf(first, sizeof(first), "hung: no progress for %.1f s: its "
             "processes used no CPU time%s (%s): %s",
             quiet, h->nvml != NULL ? " and its GPU ran nothing" : "", how,
             dr_stall_why_text(vd->why));
  if (v->reports)
    DR_SAY(DR_LOG_ERROR, "rank %u (local rank %u, pid %d) made no progress "
            "for %.1f s after step %llu; treating it as hung", w->rank,
            w->local_rank, (int)w->pid, quiet,
            (unsigned long long)w->progress_step);
  else
    DR_SAY(DR_LOG_ERROR, "rank %u (local rank %u, pid %d) made no progress "
            "for %.1f s (judged by CPU time); treating it as hung", w->rank,
            w->local_rank, (int)w->pid, quiet);
  DR_SAY(DR_LOG_ERROR, "rank %u is to blame: %s%s%s", w->rank,
          dr_stall_why_text(vd->why), st != NULL && st->where[0] ? ", at " : "",
          st != NULL ? st->where : "");

  char dir[900], tools[500], groups[1200], fr[600];
  say_where(h, "", dir, sizeof(dir), tools, sizeof(tools), groups,
            sizeof(groups));
  fr_line(h, fr, sizeof(fr));

  char indented[1300];
  size_t o = 0;
  indented[0] = '\0';
  for (const char *p = groups; *p != '\0' && o + 4 < sizeof(indented);) {
    size_t len = strcspn(p, "\n");
    o += (size_t)snprintf(indented + o, sizeof(indented) - o, "\n  %.*s",
                          (int)len, p);
    p += len + (p[len] == '\n');
  }
  char message[sizeof(((dr_failure_rec_t *)0)->message)];
  int k = snprintf(message, sizeof(message), "%s\nwhere the ranks of this "
                   "node are (%s):%s%s%s%s%s%s", first, tools, indented,
                   dir[0] != '\0' ? "\nfull stacks: " : "", dir,
                   dir[0] != '\0' ? "/<rank>/stack.txt" : "",
                   fr[0] != '\0' ? "\nflight recorder: " : "", fr);
  /* The server gets the last DR_FAILURE_MSG_MAX bytes of a message: the
   * verdict itself must be among them. */
  if (k < 0 || (size_t)k > DR_FAILURE_MSG_MAX)
    snprintf(message, sizeof(message), "%s\nat %s (%s)", first,
             st != NULL && st->where[0] ? st->where : "an unknown place",
             tools);
  char esc[1500], esc2[600];
  dr_events_emit(ag->events, "hang",
                 ",\"gen\":%llu,\"rank\":%u,\"local_rank\":%u,\"pid\":%d,"
                 "\"why\":\"%s\",\"where\":\"%s\",\"groups\":\"%s\"",
                 (unsigned long long)ag->asg.gen, w->rank, w->local_rank,
                 (int)w->pid, dr_stall_why_text(vd->why),
                 dr_json_escape(st != NULL ? st->where : "", esc2,
                                sizeof(esc2)),
                 dr_json_escape(groups, esc, sizeof(esc)));
  /* A rank named only because it waited longest may wait for a culprit on
   * another node, whose agent names it: the server holds this. */
  dr_hang_verdict_t verdict = {
      .local_rank = w->local_rank,
      .kind = vd->why == DR_WHY_WAITED ? DR_FAIL_HANG_WAIT : DR_FAIL_HANG,
      .message = message};
  h->on_verdict(ag, &verdict);
}

/* ---- polling ------------------------------------------------------------- */

/* The GPU entry of local rank i: its binding, else its share of
 * CUDA_VISIBLE_DEVICES, else its index. */
static void gpu_entry(dr_agent_t *ag, uint32_t i, char *out, size_t n) {
  if (ag->bind != NULL && ag->bind[i].have_gpu) {
    snprintf(out, n, "%s", ag->bind[i].gpu);
    return;
  }
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd == NULL) {
    snprintf(out, n, "%u", i);
    return;
  }
  size_t count = 0;
  for (const char *p = cvd; *p != '\0'; p++)
    count += *p == ',';
  count++;
  size_t want = i % count;
  const char *p = cvd;
  for (size_t k = 0; k < want; k++)
    p = strchr(p, ',') + 1;
  snprintf(out, n, "%.*s", (int)strcspn(p, ","), p);
}

/* Whether local rank i's GPU ran something since the last poll: one of
 * its processes by NVML's per-process samples, else (where the device
 * does not sample per process) the device it is bound to. */
static int gpu_busy(struct dr_hang *h, uint32_t i, size_t n_busy) {
  if (h->nvml == NULL)
    return 0;
  for (size_t k = 0; k < n_busy; k++)
    if (h->busy_pgrp[k] == h->pgids[i])
      return 1;
  char dev[80];
  gpu_entry(h->ag, i, dev, sizeof(dev));
  if (dr_nvml_per_process(h->nvml, dev))
    return 0;
  return dr_nvml_device_busy(h->nvml, dev) == 1;
}

/* Said once, when the first rank is judged by its CPU time. */
static void say_cpu(struct dr_hang *h, uint32_t i) {
  dr_agent_t *ag = h->ag;
  if (!h->nvml_tried) {
    h->nvml_tried = 1;
    char why[300];
    if (dr_nvml_open(NULL, &h->nvml, why, sizeof(why)) != 0)
      DR_SAY(DR_LOG_INFO, "rank %u does not report progress: judged by the "
              "CPU time of its processes alone (no GPU utilisation: %s)",
              ag->w[i].rank, why);
    else
      DR_SAY(DR_LOG_INFO, "rank %u does not report progress: judged by the "
              "CPU time of its processes and the utilisation of its GPU "
              "(NVML)", ag->w[i].rank);
  }
  h->said_cpu = 1;
}

/* The timeout in force: --hang-timeout's, or auto's from the steps seen;
 * and the waiting time after it. */
static void set_timeout(struct dr_hang *h) {
  if (h->lenient) {
    int reports = 0;
    for (uint32_t i = 0; i < h->n; i++)
      reports |= h->views[i].alive && h->views[i].reports;
    uint64_t steps = h->slowest_ms * AUTO_STEPS;
    h->eff_ms = !reports ? 2 * h->floor_ms
                         : steps > h->floor_ms ? steps : h->floor_ms;
  }
  h->wait_ms = h->eff_ms + h->eff_ms / 2 + (uint64_t)h->budget_ms;
}

static void tick(struct dr_hang *h) {
  dr_agent_t *ag = h->ag;
  if (ag->state != DR_AG_RUNNING || ag->w == NULL) {
    if (h->stalled || h->suspect) {
      h->stalled = h->suspect = 0;
      h->episode++;
      collect_free(h->done);
      h->done = NULL;
    }
    return;
  }
  uint64_t now = uv_now(&ag->loop);
  for (uint32_t i = 0; i < h->n; i++)
    h->pgids[i] = ag->w[i].alive ? ag->w[i].pid : 0;
  dr_pgstat_scan(NULL, h->pgids, h->n, h->ps);
  dr_nvml_refresh(h->nvml);
  const pid_t *busy = NULL;
  size_t n_busy = dr_nvml_busy_pids(h->nvml, &busy);
  if (n_busy > 0) {
    pid_t *g = realloc(h->busy_pgrp, n_busy * sizeof(*g));
    if (g == NULL)
      n_busy = 0;
    else
      h->busy_pgrp = g;
    for (size_t k = 0; k < n_busy; k++)
      h->busy_pgrp[k] = dr_pgstat_pgrp(NULL, busy[k]);
  }
  for (uint32_t i = 0; i < h->n; i++) {
    dr_worker_t *w = &ag->w[i];
    hang_rank_t *r = &h->r[i];
    dr_rank_view_t *v = &h->views[i];
    memset(v, 0, sizeof(*v));
    if (w->pid != r->pid) {
      r->pid = w->pid;
      dr_stall_start(&r->cpu, now);
    }
    if (!w->alive)
      continue;
    dr_stall_sample(&r->cpu, &h->cfg, now, &h->ps[i],
                    gpu_busy(h, i, n_busy));
    dr_progress_sample_t smp = dr_progress_read(ag->progress, i);
    if (smp.seq != w->progress_seq) {
      if (w->progress_seq != 0 && smp.seq != 0 &&
          now - w->progress_ms > h->slowest_ms)
        h->slowest_ms = now - w->progress_ms;
      w->progress_seq = smp.seq;
      w->progress_step = smp.step;
      w->progress_ms = now;
    }
    v->alive = 1;
    v->reports = (smp.flags & DR_PROGRESS_REPORTS) != 0 || smp.seq != 0;
    uint64_t cpu_quiet = dr_stall_quiet_ms(&r->cpu, &h->cfg);
    if (v->reports)
      v->quiet_ms = w->progress_seq != 0 ? now - w->progress_ms : 0;
    else
      v->quiet_ms = cpu_quiet;
    /* auto: its CPU time or GPU counts as progress too (an evaluation, a
     * checkpoint between two reports) */
    if (h->lenient && v->quiet_ms > cpu_quiet)
      v->quiet_ms = cpu_quiet;
    v->stopped = h->ps[i].stopped;
    v->disk_wait = h->ps[i].disk_wait;
    v->busy = dr_stall_cpu_pct(&r->cpu, &h->cfg, DR_STALL_BUSY_OVER_MS) >=
              DR_STALL_BUSY_PCT;
    const dr_stack_t *s = stack_of(h, i);
    v->place = s != NULL ? s->place : DR_PLACE_UNKNOWN;
    if (!v->reports && !h->said_cpu &&
        now - r->cpu.start_ms >= h->eff_ms / 2)
      say_cpu(h, i);
  }
  set_timeout(h);
  dr_verdict_t vd = dr_stall_judge(h->views, h->n, h->eff_ms, h->wait_ms,
                                   h->lenient);
  /* Quiet for half the timeout: suspect. Its stacks are taken then, so
   * that a stop for a culprit named on another node can say where this
   * node's ranks are, though none of them is stalled yet. */
  int suspect = 0;
  for (uint32_t i = 0; i < h->n; i++)
    if (h->views[i].alive && h->views[i].quiet_ms >= h->eff_ms / 2)
      suspect = 1;
  if (vd.stalled == 0) {
    if ((h->stalled || h->suspect) && !suspect) {
      /* progress again: a new stall starts afresh */
      h->stalled = h->suspect = 0;
      h->episode++;
      collect_free(h->done);
      h->done = NULL;
      return;
    }
    if (suspect && !h->suspect) {
      h->suspect = 1;
      h->episode++;
    }
    if (h->stalled) { /* a stalled rank ended, others are still quiet */
      h->stalled = 0;
      h->episode++;
    }
    if (suspect && !h->collecting &&
        (h->done == NULL || h->done->episode != h->episode))
      collect_start(h);
    return;
  }
  if (!h->stalled) {
    h->stalled = 1;
    h->episode++; /* fresh stacks for the verdict */
  }
  if (h->collecting)
    return;
  if (h->done == NULL || h->done->episode != h->episode) {
    collect_start(h);
    if (h->collecting)
      return;
  }
  if (vd.named >= 0 && vd.why == DR_WHY_WAITED && h->lenient &&
      ag->asg.nnodes > 1) {
    /* auto: what they wait for may be a long evaluation on another node;
     * the agent of a node that holds a culprit names it. */
    if (h->wait_said != h->episode) {
      h->wait_said = h->episode;
      DR_SAY(DR_LOG_WARN, "every rank of this node has made no progress "
             "for %.0f s, waiting; --hang-timeout auto leaves the verdict to "
             "the node whose rank they wait for (--hang-timeout SECONDS "
             "would stop them here)", h->views[vd.named].quiet_ms / 1000.0);
    }
    return;
  }
  if (vd.named >= 0)
    declare(h, &vd); /* the agent stops the group: no further verdict */
}

static void on_hang_timer(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->hang != NULL)
    tick(ag->hang);
}

int dr__hang_start(dr_agent_t *ag, dr_hang_verdict_cb on_verdict) {
  if (ag->o->hang_timeout_ms == 0)
    return 0;
  struct dr_hang *h = calloc(1, sizeof(*h));
  if (h == NULL)
    return -ENOMEM;
  h->ag = ag;
  h->on_verdict = on_verdict;
  h->n = ag->nproc;
  h->r = calloc(h->n, sizeof(*h->r));
  h->pgids = calloc(h->n, sizeof(*h->pgids));
  h->ps = calloc(h->n, sizeof(*h->ps));
  h->views = calloc(h->n, sizeof(*h->views));
  if (h->r == NULL || h->pgids == NULL || h->ps == NULL || h->views == NULL) {
    ag->hang = h;
    dr__hang_free(ag);
    return -ENOMEM;
  }
  uint32_t S = ag->o->hang_timeout_ms;
  if (S == DR_HANG_AUTO) {
    /* DDPRUN_TEST_HANG_FLOOR_MS: a test's floor, in place of minutes */
    const char *t = getenv("DDPRUN_TEST_HANG_FLOOR_MS");
    h->lenient = 1;
    h->floor_ms = t != NULL && atoi(t) > 0 ? (uint64_t)atoi(t) : AUTO_FLOOR_MS;
    S = (uint32_t)(2 * h->floor_ms);
  }
  h->eff_ms = S;
  h->cfg.timeout_ms = S;
  h->cfg.hz = sysconf(_SC_CLK_TCK);
  if (h->cfg.hz <= 0)
    h->cfg.hz = 100;
  h->budget_ms = (int)(S / 4 < 500 ? 500 : S / 4 > 10000 ? 10000 : S / 4);
  h->wait_ms = (uint64_t)S + S / 2 + (uint64_t)h->budget_ms;
  ag->hang = h;
  /* auto polls every 2 s (a scan of /proc on the loop, for a verdict
   * minutes away); an explicit timeout every S/10, at most every 500 ms */
  uint64_t every = h->lenient ? h->floor_ms / 10 : S / 10;
  uint64_t most = h->lenient ? 2000 : 500;
  every = every < 50 ? 50 : every > most ? most : every;
  uv_timer_start(&ag->hang_timer, on_hang_timer, every, every);
  return 0;
}

void dr__hang_tell(dr_agent_t *ag) {
  struct dr_hang *h = ag->hang;
  if (h == NULL || (!h->stalled && !h->suspect) || h->done == NULL ||
      ag->state != DR_AG_RUNNING)
    return;
  char dir[900], tools[500], groups[1200], fr[600];
  say_where(h, ", as the group stops", dir, sizeof(dir), tools,
            sizeof(tools), groups, sizeof(groups));
  fr_line(h, fr, sizeof(fr));
}

void dr__hang_free(dr_agent_t *ag) {
  struct dr_hang *h = ag->hang;
  if (h == NULL)
    return;
  collect_free(h->done);
  dr_nvml_close(&h->nvml);
  free(h->busy_pgrp);
  free(h->r);
  free(h->pgids);
  free(h->ps);
  free(h->views);
  free(h);
  ag->hang = NULL;
}
