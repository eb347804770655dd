/* Internals shared by the server's files: connections (server_conn.c), the
 * store (store.c) and rendezvous (rdzv.c), tied together in server.c.
 * Everything here runs on the server's loop thread. */
#ifndef DR_SERVER_INTERNAL_H
#define DR_SERVER_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "clock_offset.h"
#include "rdzv_core.h"
#include "ratelimit.h"
#include "server.h"
#include "wire.h"

typedef struct dr_conn dr_conn_t;
typedef struct dr_store dr_store_t;
typedef struct dr_waiter dr_waiter_t;
typedef struct dr_metrics dr_metrics_t;

/* Why a connection was refused before it became a client of the job. */
typedef enum {
  DR_REFUSE_RUN_ID,     /* HELLO with another job's run id */
  DR_REFUSE_NO_SECRET,  /* no AUTH where a secret is required (another
                         * request, or a hang-up after the WELCOME) */
  DR_REFUSE_BAD_SECRET, /* AUTH with a wrong secret */
  DR_REFUSE_VERSION,    /* another protocol version */
  DR_REFUSE_MALFORMED,  /* a frame that does not decode, or not HELLO first */
  DR_REFUSE_TIMEOUT,    /* no handshake within handshake_timeout_ms */
  DR__REFUSE_N
} dr_refuse_t;

/* Why the server closed a connection that holds what others need. The
 * first four apply past the handshake, to connections that are not nodes
 * of the job; DR_DROP_FD_LIMIT counts connections closed unread because no
 * descriptor was left to serve them. */
typedef enum {
  DR_DROP_IDLE,         /* no request for idle_timeout_ms */
  DR_DROP_SLOW_FRAME,   /* a frame not whole within frame_timeout_ms */
  DR_DROP_FRAME_MEMORY, /* largest holder while over max_frame_memory */
  DR_DROP_SLOW_READER,  /* its replies not taken in time, or too many */
  DR_DROP_FD_LIMIT,     /* at the file-descriptor limit */
  DR__DROP_N
} dr_drop_t;

/* The kinds of the server's bad-client warnings (s->bad_rl): the refusals,
 * then the drops (DR__REFUSE_N + a dr_drop_t). */
#define DR_BAD_KIND_DROP(d) ((size_t)DR__REFUSE_N + (size_t)(d))

/* Operator counters (monotonic since the server started), for metrics.c. */
typedef struct {
  uint64_t accepted;               /* TCP connections accepted */
  uint64_t refused[DR__REFUSE_N];  /* handshakes refused, by reason */
  uint64_t dropped[DR__DROP_N];    /* connections dropped, by reason */
} dr_server_stats_t;

/* The store's figures, see dr__store_stats(). */
typedef struct {
  uint64_t ops[DR__MSG_MAX]; /* requests handled, by message type */
  uint64_t stale;            /* requests refused for an ended generation */
  size_t keys_job, keys_gen; /* keys in the job and generation scopes */
  size_t waiters;            /* GET / MULTI_GET / BARRIER still blocked */
} dr_store_stats_t;

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
  uint64_t rx_us;       /* CLOCK_REALTIME as the frames being handled were
                           read: t4 of their clock stamps */
  /* Deadlines past the handshake (server_conn.c, dr__conn_sweep): */
  uint64_t active_ms;   /* last bytes received or reply sent: idleness */
  uint64_t frame_ms;    /* when the frame in in[0..in_len) began */
  uint64_t write_ms;    /* last write progress while out_pending > 0 */
  int agent;            /* has joined: judged by heartbeats (rdzv.c) only */
  uint8_t nonce[DR_NONCE_LEN];
  /* What the rendezvous core knows of it: its node, its host (HELLO's),
   * "ip:port" for messages, the time of its last frame (the heartbeat
   * clock). */
  dr_rdzv_peer_t rp;
  /* The peer's clock, measured over its stamps (rdzv_clock.c): kept with
   * the connection, which outlives the node records of its generations. */
  dr_clock_filter_t clock;
  int clock_warned;        /* said that its offset was clock_warned_us */
  int64_t clock_warned_us;
  int refused;          /* counted in stats.refused already */
  int status_waiting;   /* STATUS requests of it collecting stacks */
  const char *doomed;   /* closing at the next check phase, and why */
  dr_conn_t *doomed_next;
  dr_waiter_t *waiters; /* store requests blocked on this connection */
  dr_conn_t *prev, *next;
};

