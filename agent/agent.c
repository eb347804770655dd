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
#include <sys/time.h>
#include <unistd.h>

#include "errors.h"
#include "events.h"
#include "log.h"
#include "progress.h"
#include "watchdog.h"

static void finish(dr_agent_t *ag, int code);
static void send_join(dr_agent_t *ag);
static void reconnect(dr_agent_t *ag);
static void on_retry_reconnect(uv_timer_t *t);
static void on_join_timeout(uv_timer_t *t);

static double wall_now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

static void send_buf(dr_agent_t *ag, dr_buf_t *b) {
  if (ag->arz != NULL)
    dr_arz_send(ag->arz, b);
  dr_buf_free(b);
}

/* Holds a free port for MASTER_PORT: bound (SO_REUSEADDR), not listening,
 * so no other job gets it, while rank 0 can still bind it once released. */
static int reserve_port(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  socklen_t len = sizeof(sa);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

static void release_port(dr_agent_t *ag) {
  if (ag->port_fd >= 0)
    close(ag->port_fd);
  ag->port_fd = -1;
}

/* ---- stopping the local group ----------------------------------------- */

static void stop_done(dr_agent_t *ag) {
  uv_timer_stop(&ag->kill_timer);
  ag->killed = 0;
  dr__workers_close(ag);
  if (ag->next == DR_NEXT_EXIT) {
    finish(ag, ag->exit_code);
  } else if (ag->next == DR_NEXT_RECONNECT) {
    ag->next = DR_NEXT_WAIT;
    reconnect(ag);
  } else if (ag->next == DR_NEXT_REJOIN) {
    ag->next = DR_NEXT_WAIT;
    send_join(ag);
  } else {
    ag->state = DR_AG_WAITING;
  }
}

static void on_kill_timer(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->killed) {
    /* SIGKILL could not end them (a process stuck in the kernel): go on
     * rather than hang; the watchdog keeps trying at exit. */
    fprintf(stderr, "ddprun: worker processes survive SIGKILL; going on\n");
    stop_done(ag);
    return;
  }
  for (uint32_t i = 0; ag->w != NULL && i < ag->nproc; i++)
    if (ag->w[i].pid > 0 && !ag->w[i].group_gone)
      fprintf(stderr, "ddprun: rank %u (process group %d) did not stop within "
              "%.1f s; sending SIGKILL\n", ag->w[i].rank, (int)ag->w[i].pid,
              ag->o->stop_grace_ms / 1000.0);
  ag->killed = 1;
  dr__workers_signal(ag, SIGKILL);
  uv_timer_start(&ag->kill_timer, on_kill_timer, 2000, 0);
}

/* The local group has stopped once every worker and whatever it started
 * are gone. */
static int all_stopped(dr_agent_t *ag) {
  return ag->n_alive == 0 && dr__workers_groups_empty(ag);
}

/* Stops the local workers with sig (SIGKILL after the grace), then does
 * next; a stronger next (exit over rejoin over wait) wins. */
static void stop_local(dr_agent_t *ag, int sig, dr_ag_next_t next) {
  if (next > ag->next)
    ag->next = next;
  if (ag->state == DR_AG_STOPPING)
    return;
  if (all_stopped(ag)) {
    ag->state = DR_AG_STOPPING;
    stop_done(ag);
    return;
  }
  ag->state = DR_AG_STOPPING;
  ag->stop_sig = sig;
  dr__workers_signal(ag, sig);
  /* A stopped process (SIGSTOP, a debugger) takes the signal once it runs. */
  dr__workers_signal(ag, SIGCONT);
  uv_timer_start(&ag->kill_timer, on_kill_timer, ag->o->stop_grace_ms, 0);
}

/* ---- worker exits ------------------------------------------------------ */

/* A new failure record for local rank lr (pid 0 when it never ran), or
 * NULL when the list is full. */
