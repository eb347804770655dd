/* The rendezvous as a state machine without I/O: rounds, node ranks,
 * heartbeats, failures and the echo hold, the job's restart budget,
 * success, stop, and RESUME after a restart of the server.
 *
 * The core is fed events (a node joined, a frame heard, a failure report,
 * a RESUME, a connection closed, the time passed) with the time in
 * milliseconds passed in, and answers with orders (reply, assign, restart,
 * stop, heartbeat, close a connection, save the state, the job is done)
 * that the caller carries out: the server's libuv shell moves the bytes,
 * the unit tests look at them. It never touches a socket, a timer or a
 * file, never reads a clock, and logs only what an operator reads.
 *
 * Peers. Every connection that may become a node is a dr_rdzv_peer_t the
 * caller owns (embedded in its connection) and keeps until it has told
 * the core that the peer closed; the core writes the fields marked core
 * and reads those marked caller. Orders name peers; an order never names
 * a peer after dr_rdzv_peer_closed() returned for it.
 *
 * Orders accumulate in the core's outbox as events are handled; the caller
 * takes them with dr_rdzv_orders() after each call and marks them done
 * with dr_rdzv_orders_clear(). Carrying out an order may feed an event
 * back (a CLOSE makes the caller close the connection and call
 * dr_rdzv_peer_closed()): orders it adds come after the ones taken, so the
 * caller loops until none is left. The texts of orders live until the
 * clear. */
#ifndef DR_RDZV_CORE_H
#define DR_RDZV_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* Bounds of a JOIN, so that the sums of nproc over a job's nodes (world
 * size, first ranks: u32 on the wire, int in every worker's RANK) cannot
 * wrap: nproc per node, and the world over every member of the job (160
 * times the 100,000 ranks the server is built for). */
#define DR_MAX_NPROC 65536u
#define DR_MAX_WORLD (1u << 24)
/* Generations count rounds, one or two per restart or change of members:
 * a bound no job reaches, far enough below 2^64 that gen + 1 never wraps,
 * for what a RESUME or a state file claims. */
#define DR_MAX_GEN (1ull << 48)

typedef struct dr_node dr_node_t;

typedef struct {
  const char *run_id;           /* borrowed for the core's life */
  uint32_t min_nodes, max_nodes;
  uint32_t max_restarts;
  uint32_t heartbeat_timeout_ms;
  uint32_t last_call_timeout_ms;
  /* A job of fixed size (MIN = MAX) that loses a node waits this long for
   * a replacement to join before it stops; 0: it stops at once. */
  uint32_t replacement_timeout_ms;
  int allow_mixed_nproc;
  int events;                   /* emit DR_RDZV_EVENT orders */
  /* The rendezvous outlives its host (rdzv_core_term.c): this server's
   * term (0 is read as 1); failover: the server runs in a node's ddprun,
   * so a generation of 3 or more nodes gets successors and every server
   * acts on it only with a majority of its nodes; standby: a successor's
   * server that serves no one until dr_rdzv_takeover(). */
  uint64_t term;
  int failover;
  int standby;
} dr_rdzv_config_t;

/* A connection as the core sees it. */
typedef struct dr_rdzv_peer {
  dr_node_t *node;       /* core: the node it is, NULL when none */
  int64_t prev_rank;     /* core: its node rank in the last generation, -1 */
  int claiming;          /* core: holds a RESUME claim */
  uint64_t last_seen_ms; /* caller: when its last frame arrived */
  char host[256];        /* caller: its HELLO's host, printable */
  char addr[64];         /* caller: "ip:port", for messages */
  char ip[48];           /* caller: its address, a node's default addr */
} dr_rdzv_peer_t;

/* A node: one agent's JOIN and, once assigned, its place in the round. */
struct dr_node {
  dr_rdzv_peer_t *peer;   /* NULL while its connection is gone */
  uint64_t arrival;       /* join order, for the stable ordering */
  uint32_t join_req;      /* request id the ASSIGN answers */
  char host[256];
  char addr[256];         /* as given, or the peer's IP */
  uint32_t nproc;
  uint64_t req_rank;      /* DR_NONE when any */
  uint32_t port_offer;
  uint32_t ckpt_port;     /* its agent's checkpoint peer, 0: none */
  uint64_t ckpt_step;     /* the newest checkpoint it holds, DR_NONE */
  uint32_t standby_port;  /* its agent's standby server, 0: none */
  int hosts_server;       /* this server runs in its ddprun */
  uint8_t *boot;          /* bootstrap offer */
  uint32_t boot_len;
  uint32_t node_rank;     /* valid once assigned */
  int64_t prev_rank;      /* its node rank in the previous generation, -1 */
  int succeeded;
  int detached;           /* a place in a running generation that the
                             server took back after its restart and that
                             its node has not yet claimed */
  int leave_signal;       /* the node said it leaves (LEAVE): its signal */
  char leave_reason[256];
  /* Its workers as its agent last reported them (RANKS), for STATUS:
   * n_ranks records, received at ranks_ms (0: none this generation).
   * Kept by the caller; freed with the node. */
  dr_rank_rec_t *ranks;
  uint32_t n_ranks;
  uint64_t ranks_ms;
  /* What its JOIN said of its node: its environment summary (env_len
   * bytes, no NUL; NULL: none, a node taken back by a RESUME), for
   * STATUS; and its NCCL_SOCKET_IFNAME, printable ("" unset), for the
   * round's check (rdzv_core_ifname.c). */
  char *env;
  uint32_t env_len;
  char socket_ifname[DR_SOCKET_IFNAME_MAX + 1];
};