struct dr_server {
  uv_loop_t *loop;
  dr_server_config_t cfg;
  char *run_id;
  char *state_file;        /* --state-file, or NULL; see rdzv_state.c */
  char *later_metrics_host; /* a standby's metrics address, bound at its
                               takeover (server_takeover.c), or NULL */
  int state_warned;        /* a failed save was reported */
  uint8_t *secret;
  uv_poll_t listener;      /* on listen_fd, see server_listen.c */
  int listen_fd;
  int reserve_fd;          /* given up at the descriptor limit, see there */
  int accept_paused;       /* listener stopped until the next sweep */
  uv_timer_t sweep;        /* deadlines, heartbeats, log summaries */
  uint64_t sweep_tick_ms;  /* its period */
  uint64_t last_sweep_ms;  /* when it last ran */
  int sweep_skipped;       /* the last one was late, and judged nothing */
  uint64_t woke_ms;        /* when the loop last woke from a stall (the
                              process stopped, a VM paused), 0 if never */
  uv_async_t stop_async;
  int stop_requested;      /* dr_server_request_stop(): nodes' closes first */
  uv_async_t takeover_async; /* server_takeover.c */
  void *_Atomic takeover_req;
  uv_check_t reaper;       /* closes doomed connections at a safe point */
  uv_timer_t drain;        /* bounds the wait for writes at shutdown */
  dr_conn_t *doomed;
  uint16_t port;
  dr_conn_t *conns;
  size_t n_conns;
  uint64_t frame_bytes;    /* sum of the conns' in_cap: unfinished frames */
  dr_ratelimit_t bad_rl;   /* warnings about bad clients */
  dr_ratelimit_t fd_rl;    /* connections refused at the descriptor limit */
  size_t n_handles_open;   /* closed handles counted down to free */
  dr_rdzv_t rdzv;          /* the rendezvous core (rdzv_core.h) */
  uv_timer_t rdzv_timer;   /* armed at the core's next due time */
  int rdzv_draining;       /* carrying out the core's orders */
  dr_store_t *store;
  dr_buf_t out;            /* scratch for encoding replies */
  struct dr_events *events;
  dr_server_stats_t stats;
  dr_metrics_t *metrics;   /* NULL when the metrics endpoint is off */
  struct dr_stacks_job *stacks; /* the collection of stacks in flight */
  struct dr_stacks_job *stacks_done; /* the last one's answer, for reuse */
  uint64_t stacks_next_id;
  /* ROUND_STATUS pushes (rdzv_status.c): the forming round they follow
   * (its forming_ms), the round_seq last pushed and when. */
  uint64_t round_forming_ms, round_sent_seq, round_sent_ms;
  uint64_t start_unix_ms;
  uint8_t rbuf[64 * 1024]; /* shared read buffer, see on_alloc() */
  int closing;
  int done_flushing;
};

/* ---- server.c ---------------------------------------------------------- */
uint64_t dr__now_ms(const dr_server_t *s);
/* 1 while the loop runs its timers late after a stall (SIGSTOP, a paused
 * VM, a debugger): libuv runs due timers before it reads the sockets, so
 * a timer must not judge silence, or act on a hold, before the bytes that
 * arrived meanwhile have been read. Such a timer defers itself by a tick. */
int dr__server_stalled(const dr_server_t *s);
/* Called when the job reaches DONE: the server closes once writes drain. */
void dr__server_job_done(dr_server_t *s);
/* Called from a write completion: maybe finish the shutdown. */
void dr__server_maybe_finish(dr_server_t *s);
void dr__server_handle_closed(dr_server_t *s);
/* server_takeover.c: the takeover's async handle, set up and closed. */
void dr__takeover_init(dr_server_t *s);
void dr__takeover_close(dr_server_t *s);

