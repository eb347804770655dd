/* The blocking client of the rendezvous server and store.
 *
 * One connection, one request in flight at a time; not thread-safe (use one
 * client per thread). Every call has a deadline that holds whatever the
 * server sends: it is checked after every frame and every read, so a
 * server that never stops sending cannot hold a call past it. Nothing
 * blocks forever.
 *
 * Messages the server pushes (RESTART, STOP, HEARTBEAT, ROUND_STATUS,
 * STACKS; request id 0) that arrive while a reply is awaited are queued and
 * handed out by dr_client_recv(), in the order they arrived, within a bound
 * (DR_CLIENT_MAX_PUSHES): of HEARTBEAT, ROUND_STATUS, RESTART and STOP
 * only the newest of each type is kept (a newer one replaces the queued
 * one: the last heartbeat and round status are what is true now, a RESTART
 * names the generation to join and supersedes an older one, a STOP ends
 * the job); STACKS requests fill the rest, and when the queue is full the
 * oldest of them is dropped (its asker's wait ends at its deadline, as for
 * a node that does not answer). The queue thus holds at most one frame at
 * the frame cap (a ROUND_STATUS) and a few small ones (RESTART and STOP
 * carry a blob; STACKS and HEARTBEAT are fixed-size), however long the
 * caller leaves it and however much the server pushes.
 *
 * Never logs, never exits: every function returns 0 or a negative code
 * (dr_strerror). When the server answered ERROR the code is the server's
 * and dr_client_errmsg() has its message.
 */
#ifndef DR_CLIENT_H
#define DR_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

typedef struct dr_client dr_client_t;

/* The most pushed messages queued at once (see above); more than the four
 * types that keep only their newest, so STACKS always has room. */
#define DR_CLIENT_MAX_PUSHES 8

typedef struct {
  const char *host;     /* server host name or address */
  uint16_t port;
  const char *run_id;   /* job id presented in HELLO */
  const char *client_host; /* this host's name; NULL = gethostname() */
  const uint8_t *secret;   /* borrowed during dr_client_open; NULL = none */
  size_t secret_len;
  int connect_timeout_ms; /* total for all connect attempts; <=0: 10000 */
  int io_timeout_ms;      /* per request, beyond any wait_ms; <=0: 30000 */
  const dr_limits_t *limits; /* NULL = dr_limits_default() */
} dr_client_opts_t;

/* Connects (retrying refused or unreachable connects with exponential
 * backoff from 10 ms to 1 s until connect_timeout_ms), sends HELLO and, when
 * the server asks for it, proves knowledge of the secret.
 * Returns 0 and *out, or:
 *   -ETIMEDOUT      no connection within the deadline
 *   -EADDRNOTAVAIL  / -ENOENT: host does not resolve (no retry)
 *   DR_ENOAUTH      server requires a secret and none was given
 *   DR_EAUTH, DR_ERUNID, DR_EVERSION: refused; dr_client_errmsg() says more
 *                   only on a client that exists, so such codes also fill
 *                   errbuf when errbuf is not NULL.
 */
int dr_client_open(const dr_client_opts_t *opts, dr_client_t **out,
                   char *errbuf, size_t errbuf_len);

/* Closes the connection and frees *c; sets *c to NULL. NULL is fine. */
void dr_client_close(dr_client_t **c);

/* The socket, for poll() alongside other work. Pushed messages may already
 * sit in the client's queue after any request, where poll() cannot see
 * them: drain dr_client_recv(c, 0, &m) until -ETIMEDOUT before polling. */
int dr_client_fd(const dr_client_t *c);

/* The message of the last ERROR reply (or "" if none). Borrowed. */
const char *dr_client_errmsg(const dr_client_t *c);

/* ---- store (gen 0 = job scope) ---------------------------------------- */

int dr_client_set(dr_client_t *c, uint64_t gen, const char *key,
                  const void *value, size_t n_bytes);

/* wait_ms 0: answer at once (DR_ENOTFOUND if absent); > 0: wait up to that
 * long for the key to be set (-ETIMEDOUT). *value is malloc'd, NUL-terminated
 * for convenience (not counted in *n_bytes); caller frees with free(). */
int dr_client_get(dr_client_t *c, uint64_t gen, const char *key,
                  uint64_t wait_ms, uint8_t **value, size_t *n_bytes);

/* Adds delta to the integer at key (absent = 0) and returns the new value. */
int dr_client_add(dr_client_t *c, uint64_t gen, const char *key,
                  int64_t delta, int64_t *result);

/* Sets key to desired when its value equals expected, or when it is absent
 * and expected is empty. *current (malloc'd, caller frees) is the value
 * after the operation. */
int dr_client_cas(dr_client_t *c, uint64_t gen, const char *key,
                  const void *expected, size_t expected_len,
                  const void *desired, size_t desired_len, uint8_t **current,
                  size_t *current_len);

/* *deleted is 1 when the key existed. */
int dr_client_delete(dr_client_t *c, uint64_t gen, const char *key,
                     int *deleted);

