/* The server's lifetime: configuration, listening, the sweep timer, and an
 * orderly close once every handle (connections included) has closed. */
#include "server_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "auth.h"
#include "errors.h"
#include "events.h"
#include "log.h"

void dr_server_config_default(dr_server_config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->host = "127.0.0.1";
  cfg->run_id = "none";
  cfg->min_nodes = 1;
  cfg->max_nodes = 1;
  cfg->heartbeat_timeout_ms = 2000;
  cfg->last_call_timeout_ms = 1000;
  cfg->replacement_timeout_ms = 60000;
  cfg->handshake_timeout_ms = 5000;
  cfg->idle_timeout_ms = 60000;
  cfg->frame_timeout_ms = 30000;
  cfg->max_frame_memory = 128ull << 20;
  cfg->metrics_port = -1;
  cfg->limits = dr_limits_default();
}

uint64_t dr__now_ms(const dr_server_t *s) { return uv_now(s->loop); }

/* The sweep runs every tick; a gap of more than two ticks (and 100 ms, for
 * a busy machine) means the loop did not run meanwhile. */
static int sweep_late(const dr_server_t *s, uint64_t now) {
  return s->last_sweep_ms != 0 &&
         now - s->last_sweep_ms > 2 * s->sweep_tick_ms + 100;
}

int dr__server_stalled(const dr_server_t *s) {
  uint64_t now = dr__now_ms(s);
  return sweep_late(s, now) || (s->woke_ms != 0 && s->woke_ms == now);
}

static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
      DR_WARN("setrlimit(RLIMIT_NOFILE, %llu) failed (%d: %s)",
              (unsigned long long)rl.rlim_max, errno, strerror(errno));
  }
}

static void on_sweep(uv_timer_t *t) {
  dr_server_t *s = t->data;
  uint64_t now = dr__now_ms(s);
  dr__listen_resume(s);
  if (sweep_late(s, now) && !s->sweep_skipped) {
    /* Woken from a stall: read what waits in the sockets first; the next
     * tick judges, and silence is measured from now at the earliest. Only
     * one tick is skipped: the loop reads the sockets before the next, and
     * a loop late at every tick (a machine loaded beyond its cores) must
     * still judge, or no deadline of the core would ever pass. */
    DR_WARN("the server did not run for %" PRIu64 " ms (stopped or paused?); "
            "judging no node before its messages are read",
            now - s->last_sweep_ms);
    s->woke_ms = now;
    s->last_sweep_ms = now;
    s->sweep_skipped = 1;
    return;
  }
  s->sweep_skipped = 0;
  s->last_sweep_ms = now;
  dr__conn_sweep(s, now);
  dr__rdzv_sweep(s, now);
  dr__status_sweep(s, now);
  dr_rl_tick(&s->bad_rl, now);
  dr_rl_tick(&s->fd_rl, now);
}

static void on_drain_timeout(uv_timer_t *t) {
  dr_server_t *s = t->data;
  dr_server_close(&s);
}

/* Stops once the replies already queued (a STOP to every agent, say)
 * have been written, or after 2 s. */
static void on_stop_async(uv_async_t *a) {
  dr_server_t *s = a->data;
  if (s->closing)
    return;
  s->cfg.exit_when_done = 1;
  s->done_flushing = 1;
  /* ddprun asks once its agent has closed its connection: that close is
   * read first (the node's end is the job's), within the drain's bound. */
  s->stop_requested = 1;
  uv_timer_start(&s->drain, on_drain_timeout, 2000, 0);
  dr__server_maybe_finish(s);
}

static void free_server(dr_server_t *s) {
  void (*on_closed)(void *) = s->cfg.on_closed;
  void *arg = s->cfg.cb_arg;
  dr__status_free(s);
  dr__rdzv_free(s);
  dr__metrics_free(&s->metrics);
  dr__store_free(&s->store);
  dr_buf_free(&s->out);
  dr_events_close(&s->events);
  if (s->secret != NULL)
    dr_auth_secret_free(&s->secret, s->cfg.secret_len);
  free(s->run_id);
  free(s->state_file);
  free(s->later_metrics_host);
  free(s);
  if (on_closed != NULL)
    on_closed(arg);
}

