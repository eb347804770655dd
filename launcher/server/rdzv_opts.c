/* ddprun-rdzv's flags, one row each (launcher/flags.h), and the setters
 * behind them. A refusal names the flag and quotes its value: "--port
 * '70000' is not a port number (0-65535)". */
#include "rdzv_opts.h"

#include <stddef.h>
#include <stdio.h>

#include "cli_util.h"
#include "ddprun_version.h"
#include "errors.h"
#include "flags.h"
#include "log.h"

#define OFF(field) offsetof(dr_rdzv_opts_t, field)
#define MAX_RESTARTS 1000000u /* a budget no job spends */

/* "WHAT 'VALUE' REASON" in err; returns DR_EBADARG. */
static int bad(char *err, size_t err_len, const char *what, const char *val,
               const char *reason) {
  char q[DR_FLAGS_QUOTE_LEN];
  return dr_flags_fail(err, err_len, "%s '%s' %s", what, dr_flags_quote(val, q),
                       reason);
}

/* A string kept as given: argv outlives the server, and this program
 * reads nothing else. */
static int set_arg(void *dst, const dr_flag_t *row, const char *val,
                   const char *what, char *err, size_t err_len) {
  *(const char **)((char *)dst + row->off) = val;
  return 0;
}

/* --port and --metrics-port: 0 and *port, or DR_EBADARG. */
static int parse_port(const char *val, const char *what, uint16_t *port,
                      char *err, size_t err_len) {
  uint32_t u;
  if (dr_parse_u32(val, 0, 65535, &u) != 0)
    return bad(err, err_len, what, val, "is not a port number (0-65535)");
  *port = (uint16_t)u;
  return 0;
}

static int set_port(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len) {
  dr_rdzv_opts_t *o = dst;
  return parse_port(val, what, &o->cfg.port, err, err_len);
}

static int set_metrics_port(void *dst, const dr_flag_t *row, const char *val,
                            const char *what, char *err, size_t err_len) {
  dr_rdzv_opts_t *o = dst;
  uint16_t port = 0;
  int rc = parse_port(val, what, &port, err, err_len);
  if (rc == 0)
    o->cfg.metrics_port = port; /* from -1, off */
  return rc;
}

static int set_nnodes(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len) {
  dr_rdzv_opts_t *o = dst;
  if (dr_parse_nnodes(val, &o->cfg.min_nodes, &o->cfg.max_nodes) != 0)
    return bad(err, err_len, what, val,
               "must be N or MIN:MAX with 1 <= MIN <= MAX");
  return 0;
}

static int set_max_restarts(void *dst, const dr_flag_t *row, const char *val,
                            const char *what, char *err, size_t err_len) {
  dr_rdzv_opts_t *o = dst;
  if (dr_parse_u32(val, 0, MAX_RESTARTS, &o->cfg.max_restarts) != 0)
    return bad(err, err_len, what, val, "is not a count");
  return 0;
}

/* Seconds into the uint32_t of milliseconds at row->off: at least 0
 * (set_seconds), at least 0.01 (set_timeout), or 0 for never and else at
 * least 0.01 (set_idle). */
static int set_seconds(void *dst, const dr_flag_t *row, const char *val,
                       const char *what, char *err, size_t err_len) {
  if (dr_parse_seconds_ms(val, 0, (uint32_t *)((char *)dst + row->off)) != 0)
    return bad(err, err_len, what, val, "must be seconds >= 0");
  return 0;
}

static int set_timeout(void *dst, const dr_flag_t *row, const char *val,
                       const char *what, char *err, size_t err_len) {
  if (dr_parse_seconds_ms(val, 10, (uint32_t *)((char *)dst + row->off)) != 0)
    return bad(err, err_len, what, val, "must be seconds >= 0.01");
  return 0;
}

static int set_idle(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len) {
  dr_rdzv_opts_t *o = dst;
  uint32_t ms;
  if (dr_parse_seconds_ms(val, 0, &ms) != 0 || (ms > 0 && ms < 10))
    return bad(err, err_len, what, val, "must be 0 or seconds >= 0.01");
  o->cfg.idle_timeout_ms = ms;
  return 0;
}

