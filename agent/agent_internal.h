/* Internals of the agent: the asynchronous rendezvous connection
 * (agent_rdzv.c), spawning (spawn.c), the worker environment (env.c) and
 * the failure summary (summary.c), driven by agent.c. Loop thread only. */
#ifndef DR_AGENT_INTERNAL_H
#define DR_AGENT_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "agent.h"
#include "bind.h"
#include "client.h"
#include "logfwd.h"
#include "nvml.h"
#include "pgstat.h"
#include "session.h"
#include "wire.h"

/* ---- agent_rdzv.c: the connection to the rendezvous server ------------- */

typedef struct dr_arz dr_arz_t;

typedef struct {
  void (*on_ready)(void *arg);                  /* handshake done */
  /* An assignment, a resume's answer, a refusal, an order or a heartbeat.
   * ev->asg (ASSIGNED) is the callee's to keep or free; ev->text is
   * borrowed until it returns. */
  void (*on_event)(void *arg, const dr_sess_event_t *ev);
  /* The connection failed or closed; code and a one-line reason. Called
   * once; the connection is unusable afterwards. */
  void (*on_lost)(void *arg, int code, const char *why);
  void *arg;
} dr_arz_cb_t;

typedef struct {
  const char *host;
  uint16_t port;
  const char *run_id;
  const char *client_host;
  const uint8_t *secret;  /* borrowed until on_ready or on_lost */
  size_t secret_len;
  uint32_t connect_timeout_ms; /* keep retrying refused connects, and a
                                  name that does not resolve, this long */
  uint32_t user_timeout_ms;    /* TCP_USER_TIMEOUT: data unacknowledged
                                  this long ends the connection; 0 = the
                                  kernel's default */
  dr_limits_t limits;
  int64_t clock_skew_us;       /* added to this side's clock stamps: fault
                                  injection (DDPRUN_TEST_CLOCK_SKEW_MS) */
} dr_arz_opts_t;

/* Starts connecting. Returns 0 (callbacks follow) or a negative code (no
 * callback will be called). */
int dr_arz_start(uv_loop_t *loop, const dr_arz_opts_t *o, const dr_arz_cb_t *cb,
                 dr_arz_t **out);

/* Sends the frame in b (copied). Errors surface through on_lost. */
void dr_arz_send(dr_arz_t *a, const dr_buf_t *b);
/* JOIN and RESUME through the session, which matches their answers: 0, or
 * a code when the connection is not ready. */
int dr_arz_join(dr_arz_t *a, const dr_join_t *j);
int dr_arz_resume(dr_arz_t *a, const dr_resume_t *q);
/* A HEARTBEAT, with the clock stamp the server measures this host by. */
int dr_arz_heartbeat(dr_arz_t *a, uint64_t gen);

/* This side's address of the connection (the one the server sees): 0 or
 * a libuv error. */
int dr_arz_local_addr(const dr_arz_t *a, struct sockaddr_storage *out);

/* 1 once a TCP connection has been made; the last connect() error. */
int dr_arz_connected(const dr_arz_t *a);
int dr_arz_last_error(const dr_arz_t *a);
/* Why the last attempt could not resolve the endpoint's name; NULL when
 * it could. */
const char *dr_arz_resolve_error(const dr_arz_t *a);

/* Milliseconds since the server was last heard from. */
uint64_t dr_arz_idle_ms(const dr_arz_t *a);
/* A new bound on unacknowledged data (TCP_USER_TIMEOUT), from now on. */
void dr_arz_set_user_timeout(dr_arz_t *a, uint32_t ms);

/* Closes; no callback is called after this. Sets *a to NULL. */
void dr_arz_close(dr_arz_t **a);

/* ---- spawn.c ----------------------------------------------------------- */

typedef struct {
  const char *path;          /* resolved executable */
  char *const *argv;
  char *const *envp;
  const dr_binding_t *bind;
} dr_spawn_req_t;

