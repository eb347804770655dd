/* The local worker group: spawning with environment and binding, the
 * environment summary, output forwarding, reaping, signalling. */
#include "agent_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs.h"
#include "errors.h"
#include "events.h"
#include "exit_codes.h"
#include "log.h"
#include "pgstat.h"
#include "progress.h"
#include "shm_name.h"
#include "watchdog.h"

static int spec_used(const dr_std_spec_t *s) {
  if (s->default_mask != DR_STD_NONE)
    return 1;
  for (size_t i = 0; i < DR_MAX_LOCAL; i++)
    if (s->per_rank_set[i] && s->per_rank[i] != DR_STD_NONE)
      return 1;
  return 0;
}

/* A new directory for files that outlive the agent when there is no
 * --log-dir (logs of --redirects/--tee, stacks of a hang): made once,
 * NULL when it cannot be. *made is set when this call made it. */
static const char *kept_root(dr_agent_t *ag, int *made) {
  *made = 0;
  if (ag->kept_root[0] == '\0') {
    const char *t = getenv("TMPDIR");
    snprintf(ag->kept_root, sizeof(ag->kept_root), "%s/ddprun-logs-XXXXXX",
             t != NULL && t[0] != '\0' ? t : "/tmp");
    if (mkdtemp(ag->kept_root) == NULL) {
      ag->kept_root[0] = '\0';
      return NULL;
    }
    *made = 1;
  }
  return ag->kept_root;
}

/* Where log files go: --log-dir, or (as torchrun does for --redirects and
 * --tee without one) a new directory that is kept and announced; else the
 * private directory removed at exit, which holds only error files. */
static const char *files_root(dr_agent_t *ag) {
  if (ag->o->log_dir != NULL)
    return ag->o->log_dir;
  if (!spec_used(&ag->o->redirects) && !spec_used(&ag->o->tee))
    return ag->tmp_root;
  int made;
  const char *root = kept_root(ag, &made);
  if (root == NULL)
    return ag->tmp_root;
  if (made)
    DR_SAY(DR_LOG_INFO, "worker logs go to %s", root);
  return root;
}

int dr__workers_kept_dir(dr_agent_t *ag, const dr_worker_t *w, char *out,
                         size_t n) {
  int made;
  const char *root = ag->o->log_dir != NULL ? ag->o->log_dir
                                            : kept_root(ag, &made);
  if (root == NULL)
    return -EIO;
  if (snprintf(out, n, "%s/%s/attempt_%u/%u", root, ag->o->rdzv_id,
               ag->asg.restart_count, w->rank) >= (int)n)
    return -ENAMETOOLONG;
  return dr_mkdirs(out);
}

/* The directory of one rank's files in this attempt. */
static int rank_dir(dr_agent_t *ag, uint32_t rank, char *out, size_t n) {
  const char *root = files_root(ag);
  if (snprintf(out, n, "%s/%s/attempt_%u/%u", root, ag->o->rdzv_id,
               ag->asg.restart_count, rank) >= (int)n)
    return -ENAMETOOLONG;
  return dr_mkdirs(out);
}

static void on_pipe_closed(uv_handle_t *h) { free(h); }

static void close_pipe(dr_worker_t *w, int i) {
  if (!w->pipe_open[i])
    return;
  w->pipe_open[i] = 0;
  dr_logfwd_flush(w->fwd[i]);
  uv_close((uv_handle_t *)w->pipe[i], on_pipe_closed);
  w->pipe[i] = NULL;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char chunk[65536];
  (void)h;
  buf->base = chunk;
  buf->len = sizeof(chunk);
}

static void on_pipe_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  dr_worker_t *w = s->data;
  int i = s == (uv_stream_t *)w->pipe[0] ? 0 : 1;
  if (n > 0)
    dr_logfwd_feed(w->fwd[i], buf->base, (size_t)n);
  else if (n < 0)
    close_pipe(w, i);
}

void dr__workers_drain(dr_worker_t *w) {
  char buf[65536];
  for (int i = 0; i < 2; i++) {
    if (!w->pipe_open[i])
      continue;
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)w->pipe[i], &fd) != 0)
      continue;
    for (;;) {
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) {
        dr_logfwd_feed(w->fwd[i], buf, (size_t)n);
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      break;
    }
  }
}