static int set_frame_memory(void *dst, const dr_flag_t *row, const char *val,
                            const char *what, char *err, size_t err_len) {
  dr_rdzv_opts_t *o = dst;
  uint32_t mib;
  if (dr_parse_u32(val, 1, 1u << 20, &mib) != 0)
    return bad(err, err_len, what, val, "must be MiB, 1 to 1048576");
  o->cfg.max_frame_memory = (uint64_t)mib << 20;
  return 0;
}

static int set_state_file(void *dst, const dr_flag_t *row, const char *val,
                          const char *what, char *err, size_t err_len) {
  if (val[0] == '\0')
    return dr_flags_fail(err, err_len, "%s must not be empty", what);
  return set_arg(dst, row, val, what, err, err_len);
}

static int set_log_level(void *dst, const dr_flag_t *row, const char *val,
                         const char *what, char *err, size_t err_len) {
  dr_rdzv_opts_t *o = dst;
  int level = dr_log_parse_level(val);
  if (level < 0)
    return bad(err, err_len, what, val, "must be error, warn, info or debug");
  o->log_level = level;
  return 0;
}

#define ARGV DR_FLAG_FROM_ARGV

/* clang-format off */
static const dr_flag_t rows[] = {
  {"host", 0, DR_FLAG_VALUE, ARGV, "ADDR", "0.0.0.0",
   "address to listen on", NULL, set_arg, OFF(cfg.host)},
  {"port", 0, DR_FLAG_VALUE, ARGV, "PORT", "29400",
   "port to listen on; 0 picks a free one", NULL, set_port, 0},
  {"port-file", 0, DR_FLAG_VALUE, ARGV, "FILE", NULL,
   "write the bound port to FILE once listening", NULL, set_arg,
   OFF(port_file)},
  {"nnodes", 0, DR_FLAG_VALUE, ARGV, "N|MIN:MAX", NULL,
   "nodes in the job (required)", NULL, set_nnodes, 0},
  {"rdzv-id", 0, DR_FLAG_VALUE, ARGV, "ID", NULL,
   "the job's run id; clients must match (required)", NULL, set_arg,
   OFF(cfg.run_id)},
  {"max-restarts", 0, DR_FLAG_VALUE, ARGV, "K", "0",
   "failures the job may restart from", NULL, set_max_restarts, 0},
  {"secret-file", 0, DR_FLAG_VALUE, ARGV, "FILE",
   "DDPRUN_SECRET if set, else none",
   "require clients to prove this shared secret", NULL, set_arg,
   OFF(secret_file)},
  {"heartbeat-timeout", 0, DR_FLAG_VALUE, ARGV, "S", "2",
   "declare a silent node dead after S seconds", NULL, set_timeout,
   OFF(cfg.heartbeat_timeout_ms)},
  {"last-call-timeout", 0, DR_FLAG_VALUE, ARGV, "S", "1",
   "wait S seconds for more nodes once MIN have joined", NULL, set_seconds,
   OFF(cfg.last_call_timeout_ms)},
  {"replacement-timeout", 0, DR_FLAG_VALUE, ARGV, "S", "60",
   "a job of fixed size (--nnodes N) that loses a node waits S seconds for "
   "a replacement before it stops; 0 = stop at once", NULL, set_seconds,
   OFF(cfg.replacement_timeout_ms)},
  {"handshake-timeout", 0, DR_FLAG_VALUE, ARGV, "S", "5",
   "drop connections that do not say HELLO within S seconds", NULL,
   set_timeout, OFF(cfg.handshake_timeout_ms)},
  {"idle-timeout", 0, DR_FLAG_VALUE, ARGV, "S", "60",
   "drop a client that is not a node of the job (a store client, a tool) "
   "after S seconds without a request, none of its own blocked; 0 = never",
   NULL, set_idle, 0},
  {"frame-timeout", 0, DR_FLAG_VALUE, ARGV, "S", "30",
   "drop a client that is not a node when a frame it began is not whole "
   "within S seconds, or a reply is not taken", NULL, set_timeout,
   OFF(cfg.frame_timeout_ms)},
  {"max-frame-memory", 0, DR_FLAG_VALUE, ARGV, "MIB", "128",
   "memory all unfinished frames may hold together; past it the largest "
   "holders are dropped, and a frame larger than this can never arrive", NULL,
   set_frame_memory, 0},
  {"allow-mixed-nproc", 0, DR_FLAG_SWITCH, ARGV, NULL, NULL,
   "accept nodes with different nproc-per-node", NULL, dr_flag_set_bool,
   OFF(cfg.allow_mixed_nproc)},
  {"log-dir", 0, DR_FLAG_VALUE, ARGV, "DIR", NULL,
   "append the job's events to DIR/<rdzv-id>/events.jsonl", NULL, set_arg,
   OFF(cfg.log_dir)},
  {"log-level", 0, DR_FLAG_VALUE, ARGV, "LEVEL", "info",
   "error, warn, info or debug", NULL, set_log_level, 0},
  {"state-file", 0, DR_FLAG_VALUE, ARGV, "FILE", "none",
   "keep the job's generation and restarts used in FILE, so that a server "
   "started again on it for the same --rdzv-id continues them; removed "
   "when the job ends", NULL, set_state_file, OFF(cfg.state_file)},
  {"metrics-port", 0, DR_FLAG_VALUE, ARGV, "PORT", "no metrics endpoint",
   "serve GET /metrics (Prometheus text) and GET /healthz over HTTP on "
   "PORT; 0 picks a free one", NULL, set_metrics_port, 0},
  {"metrics-host", 0, DR_FLAG_VALUE, ARGV, "ADDR", "that of --host",
   "address of the metrics endpoint", NULL, set_arg, OFF(cfg.metrics_host)},
  {"metrics-port-file", 0, DR_FLAG_VALUE, ARGV, "FILE", NULL,
   "write the metrics port to FILE once listening", NULL, set_arg,
   OFF(metrics_port_file)},
  {"linger", 0, DR_FLAG_VALUE, ARGV, "S", "0",
   "once the job has ended, keep answering for S seconds (a last scrape "
   "sees the outcome and /healthz 503) before exiting", NULL, set_seconds,
   OFF(linger_ms)},
  {"help", 'h', DR_FLAG_HELP, ARGV, NULL, NULL, "show this help", NULL, NULL,
   0},
  {"version", 0, DR_FLAG_VERSION, ARGV, NULL, NULL,
   "print the version and the build's GPU code, and exit", NULL, NULL, 0},
};
/* clang-format on */