/* Which step of starting a worker failed. Only EXEC (a program that
 * cannot be executed) and BIND (CPUs it may not have) are configuration
 * errors; the others (a fork at the process or memory limit) may pass. */
enum {
  DR_SPAWN_SETUP = 1,
  DR_SPAWN_BIND = 2,
  DR_SPAWN_EXEC = 3,
  DR_SPAWN_FORK = 4
};

/* Forks and execs one worker in a new process group, with a parent-death
 * signal (SIGKILL), stdin from /dev/null and stdout/stderr into new pipes.
 * Returns 0 with *pid and the parent's pipe ends (non-blocking,
 * close-on-exec), or -errno of the failed step (*stage), reported by the
 * child through a close-on-exec pipe before this returns. */
int dr_spawn(const dr_spawn_req_t *r, pid_t *pid, int *out_fd, int *err_fd,
             int *stage);


/* ---- env.c ------------------------------------------------------------- */

typedef struct {
  const dr_agent_opts_t *o;
  const char *run_id;
  uint32_t rank, local_rank, local_world, world, node_rank, nnodes;
  const char *master_addr;
  uint32_t master_port;
  uint32_t restart_count, max_restarts;
  uint64_t gen;
  const char *rdzv_host;
  uint16_t rdzv_port;
  const uint8_t *bootstrap;
  size_t bootstrap_len;
  const char *error_file;
  const char *progress_file;
  const char *shm_prefix;        /* DDPRUN_SHM_PREFIX */
  const char *pyboot;            /* first on PYTHONPATH; NULL/"": none */
  const dr_binding_t *bind;
  int64_t clock_offset_us;       /* the assignment's; see dr_assign_t */
  uint64_t clock_uncertainty_us; /* DR_NONE: not measured */
  uint64_t ckpt_step;            /* DDPRUN_CKPT_STEP with --ckpt-dir;
                                    DR_NONE: absent */
} dr_env_t;

/* Builds a worker's environment: this process's environment, minus the
 * variables set here, plus the contract (RANK ... OMP_NUM_THREADS,
 * DDPRUN_*). Returns a NULL-terminated malloc'd array (one block; free()
 * it) or NULL when out of memory. */
char **dr_env_build(const dr_env_t *e);

/* Where a rank answers the agent's request for its flight recorder
 * (DDPRUN_FR_DUMP): fr_trace.json beside error_file; "" when error_file
 * has no directory. */
void dr_env_fr_dump_path(const char *error_file, char *out, size_t n);

/* Where NCCL's watchdog writes a rank's flight recorder on a collective's
 * timeout: the prefix (the rank's number follows) that the workers get,
 * TORCH_FR_DUMP_TEMP_FILE as set by the user or (with --log-dir) by
 * dr_env_build beside error_file, then TORCH_NCCL_DEBUG_INFO_TEMP_FILE,
 * then torch's default. */
void dr_env_nccl_dump_prefix(const dr_agent_opts_t *o, const char *error_file,
                             char *out, size_t n);

/* ---- summary.c ---------------------------------------------------------- */

typedef struct {
  double time;        /* wall clock, seconds since the epoch */
  uint32_t node_rank, rank, local_rank;
  pid_t pid;
  int exit_code;      /* -1 when killed by a signal */
  int signal;
  int core_dumped;
  dr_fail_kind_t kind;
  char message[2048]; /* the error file's message or the last stderr lines */
  int oom_killed;     /* the SIGKILL was the kernel's OOM killer's (or
                         the exit code 137 passed a SIGKILL of it on) */
  uint64_t rss_bytes, rss_peak_bytes; /* its group's resident memory at
                                         the last sample and at most;
                                         DR_NONE: unknown */
} dr_failure_rec_t;

