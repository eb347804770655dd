/* ddprun-rdzv: the standalone rendezvous server. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "cli_util.h"
#include "ddprun_version.h"
#include "errors.h"
#include "log.h"
#include "signals.h"
#include "server.h"

static const char usage[] =
    "usage: ddprun-rdzv --nnodes N|MIN:MAX --rdzv-id ID [options]\n"
    "\n"
    "The rendezvous server of one ddprun job: membership, rounds, heartbeats,\n"
    "the restart budget and the key-value store. Exits with the job's exit\n"
    "code when the job ends (0 when every node succeeded).\n"
    "\n"
    "  --host ADDR               address to listen on (default 0.0.0.0)\n"
    "  --port PORT               port to listen on; 0 picks a free one\n"
    "                            (default 29400)\n"
    "  --port-file FILE          write the bound port to FILE once listening\n"
    "  --nnodes N|MIN:MAX        nodes in the job (required)\n"
    "  --rdzv-id ID              the job's run id; clients must match (required)\n"
    "  --max-restarts K          failures the job may restart from (default 0)\n"
    "  --secret-file FILE        require clients to prove this shared secret\n"
    "                            (default: DDPRUN_SECRET if set, else none)\n"
    "  --heartbeat-timeout S     declare a silent node dead after S seconds\n"
    "                            (default 2)\n"
    "  --last-call-timeout S     wait S seconds for more nodes once MIN have\n"
    "                            joined (default 1)\n"
    "  --handshake-timeout S     drop connections that do not say HELLO within\n"
    "                            S seconds (default 5)\n"
    "  --idle-timeout S          drop a client that is not a node of the job\n"
    "                            (a store client, a tool) after S seconds\n"
    "                            without a request, none of its own blocked;\n"
    "                            0 = never (default 60)\n"
    "  --frame-timeout S         drop a client that is not a node when a\n"
    "                            frame it began is not whole within S\n"
    "                            seconds, or a reply is not taken\n"
    "                            (default 30)\n"
    "  --max-frame-memory MIB    memory all unfinished frames may hold\n"
    "                            together; past it the largest holders are\n"
    "                            dropped (default 128; a frame larger than\n"
    "                            this can never arrive)\n"
    "  --allow-mixed-nproc       accept nodes with different nproc-per-node\n"
    "  --log-dir DIR             append the job's events to\n"
    "                            DIR/<rdzv-id>/events.jsonl\n"
    "  --log-level LEVEL         error, warn, info or debug (default info)\n"
    "  --state-file FILE         keep the job's generation and restarts used\n"
    "                            in FILE, so that a server started again on\n"
    "                            it for the same --rdzv-id continues them\n"
    "                            (removed when the job ends; default: none)\n"
    "  --metrics-port PORT       serve GET /metrics (Prometheus text) and\n"
    "                            GET /healthz over HTTP on PORT; 0 picks a\n"
    "                            free one (default: no metrics endpoint)\n"
    "  --metrics-host ADDR       address of the metrics endpoint (default:\n"
    "                            that of --host)\n"
    "  --metrics-port-file FILE  write the metrics port to FILE once listening\n"
    "  --linger S                once the job has ended, keep answering for S\n"
    "                            seconds (a last scrape sees the outcome and\n"
    "                            /healthz 503) before exiting (default 0)\n"
    "  -h, --help                show this help\n"
    "  --version                 print the version and the build's GPU\n"
    "                            code, and exit\n";

enum {
  OPT_HOST = 256,
  OPT_PORT,
  OPT_PORT_FILE,
  OPT_NNODES,
  OPT_RDZV_ID,
  OPT_MAX_RESTARTS,
  OPT_SECRET_FILE,
  OPT_HB,
  OPT_LAST_CALL,
  OPT_HANDSHAKE,
  OPT_IDLE,
  OPT_FRAME,
  OPT_FRAME_MEMORY,
  OPT_MIXED,
  OPT_LOG_LEVEL,
  OPT_LOG_DIR,
  OPT_METRICS_PORT,
  OPT_METRICS_HOST,
  OPT_METRICS_PORT_FILE,
  OPT_LINGER,
  OPT_STATE_FILE,
  OPT_VERSION
};

static const struct option options[] = {
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"port-file", required_argument, NULL, OPT_PORT_FILE},
    {"nnodes", required_argument, NULL, OPT_NNODES},
    {"rdzv-id", required_argument, NULL, OPT_RDZV_ID},
    {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"secret-file", required_argument, NULL, OPT_SECRET_FILE},
    {"heartbeat-timeout", required_argument, NULL, OPT_HB},
    {"last-call-timeout", required_argument, NULL, OPT_LAST_CALL},
    {"handshake-timeout", required_argument, NULL, OPT_HANDSHAKE},
    {"idle-timeout", required_argument, NULL, OPT_IDLE},
    {"frame-timeout", required_argument, NULL, OPT_FRAME},
    {"max-frame-memory", required_argument, NULL, OPT_FRAME_MEMORY},
    {"allow-mixed-nproc", no_argument, NULL, OPT_MIXED},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"log-dir", required_argument, NULL, OPT_LOG_DIR},
    {"metrics-port", required_argument, NULL, OPT_METRICS_PORT},
    {"metrics-host", required_argument, NULL, OPT_METRICS_HOST},
    {"metrics-port-file", required_argument, NULL, OPT_METRICS_PORT_FILE},
    {"linger", required_argument, NULL, OPT_LINGER},
    {"state-file", required_argument, NULL, OPT_STATE_FILE},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0}};

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

#define bad(...) dr_usage_error("ddprun-rdzv", __VA_ARGS__)

int main(int argc, char **argv) {
  /* A stop signal waits, pending, until its handler is in place, and is
   * ignored once the handlers close: the server ends with its code. */
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGHUP);
  dr_signals_block(&stops);
  dr_server_config_t cfg;
  dr_server_config_default(&cfg);
  cfg.host = "0.0.0.0";
  cfg.port = 29400;
  cfg.run_id = NULL;
  cfg.exit_when_done = 1;
  const char *port_file = NULL, *secret_file = NULL;
  const char *metrics_port_file = NULL;
  uint32_t linger_ms = 0;
  int have_nnodes = 0, level = DR_LOG_INFO;

  int opt;
  while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
    uint32_t u;
    switch (opt) {
    case OPT_HOST:
      cfg.host = optarg;
      break;
    case OPT_PORT:
      if (dr_parse_u32(optarg, 0, 65535, &u) != 0)
        return bad("--port '%s' is not a port number (0-65535)", optarg);
      cfg.port = (uint16_t)u;
      break;
    case OPT_PORT_FILE:
      port_file = optarg;
      break;
    case OPT_NNODES:
      if (dr_parse_nnodes(optarg, &cfg.min_nodes, &cfg.max_nodes) != 0)
        return bad("--nnodes '%s' must be N or MIN:MAX with 1 <= MIN <= MAX",
                   optarg);
      have_nnodes = 1;
      break;
    case OPT_RDZV_ID:
      cfg.run_id = optarg;
      break;
    case OPT_MAX_RESTARTS:
      if (dr_parse_u32(optarg, 0, 1000000, &u) != 0)
        return bad("--max-restarts '%s' is not a count", optarg);
      cfg.max_restarts = u;
      break;
    case OPT_SECRET_FILE:
      secret_file = optarg;
      break;
    case OPT_HB:
      if (dr_parse_seconds_ms(optarg, 10, &cfg.heartbeat_timeout_ms) != 0)
        return bad("--heartbeat-timeout '%s' must be seconds >= 0.01", optarg);
      break;
    case OPT_LAST_CALL:
      if (dr_parse_seconds_ms(optarg, 0, &cfg.last_call_timeout_ms) != 0)
        return bad("--last-call-timeout '%s' must be seconds >= 0", optarg);
      break;
    case OPT_HANDSHAKE:
      if (dr_parse_seconds_ms(optarg, 10, &cfg.handshake_timeout_ms) != 0)
        return bad("--handshake-timeout '%s' must be seconds >= 0.01", optarg);
      break;
    case OPT_IDLE:
      if (dr_parse_seconds_ms(optarg, 0, &cfg.idle_timeout_ms) != 0 ||
          (cfg.idle_timeout_ms > 0 && cfg.idle_timeout_ms < 10))
        return bad("--idle-timeout '%s' must be 0 or seconds >= 0.01",
                   optarg);
      break;
    case OPT_FRAME:
      if (dr_parse_seconds_ms(optarg, 10, &cfg.frame_timeout_ms) != 0)
        return bad("--frame-timeout '%s' must be seconds >= 0.01", optarg);
      break;
    case OPT_FRAME_MEMORY:
      if (dr_parse_u32(optarg, 1, 1u << 20, &u) != 0)
        return bad("--max-frame-memory '%s' must be MiB, 1 to 1048576",
                   optarg);
      cfg.max_frame_memory = (uint64_t)u << 20;
      break;
    case OPT_MIXED:
      cfg.allow_mixed_nproc = 1;
      break;
    case OPT_STATE_FILE:
      if (optarg[0] == '\0')
        return bad("--state-file must not be empty");
      cfg.state_file = optarg;
      break;
    case OPT_LOG_DIR:
      cfg.log_dir = optarg;
      break;
    case OPT_METRICS_PORT:
      if (dr_parse_u32(optarg, 0, 65535, &u) != 0)
        return bad("--metrics-port '%s' is not a port number (0-65535)",
                   optarg);
      cfg.metrics_port = (int32_t)u;
      break;
    case OPT_METRICS_HOST:
      cfg.metrics_host = optarg;
      break;
    case OPT_METRICS_PORT_FILE:
      metrics_port_file = optarg;
      break;
    case OPT_LINGER:
      if (dr_parse_seconds_ms(optarg, 0, &linger_ms) != 0)
        return bad("--linger '%s' must be seconds >= 0", optarg);
      break;
    case OPT_LOG_LEVEL:
      level = dr_log_parse_level(optarg);
      if (level < 0)
        return bad("--log-level '%s' must be error, warn, info or debug",
                   optarg);
      break;
    case 'h':
      fputs(usage, stdout);
      return 0;
    case OPT_VERSION:
      printf("ddprun-rdzv %s\n", DDPRUN_VERSION_LINE);
      return 0;
    default:
      fprintf(stderr, "ddprun-rdzv: see ddprun-rdzv --help\n");
      return 2;
    }
  }
  if (optind < argc)
    return bad("unexpected argument '%s'", argv[optind]);
  if (!have_nnodes)
    return bad("%s is required", "--nnodes");
  if (cfg.run_id == NULL)
    return bad("%s is required", "--rdzv-id");
  if (cfg.metrics_port < 0 &&
      (cfg.metrics_host != NULL || metrics_port_file != NULL))
    return bad("--metrics-host and --metrics-port-file need --metrics-port");
  dr_log_init("ddprun-rdzv", (dr_log_level_t)level);

  uint8_t *secret = NULL;
  size_t secret_len = 0;
  int rc = dr_auth_secret_load(secret_file, &secret, &secret_len);
  if (rc != 0) {
    fprintf(stderr, "ddprun-rdzv: cannot read the shared secret from %s (%s)\n",
            secret_file != NULL ? secret_file : "DDPRUN_SECRET",
            dr_strerror(rc));
    return 2;
  }
  cfg.secret = secret;
  cfg.secret_len = secret_len;

  run_state_t st = {NULL, 0, 1, 0, linger_ms, {0}};
  cfg.on_done = on_done;
  cfg.on_closed = on_closed;
  cfg.cb_arg = &st;
  /* Lingering, the server stays up after the job; the timer closes it. */
  if (linger_ms > 0)
    cfg.exit_when_done = 0;
  uv_loop_t *loop = uv_default_loop();
  uv_timer_init(loop, &st.linger);
  st.linger.data = &st;
  uv_unref((uv_handle_t *)&st.linger); /* the server's handles keep it up */
  dr_server_t *srv = NULL;
  char err[256];
  rc = dr_server_start(loop, &cfg, &srv, err, sizeof(err));
  dr_auth_secret_free(&secret, secret_len);
  if (rc != 0) {
    fprintf(stderr, "ddprun-rdzv: %s\n", err);
    return rc == DR_EBADARG ? 2 : 1;
  }
  st.srv = srv;
  uint16_t port = dr_server_port(srv);
  uint16_t mport = dr_server_metrics_port(srv);
  const char *bad_file = NULL;
  if (port_file != NULL && (rc = dr_write_port_file(port_file, port)) != 0)
    bad_file = port_file;
  else if (metrics_port_file != NULL &&
           (rc = dr_write_port_file(metrics_port_file, mport)) != 0)
    bad_file = metrics_port_file;
  if (bad_file != NULL) {
    fprintf(stderr, "ddprun-rdzv: cannot write the port file %s (%s)\n",
            bad_file, dr_strerror(rc));
    dr_server_close(&srv);
    uv_run(loop, UV_RUN_DEFAULT);
    return 1;
  }
  if (mport != 0)
    DR_INFO("serving metrics on http://%s:%u/metrics and /healthz",
            cfg.metrics_host != NULL ? cfg.metrics_host : cfg.host, mport);
  DR_INFO("listening on %s:%u for job '%s' (nodes %u:%u, max restarts %u%s)",
          cfg.host, port, cfg.run_id, cfg.min_nodes, cfg.max_nodes,
          cfg.max_restarts, secret_len > 0 ? ", shared secret required" : "");

  uv_signal_t sigs[3];
  int signums[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(loop, &sigs[i]);
    sigs[i].data = &st;
    uv_signal_start(&sigs[i], on_signal, signums[i]);
    uv_unref((uv_handle_t *)&sigs[i]); /* the server's handles keep it up */
  }
  /* SIGPIPE would kill the server on a write to a vanished client. */
  signal(SIGPIPE, SIG_IGN);
  dr_signals_unblock(&stops);

  uv_run(loop, UV_RUN_DEFAULT);
  dr_signals_block(&stops);
  for (int i = 0; i < 3; i++)
    uv_close((uv_handle_t *)&sigs[i], NULL);
  dr_signals_ignore(&stops);
  uv_close((uv_handle_t *)&st.linger, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
  if (st.signal_exit != 0)
    return st.signal_exit;
  return st.done ? st.exit_code : 1;
}
