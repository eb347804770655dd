/* The process group of `train`: collectives over the CPU backend.
 *
 * Ranks meet through the rendezvous store (DDPRUN_RDZV_ENDPOINT, scoped to
 * DDPRUN_GENERATION): each publishes its host identity and a TCP listening
 * address, and all agree on one ring, ordered by host then rank. Each ring
 * link uses shared memory when both ends share a host (same boot id, same
 * network namespace) and TCP otherwise; with shared memory missing or too
 * small a link falls back to TCP on loopback with a one-line warning.
 *
 * Collectives are asynchronous: each call queues a work item, executed in
 * submission order on one communication thread; dr_work_wait() collects
 * it. Every collective has a deadline (the group's timeout); a peer that
 * does not arrive in time, or that dies, fails the collective with
 * DR_PG_ETIMEOUT / DR_PG_EPEER and a message naming the rank and the
 * operation. After a failure the group is broken: every later collective
 * fails at once.
 *
 * Collectives must be issued in the same order with the same arguments on
 * every rank. Each one starts, on every link, with a 32-byte header that
 * carries its sequence number (1, 2, ... per group), kind, byte count,
 * all-reduce op and broadcast root; each rank checks its left
 * neighbour's against its own before it takes any of its data. A rank
 * that issued another collective (an extra one, a missing one, another
 * size or root) fails it at once with DR_PG_EMISMATCH and a message that
 * names both, e.g. "allreduce #553 (4 B): out of step: rank 1 is in
 * allreduce #553 of 4 B, rank 0 in allreduce #553 of 34.0 KiB"; the
 * failure travels around the ring as the others do. A collective without
 * data (a zero-byte one, or a broadcast's link into its root) still
 * exchanges its header.
 *
 * All-reduce is a ring reduce-scatter then all-gather, pipelined in chunks;
 * the result is bit-identical on every rank (each element is summed in the
 * same order everywhere, then copied).
 */
#ifndef DR_PG_H
#define DR_PG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

typedef struct dr_pg dr_pg_t;
typedef struct dr_work dr_work_t;

/* SUM and AVG (SUM, then divided by the world size where each segment
 * completes); MAX for fp32 only. */
typedef enum { DR_PG_SUM = 0, DR_PG_AVG = 1, DR_PG_MAX = 2 } dr_pg_op_t;

/* Element types of an all-reduce. F16 and BF16 (half.h) take SUM only:
 * each pairwise add is done in fp32 and rounded to the narrow type, in
 * the ring's fixed order, so every rank still holds the same bits. The
 * type is part of the collective's header: ranks that disagree on it are
 * out of step. */
typedef enum { DR_PG_F32 = 0, DR_PG_F16 = 1, DR_PG_BF16 = 2 } dr_pg_dtype_t;

/* Failure codes of collectives, beside -errno (proto/errors.h's table,
 * which dr_strerror() reads):
 *   DR_PG_ETIMEOUT  a peer did not arrive within the timeout
 *   DR_PG_EPEER     a peer's connection or process went away
 *   DR_PG_EBROKEN   an earlier collective failed
 *   DR_PG_EMISMATCH a neighbour is in another collective (out of step) */

/* Who runs the collectives. THREAD: the communication thread, so that
 * they overlap the caller's work. INLINE: the thread that waits for one
 * runs every queued collective up to it (no thread, no wake-ups: the
 * cheapest where there is no core to overlap on). AUTO: INLINE when both
 * of this rank's links are shared memory and the host's ranks, each with
 * its compute threads (OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, default
 * 1) and a communication thread, would fill the CPUs this process may
 * run on (its own set when ddprun --cpu-bind gave it one, as
 * DDPRUN_CPUS says); else THREAD. The communication thread asks for
 * real-time priority (SCHED_RR 1; it sleeps between chunks and uses a few
 * percent of a core) so that it never waits behind a compute thread, also
 * where the ranks of other nodes share the host's CPUs unseen; where that
 * is not allowed it runs as before (said when the ranks fill the CPUs).
 * DR_PG_COMM_RT=0 keeps it at normal priority.
 * Results are the same bits either way. */
typedef enum {
  DR_PG_SCHED_AUTO = 0,
  DR_PG_SCHED_THREAD = 1,
  DR_PG_SCHED_INLINE = 2
} dr_pg_schedule_t;

typedef struct {
  uint32_t rank, world;         /* RANK, WORLD_SIZE */
  uint32_t local_rank, local_world;
  const char *store_host;       /* NULL: a group of one, no store needed */
  uint16_t store_port;
  const char *run_id;
  uint64_t gen;                 /* store scope: DDPRUN_GENERATION */
  const uint8_t *secret;        /* store secret, NULL = none */
  size_t secret_len;
  uint32_t timeout_ms;          /* per collective, and for bootstrap */
  int force_tcp;                /* never use shared memory */
  size_t chunk_bytes;           /* pipelining unit; 0 = default (512 KiB
                                   on shared memory, 4 MiB on TCP) */
  dr_pg_schedule_t schedule;    /* default AUTO; DR_PG_SCHEDULE=auto|
                                   thread|inline in the environment */
} dr_pg_config_t;

/* Fills cfg from the environment (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, DDPRUN_RDZV_ENDPOINT, DDPRUN_RUN_ID, DDPRUN_GENERATION,
 * DDPRUN_SECRET_FILE / DDPRUN_SECRET). Without RANK and WORLD_SIZE: a group
 * of one. DR_PG_FORCE_TCP set to anything but "" or "0" sets force_tcp
 * (ddprun's agent drops inherited DDPRUN_* variables, so this knob has a
 * name of its own); DR_PG_SCHEDULE sets schedule. timeout_ms is 300 s,
 * chunk_bytes 0 (the default).
 * Strings point into the environment or static storage; the secret is
 * malloc'd (freed by dr_pg_config_free). 0 or DR_EBADARG with a
 * message. */