/* "exited with code 1" / "killed by signal SIGSEGV (core dumped)" /
 * "killed by the OOM killer (SIGKILL; its last RSS 12.3 GiB, peak 12.9
 * GiB)" / "exited with code 137 (the OOM killer; its last RSS ...)". Fits
 * 96 bytes. */
const char *dr_failure_what(const dr_failure_rec_t *f, char *out, size_t n);
/* "the OOM killer killed it (its last RSS 12.3 GiB, peak 12.9 GiB)": the
 * first line of an OOM kill's message to the server, whose account says
 * already how the rank ended. */
const char *dr_failure_oom_line(const dr_failure_rec_t *f, char *out,
                                size_t n);

/* Reads the message from a worker's error file (torchelastic's JSON, or
 * plain text): 0 and out filled, or -errno. */
int dr_error_file_read(const char *path, char *out, size_t n);

/* Prints the failure summary to stderr: the root cause first (local, or the
 * server's reason when it happened elsewhere), then the other failures. */
void dr_summary_print(int exit_code, const char *host, const char *server_reason,
                      const dr_failure_rec_t *recs, size_t n_recs);

/* ---- agent.c and agent_workers.c -------------------------------------- */

typedef struct dr_agent dr_agent_t;

typedef struct {
  dr_agent_t *ag;
  uint32_t local_rank, rank;
  pid_t pid;          /* 0 before spawn */
  int alive;          /* the worker's own process has not been reaped */
  int group_gone;     /* nothing is left in its process group */
  int exit_code;      /* valid once !alive; -1 for a signal */
  int signal, core_dumped;
  uv_pipe_t *pipe[2]; /* the worker's stdout, stderr; freed on close */
  int pipe_open[2];
  dr_logfwd_t *fwd[2];
  int file_fd[2];     /* --log-dir files, or -1 */
  char error_file[1024];
  uint64_t progress_seq;   /* last progress report seen, 0 = none yet */
  uint64_t progress_step;
  uint64_t progress_ms;    /* loop time when it last changed */
  uint64_t start_ns;       /* uv_hrtime() at its start */
  uint64_t held;           /* signals (bit sig-1) waiting until it handles
                              them (sighold.c) */
  uint64_t held_said;      /* those of held already said to be held */
  uint64_t held_blocked;   /* those of held seen blocked (and neither
                              caught nor ignored) at every look since
                              held_blocked_ns (uv_hrtime()) */
  uint64_t held_blocked_ns;
  /* Its progress as `ddprun status` shows it (agent_ranks.c): the
   * slot's last reading, when its step last changed (loop ms, 0: never),
   * and its step rate (steps/s, < 0 unknown), smoothed over samples
   * half a second or more apart. */
  uint64_t st_seq, st_step, st_change_ms;
  uint64_t st_rate_ms, st_rate_step;
  double st_rate;
  /* Its health (agent_ranks.c), sampled on the heartbeat: its process
   * group's memory and CPU use since pid hl_pid started (0: not yet
   * sampled); the OOM killer's count at the last sample that found the
   * group alive (hl_oom_known: 0 none yet), against which a SIGKILL that
   * the agent did not send is judged; its RSS and GPU memory as last
   * reported (RANKS goes again when one moves by a fifth, or becomes
   * known or unknown). */
  pid_t hl_pid;
  dr_pgstat_use_t hl_use;
  uint64_t hl_oom_base;
  int hl_oom_known;
  uint32_t hl_members_id;  /* its group's members at the last sample */
  uint64_t hl_rss_sent, hl_gpu_sent;
  dr_nvml_use_t hl_gpu;  /* its GPU use at the last sample */
} dr_worker_t;

typedef enum {
  DR_AG_JOINING,   /* JOIN sent, waiting for ASSIGN */
  DR_AG_RUNNING,   /* workers running */
  DR_AG_STOPPING,  /* local workers being stopped */
  DR_AG_WAITING,   /* no workers; waiting for the server's order */
  DR_AG_EXITING
} dr_ag_state_t;