/* Gets all keys, waiting up to wait_ms for all of them to exist.
 * *values is one malloc'd block: an array of n_keys dr_bytes_t followed by
 * their bytes; caller frees with free(). */
int dr_client_multi_get(dr_client_t *c, uint64_t gen, const char *const *keys,
                        size_t n_keys, uint64_t wait_ms, dr_bytes_t **values);

/* *all_exist is 1 when every key exists. */
int dr_client_check(dr_client_t *c, uint64_t gen, const char *const *keys,
                    size_t n_keys, int *all_exist);

/* Returns when n clients have entered the barrier called name, all at once;
 * -ETIMEDOUT after wait_ms. */
int dr_client_barrier(dr_client_t *c, uint64_t gen, const char *name,
                      uint64_t n, uint64_t wait_ms);

/* ---- rendezvous -------------------------------------------------------- */

/* A peer of the node for its checkpoints (wire.h, dr_peer_rec_t). */
typedef struct {
  uint32_t node_rank, port, roles; /* roles: DR_PEER_* */
  uint64_t ckpt_step;              /* DR_NONE: none */
  char addr[DR_HOST_MAX + 1];
} dr_peer_t;

/* An owned copy of an assignment. Free with dr_assignment_free(). */
typedef struct {
  uint64_t gen;
  uint32_t node_rank, nnodes, world_size, first_rank;
  char *master_addr;
  uint32_t master_port;
  uint8_t *bootstrap;
  size_t bootstrap_len;
  uint32_t restart_count, max_restarts;
  int64_t clock_offset_us;       /* server's clock minus this node's */
  uint64_t clock_uncertainty_us; /* its bound; DR_NONE: not measured */
  uint8_t resume_token[DR_RESUME_TOKEN_LEN]; /* what a RESUME of gen needs */
  uint64_t ckpt_step;  /* the round's newest checkpoint, DR_NONE: none */
  dr_peer_t *peers;    /* n_peers, for checkpoints (replicas, holders) */
  size_t n_peers;
  uint64_t term;        /* the assigning server's term */
  uint32_t server_node; /* node rank hosting it, DR_NO_RANK: none */
  dr_peer_t *successors; /* n_successors: where the rendezvous moves */
  size_t n_successors;
} dr_assignment_t;

void dr_assignment_free(dr_assignment_t *a);

/* Joins the next round and waits up to wait_ms for its assignment.
 * Refusals return the server's code (DR_ERUNID, DR_EDUPRANK, DR_EFULL,
 * DR_ENPROC, DR_EBADRANK, DR_ESTOPPED) with its message in errmsg. */
int dr_client_join(dr_client_t *c, const dr_join_t *j, int wait_ms,
                   dr_assignment_t *out);

/* Claims this node's place in the generation its workers still run, after
 * a reconnection: 0 when the server takes it back, DR_ESTALE (with the
 * server's reason in errmsg) when the node must stop its workers and join
 * the next round, or another refusal. */
int dr_client_resume(dr_client_t *c, const dr_resume_t *q);

/* Sends without waiting for an answer (the server does not answer).
 * Clock stamps: the first JOIN, RESUME or HEARTBEAT echoes the WELCOME's
 * (the server measures this host's clock offset from it); pushed
 * HEARTBEATs are queued here, not stamped as they arrive, so they are not
 * echoed. */
int dr_client_heartbeat(dr_client_t *c, uint64_t gen);
int dr_client_report_failure(dr_client_t *c, const dr_failure_t *f);
int dr_client_report_success(dr_client_t *c, uint64_t gen);

/* The workers of this node as its agent sees them (RANKS); unanswered. */
int dr_client_report_ranks(dr_client_t *c, uint64_t gen,
                           const dr_rank_rec_t *ranks, size_t n_ranks);
/* The answer to the server's STACKS id (STACK_DUMP); unanswered. */
int dr_client_report_stacks(dr_client_t *c, uint64_t id,
                            const dr_stack_rec_t *stacks, size_t n_stacks);

/* The job's status (STATUS, answered by JOB_STATUS): flags DR_STATUS_*;
 * with DR_STATUS_STACKS the server collects every rank's stack for up to
 * wait_ms first (the call waits that much longer than the I/O timeout);
 * with DR_STATUS_ENV the answer has every node's environment summary.
 * 0 and *reply, borrowed from the client until its next call: read it with
 * dr_msg_job_status() and the record iterators of wire.h. */
int dr_client_status(dr_client_t *c, uint32_t flags, uint64_t wait_ms,
                     dr_msg_t *reply);

/* A message the server pushed (RESTART, STOP, HEARTBEAT, ROUND_STATUS,
 * STACKS): the oldest queued one, else the next from the socket. Waits up
 * to timeout_ms (0: only what is already queued or readable; -ETIMEDOUT
 * when none). A frame that has not wholly arrived by then stays buffered
 * for the next call. *msg borrows from the client until its next call. */
int dr_client_recv(dr_client_t *c, int timeout_ms, dr_msg_t *msg);

#endif /* DR_CLIENT_H */