/* Where a local rank's stream goes: console and/or file. */
static void stream_targets(dr_agent_t *ag, uint32_t lr, int i, int *console,
                           int *file) {
  uint8_t bit = i == 0 ? DR_STD_OUT : DR_STD_ERR;
  int redirected = (dr_std_spec_get(&ag->o->redirects, lr) & bit) != 0;
  int teed = (dr_std_spec_get(&ag->o->tee, lr) & bit) != 0;
  int shown = 1;
  if (ag->o->local_ranks_filter != NULL && ag->o->local_ranks_filter[0]) {
    shown = 0;
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s", ag->o->local_ranks_filter);
    for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save))
      if ((uint32_t)atoi(t) == lr)
        shown = 1;
  }
  *console = shown && !redirected;
  /* Files whenever there is a log dir: a superset of torchrun's. */
  *file = ag->o->log_dir != NULL || redirected || teed;
}

static void print_summary(dr_agent_t *ag, dr_worker_t *w) {
  char desc[600];
  const dr_assignment_t *a = &ag->asg;
  dr_bind_describe(&ag->bind[w->local_rank], desc, sizeof(desc));
  DR_SAY(DR_LOG_INFO, "[rank%u] local rank %u of %u, world size %u, node %u of %u "
          "(%s), pid %d, %s, master %s:%u, generation %llu, restart %u of "
          "%u, run id %s",
          w->rank, w->local_rank, ag->nproc, a->world_size, a->node_rank,
          a->nnodes, ag->cfg->hostname, (int)w->pid, desc, a->master_addr,
          a->master_port, (unsigned long long)a->gen, a->restart_count,
          a->max_restarts, ag->o->rdzv_id);
}

