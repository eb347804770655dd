/* The checkpoint peers: agent to agent over TCP, never through the
 * rendezvous server (docs/wire-protocol.md, "Checkpoint peers").
 *
 * The server accepts on a thread of its own and gives each connection a
 * thread (at most DR_CKPT_SRV_CONNS at once; one more is closed at once,
 * and its sender tries again with the next checkpoint). A connection
 * passes the rendezvous' handshake (the job's run id; its secret when it
 * has one), then carries one request: a push (CKPT_PUT: a replica for this
 * node's directory) or a fetch (CKPT_GET: a checkpoint of this node's
 * directory, for a peer that restores it). A peer that sends garbage, a
 * frame out of place or a copy whose checksum does not match is told why
 * (ERROR) and dropped, with a warning that names it; nothing of its copy
 * is left.
 *
 * The client calls run in the caller's thread (the plane's transfer
 * thread), blocking, each wait bounded by ctx->timeout_ms and ended by
 * ctx->stop_fd.
 */
#ifndef DR_CKPT_PEER_H
#define DR_CKPT_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_rules.h"
#include "ckpt_store.h"

#define DR_CKPT_SRV_CONNS 8

/* What both sides share; borrowed for as long as a server runs or a call
 * lasts. */
typedef struct {
  dr_ckpt_store_t *store;
  const char *run_id;
  const char *host;      /* this node's name, for HELLO */
  const uint8_t *secret; /* the job's; NULL: none */
  size_t secret_len;
  int stop_fd;           /* readable once the plane stops */
  int timeout_ms;        /* the longest wait without progress */
} dr_ckpt_ctx_t;

/* ---- the server ---------------------------------------------------------- */

typedef struct dr_ckpt_srv dr_ckpt_srv_t;

/* Listens on port (0: a free one) on every address of this host (IPv6 and
 * IPv4, or IPv4 alone where there is no IPv6) and starts its thread.
 * 0 and *out, or -errno (nothing started). */
int dr_ckpt_srv_start(const dr_ckpt_ctx_t *ctx, uint16_t port,
                      dr_ckpt_srv_t **out);
/* The port it listens on. */
uint16_t dr_ckpt_srv_port(const dr_ckpt_srv_t *s);
/* This node's rank in the running round: the origin of its own
 * checkpoints when a peer fetches one. Any thread. */
void dr_ckpt_srv_set_node_rank(dr_ckpt_srv_t *s, uint32_t node_rank);
/* Waits for its threads, which end at once once ctx->stop_fd is readable
 * (the caller makes it so first), and frees *s; sets it to NULL. */
void dr_ckpt_srv_stop(dr_ckpt_srv_t **s);

/* ---- the client ---------------------------------------------------------- */

/* What a transfer moved. */
typedef struct {
  char name[DR_CKPT_NAME_MAX + 1];
  uint64_t bytes; /* of its files */
  int had_it;     /* a push the peer did not need: it holds that name */
} dr_ckpt_moved_t;

/* Copies checkpoint name of ctx->store to the peer at host:port, written
 * by node rank origin, paced by pace (NULL: at full speed). 0 (also when
 * the peer holds it already: moved->had_it); DR_ENOTFOUND when name is no
 * longer in the directory; or a negative code with a one-line reason in
 * why (the peer's own words when it refused). */
int dr_ckpt_push(const dr_ckpt_ctx_t *ctx, const char *host, uint16_t port,
                 const char *name, uint32_t origin, dr_tbucket_t *pace,
                 dr_ckpt_moved_t *moved, char *why, size_t why_len);

/* Copies the peer's checkpoint of step into ctx->store (renamed in only
 * whole and verified). 0 and *moved, or a negative code and why. */
int dr_ckpt_fetch(const dr_ckpt_ctx_t *ctx, const char *host, uint16_t port,
                  uint64_t step, dr_ckpt_moved_t *moved, char *why,
                  size_t why_len);

#endif /* DR_CKPT_PEER_H */