int dr_pg_config_from_env(dr_pg_config_t *cfg, char *err, size_t err_len);
void dr_pg_config_free(dr_pg_config_t *cfg);

/* Bootstraps the group (store exchange, links, a first barrier) within
 * cfg->timeout_ms. Returns 0 and *out, or a negative code with a one-line
 * reason in err. */
int dr_pg_init(const dr_pg_config_t *cfg, dr_pg_t **out, char *err,
               size_t err_len);

/* Stops the communication thread (after the queued work), closes links,
 * frees. Sets *pg to NULL. */
void dr_pg_destroy(dr_pg_t **pg);

uint32_t dr_pg_rank(const dr_pg_t *pg);
uint32_t dr_pg_world(const dr_pg_t *pg);

/* The kernel thread id (gettid) of the communication thread, for its
 * CPU time and context switches under /proc/self/task/TID; 0 in a group
 * of one, which has no such thread. */
int dr_pg_comm_tid(const dr_pg_t *pg);

/* 1 when this group runs its collectives on the waiting thread, and why;
 * else the communication thread's priority (real-time where allowed, see
 * DR_PG_COMM_RT), or "" (a group of one, DR_PG_COMM_RT=0, or not allowed
 * where spare CPUs make it matter little). */
int dr_pg_inline(const dr_pg_t *pg);
/* What a rank's group is running, published where a peer sharing memory
 * with it can read it (host_weights.c, to tell a rank stuck in a
 * collective the others never issued from a slow one): the collective's
 * number (0 between collectives), kind and bytes. */
typedef struct {
  _Atomic uint64_t seq;
  _Atomic uint64_t n_bytes;
  _Atomic uint32_t kind;
} dr_pg_activity_t;

/* From now on the group writes each collective it runs into *a, and 0
 * into a->seq after it (NULL: no more). */
void dr_pg_publish_activity(dr_pg_t *pg, dr_pg_activity_t *a);
/* The number of the last collective this rank issued (0: none yet). */
uint64_t dr_pg_issued(dr_pg_t *pg);
/* "allreduce #14 (4 B)" for a published activity (seq != 0). */
void dr_pg_activity_describe(const dr_pg_activity_t *a, char *out,
                             size_t out_len);

/* 1 when both of this rank's ring links are shared memory (or the group
 * is of one). */
int dr_pg_links_shm(const dr_pg_t *pg);
const char *dr_pg_schedule_note(const dr_pg_t *pg);

/* "ring of 4: shm 0>1, tcp 1>2, shm 2>3, tcp 3>0" for the summary. */
const char *dr_pg_describe(const dr_pg_t *pg);

/* Queue collectives. Buffers are borrowed until the work completes. Return
 * 0 and *w, or DR_PG_EBROKEN / -ENOMEM (no work queued). */
int dr_pg_allreduce(dr_pg_t *pg, float *buf, size_t n_elems, dr_pg_op_t op,
                    dr_work_t **w);
/* The same for n_elems of dtype at buf (2 bytes each for F16 and BF16);
 * DR_EBADARG for an op the type does not take. */
int dr_pg_allreduce_typed(dr_pg_t *pg, void *buf, size_t n_elems,
                          dr_pg_dtype_t dtype, dr_pg_op_t op, dr_work_t **w);
int dr_pg_broadcast(dr_pg_t *pg, void *buf, size_t n_bytes, uint32_t root,
                    dr_work_t **w);
/* out holds world * n_bytes: rank r's in lands at out + r * n_bytes. */
int dr_pg_allgather(dr_pg_t *pg, const void *in, size_t n_bytes, void *out,
                    dr_work_t **w);
int dr_pg_barrier(dr_pg_t *pg, dr_work_t **w);

/* Waits for w (bounded by the collective's deadline) and frees it; sets
 * *w to NULL. Returns 0 or the failure code with a one-line reason in err,
 * e.g. "allreduce #12 (4.0 MiB): no data from rank 3 within 300 s". */
int dr_work_wait(dr_work_t **w, char *err, size_t err_len);

/* As dr_work_wait, but w stays valid so that its times can be read; free
 * it with dr_work_free(), which may also drop a work that was never waited
 * for (a queued one still runs; its buffers stay borrowed until then). */
int dr_work_wait_keep(dr_work_t *w, char *err, size_t err_len);
void dr_work_free(dr_work_t **w);

/* 1 when w has completed (successfully or not), without waiting. */
int dr_work_done(const dr_work_t *w);

/* Monotonic microseconds (CLOCK_MONOTONIC) when the communication thread
 * started and finished w; 0 before. For traces and overlap figures. */
uint64_t dr_work_start_us(const dr_work_t *w);
uint64_t dr_work_end_us(const dr_work_t *w);

/* Blocking conveniences (queue, then wait). */
int dr_pg_allreduce_sync(dr_pg_t *pg, float *buf, size_t n_elems,
                         dr_pg_op_t op, char *err, size_t err_len);
int dr_pg_broadcast_sync(dr_pg_t *pg, void *buf, size_t n_bytes,
                         uint32_t root, char *err, size_t err_len);
int dr_pg_allgather_sync(dr_pg_t *pg, const void *in, size_t n_bytes,
                         void *out, char *err, size_t err_len);
int dr_pg_barrier_sync(dr_pg_t *pg, char *err, size_t err_len);

#endif /* DR_PG_H */