typedef enum {
  DR_NEXT_WAIT = 0,      /* wait for the server's order */
  DR_NEXT_REJOIN = 1,    /* join the next round */
  DR_NEXT_EXIT = 2
} dr_ag_next_t;

/* Why ddprun exits, strongest last: a cause of its own (the server lost or
 * never reached, a refusal, a start failure), the server's STOP (the job's
 * root cause), a terminating signal ddprun received (128+signal). */
typedef enum {
  DR_END_NONE,
  DR_END_LOCAL,
  DR_END_SERVER,
  DR_END_SIGNAL
} dr_end_cause_t;

/* Stopping the local workers, and the end of the agent. */
typedef struct {
  dr_ag_next_t next;    /* what follows once the workers have stopped */
  int sig;              /* the signal this stop sent the workers */
  int killed;           /* SIGKILL sent after the grace */
  int signal;           /* a terminating signal ddprun received, or 0 */
  dr_end_cause_t cause; /* of the exit code below */
  int exit_code;        /* what ddprun exits with; see dr__agent_end() */
} dr_ag_stop_t;

struct dr_agent {
  uv_loop_t loop;
  const dr_agent_config_t *cfg;
  const dr_agent_opts_t *o;
  dr_arz_t *arz;
  dr_ag_state_t state;
  dr_ag_stop_t stop;
  dr_assignment_t asg;
  int have_asg;
  uint32_t nproc, n_alive;
  dr_worker_t *w;
  dr_binding_t *bind;
  int printed_binding;
  char *env_summary;         /* agent_env.c: the node's summary (lines), or
                                NULL; at the head of every rank's files */
  int port_fd;               /* socket holding the offered master port */
  uint16_t port_offer;
  uv_signal_t sigchld;
  uv_signal_t sigs[16];
  int n_sigs;
  uv_timer_t kill_timer, hb_timer, join_timer;
  char server_reason[1200];
  dr_failure_rec_t fails[8];
  size_t n_fails;
  char tmp_root[256];        /* error files when there is no --log-dir */
  char kept_root[256];       /* logs of --redirects/--tee without one */
  int watchdog_fd;
  int spawn_failed;          /* local rank whose start failed, or -1 */
  int spawn_stage;           /* and the DR_SPAWN_* step that failed */
  struct dr_progress *progress;
  char progress_path[300];
  char pyboot_dir[1024];     /* the Python start-up hook (pyboot.h) */
  char shm_prefix[80];       /* the workers' /dev/shm names begin with it:
                                removed when they have exited */
  uv_timer_t hang_timer;
  struct dr_hang *hang;      /* --hang-timeout's watch (hang.c), or NULL */
  int arz_ready;             /* the connection is up and authenticated */
  int reconnecting;          /* connecting again after losing the server */
  /* The server this agent talks to: the endpoint, until the rendezvous
   * moves (agent_failover.c). */
  char srv_host[DR_HOST_MAX + 1];
  uint16_t srv_port;
  /* agent_failover.c: the highest server term seen; the walk over the
   * lost server and the successors (walk_i: the target being tried;
   * walk_dead: bit i set when target i did not answer this cycle); this
   * node's standby took the job over. */
  uint64_t term_seen;
  uint64_t heard_ms;         /* when the lost server was last heard */
  int walking;
  unsigned walk_i;
  uint32_t walk_dead;
  uint64_t walk_since_ms;
  int took_over;
  int nomove_said;           /* said once that the rendezvous cannot move */
  char moved_line[1024];     /* where it moved, for the job's summary */
  char moved_from[DR_HOST_MAX + 16];
  int resume_pending;        /* RESUME sent, no answer yet */
  int silent_warned;         /* said that the server has gone silent */
  uint64_t start_ms;         /* loop time at the start */
  uint64_t lost_ms;          /* when the server was lost */
  uint64_t workers_done_ms;  /* when the last worker of a generation ended */
  char last_loss[1024];      /* the last loss reported, said once */
  unsigned n_same_loss;      /* attempts since that ended the same way */
  uv_timer_t retry_timer;
  uv_timer_t echo_timer;     /* agent_failure.c: the wait after an echo */
  uint64_t echo_gen;         /* ... in this generation */
  struct dr_events *events;  /* --log-dir's events.jsonl, or NULL */
  int64_t clock_skew_us;     /* DDPRUN_TEST_CLOCK_SKEW_MS, see there */
  uv_timer_t hold_timer;     /* polls workers holding signals */
  uint64_t held_next;        /* signals for the next generation's workers */
  /* agent_join.c: the forming round this node waits in, as last said
   * (its ROUND_STATUS, for the join timeout's message too); agent_ranks.c:
   * the RANKS last sent. */
  char round_said[1024];
  uint64_t round_said_ms;
  uint64_t ranks_digest, ranks_sent_ms;
  /* agent_ranks.c: NVML for the ranks' GPU use (tried once; NULL where
   * the node has none), and the OOM killer's count as last read
   * (oom_ns: uv_hrtime() then, 0: never read). */
  struct dr_nvml *nvml;
  int nvml_tried;
  uint64_t oom_kills, oom_ns;
  uint64_t health_ms;        /* loop time of the last sample, 0: none */
  int addr_checked;          /* agent_env_addr.c ran */
  struct dr_ckpt_plane *ckpt; /* --ckpt-dir's (agent_ckpt.c), or NULL */
  struct dr_persist_plane *persist; /* --ckpt-persist's (agent_persist.c),
                                       or NULL */
};