static dr_failure_rec_t *new_failure(dr_agent_t *ag, uint32_t lr, pid_t pid) {
  if (ag->n_fails >= sizeof(ag->fails) / sizeof(ag->fails[0]))
    return NULL;
  dr_failure_rec_t *f = &ag->fails[ag->n_fails++];
  memset(f, 0, sizeof(*f));
  f->time = wall_now();
  f->node_rank = ag->asg.node_rank;
  f->rank = ag->asg.first_rank + lr;
  f->local_rank = lr;
  f->pid = pid;
  return f;
}

static void record_failure(dr_agent_t *ag, dr_worker_t *w) {
  dr_failure_rec_t *f = new_failure(ag, w->local_rank, w->pid);
  if (f == NULL)
    return;
  f->exit_code = w->exit_code;
  f->signal = w->signal;
  f->core_dumped = w->core_dumped;
  dr__workers_drain(w);
  if (w->error_file[0] == '\0' ||
      dr_error_file_read(w->error_file, f->message, sizeof(f->message)) != 0)
    if (w->fwd[1] != NULL)
      dr_logfwd_tail(w->fwd[1], f->message, sizeof(f->message));
}

static void report_failure(dr_agent_t *ag, const dr_failure_rec_t *f) {
  dr_buf_t b;
  dr_buf_init(&b);
  dr_failure_t x;
  x.gen = ag->asg.gen;
  x.rank = f->rank;
  x.local_rank = f->local_rank;
  x.pid = (uint32_t)f->pid;
  x.exit_code = f->exit_code;
  x.signal = f->signal;
  x.message = dr_str(f->message);
  if (x.message.len > 1000) { /* the last lines matter most */
    x.message.p += x.message.len - 1000;
    x.message.len = 1000;
  }
  dr_enc_failure(&b, 0, &x);
  send_buf(ag, &b);
  char esc[2100];
  dr_events_emit(ag->events, "failure",
                 ",\"gen\":%llu,\"rank\":%u,\"local_rank\":%u,\"pid\":%d,"
                 "\"exit_code\":%d,\"signal\":%d,\"message\":\"%s\"",
                 (unsigned long long)ag->asg.gen, f->rank, f->local_rank,
                 (int)f->pid, f->exit_code, f->signal,
                 dr_json_escape(f->message, esc, sizeof(esc)));
}

