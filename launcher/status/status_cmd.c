/* `ddprun status`: its command line, and the one STATUS request to the
 * job's rendezvous server whose answer the other files of this folder
 * decode and print (status_internal.h). */
#include "status_cmd.h"

#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "cli_util.h"
#include "client.h"
#include "errors.h"
#include "exit_codes.h"
#include "log.h"
#include "status_internal.h"

#define DEFAULT_PORT 29400u
#define DEFAULT_TIMEOUT_MS 5000u
#define DEFAULT_STACKS_MS 10000u

static const char usage_text[] =
    "usage: ddprun status --rdzv-endpoint HOST[:PORT] --rdzv-id ID\n"
    "                     [--secret-file FILE] [--stacks] [--env] [--json]\n"
    "                     [--timeout S] [--stacks-timeout S]\n"
    "\n"
    "Asks the job's rendezvous server what the job does: its state,\n"
    "generation and restarts, each node with its host and how long ago it\n"
    "was heard from, and each rank's pid, state, last step and step rate as\n"
    "its agent reports them (every heartbeat while they change), its RSS,\n"
    "CPU and (with NVML) GPU memory, with the slowest rank named and a rank\n"
    "whose memory stands out. While a round forms: who has joined.\n"
    "\n"
    "  --rdzv-endpoint HOST[:PORT]  the job's rendezvous server (port 29400\n"
    "                               when left out)\n"
    "  --rdzv-id ID                 the job's run id\n"
    "  --secret-file FILE           the job's shared secret, when it has one\n"
    "                               (default: $DDPRUN_SECRET)\n"
    "  --stacks                     also every rank's stack, collected by the\n"
    "                               agents (py-spy, eu-stack or gdb where\n"
    "                               the build has them)\n"
    "  --env                        also every node's environment summary,\n"
    "                               as its agent read it at its start (GPUs,\n"
    "                               each local rank's binding, NCCL,\n"
    "                               InfiniBand/RoCE, the NCCL and torch\n"
    "                               variables): \"node N (HOST):\" and its\n"
    "                               lines; a node the server has not seen\n"
    "                               join (it took the job over since) says\n"
    "                               \"(not known to this server)\"\n"
    "  --json                       print JSON instead of the tables\n"
    "  --timeout S                  connecting and each answer (default: 5)\n"
    "  --stacks-timeout S           how long the server waits for the\n"
    "                               agents' stacks (default: 10)\n"
    "  -h, --help                   this text\n"
    "\n"
    "Options are also spelled with underscores and take their value as\n"
    "--name VALUE or --name=VALUE.\n"
    "\n"
    "Exit codes: 0 answered; 2 bad options, or the server refused this\n"
    "client (the job's secret is needed, or it serves another job); 3 the\n"
    "server could not be reached or did not answer in time.\n";

#define bad(...) dr_usage_error("ddprun status", __VA_ARGS__)

/* HOST[:PORT] or [ADDR][:PORT]. */
static int parse_endpoint(const char *v, dr_status_args_t *a) {
  const char *host = v, *port = NULL;
  size_t len;
  if (v[0] == '[') {
    const char *close = strchr(v, ']');
    if (close == NULL || (close[1] != '\0' && close[1] != ':'))
      return bad("--rdzv-endpoint '%s': expected [ADDR]:PORT", v);
    host = v + 1;
    len = (size_t)(close - host);
    port = close[1] == ':' ? close + 2 : NULL;
  } else {
    const char *colon = strchr(v, ':');
    if (colon != NULL && strchr(colon + 1, ':') != NULL)
      return bad("--rdzv-endpoint '%s': an IPv6 address needs brackets, as "
                 "[ADDR]:PORT", v);
    len = colon != NULL ? (size_t)(colon - v) : strlen(v);
    port = colon != NULL ? colon + 1 : NULL;
  }
  if (len == 0 || len >= sizeof(a->host))
    return bad("--rdzv-endpoint '%s': expected HOST[:PORT]", v);
  memcpy(a->host, host, len);
  a->host[len] = '\0';
  uint32_t p = DEFAULT_PORT;
  if (port != NULL && dr_parse_u32(port, 1, 65535, &p) != 0)
    return bad("--rdzv-endpoint '%s': the port must be 1-65535", v);
  a->port = (uint16_t)p;
  return 0;
}

/* "--rdzv_id=x" reads as "--rdzv-id" with "x". */
static void flag_name(const char *arg, char *name, size_t n,
                      const char **inline_val) {
  const char *eq = strchr(arg, '=');
  size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
  if (len >= n)
    len = n - 1;
  for (size_t i = 0; i < len; i++)
    name[i] = i >= 2 && arg[i] == '_' ? '-' : arg[i];
  name[len] = '\0';
  *inline_val = eq != NULL ? eq + 1 : NULL;
}

