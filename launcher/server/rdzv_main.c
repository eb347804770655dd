/* ddprun-rdzv: the standalone rendezvous server. Its flags are the rows of
 * rdzv_opts.c. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "cli_util.h"
#include "errors.h"
#include "log.h"
#include "rdzv_opts.h"
#include "server.h"
#include "signals.h"

typedef struct {
  dr_server_t *srv; /* NULL once the server has freed itself */
  int done, exit_code, signal_exit;
  uint32_t linger_ms;
  uv_timer_t linger; /* closes the server linger_ms after the job ended */
} run_state_t;

static void on_linger(uv_timer_t *t) {
  run_state_t *st = t->data;
  dr_server_t *s = st->srv;
  dr_server_close(&s);
}

static void on_done(void *arg, int exit_code) {
  run_state_t *st = arg;
  st->done = 1;
  st->exit_code = exit_code;
  if (st->linger_ms > 0)
    uv_timer_start(&st->linger, on_linger, st->linger_ms, 0);
}

static void on_closed(void *arg) { ((run_state_t *)arg)->srv = NULL; }

static void on_signal(uv_signal_t *h, int signum) {
  run_state_t *st = h->data;
  DR_INFO("received SIG%s, shutting down", sigabbrev_np(signum));
  /* Once the job has ended (lingering), its exit code stands. */
  if (st->signal_exit == 0 && !st->done)
    st->signal_exit = 128 + signum;
  dr_server_t *s = st->srv;
  dr_server_close(&s);
}

/* Starts the server of o on loop, then writes its port files: 0, or the
 * exit status after saying why on stderr. */
static int start(uv_loop_t *loop, dr_rdzv_opts_t *o, run_state_t *st) {
  dr_server_config_t *cfg = &o->cfg;
  uint8_t *secret = NULL;
  size_t secret_len = 0;
  int rc = dr_auth_secret_load(o->secret_file, &secret, &secret_len);
  if (rc != 0) {
    fprintf(stderr, "ddprun-rdzv: cannot read the shared secret from %s (%s)\n",
            o->secret_file != NULL ? o->secret_file : "DDPRUN_SECRET",
            dr_strerror(rc));
    return 2;
  }
  cfg->secret = secret;
  cfg->secret_len = secret_len;
  cfg->on_done = on_done;
  cfg->on_closed = on_closed;
  cfg->cb_arg = st;
  /* Lingering, the server stays up after the job; the timer closes it. */
  if (st->linger_ms > 0)
    cfg->exit_when_done = 0;
  uv_timer_init(loop, &st->linger);
  st->linger.data = st;
  uv_unref((uv_handle_t *)&st->linger); /* the server's handles keep it up */
  dr_server_t *srv = NULL;
  char err[256];
  rc = dr_server_start(loop, cfg, &srv, err, sizeof(err));
  dr_auth_secret_free(&secret, secret_len);
  cfg->secret = NULL;
  if (rc != 0) {
    fprintf(stderr, "ddprun-rdzv: %s\n", err);
    return rc == DR_EBADARG ? 2 : 1;
  }
  st->srv = srv;
  uint16_t port = dr_server_port(srv);
  uint16_t mport = dr_server_metrics_port(srv);
  const char *bad_file = NULL;
  if (o->port_file != NULL &&
      (rc = dr_write_port_file(o->port_file, port)) != 0)
    bad_file = o->port_file;
  else if (o->metrics_port_file != NULL &&
           (rc = dr_write_port_file(o->metrics_port_file, mport)) != 0)
    bad_file = o->metrics_port_file;
  if (bad_file != NULL) {
    fprintf(stderr, "ddprun-rdzv: cannot write the port file %s (%s)\n",
            bad_file, dr_strerror(rc));
    dr_server_close(&srv);
    uv_run(loop, UV_RUN_DEFAULT);
    return 1;
  }
  if (mport != 0)
    DR_INFO("serving metrics on http://%s:%u/metrics and /healthz",
            cfg->metrics_host != NULL ? cfg->metrics_host : cfg->host, mport);
  DR_INFO("listening on %s:%u for job '%s' (nodes %u:%u, max restarts %u%s)",
          cfg->host, port, cfg->run_id, cfg->min_nodes, cfg->max_nodes,
          cfg->max_restarts, secret_len > 0 ? ", shared secret required" : "");
  return 0;
}

/* Runs the loop until the server has closed, with the stop signals (held
 * blocked until now) handled; returns the exit status. */
static int run(uv_loop_t *loop, run_state_t *st, const sigset_t *stops) {
  uv_signal_t sigs[3];
  int signums[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(loop, &sigs[i]);
    sigs[i].data = st;
    uv_signal_start(&sigs[i], on_signal, signums[i]);
    uv_unref((uv_handle_t *)&sigs[i]); /* the server's handles keep it up */
  }
  /* SIGPIPE would kill the server on a write to a vanished client. */
  signal(SIGPIPE, SIG_IGN);
  dr_signals_unblock(stops);

  uv_run(loop, UV_RUN_DEFAULT);
  dr_signals_block(stops);
  for (int i = 0; i < 3; i++)
    uv_close((uv_handle_t *)&sigs[i], NULL);
  dr_signals_ignore(stops);
  uv_close((uv_handle_t *)&st->linger, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
  if (st->signal_exit != 0)
    return st->signal_exit;
  return st->done ? st->exit_code : 1;
}

int main(int argc, char **argv) {
  /* A stop signal waits, pending, until its handler is in place, and is
   * ignored once the handlers close: the server ends with its code. */
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGHUP);
  dr_signals_block(&stops);
  dr_rdzv_opts_t o;
  char err[512];
  int rc = dr_rdzv_opts_parse(argc, argv, &o, err, sizeof(err));
  if (rc != 0)
    return rc == 1 ? 0 : dr_usage_error("ddprun-rdzv", "%s", err);
  dr_log_init("ddprun-rdzv", (dr_log_level_t)o.log_level);
  uv_loop_t *loop = uv_default_loop();
  run_state_t st = {NULL, 0, 1, 0, o.linger_ms, {0}};
  int code = start(loop, &o, &st);
  return code != 0 ? code : run(loop, &st, &stops);
}
