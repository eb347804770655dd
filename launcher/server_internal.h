/* Internals shared by the server's files: connections (server_conn.c), the
 * store (store.c) and rendezvous (rdzv.c), tied together in server.c.
 * Everything here runs on the server's loop thread. */
#ifndef DR_SERVER_INTERNAL_H
#define DR_SERVER_INTERNAL_H

#include <stdint.h>
#include <uv.h>

#include "server.h"
#include "wire.h"

typedef struct dr_conn dr_conn_t;
typedef struct dr_node dr_node_t;
typedef struct dr_store dr_store_t;
typedef struct dr_waiter dr_waiter_t;

typedef enum {
  DR_CONN_HELLO,   /* waiting for HELLO */
  DR_CONN_AUTH,    /* WELCOME sent with a nonce, waiting for AUTH */
  DR_CONN_READY,   /* authenticated (or no secret needed) */
  DR_CONN_CLOSING  /* uv_close() called; freed in its close callback */
} dr_conn_state_t;

struct dr_conn {
  uv_tcp_t tcp;
  dr_server_t *srv;
  dr_conn_state_t state;
  dr_decoder_t dec;
  uint8_t *in;          /* bytes read and not yet decoded */
  size_t in_len, in_cap;
  size_t need;          /* total bytes the next frame needs, 0 = unknown */
  size_t out_pending;   /* bytes handed to uv_write and not yet written */
  uint64_t accepted_ms; /* for the handshake deadline */
  uint64_t last_seen_ms; /* last frame received: the heartbeat clock */
  uint8_t nonce[DR_NONCE_LEN];
  char peer[64];        /* "ip:port" for messages */
  char peer_ip[48];
  char host[256];       /* from HELLO */
  dr_node_t *node;      /* set while this connection is a node of the job */
  int64_t prev_rank;    /* node rank in the last generation, or -1 */
  const char *doomed;   /* closing at the next check phase, and why */
  dr_conn_t *doomed_next;
  dr_waiter_t *waiters; /* store requests blocked on this connection */
  dr_conn_t *prev, *next;
};

/* A node: one agent's JOIN and, once assigned, its place in the round. */
struct dr_node {
  dr_conn_t *conn;
  uint64_t arrival;       /* join order, for the stable ordering */
  uint32_t join_req;      /* request id the ASSIGN answers */
  char host[256];
  char addr[256];         /* as given, or the peer's IP */
  uint32_t nproc;
  uint64_t req_rank;      /* DR_NONE when any */
  uint32_t port_offer;
  uint8_t *boot;          /* bootstrap offer */
  uint32_t boot_len;
  uint32_t node_rank;     /* valid once assigned */
  int64_t prev_rank;      /* its node rank in the previous generation, -1 */
  int succeeded;
};

typedef enum {
  DR_JOB_FORMING, /* collecting JOINs for generation gen */
  DR_JOB_RUNNING, /* generation gen assigned and running */
  DR_JOB_DONE     /* STOP sent; exit_code is final */
} dr_job_state_t;

typedef struct {
  dr_job_state_t state;
  uint64_t gen;            /* current generation, the first is 1 */
  dr_node_t **round;       /* FORMING: joiners; RUNNING: assigned nodes */
  size_t n_round, cap_round;
  dr_node_t **waiting;     /* joined while RUNNING, taken in next round */
  size_t n_waiting, cap_waiting;
  dr_node_t **rank_holder; /* [max_nodes]: requested rank -> node, FORMING */
  uint32_t job_nproc;      /* nproc of the first node, 0 before any */
  uint64_t arrivals;
  uint32_t restarts_used;
  uint32_t rounds_completed;
  uv_timer_t last_call;
  int last_call_expired;
  int exit_code;
  char stop_reason[1024];
  uint8_t boot[128];       /* bootstrap when node 0 offers none */
  /* A communication failure (exit 3 or 4) is often the echo of a failure
   * elsewhere: it is held (up to the heartbeat timeout) so that the real
   * root cause, if it is on its way, is the one the job acts on and
   * reports; any other failure ends the hold at once. */
  uv_timer_t hold;
  int holding;
  int held_code, held_exit, held_signal;
  char held_what[1024];
} dr_rdzv_t;

struct dr_server {
  uv_loop_t *loop;
  dr_server_config_t cfg;
  char *run_id;
  uint8_t *secret;
  uv_tcp_t listener;
  uv_timer_t sweep;        /* handshake deadlines, heartbeats */
  uv_async_t stop_async;
  uv_check_t reaper;       /* closes doomed connections at a safe point */
  uv_timer_t drain;        /* bounds the wait for writes at shutdown */
  dr_conn_t *doomed;
  uint16_t port;
  dr_conn_t *conns;
  size_t n_conns;
  size_t n_handles_open;   /* closed handles counted down to free */
  uint64_t last_hb_push_ms;
  dr_rdzv_t rdzv;
  dr_store_t *store;
  dr_buf_t out;            /* scratch for encoding replies */
  struct dr_events *events;
  uint8_t rbuf[64 * 1024]; /* shared read buffer, see on_alloc() */
  int closing;
  int done_flushing;
};

/* ---- server.c ---------------------------------------------------------- */
uint64_t dr__now_ms(const dr_server_t *s);
/* Called when the job reaches DONE: the server closes once writes drain. */
void dr__server_job_done(dr_server_t *s);
/* Called from a write completion: maybe finish the shutdown. */
void dr__server_maybe_finish(dr_server_t *s);
void dr__server_handle_closed(dr_server_t *s);

/* ---- server_conn.c ----------------------------------------------------- */
void dr__conn_accept(dr_server_t *s);
/* Sends the frame in s->out (then resets it). A connection that cannot
 * take it is doomed: closed later at a safe point, never inside this call. */
void dr__conn_send(dr_conn_t *c);
void dr__conn_send_error(dr_conn_t *c, uint32_t req, int code,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Closes the connection; its node is reported lost and waiters dropped. */
void dr__conn_close(dr_conn_t *c, const char *why);
void dr__conn_sweep(dr_server_t *s, uint64_t now);
void dr__conn_reap(uv_check_t *h);

/* ---- store.c ----------------------------------------------------------- */
int dr__store_new(dr_store_t **out);
void dr__store_free(dr_store_t **st);
/* Handles SET..BARRIER on a ready connection. */
void dr__store_handle(dr_conn_t *c, const dr_msg_t *m);
/* Drops the generation scope; waiters on it are answered DR_ESTALE. */
void dr__store_new_generation(dr_server_t *s);
void dr__store_drop_conn(dr_conn_t *c);
size_t dr__store_n_keys(const dr_store_t *st);

/* ---- rdzv.c ------------------------------------------------------------ */
int dr__rdzv_init(dr_server_t *s);
void dr__rdzv_close(dr_server_t *s);
void dr__rdzv_free(dr_server_t *s);
/* Handles JOIN, HEARTBEAT, FAILURE, SUCCESS. */
void dr__rdzv_handle(dr_conn_t *c, const dr_msg_t *m);
/* The connection of node went away (closed, or silent too long). */
void dr__rdzv_node_lost(dr_server_t *s, dr_node_t *n, const char *why);
void dr__rdzv_sweep(dr_server_t *s, uint64_t now);

#endif /* DR_SERVER_INTERNAL_H */