void dr__agent_worker_exited(dr_agent_t *ag, dr_worker_t *w) {
  dr_events_emit(ag->events, "exit",
                 ",\"gen\":%llu,\"rank\":%u,\"local_rank\":%u,\"pid\":%d,"
                 "\"exit_code\":%d,\"signal\":%d,\"expected\":%s",
                 (unsigned long long)ag->asg.gen, w->rank, w->local_rank,
                 (int)w->pid, w->exit_code, w->signal,
                 ag->state == DR_AG_RUNNING ? "false" : "true");
  if (ag->state == DR_AG_RUNNING) {
    if (w->exit_code != 0 || w->signal != 0) {
      record_failure(ag, w);
      char what[96];
      fprintf(stderr, "ddprun: rank %u (local rank %u, pid %d) %s; stopping "
              "the workers of this node\n", w->rank, w->local_rank,
              (int)w->pid, dr_failure_what(&ag->fails[ag->n_fails - 1], what,
                                            sizeof(what)));
      report_failure(ag, &ag->fails[ag->n_fails - 1]);
      stop_local(ag, SIGTERM, DR_NEXT_WAIT);
    } else if (ag->n_alive == 0) {
      dr__workers_close(ag);
      ag->state = DR_AG_WAITING;
      dr_buf_t b;
      dr_buf_init(&b);
      dr_enc_success(&b, 0, ag->asg.gen);
      send_buf(ag, &b);
    }
    return;
  }
  /* While stopping, a death by a signal the agent has not sent (before its
   * SIGKILL) is a failure of its own, and may be the root cause of the
   * one that started the stop: report it too. */
  if (ag->state == DR_AG_STOPPING && !ag->killed && w->signal != 0 &&
      w->signal != ag->stop_sig && w->signal != SIGCONT) {
    size_t before = ag->n_fails;
    record_failure(ag, w);
    if (ag->n_fails > before)
      report_failure(ag, &ag->fails[ag->n_fails - 1]);
  }
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

static void on_assign(dr_agent_t *ag, const dr_msg_t *m) {
  dr_assign_t a;
  if (dr_msg_assign(m, &a) != 0)
    return;
  uv_timer_stop(&ag->join_timer);
  dr_assignment_free(&ag->asg);
  memset(&ag->asg, 0, sizeof(ag->asg));
  ag->asg.gen = a.gen;
  ag->asg.node_rank = a.node_rank;
  ag->asg.nnodes = a.nnodes;
  ag->asg.world_size = a.world_size;
  ag->asg.first_rank = a.first_rank;
  ag->asg.master_addr = strndup((const char *)a.master_addr.p, a.master_addr.len);
  ag->asg.master_port = a.master_port;
  ag->asg.bootstrap = malloc(a.bootstrap.len > 0 ? a.bootstrap.len : 1);
  if (ag->asg.bootstrap != NULL && a.bootstrap.len > 0)
    memcpy(ag->asg.bootstrap, a.bootstrap.p, a.bootstrap.len);
  ag->asg.bootstrap_len = a.bootstrap.len;
  ag->asg.restart_count = a.restart_count;
  ag->asg.max_restarts = a.max_restarts;
  ag->have_asg = 1;
  dr_events_emit(ag->events, "assign",
                 ",\"gen\":%llu,\"node_rank\":%u,\"nnodes\":%u,"
                 "\"world_size\":%u,\"first_rank\":%u,\"restart_count\":%u",
                 (unsigned long long)a.gen, a.node_rank, a.nnodes, a.world_size,
                 a.first_rank, a.restart_count);
  free(ag->w);
  ag->w = NULL;
  ag->n_fails = 0;
  ag->spawn_failed = -1;
  ag->state = DR_AG_RUNNING;
  /* The reservation is released only now, as the workers start: rank 0
   * binds the port next. */
  release_port(ag);
  int rc = dr__workers_start(ag);
  if (rc != 0) {
    dr_failure_rec_t *f = new_failure(
        ag, ag->spawn_failed >= 0 ? (uint32_t)ag->spawn_failed : 0, 0);
    if (f != NULL) {
      f->exit_code = 2;
      snprintf(f->message, sizeof(f->message), "cannot start '%s': %s",
               ag->cfg->prog_argv[0], dr_strerror(rc));
      report_failure(ag, f);
    }
    ag->exit_code = 2;
    stop_local(ag, SIGTERM, DR_NEXT_WAIT);
  }
}

static void on_msg(void *arg, const dr_msg_t *m) {
  dr_agent_t *ag = arg;
  switch (m->type) {
  case DR_MSG_ASSIGN:
    if (ag->state == DR_AG_JOINING)
      on_assign(ag, m);
    break;
  case DR_MSG_RESTART:
    fprintf(stderr, "ddprun: restarting the workers (generation %llu, "
            "restart %llu of %u): %.*s\n", (unsigned long long)m->f[0].u,
            (unsigned long long)m->f[1].u, ag->o->max_restarts,
            (int)m->f[2].b.len, (const char *)m->f[2].b.p);
    snprintf(ag->server_reason, sizeof(ag->server_reason), "%.*s",
             (int)m->f[2].b.len, (const char *)m->f[2].b.p);
    {
      char esc[2500];
      dr_events_emit(ag->events, "restart",
                     ",\"gen\":%llu,\"restart_count\":%llu,\"reason\":\"%s\"",
                     (unsigned long long)m->f[0].u,
                     (unsigned long long)m->f[1].u,
                     dr_json_escape(ag->server_reason, esc, sizeof(esc)));
    }
    stop_local(ag, SIGTERM, DR_NEXT_REJOIN);
    break;
  case DR_MSG_STOP:
    if (ag->stop_signal == 0)
      ag->exit_code = (int)m->f[0].u;
    snprintf(ag->server_reason, sizeof(ag->server_reason), "%.*s",
             (int)m->f[1].b.len, (const char *)m->f[1].b.p);
    {
      char esc[2500];
      dr_events_emit(ag->events, "stop", ",\"exit_code\":%d,\"reason\":\"%s\"",
                     (int)m->f[0].u,
                     dr_json_escape(ag->server_reason, esc, sizeof(esc)));
    }
    stop_local(ag, SIGTERM, DR_NEXT_EXIT);
    break;
  case DR_MSG_ERROR: {
    int code = -(int)m->f[0].u;
    if (ag->state == DR_AG_JOINING || code != DR_ESTOPPED)
      fprintf(stderr, "ddprun: the rendezvous server refused this node: %.*s\n",
              (int)m->f[1].b.len, (const char *)m->f[1].b.p);
    if (ag->next != DR_NEXT_EXIT)
      ag->exit_code = code == DR_ESTOPPED ? 1 : 2;
    stop_local(ag, SIGTERM, DR_NEXT_EXIT);
    break;
  }
  default: /* HEARTBEAT: hearing it is enough */
    break;
  }
}

static void on_lost(void *arg, int code, const char *why) {
  dr_agent_t *ag = arg;
  if (ag->next == DR_NEXT_EXIT || ag->state == DR_AG_EXITING)
    return; /* a STOP came first; the server then closed */
  fprintf(stderr, "ddprun: %s\n", why);
  char esc[1100];
  dr_events_emit(ag->events, "server_lost", ",\"reason\":\"%s\"",
                 dr_json_escape(why, esc, sizeof(esc)));
  int config = code == DR_ERUNID || code == DR_ENOAUTH || code == DR_EAUTH ||
               code == DR_EVERSION || code == DR_EDUPRANK ||
               code == DR_EBADRANK || code == DR_ENPROC || code == DR_EFULL;
  if (!config && (ag->reconnecting || !ag->have_asg) &&
      uv_now(&ag->loop) < ag->reconnect_deadline) {
    /* Connected, then lost before an assignment (a reset handshake, a
     * dying server's queue): keep trying until the join timeout of this
     * (re)connection runs out. */
    ag->reconnecting = 1;
    dr_arz_close(&ag->arz);
    uv_timer_start(&ag->retry_timer, on_retry_reconnect, 100, 0);
    return;
  }
  if (!config && !ag->cfg->server_in_process && ag->have_asg &&
      !ag->reconnecting) {
    /* A restarted server takes the job back: stop, reconnect, rejoin;
     * the workers resume from their last checkpoint. */
    fprintf(stderr, "ddprun: reconnecting to %s:%u for up to %.0f s "
            "(join_timeout)\n", ag->cfg->server_host, ag->cfg->server_port,
            ag->o->join_timeout_ms / 1000.0);
    stop_local(ag, SIGTERM, DR_NEXT_RECONNECT);
    return;
  }
  ag->exit_code = config ? 2 : 3;
  stop_local(ag, SIGTERM, DR_NEXT_EXIT);
}

static void send_join(dr_agent_t *ag) {
  ag->state = DR_AG_JOINING;
  if (ag->cfg->master_port == 0 && ag->port_fd < 0) {
    int fd = reserve_port(&ag->port_offer);
    if (fd >= 0)
      ag->port_fd = fd;
  }
  dr_join_t j;
  memset(&j, 0, sizeof(j));
  j.run_id = dr_str(ag->o->rdzv_id);
  j.host = dr_str(ag->cfg->hostname);
  j.addr = dr_str(ag->o->local_addr);
  j.nproc = ag->nproc;
  j.node_rank = ag->o->node_rank >= 0 ? (uint64_t)ag->o->node_rank : DR_NONE;
  j.master_port_offer =
      ag->cfg->master_port != 0 ? ag->cfg->master_port : ag->port_offer;
  dr_buf_t b;
  dr_buf_init(&b);
  dr_enc_join(&b, 1, &j);
  send_buf(ag, &b);
  dr_events_emit(ag->events, "join", ",\"nproc\":%u", ag->nproc);
  uv_timer_start(&ag->join_timer, on_join_timeout, ag->o->join_timeout_ms, 0);
}

static void on_join_timeout(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->state != DR_AG_JOINING)
    return;
  int err = ag->arz != NULL ? dr_arz_last_error(ag->arz) : 0;
  if (ag->arz != NULL && dr_arz_resolve_error(ag->arz) != NULL)
    fprintf(stderr, "ddprun: cannot resolve the rendezvous endpoint '%s' "
            "(%s); gave up after join_timeout=%.3g s; check the host name of "
            "--rdzv-endpoint\n", ag->cfg->server_host,
            dr_arz_resolve_error(ag->arz),
            ag->o->join_timeout_ms / 1000.0);
  else if (ag->arz != NULL && !dr_arz_connected(ag->arz))
    fprintf(stderr, "ddprun: connect() to %s:%u failed while joining (%d: "
            "%s); gave up after join_timeout=%.3g s\n", ag->cfg->server_host,
            ag->cfg->server_port, -err, err != 0 ? uv_strerror(err) : "no "
            "answer", ag->o->join_timeout_ms / 1000.0);
  else
    fprintf(stderr, "ddprun: the rendezvous at %s:%u did not complete within "
            "join_timeout=%.3g s; are the other nodes started with the same "
            "--rdzv-id and --nnodes?\n", ag->cfg->server_host,
            ag->cfg->server_port, ag->o->join_timeout_ms / 1000.0);
  ag->exit_code = 3;
  finish(ag, 3);
}

