/* ddprun: parses the command line, hosts the rendezvous server when this
 * node should (--standalone, the endpoint is here, or static node 0), and
 * runs the agent. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "agent.h"
#include "auth.h"
#include "bind.h"
#include "diag_cmd.h"
#include "hosted.h"
#include "errors.h"
#include "log.h"
#include "options.h"
#include "plan_cmd.h"
#include "server.h"
#include "status_cmd.h"
#include "watchdog.h"

extern char **environ;

/* 1 when host (a name or an address) resolves to an address of this host,
 * that is, one it can bind; 0 otherwise or when it does not resolve. */
static int is_local_address(const char *host) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, "0", &hints, &res) != 0)
    return 0;
  int local = 0;
  for (struct addrinfo *ai = res; ai != NULL && !local; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    local = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(res);
  return local;
}

static int is_numeric(const char *host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* 1 when port can be bound here (nothing holds it): the check TCPStore's
 * bind makes; 0 when it is taken. */
static int port_is_free(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return 1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  close(fd);
  return ok;
}

/* The command to exec: python for .py and -m, the program itself else. */
static char **build_argv(const dr_options_t *o) {
  const char *py = getenv("PYTHON_EXEC");
  if (py == NULL || py[0] == '\0')
    py = "python3";
  const char *prog = o->prog_argv[0];
  size_t len = strlen(prog);
  int python = o->run_module ||
               (!o->no_python && len > 3 && strcmp(prog + len - 3, ".py") == 0);
  size_t extra = python ? (o->run_module ? 3 : 2) : 0;
  char **argv = calloc((size_t)o->prog_argc + extra + 1, sizeof(char *));
  if (argv == NULL)
    return NULL;
  size_t k = 0;
  if (python) {
    argv[k++] = (char *)py;
    argv[k++] = "-u";
    if (o->run_module)
      argv[k++] = "-m";
  }
  for (int i = 0; i < o->prog_argc; i++)
    argv[k++] = o->prog_argv[i];
  argv[k] = NULL;
  return argv;
}

/* The job's server as the options say, on host:port: the one this node
 * hosts, or its standby. */
static void job_server_config(const dr_options_t *o, const uint8_t *secret,
                              size_t secret_len, const char *host,
                              uint16_t port, dr_server_config_t *c) {
  dr_server_config_default(c);
  c->host = host;
  c->port = port;
  c->run_id = o->rdzv_id;
  c->min_nodes = o->min_nodes;
  c->max_nodes = o->max_nodes;
  c->max_restarts = o->max_restarts;
  c->heartbeat_timeout_ms = o->heartbeat_timeout_ms;
  c->last_call_timeout_ms = o->last_call_timeout_ms;
  c->replacement_timeout_ms = o->replacement_timeout_ms;
  c->secret = secret;
  c->secret_len = secret_len;
  c->log_dir = o->log_dir;
  c->metrics_port = o->metrics_port;
}

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "ddprun: %s\n", msg);
}