/* agent_ranks.c: the OOM killer's count read now, before workers start:
 * a worker killed before the first sample that sees it is judged
 * against it. */
void dr__agent_oom_mark(dr_agent_t *ag);
/* agent_ranks.c: NVML, opened on first use (DDPRUN_TEST_NVML_LIB, a test
 * hook, names a stand-in library), or NULL without it. */
dr_nvml_t *dr__agent_nvml(dr_agent_t *ag);

/* agent_env.c: reads the node's environment and runs its checks, says
 * each finding; 0, or DR_EXIT_CONFIG's 2 when a setting cannot work (no
 * worker may start). The summary is kept in ag->env_summary. */
int dr__agent_env_read(dr_agent_t *ag);
/* Says the summary (once per agent) on the console. */
void dr__agent_env_say(dr_agent_t *ag);
/* Writes it, each line "ddprun: "-prefixed, to fd (a rank's file). */
void dr__agent_env_write(const dr_agent_t *ag, int fd);
/* What a JOIN says of the node: j->env, the summary's first whole lines
 * within DR_ENV_SUMMARY_MAX, and j->socket_ifname, this process's
 * NCCL_SOCKET_IFNAME (empty when unset), both borrowed from ag and the
 * environment. */
void dr__agent_env_join(const dr_agent_t *ag, dr_join_t *j);

/* agent_env_addr.c: once connected, says when NCCL_SOCKET_IFNAME excludes
 * the interface this node reaches the rendezvous from (a warning; once
 * per agent). */
void dr__agent_env_check_addr(dr_agent_t *ag);

/* agent_workers.c */
int dr__workers_start(dr_agent_t *ag);
/* Signals every worker's process group that still has members. */
void dr__workers_signal(dr_agent_t *ag, int sig);
/* SIGCONT to the worker groups that hold a process stopped by a signal
 * (state T), and to no other (agent_workers.c). */
void dr__workers_wake_stopped(dr_agent_t *ag);
/* 1 when no worker's process group has members left (stragglers a worker
 * started count until they exit). */
