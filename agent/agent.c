/* The agent's state machine: join, run, watch, stop with escalation, and
 * follow the server's RESTART and STOP orders. */
#include "agent_internal.h"

#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"
#include "exit_codes.h"
#include "events.h"
#include "log.h"
#include "progress.h"
#include "pyboot.h"
#include "shm_name.h"
#include "signals.h"
#include "watchdog.h"


/* ---- stopping the local group ----------------------------------------- */

static void stop_done(dr_agent_t *ag) {
  uv_timer_stop(&ag->kill_timer);
  ag->stop.killed = 0;
  dr__workers_close(ag);
  if (ag->stop.next == DR_NEXT_EXIT) {
    dr__agent_finish(ag);
  } else if (ag->stop.next == DR_NEXT_REJOIN) {
    ag->stop.next = DR_NEXT_WAIT;
    dr__agent_send_join(ag);
  } else {
    ag->state = DR_AG_WAITING;
    ag->workers_done_ms = uv_now(&ag->loop);
  }
}

static void on_kill_timer(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->stop.killed) {
    /* SIGKILL could not end them (a process stuck in the kernel): go on
     * rather than hang; the watchdog keeps trying at exit. */
    DR_SAY(DR_LOG_WARN, "worker processes survive SIGKILL; going on");
    stop_done(ag);
    return;
  }
  for (uint32_t i = 0; ag->w != NULL && i < ag->nproc; i++)
    if (ag->w[i].pid > 0 && !ag->w[i].group_gone)
      DR_SAY(DR_LOG_WARN, "rank %u (process group %d) did not stop within "
              "%.1f s; sending SIGKILL", ag->w[i].rank, (int)ag->w[i].pid,
              ag->o->stop_grace_ms / 1000.0);
  ag->stop.killed = 1;
  dr__workers_signal(ag, SIGKILL);
  uv_timer_start(&ag->kill_timer, on_kill_timer, 2000, 0);
}

/* The local group has stopped once every worker and whatever it started
 * are gone. */
static int all_stopped(dr_agent_t *ag) {
  return ag->n_alive == 0 && dr__workers_groups_empty(ag);
}

void dr__agent_stop_local(dr_agent_t *ag, int sig, dr_ag_next_t next) {
  if (next > ag->stop.next)
    ag->stop.next = next;
  if (ag->state == DR_AG_STOPPING)
    return;
  if (all_stopped(ag)) {
    ag->state = DR_AG_STOPPING;
    stop_done(ag);
    return;
  }
  ag->state = DR_AG_STOPPING;
  ag->stop.sig = sig;
  dr__workers_signal(ag, sig);
  /* A stopped process (SIGSTOP, job control) takes the signal once it
   * runs: its group is woken. */
  dr__workers_wake_stopped(ag);
  uv_timer_start(&ag->kill_timer, on_kill_timer, ag->o->stop_grace_ms, 0);
}

/* ---- worker exits ------------------------------------------------------ */

void dr__agent_worker_exited(dr_agent_t *ag, dr_worker_t *w) {
  dr_events_emit(ag->events, "exit",
                 ",\"gen\":%llu,\"rank\":%u,\"local_rank\":%u,\"pid\":%d,"
                 "\"exit_code\":%d,\"signal\":%d,\"expected\":%s",
                 (unsigned long long)ag->asg.gen, w->rank, w->local_rank,
                 (int)w->pid, w->exit_code, w->signal,
                 ag->state == DR_AG_RUNNING ? "false" : "true");
  if (ag->state == DR_AG_RUNNING) {
    if (w->exit_code != 0 || w->signal != 0) {
      dr__agent_worker_failed(ag, w);
    } else if (ag->n_alive == 0) {
      dr__workers_close(ag);
      ag->state = DR_AG_WAITING;
      ag->workers_done_ms = uv_now(&ag->loop);
      dr_buf_t b;
      dr_buf_init(&b);
      dr_enc_success(&b, 0, ag->asg.gen);
      dr__agent_send(ag, &b);
    }
    return;
  }
  /* While stopping, a death by a signal the agent has not sent (before its
   * SIGKILL) is a failure of its own, and may be the root cause of the
   * one that started the stop: report it too. */
  if (ag->state == DR_AG_STOPPING && !ag->stop.killed && w->signal != 0 &&
      w->signal != ag->stop.sig && w->signal != SIGCONT)
    dr__agent_worker_failed(ag, w);
  if (ag->state == DR_AG_STOPPING && all_stopped(ag))
    stop_done(ag);
}

