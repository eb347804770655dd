/* rdzv_scale: how long one ddprun-rdzv takes to assemble a round of N agents.
 *
 *   rdzv_scale --agents N [--nproc-per-node 8] [--procs P] [--server PATH]
 *              [--timeout S] [--window W] [--env-bytes 2048]
 *
 * The parent starts the server and forks P simulator processes. Each opens
 * its share of the N agent connections (real TCP, non-blocking, epoll),
 * speaks the real protocol (HELLO, WELCOME, JOIN, ASSIGN; each JOIN with an
 * environment summary of --env-bytes, as an agent's of 8 GPUs is about)
 * and reports to the
 * parent through a pipe: its first connect() and last ASSIGN times
 * (CLOCK_MONOTONIC, shared by all processes), its counters, and the node
 * rank each of its agents was given. The parent checks that the node ranks
 * are a permutation of 0..N-1 and prints one line:
 *
 *   rdzv_scale agents=N ranks=N*8 procs=P seconds=X assigns=N ok=1
 *
 * seconds runs from the first connect() of any simulator to the last ASSIGN
 * received by any. Exit status 0 on success, 1 on a failed or timed-out
 * run, 2 on bad usage.
 */
#include "bench_cli.h"
#include "bench_server.h"
#include "rdzv_sim.h"

#include "errors.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define CONNS_PER_PROC 2000u
/* Connections started but not yet welcomed, summed over all simulators
 * (--window sets it per simulator). Kept under the server's listen backlog
 * (4096, and net.core.somaxconn) so that no SYN is dropped and left to the
 * kernel's one-second retransmission. */
#define TOTAL_WINDOW 2048u
#define SERVER_START_NS 10000000000LL
/* What the parent waits beyond the deadline for simulators to report. */
#define REPORT_GRACE_NS 5000000000LL

typedef struct {
  rdzv_sim_opts_t sim;
  uint32_t procs;
  double timeout_s;
  char server[PATH_MAX];
} opts_t;

typedef struct {
  pid_t pid;
  int fd; /* report pipe, -1 once complete or closed */
  uint32_t lo, n;
  size_t got, want;
  uint8_t *buf; /* rdzv_sim_report_t then n node ranks */
} child_t;

static const char USAGE[] =
    "usage: rdzv_scale --agents N [--nproc-per-node 8] [--procs P] "
    "[--server PATH]\n"
    "                  [--timeout S] [--window W] [--env-bytes 2048]\n";

/* bench_cli_parse's results. */
static int parse_args(int argc, char **argv, opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->sim.nproc = 8;
  o->sim.env_bytes = 2048;
  o->timeout_s = 60;
  const bench_opt_t opts[] = {
      {"agents", BENCH_OPT_U32, &o->sim.n_agents, .max = UINT32_MAX},
      {"nproc-per-node", BENCH_OPT_U32, &o->sim.nproc, .max = UINT32_MAX},
      {"procs", BENCH_OPT_U32, &o->procs, .max = UINT32_MAX},
      {"server", BENCH_OPT_PATH, o->server, .program = "ddprun-rdzv"},
      {"timeout", BENCH_OPT_SECONDS, &o->timeout_s, .max = INFINITY},
      {"window", BENCH_OPT_U32, &o->sim.window, .max = UINT32_MAX},
      {"env-bytes", BENCH_OPT_U32, &o->sim.env_bytes,
       .max = DR_ENV_SUMMARY_MAX}};
  int rc = bench_cli_parse("rdzv_scale", argc, argv, opts, 7);
  if (rc != 0)
    return rc;
  rdzv_sim_opts_t *sim = &o->sim;
  if (sim->n_agents == 0 || (uint64_t)sim->n_agents * sim->nproc > UINT32_MAX)
    return BENCH_CLI_USAGE;
  if (o->procs == 0) {
    o->procs = (sim->n_agents + CONNS_PER_PROC - 1) / CONNS_PER_PROC;
    if (o->procs < 2)
      o->procs = 2;
  }
  if (o->procs > sim->n_agents)
    o->procs = sim->n_agents;
  if (sim->window == 0)
    sim->window =
        TOTAL_WINDOW / o->procs > 16 ? TOTAL_WINDOW / o->procs : 16;
  return 0;
}

/* Reads whatever the report pipes hold until every child has reported or
 * closed its pipe, or until deadline_ns. Returns 0, or -ETIMEDOUT/-EINTR. */
