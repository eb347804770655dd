/* The plane's transfer thread: the copies the agent asks for (a new
 * checkpoint pushed to its replicas; the round's newest fetched from a
 * holder) run one after another on a thread of their own, blocking with a
 * deadline on every call (ckpt_io.h), never on the agent's loop. The loop
 * hands a job over and learns that it is done through a uv_async.
 *
 * Fetches go before queued pushes: the workers wait for them. Every push
 * shares one token bucket at --ckpt-replicate-rate, so that the copies
 * never take the link from the training's collectives; fetches run at full
 * speed (no worker runs on this node while it restores).
 */
#ifndef DR_CKPT_XFER_H
#define DR_CKPT_XFER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ckpt_peer.h"
#include "wire.h"

typedef enum { DR_XFER_PUSH, DR_XFER_FETCH } dr_xfer_kind_t;

typedef struct {
  char addr[DR_HOST_MAX + 1];
  uint16_t port;
  uint32_t node_rank;
  /* The outcome with this peer: 0, a code, or 1 when it was not tried (a
   * fetch that another peer served first). */
  int rc;
  char why[320];
} dr_xfer_peer_t;

typedef struct dr_xfer_job {
  uint64_t id;           /* set by dr_xfer_submit */
  dr_xfer_kind_t kind;
  char name[DR_CKPT_NAME_MAX + 1]; /* PUSH: the checkpoint */
  uint32_t origin;                 /* PUSH: who wrote it */
  uint64_t step;                   /* FETCH: the step wanted */
  dr_xfer_peer_t peers[DR_PEERS_MAX];
  size_t n_peers;
  /* Outcome. PUSH: every peer tried, each with its rc. FETCH: peers in
   * turn until one serves it: served is its index (-1: none did, or DIR
   * held the step already: have_it). */
  int served, have_it;
  /* PUSH: never started, as a newer checkpoint of the same origin was
   * queued behind it (what a copy costs goes to the newest). */
  int superseded;
  dr_ckpt_moved_t moved;
  uint64_t ms;           /* how long it took */
  struct dr_xfer_job *next;
} dr_xfer_job_t;

/* A job is done, on the loop: the callee owns job (free() it). */
typedef void (*dr_xfer_done_cb)(void *arg, dr_xfer_job_t *job);

typedef struct dr_xfer dr_xfer_t;

/* Starts the thread. ctx is copied (its pointers borrowed); rate: bytes/s
 * of the pushes, 0 no cap. 0 and *out, or a negative code. */
int dr_xfer_start(uv_loop_t *loop, const dr_ckpt_ctx_t *ctx, uint64_t rate,
                  dr_xfer_done_cb cb, void *arg, dr_xfer_t **out);

/* Queues job (taken over) and returns its id. Loop thread. */
uint64_t dr_xfer_submit(dr_xfer_t *x, dr_xfer_job_t *job);

/* Stops the thread (ctx's stop descriptor is readable already, so that a
 * transfer under way ends at once) and drops what is queued or done but
 * not yet delivered; no callback after this. The memory goes once the
 * loop has closed its handle. Loop thread. Sets *x to NULL. */
void dr_xfer_stop(dr_xfer_t **x);

#endif /* DR_CKPT_XFER_H */
