/* The per-node agent: joins the rendezvous, spawns one worker per local
 * rank with torchrun's environment contract (README.md, "The worker's
 * environment"; env.c), forwards their output, watches them, and follows
 * the server's orders (restart into the next generation, or stop). Runs on
 * its own libuv loop in the calling thread.
 */
#ifndef DR_AGENT_H
#define DR_AGENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "options.h"

typedef struct {
  const dr_options_t *opts;
  const char *server_host;   /* rendezvous endpoint to connect to */
  uint16_t server_port;
  uint32_t nproc;            /* workers on this node (resolved) */
  const char *const *prog_argv; /* what to exec: resolved interpreter + args */
  const uint8_t *secret;     /* borrowed; NULL = none */
  size_t secret_len;
  int master_port_fd;        /* a socket holding the offered port, or -1 */
  uint16_t master_port;      /* offered MASTER_PORT (0 = none) */
  const char *hostname;      /* this node's name */
  int watchdog_fd;           /* dr_watchdog_start()'s pipe, or -1 */
  pid_t watchdog_pid;
  int server_in_process;     /* this ddprun hosts the server: no reconnect */
} dr_agent_config_t;

/* Runs the agent until the job ends or a signal stops it. Returns the exit
 * status ddprun should exit with: 0 success, 2 configuration error, the
 * root cause's code (128+signal for a signal), 3 lost rendezvous. */
int dr_agent_run(const dr_agent_config_t *cfg);

/* Blocks SIGUSR1 and SIGUSR2 in the calling thread (first thing in main,
 * before any thread exists): one that arrives while ddprun starts waits
 * for dr_agent_run, which unblocks them once its handlers are in place,
 * instead of killing ddprun. */
void dr_agent_hold_early_signals(void);

/* Finds prog on PATH (or takes it as is when it has a '/'), so that a
 * missing program is reported before anything starts: 0 and a malloc'd
 * path, or -ENOENT / -EACCES. */
int dr_resolve_exec(const char *prog, char **path);

#endif /* DR_AGENT_H */