static void on_sigchld(uv_signal_t *h, int signum) {
  dr_agent_t *ag = h->data;
  (void)signum;
  dr__workers_reap(ag);
  /* A straggler of a worker's group (reparented here) may have exited. */
  if (ag->state == DR_AG_STOPPING && all_stopped(ag))
    stop_done(ag);
}

/* ---- the server's messages --------------------------------------------- */

void dr__agent_on_assign(dr_agent_t *ag, dr_assignment_t *a) {
  dr_assignment_free(&ag->asg);
  ag->asg = *a;
  memset(a, 0, sizeof(*a));
  ag->have_asg = 1;
  uv_timer_stop(&ag->echo_timer); /* a wait of the generation before */
  dr__failover_settled(ag);
  dr_events_emit(ag->events, "assign",
                 ",\"gen\":%llu,\"node_rank\":%u,\"nnodes\":%u,"
                 "\"world_size\":%u,\"first_rank\":%u,\"restart_count\":%u",
                 (unsigned long long)ag->asg.gen, ag->asg.node_rank,
                 ag->asg.nnodes, ag->asg.world_size, ag->asg.first_rank,
                 ag->asg.restart_count);
  free(ag->w);
  ag->w = NULL;
  ag->n_fails = 0;
  ag->spawn_failed = -1;
  ag->state = DR_AG_RUNNING;
  if (dr__ckpt_on_assign(ag))
    return; /* the workers start once the round's checkpoint is here */
  dr__agent_spawn(ag);
}

void dr__agent_spawn(dr_agent_t *ag) {
  /* The reservation is released only now, as the workers start: rank 0
   * binds the port next. */
  dr__agent_release_port(ag);
  ag->spawn_stage = 0;
  int rc = dr__workers_start(ag);
  if (rc != 0) {
    /* A program that cannot be executed, or CPUs it may not have, is the
     * configuration's fault and never restarted; a fork at the process or
     * memory limit may pass and is restartable (as out of memory). */
    int config = ag->spawn_stage == DR_SPAWN_EXEC ||
                 ag->spawn_stage == DR_SPAWN_BIND;
    int code = config                              ? DR_EXIT_CONFIG
               : rc == -EAGAIN || rc == -ENOMEM    ? DR_EXIT_NOMEM
                                                   : 1;
    dr_failure_rec_t d;
    memset(&d, 0, sizeof(d));
    d.local_rank = ag->spawn_failed >= 0 ? (uint32_t)ag->spawn_failed : 0;
    d.exit_code = code;
    d.kind = DR_FAIL_START;
    snprintf(d.message, sizeof(d.message), "cannot start '%s': %s%s",
             ag->cfg->prog_argv[0],
             ag->spawn_stage == DR_SPAWN_FORK ? "fork() failed: " : "",
             dr_strerror(rc));
    dr__agent_local_failure(ag, &d);
    if (config)
      dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_CONFIG);
  }
}

/* ---- signals and the end ----------------------------------------------- */

static void on_signal(uv_signal_t *h, int sig) {
  dr_agent_t *ag = h->data;
  int terminating = sig == SIGINT || sig == SIGTERM || sig == SIGHUP ||
                    sig == SIGQUIT;
  if (!terminating) {
    dr__sighold_forward(ag, sig);
    return;
  }
  if (ag->stop.signal != 0) {
    dr__workers_signal(ag, SIGKILL); /* asked twice: no more grace */
    return;
  }
  DR_SAY(DR_LOG_WARN, "received SIG%s; forwarding it to the workers",
          sigabbrev_np(sig));
  ag->stop.signal = sig;
  dr__agent_end(ag, DR_END_SIGNAL, 128 + sig);
  dr__agent_leave(ag, sig);
  if (ag->state == DR_AG_STOPPING) {
    dr__workers_signal(ag, sig);
    ag->stop.next = DR_NEXT_EXIT;
  } else {
    dr__agent_stop_local(ag, sig, DR_NEXT_EXIT);
  }
}

static void close_cb(uv_handle_t *h) { (void)h; }

void dr__agent_end(dr_agent_t *ag, dr_end_cause_t cause, int code) {
  if (cause > ag->stop.cause) {
    ag->stop.cause = cause;
    ag->stop.exit_code = code;
  }
}