/* Room for the server's account of a FAILURE (rdzv_core_live.c), with its
 * NUL: "rank R (local rank L, pid P) on node N (HOST) DID: " -- 40 bytes of
 * words, four u32s of up to 10 digits, the node's host, what the rank did
 * (under 96 bytes) -- and then the message whole. */
#define DR_RDZV_FAILURE_TEXT_LEN                                             \
  (40u + 4u * 10u + sizeof(((struct dr_node *)0)->host) + 96u +            \
   DR_FAILURE_MSG_MAX)

/* A RESUME that a server without the generation's token holds until its
 * resume window ends: what it claims. */
typedef struct {
  dr_rdzv_peer_t *peer;
  uint32_t req;
  uint64_t gen;
  uint32_t node_rank, nnodes, world, nproc, restart_count;
  uint8_t token[DR_RESUME_TOKEN_LEN];
  char host[256];
} dr_claim_t;

typedef enum {
  DR_JOB_FORMING, /* collecting JOINs for generation gen */
  DR_JOB_RUNNING, /* generation gen assigned and running */
  DR_JOB_DONE     /* STOP sent; exit_code is final */
} dr_job_state_t;

/* What the caller carries out. */
typedef enum {
  DR_RDZV_NONE,      /* nothing (an order for a peer that closed since) */
  DR_RDZV_OK,        /* peer: OK to request req */
  DR_RDZV_RESUMED,   /* peer: OK to its RESUME req; its place is back */
  DR_RDZV_ERROR,     /* peer: ERROR code, text, to request req */
  DR_RDZV_ASSIGN,    /* peer: the generation's assignment (dr_rdzv_assign)
                        with node_rank and first_rank, answering req */
  DR_RDZV_RESTART,   /* peer: RESTART into gen, restart_count, text */
  DR_RDZV_STOP,      /* peer: STOP with exit code code, text */
  DR_RDZV_HEARTBEAT, /* peer: the server's HEARTBEAT of gen */
  DR_RDZV_CLOSE,     /* peer: close its connection (text: why); the caller
                        then calls dr_rdzv_peer_closed() */
  DR_RDZV_SAVE,      /* the job's state changed: save it (state file) */
  DR_RDZV_REMOVE,    /* the job has ended: remove the saved state */
  DR_RDZV_NEW_GEN,   /* generation gen opened: its store scope is gone */
  DR_RDZV_DONE,      /* the job ended with exit code code (text: why) */
  DR_RDZV_EVENT      /* an event for the job's log: name, then a JSON
                        fragment in text (",\"gen\":3,...") */
} dr_rdzv_order_kind_t;

typedef struct {
  dr_rdzv_order_kind_t kind;
  dr_rdzv_peer_t *peer;
  uint32_t req;
  int code;
  uint64_t gen;
  uint32_t restart_count;
  uint32_t node_rank, first_rank; /* ASSIGN */
  const char *name;               /* EVENT */
  const char *text;               /* "" when none */
} dr_rdzv_order_t;

/* The core. Its fields are for reading by the caller's reports (status,
 * metrics, the state file); only the core writes them. */
