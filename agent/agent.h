/* The per-node agent: joins the rendezvous, spawns one worker per local
 * rank with torchrun's environment contract (docs/ddprun.md, "The
 * worker's environment"; env.c), forwards their output, watches them, and
 * follows the server's orders (restart into the next generation, or
 * stop). Runs on its own libuv loop in the calling thread.
 */
#ifndef DR_AGENT_H
#define DR_AGENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bind.h"
#include "wire.h"

/* Per local rank stream choice, as torchrun's --redirects / --tee:
 * bit 1 = stdout, bit 2 = stderr. */
#define DR_STD_NONE 0u
#define DR_STD_OUT 1u
#define DR_STD_ERR 2u
#define DR_STD_ALL 3u

typedef struct {
  /* Which streams; default_mask applies to local ranks not in per_rank.
   * per_rank_set[i] says per_rank[i] was given. */
  uint8_t default_mask;
  uint8_t per_rank[DR_MAX_LOCAL];
  uint8_t per_rank_set[DR_MAX_LOCAL];
} dr_std_spec_t;

/* The mask of streams for local rank lr in a redirects/tee spec: its own
 * entry when one was given, else default_mask. */
static inline uint8_t dr_std_spec_get(const dr_std_spec_t *s, uint32_t lr) {
  if (lr < DR_MAX_LOCAL && s->per_rank_set[lr])
    return s->per_rank[lr];
  return s->default_mask;
}

/* --hang-timeout auto (the default): see hang.c. */
#define DR_HANG_AUTO UINT32_MAX

/* What the agent takes of ddprun's settings (the launcher fills it from
 * its command line). Strings are borrowed for the agent's run. */
typedef struct {
  const char *rdzv_id;            /* the job's run id */
  uint32_t max_restarts;
  uint32_t min_nodes, max_nodes;  /* --nnodes MIN:MAX, handed to workers
                                     (DDPRUN_MIN_NNODES, _MAX_); 0: unsaid */
  int64_t node_rank;              /* requested node rank, -1 = any */
  const char *local_addr;         /* address workers reach this node at */
  uint32_t join_timeout_ms, heartbeat_timeout_ms;
  uint32_t hang_timeout_ms;       /* 0 = off; DR_HANG_AUTO: the default
                                     rule of hang.c */
  uint32_t stop_grace_ms, signal_hold_ms;
  const char *role;               /* ROLE_NAME */
  const char *log_dir;            /* --log-dir, or NULL */
  dr_std_spec_t redirects, tee;   /* --redirects, --tee */
  const char *local_ranks_filter; /* "0,2", or NULL for all */
  const char *log_prefix_template;
  const char *signals_to_handle;  /* "SIGTERM,SIGINT,...", NULL = default */
  const char *secret_file;        /* handed to workers, or NULL */
  const char *ckpt_dir;           /* --ckpt-dir, or NULL: no checkpoint
                                     plane (agent_ckpt.c) */
  uint32_t ckpt_replicas;         /* copies of each new checkpoint */
  uint64_t ckpt_rate;             /* bytes/s of the copies, 0: no cap */
  uint32_t ckpt_keep;             /* checkpoints kept per origin, and
                                     in ckpt_persist */
  const char *ckpt_persist;       /* --ckpt-persist, or NULL: no persist
                                     tier (agent_persist.c) */
  uint32_t ckpt_persist_every_ms; /* the least time between two copies */
  dr_bind_opts_t bind;
} dr_agent_opts_t;

struct dr_agent_takeover;

typedef struct {
  const dr_agent_opts_t *opts;
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
  /* The rendezvous outlives its host (agent_failover.c): the port of this
   * ddprun's standby server (0: none), and how the agent makes it the
   * job's server (0, or a negative errno). */
  uint16_t standby_port;
  int (*takeover)(void *arg, const struct dr_agent_takeover *t);
  void *takeover_arg;
} dr_agent_config_t;

/* What a standby server takes the job over with: what this node knows of
 * the generation its workers ran (its ASSIGN) and who was lost. */
typedef struct dr_agent_takeover {
  uint64_t term;            /* the new server's: the ASSIGN's + 1 */
  uint64_t gen;
  uint32_t restarts_used, nnodes, world;
  uint8_t token[DR_RESUME_TOKEN_LEN];
  uint32_t lost_node;       /* the node that hosted the lost server */
  const char *lost_host;    /* its endpoint's host, as configured */
  const char *self_host;    /* this node's host name */
} dr_agent_takeover_t;

/* Runs the agent until the job ends or a signal stops it. Returns the exit
 * status ddprun should exit with: 0 success, 2 configuration error, the
 * root cause's code (128+signal for a signal), 3 lost rendezvous. */
int dr_agent_run(const dr_agent_config_t *cfg);

/* Blocks the signals that stop ddprun (INT, TERM, HUP, QUIT) and those it
 * holds for its workers (USR1, USR2) in the calling thread (first thing in
 * main, before any thread exists, so that the in-process server's thread
 * never takes them): one that arrives while ddprun starts waits for
 * dr_agent_run, which unblocks them once its handlers are in place,
 * instead of killing ddprun. From then until ddprun exits they are
 * handled, and on the way out ignored: ddprun ends with its job's exit
 * code, never by a signal sent while it stops. */
void dr_agent_hold_early_signals(void);
/* Undoes dr_agent_hold_early_signals() for a subcommand that runs no
 * agent (status, diagnose, plan): Ctrl-C ends it as usual. */
void dr_agent_release_early_signals(void);

/* Finds prog on PATH (or takes it as is when it has a '/'), so that a
 * missing program is reported before anything starts: 0 and a malloc'd
 * path, or -ENOENT / -EACCES. */
int dr_resolve_exec(const char *prog, char **path);

#endif /* DR_AGENT_H */