void dr__agent_finish(dr_agent_t *ag) {
  if (ag->state == DR_AG_EXITING)
    return;
  ag->state = DR_AG_EXITING;
  int code = ag->stop.exit_code;
  if (ag->moved_line[0] != '\0') /* the job's summary says it */
    DR_SAY(code == 0 ? DR_LOG_INFO : DR_LOG_ERROR, "%s during the job",
            ag->moved_line);
  if (code != 0 && ag->stop.signal == 0 &&
      (ag->n_fails > 0 || ag->server_reason[0] != '\0'))
    dr_summary_print(code, ag->cfg->hostname, ag->server_reason, ag->fails,
                     ag->n_fails);
  dr_arz_close(&ag->arz);
  dr__agent_release_port(ag);
  dr__workers_close(ag);
  dr__ckpt_stop(ag);
  uv_close((uv_handle_t *)&ag->kill_timer, close_cb);
  uv_close((uv_handle_t *)&ag->hb_timer, close_cb);
  uv_close((uv_handle_t *)&ag->join_timer, close_cb);
  uv_close((uv_handle_t *)&ag->hang_timer, close_cb);
  uv_close((uv_handle_t *)&ag->retry_timer, close_cb);
  uv_close((uv_handle_t *)&ag->echo_timer, close_cb);
  dr__sighold_close(ag);
  uv_close((uv_handle_t *)&ag->sigchld, close_cb);
  /* Closing a signal's last handle restores its default action, which
   * would end ddprun by a signal that comes now (a Slurm script resends
   * SIGUSR1 every few seconds): held across the close, then ignored. */
  sigset_t handled;
  dr_signals_stop_set(&handled);
  for (int i = 0; i < ag->n_sigs; i++)
    sigaddset(&handled, ag->sigs[i].signum);
  dr_signals_block(&handled);
  for (int i = 0; i < ag->n_sigs; i++)
    uv_close((uv_handle_t *)&ag->sigs[i], close_cb);
  dr_signals_ignore(&handled);
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

void dr_agent_hold_early_signals(void) {
  sigset_t early;
  dr_signals_stop_set(&early);
  dr_signals_block(&early);
}

void dr_agent_release_early_signals(void) {
  sigset_t early;
  dr_signals_stop_set(&early);
  dr_signals_unblock(&early);
}

static int parse_signals(const char *list, int *out, int max) {
  int n = 0;
  char tmp[512];
  snprintf(tmp, sizeof(tmp), "%s",
           list != NULL ? list : "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  for (char *save = NULL, *t = strtok_r(tmp, ", ", &save); t != NULL && n < max;
       t = strtok_r(NULL, ", ", &save)) {
    const char *name = strncmp(t, "SIG", 3) == 0 ? t + 3 : t;
    for (int s = 1; s < NSIG; s++) {
      const char *abbr = sigabbrev_np(s);
      if (abbr != NULL && strcmp(abbr, name) == 0 && s != SIGCHLD &&
          s != SIGKILL && s != SIGSTOP)
        out[n++] = s;
    }
  }
  return n;
}

/* What the agent holds before its loop starts, freed on a refusal. */
static void early_free(dr_agent_t *ag) {
  dr__agent_ranks_free(ag);
  free(ag->env_summary);
  free(ag->bind);
  free(ag);
}

int dr_agent_run(const dr_agent_config_t *cfg) {
  dr_agent_t *ag = calloc(1, sizeof(*ag));
  if (ag == NULL)
    return 1;
  ag->cfg = cfg;
  snprintf(ag->srv_host, sizeof(ag->srv_host), "%s", cfg->server_host);
  ag->srv_port = cfg->server_port;
  ag->o = cfg->opts;
  ag->nproc = cfg->nproc;
  ag->watchdog_fd = cfg->watchdog_fd;
  ag->spawn_failed = -1;
  /* Orphans of a worker become the agent's children: it reaps them and
   * can tell when a worker's group is really empty. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  ag->port_fd = cfg->master_port_fd;
  ag->port_offer = cfg->master_port;
  ag->bind = calloc(cfg->nproc, sizeof(*ag->bind));
  char err[256];
  if (ag->bind == NULL ||
      dr_bind_plan(&ag->o->bind, cfg->nproc, ag->bind, err, sizeof(err)) != 0) {
    DR_SAY(DR_LOG_ERROR, "%s", ag->bind == NULL ? "out of memory" : err);
    free(ag->bind);
    free(ag);
    return 2;
  }
  if (dr__agent_env_read(ag) != 0) {
    early_free(ag);
    return 2;
  }
  /* The progress slots, and error files when there is no --log-dir, live
   * here; removed at exit (by the watchdog if the agent is killed). */
  const char *tmpdir = getenv("TMPDIR");
  snprintf(ag->tmp_root, sizeof(ag->tmp_root), "%s/ddprun-XXXXXX",
           tmpdir != NULL && tmpdir[0] != '\0' ? tmpdir : "/tmp");
  if (mkdtemp(ag->tmp_root) == NULL) {
    DR_SAY(DR_LOG_ERROR, "cannot create a directory in %s (%s); set "
            "TMPDIR or --log-dir", tmpdir != NULL ? tmpdir : "/tmp",
            strerror(errno));
    early_free(ag);
    return 2;
  }
  dr_watchdog_set_dir(ag->watchdog_fd, ag->tmp_root);
  int prc = dr_pyboot_write(ag->tmp_root, ag->pyboot_dir,
                            sizeof(ag->pyboot_dir));
  if (prc != 0)
    DR_SAY(DR_LOG_WARN, "cannot write the Python start-up hook into %s (%s); "
           "a hang report of a Python program goes without PyTorch's flight "
           "recorder", ag->tmp_root, dr_strerror(prc));
  if (dr_shm_prefix_new(ag->shm_prefix, sizeof(ag->shm_prefix)) == 0)
    dr_watchdog_set_shm_prefix(ag->watchdog_fd, ag->shm_prefix);
  else
    ag->shm_prefix[0] = '\0';
  int erc = dr_events_open(ag->o->log_dir, ag->o->rdzv_id, "agent",
                           cfg->hostname, &ag->events);
  if (erc != 0)
    DR_SAY(DR_LOG_WARN, "cannot write events under %s (%s)",
            ag->o->log_dir, dr_strerror(erc));
  char progress_path[300];
  snprintf(progress_path, sizeof(progress_path), "%s/progress", ag->tmp_root);
  if (dr_progress_create(progress_path, cfg->nproc, &ag->progress) == 0)
    snprintf(ag->progress_path, sizeof(ag->progress_path), "%s",
             progress_path);
  uv_loop_init(&ag->loop);
  uv_timer_init(&ag->loop, &ag->kill_timer);
  uv_timer_init(&ag->loop, &ag->hb_timer);
  uv_timer_init(&ag->loop, &ag->join_timer);
  uv_timer_init(&ag->loop, &ag->hang_timer);
  uv_timer_init(&ag->loop, &ag->retry_timer);
  uv_timer_init(&ag->loop, &ag->echo_timer);
  ag->echo_timer.data = ag;
  ag->kill_timer.data = ag->hb_timer.data = ag->join_timer.data = ag;
  ag->hang_timer.data = ag->retry_timer.data = ag;
  dr__sighold_init(ag);
  uv_signal_init(&ag->loop, &ag->sigchld);
  ag->sigchld.data = ag;
  uv_signal_start(&ag->sigchld, on_sigchld, SIGCHLD);
  int sigs[16];
  int n = parse_signals(ag->o->signals_to_handle, sigs, 12);
  static const int always[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  for (int i = 0; i < 4; i++) {
    int have = 0;
    for (int k = 0; k < n; k++)
      have |= sigs[k] == always[i];
    if (!have)
      sigs[n++] = always[i];
  }
  for (int i = 0; i < n; i++) {
    uv_signal_init(&ag->loop, &ag->sigs[i]);
    ag->sigs[i].data = ag;
    uv_signal_start(&ag->sigs[i], on_signal, sigs[i]);
  }
  ag->n_sigs = n;
  signal(SIGPIPE, SIG_IGN);
  /* Handled now (or, when not listed, their default action applies). */
  dr_agent_release_early_signals();

  if (dr__hang_start(ag, dr__agent_hang_verdict) != 0)
    DR_SAY(DR_LOG_WARN, "out of memory: --hang-timeout is not watched");
  ag->start_ms = uv_now(&ag->loop);
  /* The checkpoint directory and port first: the JOIN says them. A
   * restore into it from --ckpt-persist starts the session once done. */
  int crc = dr__ckpt_start(ag);
  if (crc < 0 || (crc == 0 && dr__agent_session_start(ag) != 0)) {
    dr__agent_end(ag, DR_END_LOCAL, DR_EXIT_CONFIG);
    dr__agent_finish(ag);
  }
  uv_run(&ag->loop, UV_RUN_DEFAULT);
  int code = ag->stop.exit_code;
  dr_events_emit(ag->events, "exit_agent", ",\"exit_code\":%d", code);
  dr_events_close(&ag->events);
  dr__hang_free(ag);
  dr__agent_ranks_free(ag);
  dr_progress_close(&ag->progress);
  dr__ckpt_free(ag);
  nftw(ag->tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  dr_watchdog_stop(&ag->watchdog_fd, cfg->watchdog_pid);
  uv_loop_close(&ag->loop);
  dr_assignment_free(&ag->asg);
  free(ag->w);
  free(ag->bind);
  free(ag->env_summary);
  free(ag);
  return code;
}