static void on_retry_reconnect(uv_timer_t *t) { reconnect(t->data); }

static void on_ready(void *arg) {
  dr_agent_t *ag = arg;
  ag->reconnecting = 0;
  send_join(ag);
}

static int start_arz(dr_agent_t *ag) {
  dr_arz_opts_t ao;
  memset(&ao, 0, sizeof(ao));
  ao.host = ag->cfg->server_host;
  ao.port = ag->cfg->server_port;
  ao.run_id = ag->o->rdzv_id;
  ao.client_host = ag->cfg->hostname;
  ao.secret = ag->cfg->secret;
  ao.secret_len = ag->cfg->secret_len;
  ao.connect_timeout_ms = ag->o->join_timeout_ms;
  ao.limits = dr_limits_default();
  dr_arz_cb_t cb = {on_ready, on_msg, on_lost, ag};
  int rc = dr_arz_start(&ag->loop, &ao, &cb, &ag->arz);
  if (rc != 0)
    fprintf(stderr, "ddprun: cannot start the rendezvous client for '%s' "
            "(%s)\n", ag->cfg->server_host, dr_strerror(rc));
  else
    uv_timer_start(&ag->join_timer, on_join_timeout, ag->o->join_timeout_ms, 0);
  return rc;
}

static void reconnect(dr_agent_t *ag) {
  dr_arz_close(&ag->arz);
  if (!ag->reconnecting)
    ag->reconnect_deadline = uv_now(&ag->loop) + ag->o->join_timeout_ms;
  ag->reconnecting = 1;
  ag->state = DR_AG_JOINING;
  if (start_arz(ag) != 0)
    finish(ag, 3);
}