static int parse(int argc, char **argv, dr_status_args_t *a) {
  memset(a, 0, sizeof(*a));
  a->timeout_ms = DEFAULT_TIMEOUT_MS;
  a->stacks_ms = DEFAULT_STACKS_MS;
  int have_endpoint = 0;
  for (int i = 1; i < argc; i++) {
    char f[64];
    const char *v;
    flag_name(argv[i], f, sizeof(f), &v);
    if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) {
      fputs(usage_text, stdout);
      return 1;
    }
    if (strcmp(f, "--json") == 0 || strcmp(f, "--stacks") == 0 ||
        strcmp(f, "--env") == 0) {
      if (v != NULL)
        return bad("%s takes no value", f);
      *(strcmp(f, "--json") == 0     ? &a->json
        : strcmp(f, "--stacks") == 0 ? &a->stacks
                                     : &a->env) = 1;
      continue;
    }
    if (strcmp(f, "--rdzv-endpoint") != 0 && strcmp(f, "--rdzv-id") != 0 &&
        strcmp(f, "--secret-file") != 0 && strcmp(f, "--timeout") != 0 &&
        strcmp(f, "--stacks-timeout") != 0)
      return bad("unknown option '%s'", argv[i]);
    if (v == NULL) {
      if (i + 1 >= argc)
        return bad("%s needs a value", f);
      v = argv[++i];
    }
    int rc = 0;
    if (strcmp(f, "--rdzv-endpoint") == 0) {
      rc = parse_endpoint(v, a);
      have_endpoint = 1;
    } else if (strcmp(f, "--rdzv-id") == 0) {
      if (v[0] == '\0')
        return bad("--rdzv-id must not be empty");
      a->run_id = v;
    } else if (strcmp(f, "--secret-file") == 0) {
      a->secret_file = v;
    } else if (dr_parse_seconds_ms(v, 1, strcmp(f, "--timeout") == 0
                                             ? &a->timeout_ms
                                             : &a->stacks_ms) != 0) {
      return bad("%s '%s': expected seconds, more than 0", f, v);
    }
    if (rc != 0)
      return rc;
  }
  if (!have_endpoint)
    return bad("--rdzv-endpoint HOST[:PORT] is missing");
  if (a->run_id == NULL)
    return bad("--rdzv-id ID is missing");
  return 0;
}

/* ---- the request -------------------------------------------------------- */

/* The exit status for a failed open or request, with one line said.
 * answered: the server sent an ERROR (its message in detail, escaped
 * here: it is the server's text). */
static int failed(const dr_status_args_t *a, int rc, int answered,
                  const char *detail) {
  const char *raw = detail != NULL && detail[0] != '\0' ? detail
                                                        : dr_strerror(rc);
  char what[4 * 512 + 8];
  size_t n = strlen(raw);
  dr_log_sample(raw, n < 512 ? n : 512, what, sizeof(what));
  int refused = rc == DR_ENOAUTH || rc == DR_EAUTH || rc == DR_ERUNID ||
                rc == DR_EVERSION;
  if (rc == DR_ENOAUTH)
    fprintf(stderr, "ddprun status: the rendezvous server %s:%u requires "
            "the job's shared secret: pass --secret-file FILE or set "
            "DDPRUN_SECRET\n", a->host, a->port);
  else if (refused)
    fprintf(stderr, "ddprun status: the rendezvous server %s:%u refused "
            "this client: %s\n", a->host, a->port, what);
  else if (rc == DR_ESTANDBY)
    fprintf(stderr, "ddprun status: %s:%u is a node's standby rendezvous "
            "server, not the job's server: %s\n", a->host, a->port, what);
  else if (answered)
    fprintf(stderr, "ddprun status: the rendezvous server %s:%u could not "
            "answer: %s\n", a->host, a->port, what);
  else
    fprintf(stderr, "ddprun status: no answer from the rendezvous server "
            "%s:%u: %s (if its node was lost, the rendezvous may have moved: "
            "each ddprun says where, \"the rendezvous moved ... to "
            "HOST:PORT\")\n", a->host, a->port, what);
  return refused ? DR_EXIT_CONFIG : DR_EXIT_COMM;
}

int dr_status_main(int argc, char **argv) {
  dr_status_args_t a;
  int rc = parse(argc, argv, &a);
  if (rc != 0)
    return rc == 1 ? 0 : rc;
  uint8_t *secret = NULL;
  size_t secret_len = 0;
  rc = dr_auth_secret_load(a.secret_file, &secret, &secret_len);
  if (rc != 0) {
    fprintf(stderr, "ddprun status: cannot read the shared secret from %s "
            "(%s)\n", a.secret_file != NULL ? a.secret_file : "DDPRUN_SECRET",
            dr_strerror(rc));
    return DR_EXIT_CONFIG;
  }
  dr_client_opts_t o;
  memset(&o, 0, sizeof(o));
  o.host = a.host;
  o.port = a.port;
  o.run_id = a.run_id;
  o.secret = secret;
  o.secret_len = secret_len;
  o.connect_timeout_ms = (int)a.timeout_ms;
  o.io_timeout_ms = (int)a.timeout_ms;
  dr_client_t *c = NULL;
  char err[512];
  rc = dr_client_open(&o, &c, err, sizeof(err));
  if (secret != NULL)
    dr_auth_secret_free(&secret, secret_len);
  if (rc != 0)
    return failed(&a, rc, 0, err);
  dr_msg_t m;
  uint32_t flags = (a.stacks ? DR_STATUS_STACKS : 0) |
                   (a.env ? DR_STATUS_ENV : 0);
  rc = dr_client_status(c, flags, a.stacks ? a.stacks_ms : 0, &m);
  if (rc != 0) {
    snprintf(err, sizeof(err), "%s", dr_client_errmsg(c));
    dr_client_close(&c);
    return failed(&a, rc, err[0] != '\0', err);
  }
  dr_status_report_t r;
  rc = dr__status_decode(&m, &r);
  if (rc != 0) {
    dr__status_report_free(&r);
    dr_client_close(&c);
    return failed(&a, rc, 1, "a malformed answer");
  }
  if (a.json)
    dr__status_print_json(&a, &r);
  else
    dr__status_print_table(&a, &r);
  dr__status_report_free(&r);
  dr_client_close(&c);
  return 0;
}