static void on_handle_closed(uv_handle_t *h) { dr__server_handle_closed(h->data); }

void dr__server_handle_closed(dr_server_t *s) {
  if (--s->n_handles_open == 0)
    free_server(s);
}

static int check_config(const dr_server_config_t *c, char *err, size_t n) {
  if (c->min_nodes < 1 || c->max_nodes < c->min_nodes) {
    snprintf(err, n, "invalid node count %u:%u: need 1 <= MIN <= MAX",
             c->min_nodes, c->max_nodes);
    return DR_EBADARG;
  }
  if (c->run_id == NULL || c->run_id[0] == '\0' ||
      strlen(c->run_id) > c->limits.max_str) {
    snprintf(err, n, "the run id must be 1 to %u characters",
             c->limits.max_str);
    return DR_EBADARG;
  }
  if (c->heartbeat_timeout_ms < 10 || c->handshake_timeout_ms < 10 ||
      c->frame_timeout_ms < 10 ||
      (c->idle_timeout_ms != 0 && c->idle_timeout_ms < 10)) {
    snprintf(err, n, "heartbeat, handshake, frame and idle timeouts must be "
                     ">= 10 ms (idle: or 0 for none)");
    return DR_EBADARG;
  }
  if (c->max_frame_memory < DR_FRAME_HDR_LEN) {
    snprintf(err, n, "the frame memory limit must hold at least a header");
    return DR_EBADARG;
  }
  return 0;
}

/* A start that fails calls none of the caller's callbacks (the promise
 * of every call that takes one); what it opened closes on the loop. */
static int start_failed(dr_server_t *s, int rc, int handles_open) {
  s->cfg.on_closed = NULL;
  s->cfg.on_done = NULL;
  if (handles_open)
    dr_server_close(&s);
  else
    free_server(s);
  return rc;
}

int dr_server_start(uv_loop_t *loop, const dr_server_config_t *cfg,
                    dr_server_t **out, char *err, size_t errlen) {
  int rc = check_config(cfg, err, errlen);
  if (rc != 0)
    return rc;
  if (dr_auth_init() != 0) {
    snprintf(err, errlen, "libsodium failed to initialise");
    return -ENOSYS;
  }
  raise_nofile();

  dr_server_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return -ENOMEM;
  s->loop = loop;
  s->cfg = *cfg;
  s->run_id = strdup(cfg->run_id);
  s->cfg.run_id = s->run_id;
  s->state_file = cfg->state_file != NULL ? strdup(cfg->state_file) : NULL;
  s->cfg.state_file = s->state_file;
  /* A standby binds its metrics when it takes the job over: where. */
  if (cfg->standby && cfg->metrics_port >= 0)
    s->later_metrics_host = strdup(cfg->metrics_host != NULL
                                       ? cfg->metrics_host
                                       : cfg->host != NULL ? cfg->host
                                                           : "0.0.0.0");
  s->cfg.host = NULL; /* borrowed from the caller; not kept */
  s->cfg.log_dir = NULL;
  s->cfg.metrics_host = NULL;
  uv_timeval64_t tv;
  if (uv_gettimeofday(&tv) == 0)
    s->start_unix_ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
  if (cfg->log_dir != NULL) {
    char host[256];
    if (gethostname(host, sizeof(host)) != 0)
      snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';
    int erc = dr_events_open(cfg->log_dir, cfg->run_id, "server", host,
                             &s->events);
    if (erc != 0)
      DR_WARN("cannot write events under %s (%s)", cfg->log_dir,
              dr_strerror(erc));
  }
  if (cfg->secret != NULL && cfg->secret_len > 0) {
    s->secret = malloc(cfg->secret_len);
    if (s->secret != NULL)
      memcpy(s->secret, cfg->secret, cfg->secret_len);
  }
  s->cfg.secret = s->secret;
  if (s->run_id == NULL || (cfg->secret_len > 0 && s->secret == NULL) ||
      (cfg->state_file != NULL && s->state_file == NULL) ||
      dr__store_new(&s->store) != 0)
    return start_failed(s, -ENOMEM, 0);

  static const char *const bad_kinds[DR_BAD_KIND_DROP(DR__DROP_N)] = {
      "run id", "no secret", "wrong secret", "protocol version",
      "malformed", "handshake timeout", "idle", "slow frame",
      "frame memory", "slow reader", "descriptor limit"};
  /* A flood of bad clients costs a few lines and a summary per 10 s. */
  dr_rl_init(&s->bad_rl, "connections refused or dropped", bad_kinds,
             DR_BAD_KIND_DROP(DR__DROP_N), 5, 10000);
  s->listen_fd = s->reserve_fd = -1;
  rc = dr__listen_start(s, cfg->host, cfg->port, err, errlen);
  if (rc != 0)
    return start_failed(s, rc, 0);

  /* The sweep checks every deadline at a fifth of the shortest. */
  uint32_t shortest = cfg->heartbeat_timeout_ms;
  uint32_t others[3] = {cfg->handshake_timeout_ms, cfg->frame_timeout_ms,
                        cfg->idle_timeout_ms};
  for (int i = 0; i < 3; i++)
    if (others[i] != 0 && others[i] < shortest)
      shortest = others[i];
  uint64_t tick = shortest / 5;
  tick = tick < 10 ? 10 : tick > 250 ? 250 : tick;
  uv_timer_init(loop, &s->sweep);
  s->sweep.data = s;
  s->sweep_tick_ms = tick;
  uv_timer_start(&s->sweep, on_sweep, tick, tick);
  uv_async_init(loop, &s->stop_async, on_stop_async);
  s->stop_async.data = s;
  dr__takeover_init(s);
  uv_check_init(loop, &s->reaper);
  s->reaper.data = s;
  uv_timer_init(loop, &s->drain);
  s->drain.data = s;
  s->n_handles_open += 4;
  rc = dr__rdzv_init(s);
  if (rc != 0) {
    snprintf(err, errlen, "out of memory");
    return start_failed(s, rc, 1);
  }
  if ((rc = dr__state_load(s, err, errlen)) != 0)
    return start_failed(s, rc, 1);
  /* A standby serves its metrics once it has taken the job over. */
  if (cfg->metrics_port >= 0 && !cfg->standby &&
      (rc = dr__metrics_start(s, cfg, err, errlen)) != 0)
    return start_failed(s, rc, 1);
  *out = s;
  return 0;
}