typedef struct {
  dr_rdzv_config_t cfg;
  dr_job_state_t state;
  uint64_t gen;            /* current generation, the first is 1 */
  dr_node_t **round;       /* FORMING: joiners; RUNNING: assigned nodes */
  size_t n_round, cap_round;
  dr_node_t **waiting;     /* joined while RUNNING, taken in next round */
  size_t n_waiting, cap_waiting;
  dr_node_t **rank_holder; /* [max_nodes]: requested rank -> node, FORMING */
  uint32_t job_nproc;      /* nproc of the first node, 0 before any */
  uint32_t nproc_max;      /* the most any node ever had (a bound) */
  uint64_t arrivals;
  uint32_t restarts_used;
  uint32_t rounds_completed;
  uint64_t last_call_at;   /* when the armed last call expires, 0: none */
  /* A fixed-size job that lost a node forms its next round until
   * replace_at (0: not waiting); past it, it stops with replace_code and
   * replace_why. */
  uint64_t replace_at;
  int replace_code;
  char replace_why[900];
  int last_call_expired;
  int exit_code;
  char stop_reason[1024];
  uint8_t boot[128];       /* bootstrap when node 0 offers none */
  dr_assign_t asg;         /* the running generation's assignment, but for
                              node_rank, first_rank and the clock fields */
  /* The running round's indices of the nodes with a checkpoint port and
   * of those that hold asg.ckpt_step, ascending (rdzv_core_peers.c), for
   * generation ck_gen; ck_indexed is 0 when they could not be allocated. */
  uint32_t *ck_ports, *ck_holders;
  size_t n_ck_ports, n_ck_holders, cap_ck;
  int ck_indexed;
  uint64_t ck_gen;
  /* A running generation taken back after the server restarted (from its
   * state file, or from the claims): its nodes have until resume_deadline
   * to claim their places, else they are lost. */
  int resuming;
  uint64_t resume_deadline;
  uint32_t resume_world;
  int state_loaded;        /* dr_rdzv_restore() was called */
  /* The running generation's resume token (in every ASSIGN; a RESUME must
   * carry it), known unless the server started afresh into a running
   * job: then it holds every RESUME (claims) until the deadline and takes
   * back only a generation that one token claims whole. */
  uint8_t token[DR_RESUME_TOKEN_LEN];
  int token_known;
  int claiming;
  dr_claim_t *claims;
  size_t n_claims, cap_claims;
  /* A communication failure (exit 3 or 4) is often the echo of a failure
   * elsewhere: it is held (up to the heartbeat timeout) so that the real
   * root cause, if it is on its way, is the one the job acts on and
   * reports; any other failure ends the hold at once. */
  int holding;
  uint64_t hold_at;        /* when the hold ends */
  int held_code, held_exit, held_signal;
  char held_what[DR_RDZV_FAILURE_TEXT_LEN];
  /* What the job's status says: since when the state is what it is
   * (forming: since the round's first node joined, 0 while it has none),
   * and a count of the forming round's changes of members. */
  uint64_t state_ms;
  uint64_t forming_ms;
  uint64_t round_seq;
  uint64_t woke_ms;        /* caller: when its loop last woke from a stall;
                              silence counts from then at the earliest */
  uint64_t last_hb_ms;     /* the last push of heartbeats */
  uint64_t now;            /* the time of the event being handled */
  uint64_t failures;       /* worker failures reported (for metrics) */
  uint64_t nodes_lost;     /* nodes dropped: closed or silent */
  uint64_t joins_refused;  /* JOINs answered with an error */
  /* The rendezvous outlives its host (rdzv_core_term.c): the running
   * generation's successors (indices into round, by node rank) and the
   * node that hosts this server (DR_NO_RANK: none); a deferred action
   * that waits for a majority of the generation's nodes to be heard since
   * q_since (until q_due, then the server steps down); a takeover's place
   * of the lost server's node, lost once the others have resumed. */
  uint32_t succ[DR_SUCCESSORS_MAX];
  size_t n_succ;
  uint32_t server_node;
  int q_waiting, q_granted;
  uint64_t q_since, q_due;
  char q_reason[1200];
  uint32_t moved_lost;     /* DR_NO_RANK: no takeover pending */
  char moved_text[600];
  int stepped_down;
  /* The outbox: orders, and blocks of their texts. */
  dr_rdzv_order_t *out;
  size_t n_out, cap_out;
  struct dr__rdzv_text *text_head;
} dr_rdzv_t;

/* 0, or -ENOMEM. cfg is copied (run_id borrowed). */
int dr_rdzv_init(dr_rdzv_t *r, const dr_rdzv_config_t *cfg, uint64_t now);
void dr_rdzv_free(dr_rdzv_t *r);

/* A state saved by an earlier server of the job (the state file): the
 * restarts used, and either a forming generation's count (running == 0:
 * the next one is gen + 1) or a running generation (gen, its token, and
 * per place who held it: hosts[i] and nprocs[i] of nnodes, world their
 * sum), whose nodes then have the resume window to claim their places.
 * 0 or -ENOMEM. */
typedef struct {
  uint64_t gen;
  uint32_t restarts_used;
  int running;
  uint32_t nnodes, world;
  uint8_t token[DR_RESUME_TOKEN_LEN];
  const char *const *hosts;
  const uint32_t *nprocs;
} dr_rdzv_saved_t;
int dr_rdzv_restore(dr_rdzv_t *r, const dr_rdzv_saved_t *st, uint64_t now);

/* A successor's standby server takes the job over (rdzv_core_term.c),
 * from what its agent knows of the generation its workers ran (its
 * ASSIGN of term - 1): the generation, its token and shape, the restarts
 * used, the hosts of its places (hosts[i], "" when unknown), and the node
 * whose server was lost (lost_node, lost_host), whose place is lost once
 * every other place is claimed or the resume window ends. self_host names
 * this server's host in what it says. 0 or -ENOMEM. */
