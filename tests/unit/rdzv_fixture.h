/* The fixture of the rendezvous core's unit tests (test_rdzv_core*.c):
 * one core and FX_PEERS connections the test owns, events sent at a time
 * the test sets, and the orders they produce copied out so that a test
 * reads them as plain values.
 *
 * Every event helper takes the orders the event produced and leaves them
 * in f->got (replacing the previous batch). Like the server's shell, it
 * carries out CLOSE orders by telling the core the peer closed, and takes
 * the orders that adds into the same batch. */
#ifndef DR_RDZV_FIXTURE_H
#define DR_RDZV_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv_core.h"

#define FX_PEERS 6
#define FX_MAX_GOT 128
#define FX_RUN_ID "job7"
/* Index of an order's peer: FX_NOPEER for orders to the caller itself
 * (SAVE, DONE, ...); FX_ANY in a query matches any peer or none. */
#define FX_NOPEER (-1)
#define FX_ANY (-2)

typedef struct {
  dr_rdzv_order_kind_t kind;
  int peer; /* index in fx_t.peer, or FX_NOPEER */
  uint32_t req;
  int code;
  uint64_t gen;
  uint32_t restart_count;
  uint32_t node_rank, first_rank;
  char name[32];
  char text[1400];
} fx_order_t;

typedef struct {
  dr_rdzv_t r;
  dr_rdzv_peer_t peer[FX_PEERS]; /* host "node-<i>", ip "10.0.0.<i+1>" */
  uint64_t now;                  /* the time events are sent at */
  uint32_t next_req;
  uint32_t req[FX_PEERS];        /* each peer's last request id */
  fx_order_t got[FX_MAX_GOT];    /* the last batch of orders */
  size_t n_got;
} fx_t;

/* The default job: run id FX_RUN_ID, 2:3 nodes, a budget of 2 restarts,
 * heartbeat timeout 3000 ms, last call 1000 ms, events on. */
dr_rdzv_config_t fx_config(void);
/* For cmocka setups: *state becomes a fixture with cfg. */
int fx_setup_with(void **state, const dr_rdzv_config_t *cfg);
int fx_setup(void **state); /* fx_config() */
int fx_teardown(void **state);

/* Takes the core's orders into f->got. */
void fx_take(fx_t *f);
/* Sets the time to t and ticks. */
void fx_at(fx_t *f, uint64_t t);
/* A frame from peer i arrives now. */
void fx_heard(fx_t *f, int i);
void fx_heard_all(fx_t *f);

/* A JOIN of peer i with nproc workers asking for node rank rank (DR_NONE:
 * any), from its peer's address (addr empty), offering port 29500 + i. */
dr_join_t fx_join_msg(fx_t *f, int i, uint32_t nproc, uint64_t rank);
void fx_join_with(fx_t *f, int i, const dr_join_t *j);
void fx_join(fx_t *f, int i, uint32_t nproc, uint64_t rank);
/* Peers 0..n-1 join with nproc 2 and any rank; when the round does not
 * complete at once the last call is let expire. The round then runs. */
void fx_run(fx_t *f, int n);

/* A failure of rank rank of the current generation reported by peer i. */
dr_failure_t fx_failure_msg(fx_t *f, int i, uint32_t rank, int exit_code,
                            int signal);
void fx_fail_with(fx_t *f, int i, const dr_failure_t *x);
void fx_fail(fx_t *f, int i, uint32_t rank, int exit_code, int signal);
void fx_success(fx_t *f, int i, uint64_t gen);
void fx_leave(fx_t *f, int i, uint32_t signal, const char *reason);
void fx_close(fx_t *f, int i, const char *why);

/* A RESUME of peer i: node_rank of a generation of nnodes nodes, world
 * workers, nproc of them on this node, with token. */
dr_resume_t fx_resume_msg(fx_t *f, int i, uint64_t gen, uint32_t node_rank,
                          uint32_t nnodes, uint32_t world, uint32_t nproc,
                          uint32_t restart_count, const uint8_t *token);
void fx_resume_with(fx_t *f, int i, const dr_resume_t *q);

/* The first order of kind for peer (an index, FX_NOPEER or FX_ANY) in the
 * last batch, NULL when none; how many there are. */
const fx_order_t *fx_find(const fx_t *f, dr_rdzv_order_kind_t kind,
                          int peer);
size_t fx_count(const fx_t *f, dr_rdzv_order_kind_t kind, int peer);
/* The first EVENT order called name, NULL when none. */
const fx_order_t *fx_event(const fx_t *f, const char *name);
/* The order of kind for peer, failing the test when there is none. */
const fx_order_t *fx_must(const fx_t *f, dr_rdzv_order_kind_t kind,
                          int peer);
/* Fails the test unless text contains phrase. */
void fx_assert_has(const char *text, const char *phrase);

#endif /* DR_RDZV_FIXTURE_H */