uint16_t dr_server_port(const dr_server_t *s) { return s->port; }

uint16_t dr_server_metrics_port(const dr_server_t *s) {
  return s->metrics != NULL ? dr__metrics_port(s->metrics) : 0;
}

void dr__server_job_done(dr_server_t *s) {
  if (s->cfg.on_done != NULL)
    s->cfg.on_done(s->cfg.cb_arg, s->rdzv.exit_code);
  if (!s->cfg.exit_when_done)
    return;
  s->done_flushing = 1;
  uv_timer_start(&s->drain, on_drain_timeout, 2000, 0);
  dr__server_maybe_finish(s);
}

void dr__server_maybe_finish(dr_server_t *s) {
  if (!s->done_flushing || s->closing)
    return;
  for (dr_conn_t *c = s->conns; c != NULL; c = c->next)
    if (c->out_pending > 0 || (s->stop_requested && c->rp.node != NULL))
      return;
  dr_server_t *tmp = s;
  dr_server_close(&tmp);
}

void dr_server_close(dr_server_t **sp) {
  dr_server_t *s = *sp;
  *sp = NULL;
  if (s == NULL || s->closing)
    return;
  s->closing = 1;
  /* Counted down in on_handle_closed; the last one frees the server. */
  s->n_handles_open++;
  while (s->conns != NULL)
    dr__conn_close(s->conns, "server shutting down");
  dr__rdzv_close(s);
  if (s->metrics != NULL)
    dr__metrics_close(s->metrics);
  dr_rl_flush(&s->bad_rl, dr__now_ms(s));
  dr__listen_close(s);
  uv_close((uv_handle_t *)&s->sweep, on_handle_closed);
  uv_close((uv_handle_t *)&s->stop_async, on_handle_closed);
  dr__takeover_close(s);
  uv_close((uv_handle_t *)&s->reaper, on_handle_closed);
  uv_close((uv_handle_t *)&s->drain, on_handle_closed);
  dr__server_handle_closed(s);
}

void dr_server_request_stop(dr_server_t *s) { uv_async_send(&s->stop_async); }