int dr__workers_groups_empty(dr_agent_t *ag);
void dr__workers_reap(dr_agent_t *ag);
void dr__workers_drain(dr_worker_t *w);
void dr__workers_close(dr_agent_t *ag);
/* The directory of worker w's files in this attempt, created, and kept
 * after ddprun exits: under --log-dir, else under a new directory in
 * TMPDIR. 0 or a negative code. */
int dr__workers_kept_dir(dr_agent_t *ag, const dr_worker_t *w, char *out,
                         size_t n);
/* sighold.c: forwarding a signal that is not a stop to workers once they
 * catch, ignore or block it, or --signal-hold after their start. */
void dr__sighold_init(dr_agent_t *ag);
void dr__sighold_forward(dr_agent_t *ag, int sig);
/* A worker has just started (pid set): it gets what is held for it. */
void dr__sighold_started(dr_agent_t *ag, dr_worker_t *w);
/* Every worker of a generation has started. */
void dr__sighold_generation_started(dr_agent_t *ag);
void dr__sighold_close(dr_agent_t *ag);

/* agent.c: a worker has exited (alive is 0, its status filled). */
void dr__agent_worker_exited(dr_agent_t *ag, dr_worker_t *w);
/* Stops the local workers with sig (SIGKILL after the grace), then does
 * next; a stronger next (exit over rejoin over wait) wins. */
void dr__agent_stop_local(dr_agent_t *ag, int sig, dr_ag_next_t next);
/* Records code as the exit code when cause outranks the one recorded (the
 * first of equal rank stays). */
void dr__agent_end(dr_agent_t *ag, dr_end_cause_t cause, int code);
/* Ends the agent now with the recorded exit code. */
void dr__agent_finish(dr_agent_t *ag);
/* An assignment while joining (*a is taken over): start the generation's
 * workers, once the round's newest checkpoint is here (agent_ckpt.c). */
void dr__agent_on_assign(dr_agent_t *ag, dr_assignment_t *a);
/* Starts the workers of the generation assigned (state RUNNING, none
 * started yet). */
void dr__agent_spawn(dr_agent_t *ag);

/* hang.c: --hang-timeout's watch of the local workers: progress reports,
 * CPU time and GPU use, the culprit, and every rank's stack. */

/* The watch's verdict: local rank local_rank is hung. kind: DR_FAIL_HANG,
 * or DR_FAIL_HANG_WAIT when the rank is named only because it waited
 * longest (its culprit may be on another node, whose agent names it).
 * message: the verdict and where this node's ranks are, within
 * DR_FAILURE_MSG_MAX bytes. */
typedef struct {
  uint32_t local_rank;
  dr_fail_kind_t kind;
  const char *message;
} dr_hang_verdict_t;

/* Called on the loop with a verdict, borrowed until it returns; the watch
 * has said it and written the stacks, and does nothing else about it. */
typedef void (*dr_hang_verdict_cb)(dr_agent_t *ag, const dr_hang_verdict_t *v);

/* Starts ag->hang_timer when the option is set: 0, or -ENOMEM. */
int dr__hang_start(dr_agent_t *ag, dr_hang_verdict_cb on_verdict);
/* The group is stopped or restarted by the server while some local rank
 * is stalled and its stacks are taken: says where this node's ranks are
 * and keeps their stacks, as a verdict would (the culprit was named on
 * another node). Nothing otherwise. */
void dr__hang_tell(dr_agent_t *ag);
/* After the loop has ended: frees the watch. */
void dr__hang_free(dr_agent_t *ag);

/* agent_failure.c: a failure of a local rank. */
/* The one entry for a local failure (a worker's exit, a start that failed,
 * a hang verdict): records d for the failure summary (its local rank, pid,
 * exit code, signal, core dump, kind and message; the time, node rank and
 * global rank are filled in here), reports it to the server and stops the
 * local workers (nothing more while they are stopping already). Beyond the
 * generation's list of failures, it only stops them. */