static int collect_reports(child_t *ch, uint32_t procs, int64_t deadline_ns) {
  struct pollfd *pfd = calloc(procs, sizeof(*pfd));
  uint32_t *idx = calloc(procs, sizeof(*idx));
  int rc = 0;
  if (pfd == NULL || idx == NULL) {
    free(pfd);
    free(idx);
    return -ENOMEM;
  }
  for (;;) {
    nfds_t n = 0;
    for (uint32_t k = 0; k < procs; k++)
      if (ch[k].fd >= 0) {
        pfd[n].fd = ch[k].fd;
        pfd[n].events = POLLIN;
        idx[n++] = k;
      }
    if (n == 0)
      break;
    if (bench_stop_requested) {
      rc = -EINTR;
      break;
    }
    int64_t left = deadline_ns - bench_now_ns();
    if (left <= 0) {
      rc = -ETIMEDOUT;
      break;
    }
    int r = poll(pfd, n, (int)(left / 1000000) + 1);
    if (r < 0 && errno != EINTR) {
      rc = -errno;
      break;
    }
    for (nfds_t j = 0; r > 0 && j < n; j++) {
      if (pfd[j].revents == 0)
        continue;
      child_t *c = &ch[idx[j]];
      ssize_t got = read(c->fd, c->buf + c->got, c->want - c->got);
      if (got < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (got > 0)
        c->got += (size_t)got;
      if (got <= 0 || c->got == c->want) {
        close(c->fd);
        c->fd = -1;
      }
    }
  }
  free(pfd);
  free(idx);
  return rc;
}

static void reap_children(child_t *ch, uint32_t procs, int kill_first) {
  for (uint32_t k = 0; k < procs; k++)
    if (ch[k].pid > 0 && kill_first)
      kill(ch[k].pid, SIGKILL);
  for (uint32_t k = 0; k < procs; k++) {
    if (ch[k].pid <= 0)
      continue;
    int status;
    pid_t got;
    while ((got = waitpid(ch[k].pid, &status, 0)) < 0 && errno == EINTR)
      ;
    if (got == ch[k].pid && !kill_first && WIFSIGNALED(status)) {
      char how[64];
      bench_describe_status(status, how, sizeof(how));
      fprintf(stderr, "rdzv_scale: simulator %u (pid %d) %s\n", k,
              (int)ch[k].pid, how);
    }
    ch[k].pid = 0;
  }
}

int main(int argc, char **argv) {
  opts_t o;
  bench_server_t srv;
  char err[512];
  int go[2] = {-1, -1}, quit[2] = {-1, -1};
  int exit_code = 1;
  child_t *ch = NULL;
  uint8_t *seen = NULL;

  memset(&srv, 0, sizeof(srv));
  int rc = parse_args(argc, argv, &o);
  if (rc != 0)
    return bench_cli_exit_status(rc, USAGE);

  int64_t t0 = bench_now_ns();
  int64_t deadline = t0 + (int64_t)(o.timeout_s * 1e9);
  char nnodes[16];
  snprintf(nnodes, sizeof(nnodes), "%u", o.sim.n_agents);
  const char *extra[] = {"--nnodes", nnodes, "--heartbeat-timeout", "120",
                         NULL};
  int64_t start_deadline =
      t0 + SERVER_START_NS < deadline ? t0 + SERVER_START_NS : deadline;
  if (bench_server_open(&srv, "rdzv_scale", o.server, extra,
                        start_deadline) != 0)
    return 1;

  ch = calloc(o.procs, sizeof(*ch));
  seen = calloc(o.sim.n_agents, 1);
  if (ch == NULL || seen == NULL || pipe2(go, O_CLOEXEC) != 0 ||
      pipe2(quit, O_CLOEXEC) != 0) {
    fprintf(stderr, "rdzv_scale: setting up simulators failed (%d: %s)\n",
            errno, strerror(errno));
    goto out;
  }
  for (uint32_t k = 0; k < o.procs; k++)
    ch[k].fd = -1;

  pid_t parent = getpid();
  for (uint32_t k = 0; k < o.procs; k++) {
    child_t *c = &ch[k];
    int rep[2];
    c->lo = (uint32_t)((uint64_t)o.sim.n_agents * k / o.procs);
    c->n = (uint32_t)((uint64_t)o.sim.n_agents * (k + 1) / o.procs) - c->lo;
    c->want = sizeof(rdzv_sim_report_t) + (size_t)c->n * sizeof(uint32_t);
    c->buf = calloc(1, c->want);
    if (c->buf == NULL || pipe2(rep, O_CLOEXEC) != 0) {
      fprintf(stderr, "rdzv_scale: setting up simulator %u failed\n", k);
      goto out;
    }
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "rdzv_scale: fork() of simulator %u failed (%d: %s)\n",
              k, errno, strerror(errno));
      close(rep[0]);
      close(rep[1]);
      goto out;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      /* Only the parent may hold the write ends, or EOF never comes. */
      close(go[1]);
      close(quit[1]);
      close(rep[0]);
      for (uint32_t j = 0; j < k; j++)
        close(ch[j].fd);
      _exit(rdzv_sim_main(&o.sim, srv.port, c->lo, c->n, deadline, go[0],
                          quit[0], rep[1]));
    }
    close(rep[1]);
    c->pid = pid;
    c->fd = rep[0];
  }
  close(go[1]);
  go[1] = -1;

  rc = collect_reports(ch, o.procs, deadline + REPORT_GRACE_NS);
  if (rc == -EINTR) {
    fprintf(stderr, "rdzv_scale: interrupted\n");
    goto out;
  }

  /* Stop the server before the simulators drop their connections, so it
   * does not mistake the end of the benchmark for failing nodes. */
  rc = bench_server_stop(&srv, 2000, err, sizeof(err));
  if (rc != 0)
    fprintf(stderr, "rdzv_scale: %s\n", err);
  int failed = rc != 0;

  uint64_t assigned = 0, started = 0, connected = 0, welcomed = 0;
  int64_t first = 0, last = 0;
  int timed_out = 0, have_gen = 0;
  uint64_t gen = 0;
  for (uint32_t k = 0; k < o.procs; k++) {
    child_t *c = &ch[k];
    const rdzv_sim_report_t *r = (const rdzv_sim_report_t *)c->buf;
    if (c->got < sizeof(rdzv_sim_report_t)) {
      fprintf(stderr, "rdzv_scale: simulator %u (agents %u..%u) sent no "
                      "report\n",
              k, c->lo, c->lo + c->n - 1);
      failed = 1;
      continue;
    }
    started += r->n_started;
    connected += r->n_connected;
    welcomed += r->n_welcomed;
    assigned += r->n_assigned;
    if (r->first_connect_ns != 0 && (first == 0 || r->first_connect_ns < first))
      first = r->first_connect_ns;
    if (r->last_assign_ns > last)
      last = r->last_assign_ns;
    if (r->status == RDZV_SIM_TIMEOUT)
      timed_out = 1;
    if (r->status != RDZV_SIM_OK) {
      fprintf(stderr, "rdzv_scale: simulator %u (agents %u..%u): %.*s\n", k,
              c->lo, c->lo + c->n - 1, (int)sizeof(r->msg), r->msg);
      failed = 1;
    }
    if (r->n_assigned > 0) {
      if (have_gen && r->gen != gen) {
        fprintf(stderr, "rdzv_scale: simulators saw generations %llu and "
                        "%llu\n",
                (unsigned long long)gen, (unsigned long long)r->gen);
        failed = 1;
      }
      gen = r->gen;
      have_gen = 1;
    }
    if (c->got < c->want) {
      failed = 1;
      continue;
    }
    const uint32_t *ranks = (const uint32_t *)(c->buf + sizeof(*r));
    for (uint32_t i = 0; i < c->n; i++) {
      if (ranks[i] == RDZV_SIM_NO_RANK)
        continue;
      if (ranks[i] >= o.sim.n_agents || seen[ranks[i]]) {
        fprintf(stderr, "rdzv_scale: node rank %u given twice (again to "
                        "agent %u)\n",
                ranks[i], c->lo + i);
        failed = 1;
        continue;
      }
      seen[ranks[i]] = 1;
    }
  }
  if (!failed && assigned != o.sim.n_agents)
    failed = 1;

  double seconds = 0;
  if (first != 0)
    seconds = (double)((last > first ? last : bench_now_ns()) - first) / 1e9;
  if (timed_out || rc == -ETIMEDOUT)
    fprintf(stderr,
            "rdzv_scale: timed out after %.0f s: started=%llu connected=%llu "
            "welcomed=%llu assigned=%llu of %u agents\n",
            o.timeout_s, (unsigned long long)started,
            (unsigned long long)connected, (unsigned long long)welcomed,
            (unsigned long long)assigned, o.sim.n_agents);
  printf("rdzv_scale agents=%u ranks=%llu procs=%u seconds=%.3f assigns=%llu "
         "ok=%d\n",
         o.sim.n_agents, (unsigned long long)o.sim.n_agents * o.sim.nproc,
         o.procs, seconds, (unsigned long long)assigned, failed ? 0 : 1);
  exit_code = failed ? 1 : 0;

out:
  /* Every path: the server first, then the simulators. */
  bench_server_stop(&srv, 2000, err, sizeof(err));
  if (go[1] >= 0)
    close(go[1]);
  if (quit[1] >= 0)
    close(quit[1]);
  if (ch != NULL) {
    reap_children(ch, o.procs, exit_code != 0);
    for (uint32_t k = 0; k < o.procs; k++) {
      if (ch[k].fd >= 0)
        close(ch[k].fd);
      free(ch[k].buf);
    }
  }
  if (go[0] >= 0)
    close(go[0]);
  if (quit[0] >= 0)
    close(quit[0]);
  free(ch);
  free(seen);
  return exit_code;
}