/* ---- server_listen.c --------------------------------------------------- */
/* Binds host:port (an IPv4 or IPv6 literal), listens and accepts on s's
 * loop; s->port is the port bound. Its handle counts in s->n_handles_open
 * once this returns 0. 0, or a negative code with a reason in err. */
int dr__listen_start(dr_server_t *s, const char *host, uint16_t port,
                     char *err, size_t errlen);
/* Accepting again after a pause (called from the sweep). */
void dr__listen_resume(dr_server_t *s);
void dr__listen_close(dr_server_t *s);

/* ---- server_conn.c ----------------------------------------------------- */
/* Takes fd, a connection just accepted (non-blocking); closes it on
 * failure. */
void dr__conn_accept(dr_server_t *s, int fd);
/* A rate-limited warning about c, of kind (a dr_refuse_t, or
 * DR_BAD_KIND_DROP(a dr_drop_t)). */
void dr__conn_warn(dr_conn_t *c, size_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Marks c to be closed in the check phase; safe inside any callback. */
void dr__conn_doom(dr_conn_t *c, const char *why);
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

/* ---- server_read.c ----------------------------------------------------- */
/* Starts reading c; its frames go to dr__conn_dispatch. 0 or a code. */
int dr__conn_read_start(dr_conn_t *c);
/* Frees what c holds of an unfinished frame; only where c has no read
 * buffer outstanding (it is closing, or being dropped for memory). */
void dr__conn_in_free(dr_conn_t *c);

/* ---- server_hello.c ---------------------------------------------------- */
/* Handles one decoded frame: the handshake, then requests. */
void dr__conn_dispatch(dr_conn_t *c, const dr_msg_t *m);
/* Logs, answers and closes a connection that broke the protocol. */
void dr__conn_reject(dr_conn_t *c, int code, const char *what,
                     const uint8_t *bytes, size_t n_bytes);
void dr__conn_count_refused(dr_conn_t *c, dr_refuse_t why);

/* ---- store.c ----------------------------------------------------------- */
int dr__store_new(dr_store_t **out);
void dr__store_free(dr_store_t **st);
/* Handles SET..BARRIER on a ready connection. */
void dr__store_handle(dr_conn_t *c, const dr_msg_t *m);
/* Drops the generation scope; waiters on it are answered DR_ESTALE. */
void dr__store_new_generation(dr_server_t *s);
void dr__store_drop_conn(dr_conn_t *c);
void dr__store_stats(const dr_store_t *st, dr_store_stats_t *out);

/* ---- rdzv_state.c ------------------------------------------------------ */
/* After dr__rdzv_init: the generation and restarts used of the same run id
 * from the state file (none: a fresh job). 0, or a code with err. */
int dr__state_load(dr_server_t *s, char *err, size_t errlen);
/* Writes the current generation and restarts used (failures are logged). */
void dr__state_save(dr_server_t *s);
/* The job has ended: a new server for this run id starts afresh. */
void dr__state_remove(dr_server_t *s);

/* ---- rdzv_shell.c: the core's messages, orders and timer ----------------- */
int dr__rdzv_init(dr_server_t *s);
void dr__rdzv_close(dr_server_t *s);
void dr__rdzv_free(dr_server_t *s);
/* Handles JOIN, RESUME, HEARTBEAT, FAILURE, SUCCESS, LEAVE. */
void dr__rdzv_handle(dr_conn_t *c, const dr_msg_t *m);
/* c is closing: its node is lost, its claim dropped. */
void dr__rdzv_conn_closed(dr_conn_t *c, const char *why);
void dr__rdzv_sweep(dr_server_t *s, uint64_t now);
/* Carries out the core's orders (after any event fed to it). */
void dr__rdzv_drain(dr_server_t *s);
/* The connection of peer p. */
dr_conn_t *dr__conn_of(dr_rdzv_peer_t *p);

/* ---- rdzv_status.c: the job's status ----------------------------------- */
/* Pushes ROUND_STATUS to the waiting nodes when due; answers the STATUS
 * requests whose stacks are in, late, or of an ended generation. */
void dr__status_sweep(dr_server_t *s, uint64_t now);
/* Handles RANKS, STATUS, STACK_DUMP. */
void dr__status_handle(dr_conn_t *c, const dr_msg_t *m);
/* c is closing: its STATUS requests are dropped. */
void dr__status_drop_conn(dr_conn_t *c);
void dr__status_free(dr_server_t *s);
/* rdzv_status_env.c: the env records of a JOB_STATUS whose node records
 * are nodes[0..n_nodes), collected from the round then the waiting nodes:
 * into *out (the caller frees it; its texts borrow the nodes'). 0,
 * -ENOMEM, or -EINVAL when the nodes are not the core's. */
int dr__status_env_recs(const dr_server_t *s, const dr_node_rec_t *nodes,
                        size_t n_nodes, dr_env_rec_t **out);

/* ---- rdzv_clock.c: the nodes' clock offsets ----------------------------- */
/* A clock stamp from c's peer (JOIN, RESUME, HEARTBEAT), received at
 * c->rx_us: one more sample when it echoes a stamp of the server's. */
void dr__clock_on_stamp(dr_conn_t *c, const dr_clock_stamp_t *st);
/* The best estimate of c's peer: 0 and *out, or DR_ENOTFOUND. */
int dr__clock_estimate(const dr_conn_t *c, dr_clock_sample_t *out);
/* The clock fields of an ASSIGN to c's node. */
void dr__clock_assign(const dr_conn_t *c, dr_assign_t *a);
/* Warns when c's node, assigned its rank, has a clock more than 100 ms off
 * the server's: once, then again when the offset has moved by another
 * 100 ms; says so when it is back within 50 ms. */
void dr__clock_check(dr_conn_t *c);

/* ---- metrics_http.c: the HTTP endpoint ---------------------------------- */
/* Binds cfg->metrics_host (or cfg->host) on cfg->metrics_port and serves
 * on s's loop; its handles count in s->n_handles_open. 0, or a negative
 * code with a one-line reason in err. */
int dr__metrics_start(dr_server_t *s, const dr_server_config_t *cfg,
                      char *err, size_t errlen);
uint16_t dr__metrics_port(const dr_metrics_t *m);
/* Closes the listener and every HTTP connection (at server close). */
void dr__metrics_close(dr_metrics_t *m);
/* Frees the endpoint once its handles have closed. */
void dr__metrics_free(dr_metrics_t **m);

/* ---- http_request.c: reading a request head ---------------------------- */
typedef enum { DR_HTTP_METRICS, DR_HTTP_HEALTHZ } dr_http_target_t;
/* Looks at the first len bytes a client sent (cap: the most its head may
 * take). Returns 0 while the head is incomplete; 200 for a complete
 * GET of /metrics or /healthz (*target says which; a query string is
 * ignored); else the status to answer at once: 400 malformed (not
 * "METHOD /path HTTP/1.x", control bytes), 404 another path, 405 another
 * method, 431 no end of head within cap bytes. */
int dr__http_classify(const char *buf, size_t len, size_t cap,
                      dr_http_target_t *target);

/* ---- metrics.c: what the endpoint says ---------------------------------- */
/* Appends the Prometheus text exposition (format 0.0.4) of s's state to
 * out; http_counts[i] are the HTTP answers so far by dr__metrics_codes[i]. */
int dr__metrics_render(dr_server_t *s, dr_buf_t *out,
                       const uint64_t *http_counts);
/* The /healthz answer: 200 while the job forms or runs, 503 once it has
 * ended; a one-line body into out. */
int dr__metrics_health(const dr_server_t *s, char *out, size_t n);
/* The HTTP status codes the endpoint answers with, counted by metrics. */
#define DR_METRICS_N_CODES 7
extern const int dr__metrics_codes[DR_METRICS_N_CODES];

#endif /* DR_SERVER_INTERNAL_H */