_Static_assert(sizeof(rows) / sizeof(rows[0]) <= 64, "one bit per row");

static const dr_flags_t rdzv_flags = {
    .prog = "ddprun-rdzv",
    .version = DDPRUN_VERSION_LINE,
    .rows = rows,
    .n_rows = sizeof(rows) / sizeof(rows[0]),
    .mode = DR_FLAGS_PREFIXES,
    .usage = "usage: ddprun-rdzv --nnodes N|MIN:MAX --rdzv-id ID [options]\n"
             "\n"
             "The rendezvous server of one ddprun job: membership, rounds, "
             "heartbeats,\n"
             "the restart budget and the key-value store. Exits with the "
             "job's exit\n"
             "code when the job ends (0 when every node succeeded).\n"
             "\n",
};

int dr_rdzv_opts_parse(int argc, char **argv, dr_rdzv_opts_t *o, char *err,
                       size_t err_len) {
  *o = (dr_rdzv_opts_t){.log_level = DR_LOG_INFO};
  dr_server_config_default(&o->cfg);
  o->cfg.host = "0.0.0.0";
  o->cfg.port = 29400;
  o->cfg.exit_when_done = 1;
  dr_flags_result_t res;
  int rc = dr_flags_parse(&rdzv_flags, o, argc, argv, NULL, &res, err, err_len);
  if (rc != 0)
    return rc;
  static const char *const required[] = {"nnodes", "rdzv-id"};
  for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
    if (!dr_flags_given(&rdzv_flags, res.given, required[i]))
      return dr_flags_fail(err, err_len, "--%s is required", required[i]);
  if (o->cfg.metrics_port < 0 &&
      (o->cfg.metrics_host != NULL || o->metrics_port_file != NULL))
    return dr_flags_fail(
        err, err_len,
        "--metrics-host and --metrics-port-file need --metrics-port");
  return 0;
}