void dr__agent_local_failure(dr_agent_t *ag, const dr_failure_rec_t *d);
/* Worker w has exited on its own (a code or a signal): its failure, with
 * its error file's message or its last stderr lines, said first when it
 * starts the stop. */
void dr__agent_worker_failed(dr_agent_t *ag, dr_worker_t *w);
/* The hang watch's verdict (a dr_hang_verdict_cb): a failure with exit
 * code 4, as a worker's own timeout would be. */
void dr__agent_hang_verdict(dr_agent_t *ag, const dr_hang_verdict_t *v);
/* Sends failure record f to the server (the last whole lines of its
 * message within DR_FAILURE_MSG_MAX bytes) and writes its event; again for
 * every record on resuming (agent_resume.c). */
void dr__agent_report_failure(dr_agent_t *ag, const dr_failure_rec_t *f);

/* agent_session.c: the session with the rendezvous server: the
 * connection, its heartbeats, the reconnection. */
/* Connects and starts the heartbeats: 0, or -1 (said on stderr). */
int dr__agent_session_start(dr_agent_t *ag);
/* Sends b (then frees it) when connected; dropped otherwise: whatever the
 * server must know is sent again on resuming. */
void dr__agent_send(dr_agent_t *ag, dr_buf_t *b);
/* Drops the connection at the next turn of the loop and connects again,
 * to srv_host:srv_port (the failover's next place). */
void dr__agent_reconnect_soon(dr_agent_t *ag);
/* The bound on the server's unacknowledged heartbeats: 4 heartbeat
 * timeouts, at least 10 s (a host gone without a FIN), or shorter where
 * the rendezvous can move (dr__failover_user_timeout_ms). */
uint32_t dr__agent_user_timeout_ms(const dr_agent_t *ag);
/* Tells the server this node leaves because ddprun received sig. */
void dr__agent_leave(dr_agent_t *ag, int sig);

/* agent_join.c: joining a round. */
/* Joins the next round: JOIN now, or once the connection is ready, and the
 * join timeout (re)started. */
void dr__agent_send_join(dr_agent_t *ag);
/* Closes the socket that holds the port this node offers as MASTER_PORT,
 * so that its rank 0 can bind it. */
void dr__agent_release_port(dr_agent_t *ag);
/* ag->join_timer's callback: gives up joining, saying why. */
void dr__agent_on_join_timeout(uv_timer_t *t);
/* The forming round's ROUND_STATUS, said while this node joins. */
void dr__agent_on_round_status(dr_agent_t *ag, const dr_round_status_t *st);

/* agent_resume.c: resuming after a reconnection. */
/* RESUME for the generation of ag->asg (resume_pending set once sent). */
void dr__agent_send_resume(dr_agent_t *ag);
/* The server took this node back (resume_pending was set). */
void dr__agent_on_resumed(dr_agent_t *ag);

/* agent_orders.c: the server's messages, as a dr_arz_cb_t's on_event
 * (arg is the agent). */
void dr__agent_on_event(void *arg, const dr_sess_event_t *ev);

/* agent_failover.c. The connection to the server failed with code (a
 * refusal of the protocol, or a connection that never came): 1 when the
 * agent tries the next place of the rendezvous (srv_host, srv_port set;
 * the caller reconnects), 0 when it goes on as without failover. */
int dr__failover_on_lost(dr_agent_t *ag, int code);
/* A RESUME or JOIN refused by a standby or a replaced server: 1 when the
 * agent moves on to the next place (it reconnects), 0 otherwise. */
int dr__failover_on_refused(dr_agent_t *ag, int code);
/* How long a connection attempt may take: dflt, or while the agent looks
 * for the rendezvous, what is left of the heartbeat timeout. */
uint32_t dr__failover_connect_ms(const dr_agent_t *ag, uint32_t dflt);
/* The bound on unacknowledged heartbeats (TCP_USER_TIMEOUT): dflt, or
 * where the rendezvous can move, twice the heartbeat timeout, so that a
 * server cut off is left in seconds (a stopped one still acknowledges). */