/* 1 when pid is stopped (SIGSTOP, a debugger): state T or t. */
static int process_stopped(pid_t pid) {
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

/* A worker that reported progress and then stopped reporting for
 * --hang-timeout is treated as failed (exit code 4). */
static void on_hang_timer(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->state != DR_AG_RUNNING || ag->w == NULL)
    return;
  uint64_t now = uv_now(&ag->loop);
  for (uint32_t i = 0; i < ag->nproc; i++) {
    dr_worker_t *w = &ag->w[i];
    if (!w->alive)
      continue;
    dr_progress_sample_t smp = dr_progress_read(ag->progress, i);
    if (smp.seq != w->progress_seq) {
      w->progress_seq = smp.seq;
      w->progress_step = smp.step;
      w->progress_ms = now;
      continue;
    }
    /* A stopped process is the hang itself; ranks that merely wait for
     * it in a collective are judged a little later, so that the agent of
     * the stopped one names the right rank first. */
    uint64_t limit = ag->o->hang_timeout_ms;
    if (!process_stopped(w->pid))
      limit += limit / 2;
    if (w->progress_seq == 0 || now - w->progress_ms <= limit)
      continue;
    double idle = (now - w->progress_ms) / 1000.0;
    fprintf(stderr, "ddprun: rank %u (local rank %u, pid %d) made no progress "
            "for %.1f s after step %llu; treating it as hung\n", w->rank,
            w->local_rank, (int)w->pid, idle,
            (unsigned long long)w->progress_step);
    dr_failure_rec_t *f = new_failure(ag, w->local_rank, w->pid);
    if (f != NULL) {
      f->exit_code = 4;
      snprintf(f->message, sizeof(f->message), "hung: no progress for %.1f s "
               "after step %llu (--hang-timeout %.1f s)", idle,
               (unsigned long long)w->progress_step,
               ag->o->hang_timeout_ms / 1000.0);
      report_failure(ag, f);
    }
    stop_local(ag, SIGTERM, DR_NEXT_WAIT);
    return;
  }
}

