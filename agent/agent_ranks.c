/* The workers as `ddprun status` shows them: while workers run, the agent
 * reports them to the server (RANKS: pid, state, last progress step and
 * step rate, and their health: the memory and CPU use of each one's
 * process group, its GPU memory and utilisation through NVML) when they
 * change, at most once per heartbeat. The health is sampled on the same
 * heartbeat, in one pass over /proc for all the ranks, and with it the
 * OOM killer's count that names a rank it killed (agent_failure.c). */
#include "agent_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "nvml.h"
#include "pgstat.h"
#include "progress.h"

/* Unchanged ranks are reported again after this long. */
#define RANKS_REFRESH_MS 5000u
/* Every rank's memory, CPU and GPU are sampled at most this often (a scan
 * of /proc on the loop; a heartbeat comes more often), and whenever a
 * worker started since. */
#define HEALTH_SAMPLE_MS 1000u

/* 1 when pid is stopped (a signal, a debugger): state T or t. */
static int is_stopped(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the name may hold spaces */
  return p != NULL && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

uint32_t dr__agent_rank_state(const dr_agent_t *ag, const dr_worker_t *w) {
  if (w->pid <= 0)
    return DR_RS_STARTING;
  if (!w->alive)
    return w->signal != 0 ? DR_RS_KILLED : DR_RS_EXITED;
  if (ag->state == DR_AG_STOPPING)
    return DR_RS_STOPPING;
  return is_stopped(w->pid) ? DR_RS_STOPPED : DR_RS_RUNNING;
}

/* Reads w's progress slot: its step, when it changed, its rate. */
static void track(dr_agent_t *ag, dr_worker_t *w, uint64_t now) {
  dr_progress_sample_t smp = dr_progress_read(ag->progress, w->local_rank);
  if (smp.seq == 0 || w->pid <= 0)
    return; /* no report yet (the slot is reset as the worker starts) */
  if (smp.seq != w->st_seq) {
    if (w->st_change_ms == 0 || smp.step != w->st_step)
      w->st_change_ms = now;
    w->st_seq = smp.seq;
    w->st_step = smp.step;
  }
  if (w->st_rate_ms == 0) {
    w->st_rate_ms = now;
    w->st_rate_step = smp.step;
    w->st_rate = -1;
  } else if (now - w->st_rate_ms >= 500) {
    uint64_t d = smp.step >= w->st_rate_step ? smp.step - w->st_rate_step : 0;
    double inst = (double)d * 1000.0 / (double)(now - w->st_rate_ms);
    w->st_rate = w->st_rate < 0 ? inst : 0.5 * inst + 0.5 * w->st_rate;
    w->st_rate_ms = now;
    w->st_rate_step = smp.step;
  }
}

static uint64_t fnv(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

/* ---- health -------------------------------------------------------------- */

/* The OOM killer's count: the host's (/proc/vmstat), else, on a kernel or
 * a sandbox without it, the cgroup v2 of this agent, which its workers
 * share unless they move. 0, or a negative code. */
static int oom_count(uint64_t *out) {
  int rc = dr_pgstat_oom_kills(NULL, out);
  if (rc == 0)
    return 0;
  FILE *f = fopen("/proc/self/cgroup", "re");
  if (f == NULL)
    return rc;
  char line[600], path[700];
  path[0] = '\0';
  while (fgets(line, sizeof(line), f) != NULL)
    if (strncmp(line, "0::", 3) == 0) {
      line[strcspn(line, "\n")] = '\0';
      snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.events",
               strcmp(line + 3, "/") == 0 ? "" : line + 3);
      break;
    }
  fclose(f);
  return path[0] != '\0' ? dr_pgstat_cgroup_oom_kills(path, out) : rc;
}

/* NVML, opened at the first call: the library DDPRUN_TEST_NVML_LIB names
 * (a test's stand-in), else the driver's. NULL where there is none. */
dr_nvml_t *dr__agent_nvml(dr_agent_t *ag) {
  if (!ag->nvml_tried) {
    ag->nvml_tried = 1;
    char why[300];
    const char *lib = getenv("DDPRUN_TEST_NVML_LIB");
    if (dr_nvml_open(lib != NULL && lib[0] != '\0' ? lib : NULL, &ag->nvml,
                     why, sizeof(why)) != 0)
      DR_SAY(DR_LOG_DEBUG, "no GPU figures in ddprun status: %s", why);
  }
  return ag->nvml;
}

/* The ranks' GPU use into gpu[] (pg[i]: rank i's process group, 0: none):
 * unknown without NVML. */
static void sample_gpus(dr_agent_t *ag, const pid_t *pg, dr_nvml_use_t *gpu) {
  dr_nvml_t *g = dr__agent_nvml(ag);
  dr_nvml_refresh(g);
  const dr_nvml_proc_t *procs;
  size_t n = dr_nvml_procs(g, &procs);
  pid_t *grp = calloc(n > 0 ? n : 1, sizeof(*grp));
  if (grp == NULL) {
    dr_nvml_group_use(NULL, NULL, pg, ag->nproc, gpu);
    return;
  }
  /* A stat read per process that holds a GPU context: a few per GPU. */
  for (size_t k = 0; k < n; k++)
    grp[k] = dr_pgstat_pgrp(NULL, procs[k].pid);
  dr_nvml_group_use(g, grp, pg, ag->nproc, gpu);
  free(grp);
}

/* One sample of every rank's group: its memory and CPU into w->hl_use,
 * its GPU use into gpu[] (unknown for all when gpu is NULL or sampling
 * failed), and the OOM killer's count it is judged against. */
static void sample(dr_agent_t *ag, uint64_t now, dr_nvml_use_t *gpu) {
  uint32_t n = ag->w != NULL ? ag->nproc : 0;
  /* A worker that started since the last count gets that count as its
   * base: it was read before the worker existed. */
  for (uint32_t i = 0; i < n; i++) {
    dr_worker_t *w = &ag->w[i];
    if (w->pid > 0 && w->hl_pid != w->pid) {
      w->hl_pid = w->pid;
      dr_pgstat_use_init(&w->hl_use);
      w->hl_oom_known = 0;
      w->hl_gpu.mem_bytes = w->hl_gpu.dev_used_bytes = DR_NVML_UNKNOWN;
      w->hl_gpu.dev_total_bytes = DR_NVML_UNKNOWN;
      w->hl_gpu.util = UINT32_MAX;
    }
    if (w->pid > 0 && !w->hl_oom_known && ag->oom_ns != 0 &&
        ag->oom_ns < w->start_ns) {
      w->hl_oom_base = ag->oom_kills;
      w->hl_oom_known = 1;
    }
  }
  /* The count before the scan: a group found alive below was alive after
   * this count was read, so that a kill after it raises the count. But
   * the count rises as the OOM killer strikes, before its victim is gone:
   * a group still alive now may hold the victim of a kill counted since
   * the last sample. So a live group's base moves only to the count read
   * before this one (before: the last sample's, a second or more old, or
   * the one read as the workers started). */
  uint64_t before = ag->oom_kills;
  int had_before = ag->oom_ns != 0;
  uint64_t kills;
  int have_kills = oom_count(&kills) == 0;
  if (have_kills) {
    ag->oom_kills = kills;
    ag->oom_ns = uv_hrtime();
  }
  for (uint32_t i = 0; gpu != NULL && i < n; i++) {
    gpu[i].mem_bytes = gpu[i].dev_used_bytes = DR_NVML_UNKNOWN;
    gpu[i].dev_total_bytes = DR_NVML_UNKNOWN;
    gpu[i].util = UINT32_MAX;
  }
  pid_t *pg = calloc(n > 0 ? n : 1, sizeof(*pg));
  dr_pgstat_t *st = calloc(n > 0 ? n : 1, sizeof(*st));
  if (pg == NULL || st == NULL || n == 0)
    goto done;
  for (uint32_t i = 0; i < n; i++)
    pg[i] = ag->w[i].pid > 0 && !ag->w[i].group_gone ? ag->w[i].pid : 0;
  if (dr_pgstat_scan(NULL, pg, n, st) != 0)
    goto done;
  long tck = sysconf(_SC_CLK_TCK);
  for (uint32_t i = 0; i < n; i++) {
    dr_worker_t *w = &ag->w[i];
    if (pg[i] <= 0) {
      w->hl_use.live = 0;
      continue;
    }
    dr_pgstat_use_sample(&w->hl_use, &st[i], now, tck);
    /* The group alive: its base moves up to the last sample's count,
     * unless a member left while the count rose (a child the OOM killer
     * took, whose shell may still be passing on its end): that kill stays
     * its. */
    if (have_kills && had_before && st[i].leader_state != '\0') {
      int lost = w->hl_oom_known && st[i].members_id != w->hl_members_id &&
                 kills > w->hl_oom_base;
      if (!w->hl_oom_known)
        w->hl_oom_base = before;
      else if (!lost && before > w->hl_oom_base)
        w->hl_oom_base = before;
      w->hl_oom_known = 1;
      w->hl_members_id = st[i].members_id;
    }
  }
  if (gpu != NULL)
    sample_gpus(ag, pg, gpu);
done:
  free(pg);
  free(st);
}

int dr__agent_rank_oom_killed(dr_agent_t *ag, const dr_worker_t *w) {
  /* Killed itself, or a process of it whose end it passed on as a shell
   * does (128 + SIGKILL). */
  if (w->signal != SIGKILL && (w->signal != 0 || w->exit_code != 128 + SIGKILL))
    return 0;
  uint64_t base, now;
  if (w->hl_oom_known && w->hl_pid == w->pid)
    base = w->hl_oom_base;
  else if (ag->oom_ns != 0 && ag->oom_ns < w->start_ns)
    base = ag->oom_kills; /* it died before a sample saw it */
  else
    return 0;
  return oom_count(&now) == 0 && now > base;
}

void dr__agent_oom_mark(dr_agent_t *ag) {
  uint64_t kills;
  if (oom_count(&kills) == 0) {
    ag->oom_kills = kills;
    ag->oom_ns = uv_hrtime();
  }
}

void dr__agent_ranks_free(dr_agent_t *ag) { dr_nvml_close(&ag->nvml); }

/* A memory figure that moved enough since it was last reported to be
 * reported again: known or unknown since, or by more than a fifth (with
 * that hysteresis, a figure that hovers reports nothing more). */
static int moved(uint64_t now, uint64_t sent) {
  if ((now == DR_NONE) != (sent == DR_NONE))
    return 1;
  if (now == DR_NONE)
    return 0;
  uint64_t d = now > sent ? now - sent : sent - now;
  return d > sent / 5;
}

/* RANKS when the workers changed (pid, state, step, a memory figure by a
 * fifth), at most once per heartbeat, and every RANKS_REFRESH_MS while they
 * do not. */
void dr__agent_report_ranks(dr_agent_t *ag) {
  uint64_t now = uv_now(&ag->loop);
  int reporting =
      ag->have_asg && ag->w != NULL && ag->arz_ready &&
      (ag->state == DR_AG_RUNNING || ag->state == DR_AG_STOPPING ||
       ag->state == DR_AG_WAITING);
  int due = ag->health_ms == 0 || now - ag->health_ms >= HEALTH_SAMPLE_MS;
  for (uint32_t i = 0; !due && ag->w != NULL && i < ag->nproc; i++)
    due = ag->w[i].pid > 0 && ag->w[i].hl_pid != ag->w[i].pid;
  dr_nvml_use_t *gpu = reporting && due
                           ? calloc(ag->nproc > 0 ? ag->nproc : 1, sizeof(*gpu))
                           : NULL;
  if (due) {
    sample(ag, now, gpu);
    ag->health_ms = now;
    for (uint32_t i = 0; gpu != NULL && i < ag->nproc; i++)
      ag->w[i].hl_gpu = gpu[i];
  }
  free(gpu);
  dr_rank_rec_t *recs =
      reporting ? calloc(ag->nproc > 0 ? ag->nproc : 1, sizeof(*recs)) : NULL;
  if (recs == NULL)
    return;
  uint64_t h = 1469598103934665603ull ^ ag->asg.gen;
  int mem_moved = 0;
  for (uint32_t i = 0; i < ag->nproc; i++) {
    dr_worker_t *w = &ag->w[i];
    dr_rank_rec_t *x = &recs[i];
    track(ag, w, now);
    x->rank = ag->asg.first_rank + i;
    x->local_rank = i;
    x->node_rank = ag->asg.node_rank;
    x->pid = w->pid > 0 ? (uint32_t)w->pid : 0;
    x->state = dr__agent_rank_state(ag, w);
    x->exit_code = x->state == DR_RS_EXITED ? w->exit_code : 0;
    x->signal = x->state == DR_RS_KILLED ? (uint32_t)w->signal : 0;
    x->step = w->st_change_ms != 0 ? w->st_step : DR_NONE;
    x->step_age_ms = w->st_change_ms != 0 ? now - w->st_change_ms : DR_NONE;
    x->rate_milli = w->alive && w->st_rate >= 0
                        ? (uint64_t)(w->st_rate * 1000.0 + 0.5)
                        : DR_NONE;
    /* A group gone has no use now; its peak stays. */
    int sampled = w->pid > 0 && w->hl_pid == w->pid;
    int live = sampled && w->hl_use.live;
    x->rss_bytes = live ? w->hl_use.rss_bytes : DR_NONE;
    x->rss_peak_bytes = sampled ? w->hl_use.rss_peak_bytes : DR_NONE;
    x->cpu_milli = live ? w->hl_use.cpu_milli : DR_NO_U32;
    x->gpu_mem_bytes = live ? w->hl_gpu.mem_bytes : DR_NONE;
    x->gpu_util = live ? w->hl_gpu.util : DR_NO_U32;
    x->gpu_used_bytes = live ? w->hl_gpu.dev_used_bytes : DR_NONE;
    x->gpu_total_bytes = live ? w->hl_gpu.dev_total_bytes : DR_NONE;
    h = fnv(fnv(fnv(h, x->pid), x->state), x->step);
    h = fnv(fnv(h, (uint32_t)x->exit_code), x->signal);
    mem_moved |= moved(x->rss_bytes, w->hl_rss_sent) ||
                 moved(x->gpu_mem_bytes, w->hl_gpu_sent);
  }
  if (h != ag->ranks_digest || mem_moved || ag->ranks_sent_ms == 0 ||
      now - ag->ranks_sent_ms >= RANKS_REFRESH_MS) {
    dr_buf_t b;
    dr_buf_init(&b);
    if (dr_enc_ranks(&b, 0, ag->asg.gen, recs, ag->nproc) == 0) {
      ag->ranks_digest = h;
      ag->ranks_sent_ms = now;
      for (uint32_t i = 0; i < ag->nproc; i++) {
        ag->w[i].hl_rss_sent = recs[i].rss_bytes;
        ag->w[i].hl_gpu_sent = recs[i].gpu_mem_bytes;
      }
    }
    dr__agent_send(ag, &b);
  }
  free(recs);
}
