/* The rendezvous server: membership, rounds, heartbeats, job state and the
 * key-value store, on one libuv loop (single-threaded, never blocks).
 *
 * Embeddable: ddprun-rdzv runs it on the default loop; ddprun runs it on a
 * loop of its own in a thread. All functions must be called on the loop's
 * thread, except dr_server_request_stop(), which is thread-safe (it goes
 * through a uv_async_t).
 */
#ifndef DR_SERVER_H
#define DR_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "rdzv_core.h"
#include "wire.h"

typedef struct dr_server dr_server_t;

typedef struct {
  const char *host;        /* address to bind, e.g. "0.0.0.0", "127.0.0.1" */
  uint16_t port;           /* 0 = an ephemeral port, see dr_server_port() */
  const char *run_id;      /* the job id clients must present */
  uint32_t min_nodes;      /* >= 1 */
  uint32_t max_nodes;      /* >= min_nodes */
  uint32_t max_restarts;   /* failures the job may restart from */
  uint32_t heartbeat_timeout_ms; /* silent node declared dead after this */
  uint32_t last_call_timeout_ms; /* wait after min nodes joined */
  /* A job of fixed size (MIN = MAX) that loses a node waits this long for a
   * replacement before it stops; 0: it stops at once. */
  uint32_t replacement_timeout_ms;
  uint32_t handshake_timeout_ms; /* HELLO (and AUTH) must arrive within */
  /* Past the handshake, for connections that are not nodes of the job
   * (store clients, tools; a node is judged by its heartbeats): */
  uint32_t idle_timeout_ms;  /* closed after this long with no request
                              * and none blocked; 0 = never */
  uint32_t frame_timeout_ms; /* a frame, once begun, must arrive whole
                              * within this; so must a reply be taken */
  /* Bytes that unfinished frames of all connections may hold together;
   * past it the largest holders are dropped. A frame larger than this
   * can never arrive. */
  uint64_t max_frame_memory;
  int allow_mixed_nproc;   /* 0: every node must have the same nproc */
  int exit_when_done;      /* stop the loop once the job has ended */
  const uint8_t *secret;   /* NULL = no secret; copied by dr_server_start */
  size_t secret_len;
  dr_limits_t limits;
  const char *log_dir;     /* events to <log_dir>/<run_id>/events.jsonl */
  /* The generation and restarts used, kept across server restarts for the
   * same run_id (written on each change, removed at the job's end); NULL =
   * none. */
  const char *state_file;
  /* GET /metrics (Prometheus text) and GET /healthz over HTTP on the same
   * loop: -1 = off (the default), 0 = a free port, see
   * dr_server_metrics_port(). Bound to metrics_host, or to host when NULL. */
  int32_t metrics_port;
  const char *metrics_host;
  /* The rendezvous outlives its host (rdzv_core_term.c): the term of this
   * server (0: 1); failover: it runs in a node's ddprun, so the nodes of
   * a generation of 3 or more get successors and it acts only with a
   * majority; standby: it serves no one until dr_server_takeover(). */
  uint64_t term;
  int failover;
  int standby;
  /* Called once when the job ends, with its exit code. */
  void (*on_done)(void *arg, int exit_code);
  /* Called when the server has closed every handle and freed itself. */
  void (*on_closed)(void *arg);
  void *cb_arg;
} dr_server_config_t;

/* Defaults: 127.0.0.1, port 0, nodes 1:1, no restarts, heartbeat 2000 ms,
 * last call 1000 ms, handshake 5000 ms, idle 60 s, frame 30 s, frame
 * memory 128 MiB, no metrics endpoint. */
void dr_server_config_default(dr_server_config_t *cfg);

/* Validates cfg, binds and listens. Returns 0 and *out, or a negative code
 * with a one-line reason in errbuf (e.g. "bind() to 0.0.0.0:29400 failed
 * (98: Address already in use)"). The server raises RLIMIT_NOFILE to its
 * hard limit. On an error neither on_done nor on_closed is ever called;
 * handles it had opened close when the loop runs next. */
int dr_server_start(uv_loop_t *loop, const dr_server_config_t *cfg,
                    dr_server_t **out, char *errbuf, size_t errbuf_len);

/* The port bound (useful with port 0). */
uint16_t dr_server_port(const dr_server_t *s);

/* The metrics endpoint's port, 0 when it is off. */
uint16_t dr_server_metrics_port(const dr_server_t *s);

/* Closes every handle; the loop then runs out. Frees the server when the
 * loop has closed the handles: call uv_run() until it returns after this. */
void dr_server_close(dr_server_t **s);

/* Thread-safe: a standby server takes the job over (dr_rdzv_takeover(),
 * whose seed is copied); returns once it has, 0 or -ENOMEM. */
int dr_server_takeover(dr_server_t *s, const dr_rdzv_takeover_t *t);

/* Thread-safe: asks the loop to close the server once the replies it has
 * queued are written (at most 2 s). */
void dr_server_request_stop(dr_server_t *s);

#endif /* DR_SERVER_H */