static void on_heartbeat(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  if (ag->arz == NULL || ag->state == DR_AG_EXITING)
    return;
  /* The server pushes heartbeats to running nodes only. */
  if (ag->state == DR_AG_RUNNING &&
      dr_arz_idle_ms(ag->arz) > 2ull * ag->o->heartbeat_timeout_ms) {
    char why[160];
    snprintf(why, sizeof(why), "lost the rendezvous server %s:%u: nothing "
             "heard for %llu ms", ag->cfg->server_host, ag->cfg->server_port,
             (unsigned long long)dr_arz_idle_ms(ag->arz));
    on_lost(ag, DR_ECLOSED, why);
    return;
  }
  dr_buf_t b;
  dr_buf_init(&b);
  dr_enc_heartbeat(&b, 0, ag->asg.gen);
  send_buf(ag, &b);
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
  if (ag->stop_signal != 0) {
    dr__workers_signal(ag, SIGKILL); /* asked twice: no more grace */
    return;
  }
  fprintf(stderr, "ddprun: received SIG%s; forwarding it to the workers\n",
          sigabbrev_np(sig));
  ag->stop_signal = sig;
  ag->exit_code = 128 + sig;
  if (ag->state == DR_AG_STOPPING) {
    dr__workers_signal(ag, sig);
    ag->next = DR_NEXT_EXIT;
  } else {
    stop_local(ag, sig, DR_NEXT_EXIT);
  }
}

static void close_cb(uv_handle_t *h) { (void)h; }