typedef struct {
  uint64_t term;
  uint64_t gen;
  uint32_t restarts_used;
  uint32_t nnodes, world;
  uint8_t token[DR_RESUME_TOKEN_LEN];
  const char *const *hosts;
  uint32_t lost_node;
  const char *lost_host, *self_host;
} dr_rdzv_takeover_t;
int dr_rdzv_takeover(dr_rdzv_t *r, const dr_rdzv_takeover_t *t, uint64_t now);

/* The running generation's successors, for node node_rank's ASSIGN: into
 * out[max] (max <= DR_SUCCESSORS_MAX), records borrowing the nodes'
 * addresses. Returns how many (0 when the rendezvous cannot move). */
size_t dr_rdzv_successors(const dr_rdzv_t *r, dr_peer_rec_t *out, size_t max);

/* ---- events ------------------------------------------------------------ */

/* Messages of a peer, decoded (the caller refuses what does not decode,
 * and has stamped the clock). */
void dr_rdzv_join(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                  const dr_join_t *j, uint64_t now);
void dr_rdzv_resume(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                    const dr_resume_t *q, uint64_t now);
void dr_rdzv_failure(dr_rdzv_t *r, dr_rdzv_peer_t *p, const dr_failure_t *f,
                     uint64_t now);
void dr_rdzv_success(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint64_t gen,
                     uint64_t now);
void dr_rdzv_leave(dr_rdzv_t *r, dr_rdzv_peer_t *p, const dr_leave_t *l);
/* p's connection is gone (closed, reset, or dropped by the caller): its
 * node is lost, its claim dropped; the core forgets p. */
void dr_rdzv_peer_closed(dr_rdzv_t *r, dr_rdzv_peer_t *p, const char *why,
                         uint64_t now);
/* The time passed: the last call, the hold, the resume window, silent
 * nodes, the heartbeats to push. The caller calls it at least every fifth
 * of the heartbeat timeout, and at dr_rdzv_next_due(); never while its
 * loop runs late after a stall with frames still unread. */
void dr_rdzv_tick(dr_rdzv_t *r, uint64_t now);
/* The next time a timer of the core is due (last call, hold, resume
 * window), 0 when none: the caller ticks then. */
uint64_t dr_rdzv_next_due(const dr_rdzv_t *r);

/* ---- orders ------------------------------------------------------------ */

/* The orders not yet cleared (borrowed until dr_rdzv_orders_clear). */
const dr_rdzv_order_t *dr_rdzv_orders(const dr_rdzv_t *r, size_t *n);
void dr_rdzv_orders_clear(dr_rdzv_t *r);

/* ---- reading ----------------------------------------------------------- */

/* Nodes of the round whose agents are connected, plus those waiting. */
size_t dr_rdzv_alive(const dr_rdzv_t *r);
/* The forming round, as ROUND_STATUS and the metrics tell it (all zero,
 * last_call_ms DR_NONE, when no round forms). */
typedef struct {
  uint32_t joined;      /* nodes in it */
  uint32_t needed;      /* more it needs before it can complete */
  int is_static;        /* every node in it asked for its node rank */
  uint32_t n_missing;   /* is_static: ranks below what it needs, free */
  uint64_t waited_ms;   /* since its first node joined */
  uint64_t last_call_ms; /* until it completes as it is; DR_NONE: not armed */
  uint32_t need_to;     /* nodes it needs in all (MIN, or to every rank
                           asked for) */
} dr_round_fig_t;
void dr_rdzv_round_figures(const dr_rdzv_t *r, uint64_t now,
                           dr_round_fig_t *out);
/* The peers of the running generation's node node_rank for its
 * checkpoints, into out[max] (max <= DR_PEERS_MAX): the next nodes by node
 * rank (DR_PEER_REPLICA, up to DR_PEERS_REPLICAS, those with a checkpoint
 * port), then, when the node lacks the round's newest checkpoint (asg's
 * ckpt_step), nodes that hold it (DR_PEER_HOLDER, up to DR_PEERS_HOLDERS,
 * the next ones after it first, so that restores spread over the holders).
 * A node in both lists is listed once with both roles. Records borrow the
 * nodes' addresses. Returns how many. */
#define DR_PEERS_REPLICAS 8u
#define DR_PEERS_HOLDERS 4u
size_t dr_rdzv_peers(const dr_rdzv_t *r, uint32_t node_rank,
                     dr_peer_rec_t *out, size_t max);

/* The resume window after a restart of the server: two heartbeat timeouts
 * and a second (agents retry at least once a second). */
uint64_t dr_rdzv_resume_window_ms(const dr_rdzv_t *r);

#endif /* DR_RDZV_CORE_H */