static int start_one(dr_agent_t *ag, dr_worker_t *w, uint64_t ckpt_step) {
  const dr_assignment_t *a = &ag->asg;
  char dir[900];
  int rc = rank_dir(ag, w->rank, dir, sizeof(dir));
  if (rc != 0) {
    DR_ERROR("cannot create %s/%s/attempt_%u/%u (%s)", files_root(ag),
             ag->o->rdzv_id, a->restart_count, w->rank, dr_strerror(rc));
    return rc;
  }
  snprintf(w->error_file, sizeof(w->error_file), "%s/error.json", dir);
  unlink(w->error_file);

  dr_env_t e;
  memset(&e, 0, sizeof(e));
  e.o = ag->o;
  e.run_id = ag->o->rdzv_id;
  e.rank = w->rank;
  e.local_rank = w->local_rank;
  e.local_world = ag->nproc;
  e.world = a->world_size;
  e.node_rank = a->node_rank;
  e.nnodes = a->nnodes;
  e.master_addr = a->master_addr;
  e.master_port = a->master_port;
  e.restart_count = a->restart_count;
  e.max_restarts = a->max_restarts;
  e.gen = a->gen;
  e.rdzv_host = ag->srv_host;
  e.rdzv_port = ag->srv_port;
  e.bootstrap = a->bootstrap;
  e.bootstrap_len = a->bootstrap_len;
  e.error_file = w->error_file;
  e.progress_file = ag->progress_path;
  e.shm_prefix = ag->shm_prefix;
  e.pyboot = ag->pyboot_dir;
  dr_progress_reset(ag->progress, w->local_rank);
  e.bind = &ag->bind[w->local_rank];
  e.clock_offset_us = a->clock_offset_us;
  e.clock_uncertainty_us = a->clock_uncertainty_us;
  e.ckpt_step = ckpt_step;
  char **env = dr_env_build(&e);
  if (env == NULL)
    return -ENOMEM;

  dr_spawn_req_t req = {ag->cfg->prog_argv[0], (char *const *)ag->cfg->prog_argv,
                        env, &ag->bind[w->local_rank]};
  int fds[2], stage = 0;
  rc = dr_spawn(&req, &w->pid, &fds[0], &fds[1], &stage);
  free(env);
  if (rc != 0) {
    if (stage == DR_SPAWN_EXEC)
      DR_SAY(DR_LOG_ERROR, "cannot execute '%s': %s",
              ag->cfg->prog_argv[0], dr_strerror(rc));
    else
      DR_SAY(DR_LOG_ERROR, "cannot start local rank %u: %s failed (%s)",
              w->local_rank, stage == DR_SPAWN_BIND   ? "sched_setaffinity()"
                             : stage == DR_SPAWN_FORK ? "fork()"
                                                      : "setting up the process",
              dr_strerror(rc));
    ag->spawn_stage = stage;
    return rc;
  }
  w->alive = 1;
  ag->n_alive++;
  dr__sighold_started(ag, w);
  dr_watchdog_add_group(ag->watchdog_fd, w->pid);

  char prefix[256];
  if (dr_log_prefix_render(ag->o->log_prefix_template, (int)w->rank,
                           (int)w->local_rank, ag->o->role, ag->cfg->hostname,
                           prefix, sizeof(prefix)) != 0)
    snprintf(prefix, sizeof(prefix), "[rank%u]:", w->rank);
  for (int i = 0; i < 2; i++) {
    int console, file;
    stream_targets(ag, w->local_rank, i, &console, &file);
    w->file_fd[i] = -1;
    if (file) {
      char path[1100];
      snprintf(path, sizeof(path), "%s/%s.log", dir, i == 0 ? "stdout" : "stderr");
      w->file_fd[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (w->file_fd[i] < 0)
        DR_WARN("cannot open %s (%s); rank %u's output goes to the console only",
                path, strerror(errno), w->rank);
      else if (i == 0)
        dr__agent_env_write(ag, w->file_fd[i]);
    }
    dr_logfwd_opts_t fo = {console ? (i == 0 ? 1 : 2) : -1, w->file_fd[i],
                           prefix};
    w->fwd[i] = dr_logfwd_new(&fo);
    w->pipe[i] = malloc(sizeof(uv_pipe_t));
    if (w->pipe[i] == NULL || w->fwd[i] == NULL) {
      free(w->pipe[i]);
      w->pipe[i] = NULL;
      close(fds[i]);
      continue;
    }
    uv_pipe_init(&ag->loop, w->pipe[i], 0);
    w->pipe[i]->data = w;
    if (uv_pipe_open(w->pipe[i], fds[i]) != 0) {
      close(fds[i]);
      uv_close((uv_handle_t *)w->pipe[i], on_pipe_closed);
      w->pipe[i] = NULL;
      continue;
    }
    w->pipe_open[i] = 1;
    uv_read_start((uv_stream_t *)w->pipe[i], on_alloc, on_pipe_read);
  }
  print_summary(ag, w);
  dr_events_emit(ag->events, "spawn",
                 ",\"gen\":%llu,\"rank\":%u,\"local_rank\":%u,\"pid\":%d",
                 (unsigned long long)a->gen, w->rank, w->local_rank, (int)w->pid);
  return 0;
}

int dr__workers_start(dr_agent_t *ag) {
  ag->w = calloc(ag->nproc, sizeof(*ag->w));
  if (ag->w == NULL)
    return -ENOMEM;
  dr__agent_env_say(ag);
  dr__agent_oom_mark(ag);
  if (!ag->printed_binding) { /* no summary: the bindings at least */
    ag->printed_binding = 1;
    for (uint32_t i = 0; i < ag->nproc; i++) {
      char desc[600];
      dr_bind_describe(&ag->bind[i], desc, sizeof(desc));
      DR_SAY(DR_LOG_INFO, "binding: local rank %u: %s", i, desc);
    }
  }
  uint64_t ckpt_step = dr__ckpt_newest(ag); /* one for every rank */
  for (uint32_t i = 0; i < ag->nproc; i++) {
    dr_worker_t *w = &ag->w[i];
    w->ag = ag;
    w->local_rank = i;
    w->rank = ag->asg.first_rank + i;
    w->file_fd[0] = w->file_fd[1] = -1;
    int rc = start_one(ag, w, ckpt_step);
    if (rc != 0) {
      w->alive = 0;
      w->group_gone = 1;
      ag->spawn_failed = (int)i;
      return rc;
    }
  }
  dr__sighold_generation_started(ag);
  return 0;
}

void dr__workers_signal(dr_agent_t *ag, int sig) {
  for (uint32_t i = 0; ag->w != NULL && i < ag->nproc; i++)
    if (ag->w[i].pid > 0 && !ag->w[i].group_gone)
      kill(-ag->w[i].pid, sig);
}

/* Only the groups that need it: a SIGCONT that lands while a tracer
 * attaches to a worker (py-spy or gdb for the stacks, a sanitizer's leak
 * check as the worker exits) cancels the SIGSTOP of the attach, and tracer
 * and tracee then wait on each other for good. A tracer's stop (state t)
 * is not woken by SIGCONT anyway. */
void dr__workers_wake_stopped(dr_agent_t *ag) {
  if (ag->w == NULL || ag->nproc == 0)
    return;
  pid_t *pg = calloc(ag->nproc, sizeof(*pg));
  dr_pgstat_t *st = calloc(ag->nproc, sizeof(*st));
  if (pg == NULL || st == NULL) {
    free(pg);
    free(st);
    dr__workers_signal(ag, SIGCONT); /* cannot look: wake them all */
    return;
  }
  for (uint32_t i = 0; i < ag->nproc; i++)
    if (ag->w[i].pid > 0 && !ag->w[i].group_gone)
      pg[i] = ag->w[i].pid;
  if (dr_pgstat_scan(NULL, pg, ag->nproc, st) != 0) {
    dr__workers_signal(ag, SIGCONT);
  } else {
    for (uint32_t i = 0; i < ag->nproc; i++)
      if (pg[i] > 0 && st[i].job_stopped)
        kill(-pg[i], SIGCONT);
  }
  free(pg);
  free(st);
}

int dr__workers_groups_empty(dr_agent_t *ag) {
  int empty = 1;
  for (uint32_t i = 0; ag->w != NULL && i < ag->nproc; i++) {
    dr_worker_t *w = &ag->w[i];
    if (w->pid <= 0 || w->group_gone)
      continue;
    /* The agent is a child subreaper: a worker's orphans are its children
     * and are reaped, so an empty group really is empty. */
    if (kill(-w->pid, 0) != 0 && errno == ESRCH) {
      w->group_gone = 1;
      dr_watchdog_remove_group(ag->watchdog_fd, w->pid);
    } else {
      empty = 0;
    }
  }
  return empty;
}

/* A communication failure is usually the echo of another one. */
static int is_echo(const dr_worker_t *w) {
  return dr_exit_is_echo(w->exit_code, w->signal);
}

/* 0: a failure of its own; 1: an echo; 2: a success, reported last: a
 * worker that exited 0 in the same batch as the last failing one would
 * otherwise end the node as a success, and the failure be ignored. */
static int report_order(const dr_worker_t *w) {
  if (w->signal == 0 && w->exit_code == 0)
    return 2;
  return is_echo(w);
}

static void report_batch(dr_agent_t *ag, dr_worker_t **w, size_t n) {
  for (int pass = 0; pass < 3; pass++)
    for (size_t i = 0; i < n; i++)
      if (report_order(w[i]) == pass)
        dr__agent_worker_exited(ag, w[i]);
}

void dr__workers_reap(dr_agent_t *ag) {
  /* Reap everything first, then report: of exits seen together, a crash is
   * handled before the communication failures it caused. */
  dr_worker_t *reaped[64];
  size_t n = 0;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (pid < 0 && errno == EINTR)
        continue;
      break;
    }
    for (uint32_t i = 0; ag->w != NULL && i < ag->nproc; i++) {
      dr_worker_t *w = &ag->w[i];
      if (w->pid != pid || !w->alive)
        continue;
      w->alive = 0;
      ag->n_alive--;
      if (WIFSIGNALED(status)) {
        w->exit_code = -1;
        w->signal = WTERMSIG(status);
        w->core_dumped = WCOREDUMP(status) != 0;
      } else {
        w->exit_code = WEXITSTATUS(status);
      }
      reaped[n++] = w;
      break;
    }
    if (n == sizeof(reaped) / sizeof(reaped[0])) {
      report_batch(ag, reaped, n);
      n = 0;
    }
  }
  report_batch(ag, reaped, n);
}

void dr__workers_close(dr_agent_t *ag) {
  /* Whatever a worker left running in its group goes with it. */
  dr__workers_signal(ag, SIGKILL);
  /* And what a worker killed while setting up shared memory left in
   * /dev/shm (a segment is named there only for the instants until every
   * rank has mapped it). */
  if (ag->shm_prefix[0] != '\0')
    dr_shm_remove_prefix(ag->shm_prefix);
  for (uint32_t i = 0; ag->w != NULL && i < ag->nproc; i++) {
    dr_worker_t *w = &ag->w[i];
    dr__workers_drain(w);
    for (int k = 0; k < 2; k++) {
      close_pipe(w, k);
      dr_logfwd_free(&w->fwd[k]);
      if (w->file_fd[k] >= 0)
        close(w->file_fd[k]);
      w->file_fd[k] = -1;
    }
  }
}