static void finish(dr_agent_t *ag, int code) {
  if (ag->state == DR_AG_EXITING)
    return;
  ag->state = DR_AG_EXITING;
  ag->exit_code = code;
  if (code != 0 && ag->stop_signal == 0 &&
      (ag->n_fails > 0 || ag->server_reason[0] != '\0'))
    dr_summary_print(code, ag->cfg->hostname, ag->server_reason, ag->fails,
                     ag->n_fails);
  dr_arz_close(&ag->arz);
  release_port(ag);
  dr__workers_close(ag);
  uv_close((uv_handle_t *)&ag->kill_timer, close_cb);
  uv_close((uv_handle_t *)&ag->hb_timer, close_cb);
  uv_close((uv_handle_t *)&ag->join_timer, close_cb);
  uv_close((uv_handle_t *)&ag->hang_timer, close_cb);
  uv_close((uv_handle_t *)&ag->retry_timer, close_cb);
  dr__sighold_close(ag);
  uv_close((uv_handle_t *)&ag->sigchld, close_cb);
  for (int i = 0; i < ag->n_sigs; i++)
    uv_close((uv_handle_t *)&ag->sigs[i], close_cb);
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void early_signals(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGUSR1);
  sigaddset(set, SIGUSR2);
}

void dr_agent_hold_early_signals(void) {
  sigset_t early;
  early_signals(&early);
  pthread_sigmask(SIG_BLOCK, &early, NULL);
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

int dr_agent_run(const dr_agent_config_t *cfg) {
  dr_agent_t *ag = calloc(1, sizeof(*ag));
  if (ag == NULL)
    return 1;
  ag->cfg = cfg;
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
      dr_bind_plan(ag->o, cfg->nproc, ag->bind, err, sizeof(err)) != 0) {
    fprintf(stderr, "ddprun: %s\n", ag->bind == NULL ? "out of memory" : err);
    free(ag->bind);
    free(ag);
    return 2;
  }
  /* The progress slots, and error files when there is no --log-dir, live
   * here; removed at exit (by the watchdog if the agent is killed). */
  const char *tmpdir = getenv("TMPDIR");
  snprintf(ag->tmp_root, sizeof(ag->tmp_root), "%s/ddprun-XXXXXX",
           tmpdir != NULL && tmpdir[0] != '\0' ? tmpdir : "/tmp");
  if (mkdtemp(ag->tmp_root) == NULL) {
    fprintf(stderr, "ddprun: cannot create a directory in %s (%s); set "
            "TMPDIR or --log-dir\n", tmpdir != NULL ? tmpdir : "/tmp",
            strerror(errno));
    free(ag->bind);
    free(ag);
    return 2;
  }
  dr_watchdog_set_dir(ag->watchdog_fd, ag->tmp_root);
  int erc = dr_events_open(ag->o->log_dir, ag->o->rdzv_id, "agent",
                           cfg->hostname, &ag->events);
  if (erc != 0)
    fprintf(stderr, "ddprun: cannot write events under %s (%s)\n",
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
  sigset_t early;
  early_signals(&early);
  pthread_sigmask(SIG_UNBLOCK, &early, NULL);

  if (ag->o->hang_timeout_ms > 0) {
    uint64_t every = ag->o->hang_timeout_ms / 4;
    every = every < 50 ? 50 : every > 1000 ? 1000 : every;
    uv_timer_start(&ag->hang_timer, on_hang_timer, every, every);
  }
  ag->reconnect_deadline = uv_now(&ag->loop) + ag->o->join_timeout_ms;
  if (start_arz(ag) != 0) {
    finish(ag, 2);
  } else {
    uint64_t hb = ag->o->heartbeat_timeout_ms / 3;
    uv_timer_start(&ag->hb_timer, on_heartbeat, hb > 0 ? hb : 1, hb > 0 ? hb : 1);
  }
  uv_run(&ag->loop, UV_RUN_DEFAULT);
  int code = ag->exit_code;
  dr_events_emit(ag->events, "exit_agent", ",\"exit_code\":%d", code);
  dr_events_close(&ag->events);
  dr_progress_close(&ag->progress);
  nftw(ag->tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  dr_watchdog_stop(&ag->watchdog_fd, cfg->watchdog_pid);
  uv_loop_close(&ag->loop);
  dr_assignment_free(&ag->asg);
  free(ag->w);
  free(ag->bind);
  free(ag);
  return code;
}