int main(int argc, char **argv) {
  /* First: a signal sent as ddprun starts (a SIGUSR1 while srun still
   * starts the nodes' tasks, a Ctrl-C) must not kill it; the agent takes
   * it once it can. */
  dr_agent_hold_early_signals();
  setvbuf(stdout, NULL, _IOLBF, 0);
  int sub = argc > 1 && (strcmp(argv[1], "plan") == 0 ||
                         strcmp(argv[1], "diagnose") == 0 ||
                         strcmp(argv[1], "status") == 0);
  if (sub)
    dr_agent_release_early_signals(); /* no agent: Ctrl-C ends them */
  if (sub && strcmp(argv[1], "plan") == 0)
    return dr_plan_main(argc - 1, argv + 1); /* the bucket planner */
  if (sub && strcmp(argv[1], "diagnose") == 0)
    return dr_diagnose_main(argc - 1, argv + 1); /* why a job is slow */
  if (sub)
    return dr_status_main(argc - 1, argv + 1); /* a running job, live */
  dr_options_t o;
  char err[512];
  int rc = dr_options_parse(argc, argv, environ, &o, err, sizeof(err));
  if (rc == 1)
    return 0;
  if (rc != 0) {
    fprintf(stderr, "ddprun: %s\n", err);
    dr_options_free(&o);
    return 2;
  }
  dr_log_init("ddprun", (dr_log_level_t)o.log_level);
  if (o.notice != NULL)
    fprintf(stderr, "ddprun: %s\n", o.notice);
  int code = 2;
  /* Forked while this process still has one thread. */
  pid_t watchdog_pid = 0;
  int watchdog_fd = dr_watchdog_start(&watchdog_pid);
  char **exec_argv = NULL;
  char *path = NULL;
  uint8_t *secret = NULL;
  size_t secret_len = 0;
  dr_hosted_t *hosted = NULL;
  dr_hosted_t *standby = NULL;

  char hostname[256];
  if (gethostname(hostname, sizeof(hostname)) != 0)
    snprintf(hostname, sizeof(hostname), "localhost");
  hostname[sizeof(hostname) - 1] = '\0';

  uint32_t nproc;
  dr_bind_opts_t bind = dr_options_bind(&o);
  if (dr_bind_nproc(&bind, &nproc, err, sizeof(err)) != 0) {
    fprintf(stderr, "ddprun: %s\n", err);
    goto out;
  }
  exec_argv = build_argv(&o);
  if (exec_argv == NULL)
    goto out;
  rc = dr_resolve_exec(exec_argv[0], &path);
  if (rc != 0) {
    fail("cannot execute '%s': %s", exec_argv[0], dr_strerror(rc));
    goto out;
  }
  exec_argv[0] = path;
  rc = dr_auth_secret_load(o.secret_file, &secret, &secret_len);
  if (rc != 0) {
    fail("cannot read the shared secret from %s (%s)",
         o.secret_file != NULL ? o.secret_file : "DDPRUN_SECRET",
         dr_strerror(rc));
    goto out;
  }

  /* Where the rendezvous is, and whether this node hosts it. */
  const char *rdzv_host = o.rdzv_host;
  uint16_t rdzv_port = o.rdzv_port;
  const char *bind_host = NULL;
  uint16_t master_port = 0;
  int host_it = 0;
  if (o.standalone || (o.rdzv_backend == DR_RDZV_C10D && !o.have_endpoint &&
                       o.max_nodes == 1)) {
    rdzv_host = bind_host = "127.0.0.1";
    rdzv_port = 0;
    host_it = 1;
    if (o.master_port >= 0)
      master_port = (uint16_t)o.master_port;
    /* Two standalone jobs must not share a run id (and --log-dir files). */
    if (strcmp(o.rdzv_id, "none") == 0) {
      char *id = malloc(32);
      if (id != NULL) {
        uint8_t r[DR_NONCE_LEN];
        dr_auth_init();
        dr_auth_nonce(r);
        snprintf(id, 32, "standalone-%02x%02x%02x%02x", r[0], r[1], r[2], r[3]);
        free(o.rdzv_id);
        o.rdzv_id = id;
      }
    }
  } else if (o.rdzv_backend == DR_RDZV_STATIC) {
    master_port = o.master_port >= 0 ? (uint16_t)o.master_port : 29500;
    if (!o.have_endpoint) {
      rdzv_host = o.master_addr;
      rdzv_port = (uint16_t)(master_port + 1);
    }
    host_it = o.is_host >= 0 ? o.is_host : o.node_rank == 0;
    bind_host = is_numeric(rdzv_host) ? rdzv_host : "0.0.0.0";
  } else {
    if (!o.have_endpoint) {
      fprintf(stderr, "ddprun: --rdzv-endpoint HOST[:PORT] is needed for a "
                      "job of more than one node (or use --standalone)\n");
      goto out;
    }
    if (o.master_port >= 0)
      master_port = (uint16_t)o.master_port;
    host_it = o.is_host == 1 || (o.is_host < 0 && is_local_address(rdzv_host));
    bind_host = is_numeric(rdzv_host) ? rdzv_host : "0.0.0.0";
  }
  if (master_port != 0 && (o.rdzv_backend != DR_RDZV_STATIC || o.node_rank == 0) &&
      !port_is_free(master_port)) {
    fprintf(stderr, "ddprun: --master-port %u is already in use on this host; "
                    "choose another port or leave it out to get a free one\n",
            master_port);
    goto out;
  }

  if (host_it) {
    hosted = calloc(1, sizeof(*hosted));
    if (hosted == NULL)
      goto out;
    dr_server_config_t *c = &hosted->cfg;
    job_server_config(&o, secret, secret_len, bind_host, rdzv_port, c);
    c->failover = !o.standalone;
    rc = dr_hosted_start(hosted);
    if (rc == UV_EADDRINUSE && !o.standalone && o.is_host != 1) {
      /* Another ddprun on this host serves the endpoint: join it. */
      free(hosted);
      hosted = NULL;
    } else if (rc != 0) {
      fprintf(stderr, "ddprun: cannot host the rendezvous server: %s\n",
              hosted->err);
      free(hosted);
      hosted = NULL;
      goto out;
    } else {
      rdzv_port = hosted->port;
      DR_DEBUG("hosting the rendezvous server on %s:%u", bind_host, rdzv_port);
      if (hosted->metrics_port != 0)
        DR_INFO("serving metrics on http://%s:%u/metrics and /healthz",
                bind_host, hosted->metrics_port);
    }
  }

  if (hosted == NULL && !o.standalone && o.max_nodes >= 3) {
    /* A standby server: the rendezvous outlives its host (hosted.h). */
    standby = calloc(1, sizeof(*standby));
    if (standby == NULL)
      goto out;
    dr_server_config_t *c = &standby->cfg;
    /* The endpoint's port where it is free (another host's, usually), so
     * that `ddprun status` and /metrics find the job's server at the same
     * port of the node that takes it over; else any port. */
    job_server_config(&o, secret, secret_len, "0.0.0.0", rdzv_port, c);
    c->failover = 1;
    c->standby = 1;
    int src = dr_hosted_start(standby);
    if (src == UV_EADDRINUSE && c->port != 0) {
      c->port = 0;
      src = dr_hosted_start(standby);
    }
    if (src != 0) {
      DR_WARN("no standby rendezvous server on this node (%s): the job "
              "cannot move its rendezvous here if its server is lost",
              standby->err);
      free(standby);
      standby = NULL;
    }
  }

  static dr_agent_opts_t ao; /* two stream tables: off the stack */
  dr_options_agent(&o, &ao);
  dr_agent_config_t ac;
  memset(&ac, 0, sizeof(ac));
  ac.opts = &ao;
  ac.server_host = rdzv_host;
  ac.server_port = rdzv_port;
  ac.nproc = nproc;
  ac.prog_argv = (const char *const *)exec_argv;
  ac.secret = secret;
  ac.secret_len = secret_len;
  ac.master_port_fd = -1;
  ac.master_port = master_port;
  ac.hostname = hostname;
  ac.watchdog_fd = watchdog_fd;
  ac.watchdog_pid = watchdog_pid;
  ac.server_in_process = hosted != NULL;
  if (standby != NULL) {
    ac.standby_port = standby->port;
    ac.takeover = dr_hosted_takeover;
    ac.takeover_arg = standby;
  }
  watchdog_fd = -1; /* the agent stops it */
  code = dr_agent_run(&ac);

out:
  dr_watchdog_stop(&watchdog_fd, watchdog_pid);
  if (hosted != NULL) {
    dr_hosted_stop(hosted);
    free(hosted);
  }
  if (standby != NULL) {
    dr_hosted_stop(standby);
    free(standby);
  }
  if (secret != NULL)
    dr_auth_secret_free(&secret, secret_len);
  free(path);
  free(exec_argv);
  dr_options_free(&o);
  return code;
}