uint32_t dr__failover_user_timeout_ms(const dr_agent_t *ag, uint32_t dflt);
/* The server took this node back, or assigned it: the walk is over. */
void dr__failover_settled(dr_agent_t *ag);

/* agent_ckpt.c: the checkpoint plane of --ckpt-dir (nothing without it). */
/* Opens the directory, listens for peers and watches it: 0, or -1 said on
 * stderr (a directory that cannot be made or written: exit 2). Before the
 * first JOIN. 1: --ckpt-persist restores into the empty directory first,
 * and starts the session with the server (dr__agent_session_start) once
 * it is done. */
int dr__ckpt_start(dr_agent_t *ag);
/* A JOIN's checkpoint port and the newest step in the directory. */
void dr__ckpt_join(dr_agent_t *ag, dr_join_t *j);
/* ag->asg is new: 1 when the round's newest checkpoint is being fetched
 * first (dr__agent_spawn follows once it is done, whether or not it
 * came), 0 when the workers may start now. */
int dr__ckpt_on_assign(dr_agent_t *ag);
/* The newest step in the directory (DDPRUN_CKPT_STEP), DR_NONE: none. */
uint64_t dr__ckpt_newest(dr_agent_t *ag);
/* Ends every transfer at once and closes the plane's handles (the loop
 * then frees them); from dr__agent_finish. */
void dr__ckpt_stop(dr_agent_t *ag);
/* After the loop has ended: the directory's lock and the rest. */
void dr__ckpt_free(dr_agent_t *ag);

/* "1.2 MiB": a size for messages, into out[n]. Returns out. */
const char *dr__size_text(uint64_t bytes, char *out, size_t n);

/* agent_persist.c: the persist tier of --ckpt-persist (nothing without
 * it), driven by agent_ckpt.c on store, the plane's directory. */
struct dr_ckpt_store;
/* Starts its thread: 0; 1 when store holds no checkpoint and a restore
 * from DIR2 runs first (the session with the server starts once it is
 * done); -1 said on stderr. */
int dr__persist_start(dr_agent_t *ag, struct dr_ckpt_store *store);
/* ag->asg is new: the agent of node rank 0 copies, the others do not. */
void dr__persist_on_assign(dr_agent_t *ag);
/* A checkpoint appeared in the directory: copied once it is due. */
void dr__persist_nudge(dr_agent_t *ag);
/* At the end (dr__ckpt_stop): after a job that ended well, the last copy
 * on the copying node, waited for within a bound; then the thread ends.
 * 1 when the thread would not end: the store must outlive ddprun. */
int dr__persist_stop(dr_agent_t *ag);
/* After the loop has ended. */
void dr__persist_free(dr_agent_t *ag);

/* agent_ranks.c: the workers as `ddprun status` shows them. */
/* Worker w's DR_RS_* state. */
uint32_t dr__agent_rank_state(const dr_agent_t *ag, const dr_worker_t *w);
/* Samples the workers' health, then RANKS to the server when the workers
 * changed; called every heartbeat. */
void dr__agent_report_ranks(dr_agent_t *ag);
/* 1 when worker w, killed by a SIGKILL that the agent did not send (or
 * exited with 137, as a shell whose child was), was killed by the kernel's
 * OOM killer: its count rose since w was last seen alive (or, not seen
 * yet, since before it started). */
int dr__agent_rank_oom_killed(dr_agent_t *ag, const dr_worker_t *w);
/* After the loop has ended: NVML, if it was opened. */
void dr__agent_ranks_free(dr_agent_t *ag);

/* agent_stacks.c: the server's STACKS id: the workers' stacks, collected
 * off the loop, answered with STACK_DUMP id. */
void dr__agent_on_stacks_request(dr_agent_t *ag, uint64_t id);

#endif /* DR_AGENT_INTERNAL_H */
