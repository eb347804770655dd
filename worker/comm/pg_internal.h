/* Internals of the process group, shared by pg.c (API, work queue, the
 * communication thread), pg_boot.c (bootstrap), link.c (transports) and
 * coll.c (the ring algorithms). Not installed. */
#ifndef DR_PG_INTERNAL_H
#define DR_PG_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pg.h"
#include "shm_ring.h"

/* Default pieces: on shared memory a few per ring, so producer and
 * consumer overlap; on TCP large, so each system call moves a lot. */
#define DR_PG_SHM_CHUNK (512u << 10)
#define DR_PG_TCP_CHUNK (4u << 20)
/* Data bytes of each shared-memory ring; a few chunks in flight, small
 * enough to stay in the last-level cache. */
#define DR_PG_SHM_RING_BYTES (4u << 20)
/* On shared memory every step's bytes start on a cache line, so float
 * data never straddles the ring's wrap point. */
#define DR_PG_SHM_ALIGN 64u
/* The most a TCP receive waits for before it wakes (SO_RCVLOWAT). */
#define DR_PG_TCP_LOWAT (1u << 20)
/* Longest a wait sleeps before it checks the neighbours' liveness. */
#define DR_PG_LIVENESS_MS 50
/* How long a rank that saw a neighbour go away waits for that
 * neighbour's abort record, which names the root cause. */
#define DR_PG_ABORT_GRACE_MS 200
#define DR_PG_CTRL_RECORD 256

typedef enum { DR_LINK_SHM = 1, DR_LINK_TCP = 2 } dr_link_kind_t;

/* One direction of a ring edge, seen from this rank. */
typedef struct {
  uint32_t peer;         /* rank at the other end */
  int sending;           /* 1: this rank sends on it (to its right) */
  dr_link_kind_t kind;
  size_t chunk;          /* bytes moved per piece */
  int ctrl_fd;           /* control connection: abort records, liveness */
  int ctrl_eof;          /* the peer closed it */
  uint8_t ctrl_buf[DR_PG_CTRL_RECORD];
  size_t ctrl_have;
  int data_fd;           /* TCP data; -1 on shared memory */
  dr_shm_ring_t *ring;   /* shared memory; NULL on TCP */
  int peer_pid;
  int gone;              /* the peer went away */
  char gone_why[96];     /* "connection closed", "process 123 exited" */
  int gone_rechecked;    /* the caller looked again after gone was set */
  uint8_t *stage;        /* TCP receive buffer for reductions */
  size_t stage_cap;
  size_t stage_have;     /* bytes of an incomplete float carried over */
  size_t lowat;          /* TCP receive: SO_RCVLOWAT in force (0: 1) */
} dr_link_t;

/* A failure as it travels around the ring in abort records. */
typedef struct {
  int code;         /* DR_PG_ETIMEOUT, DR_PG_EPEER or DR_PG_EMISMATCH */
  uint32_t blamed;  /* the rank that did not arrive, went away, or is in
                       another collective */
  uint32_t origin;  /* the rank that saw it */
  uint64_t seq;     /* the collective it happened in */
  char text[200];   /* "no data from rank 3 within 300 s" */
} dr_pg_fail_t;

typedef enum {
  DR_WORK_ALLREDUCE = 0,
  DR_WORK_BROADCAST,
  DR_WORK_ALLGATHER,
  DR_WORK_BARRIER
} dr_work_kind_t;

struct dr_work {
  dr_work_kind_t kind;
  dr_pg_t *pg;
  uint64_t seq; /* 1, 2, ... in submission order */
  void *buf;    /* allreduce/broadcast buffer; allgather output */
  const void *in;
  size_t n_bytes; /* allreduce: n_elems * element size; allgather: per
                     rank */
  dr_pg_op_t op;
  dr_pg_dtype_t dtype; /* allreduce */
  uint32_t root;
  _Atomic int done;
  _Atomic int refs; /* the submitter's and the queue's */
  _Atomic uint64_t start_us, end_us;
  int rc;
  char err[320];
  dr_work_t *next;
};

struct dr_pg {
  uint32_t rank, world;
  uint32_t local_rank, local_world;
  uint32_t pos;    /* this rank's position in the ring */
  uint32_t *order; /* rank at each ring position */
  uint32_t timeout_ms;
  size_t chunk;    /* cfg->chunk_bytes: 0 for the links' defaults */
  uint64_t spin_ns; /* dr_shm_spin_ns(local_world): 0 never spins */
  size_t tcp_lowat; /* DR_PG_TCP_LOWAT, or the environment's (tests) */
  dr_link_t send;  /* to order[pos + 1] */
  dr_link_t recv;  /* from order[pos - 1] */
  char *describe;

  /* The inline schedule (pg_schedule.c): no communication thread; the
   * thread that waits for a work runs the queue up to it. */
  int inline_run;
  char schedule_note[256];
  /* Thread schedule: the communication thread asks for real-time priority
   * (SCHED_RR 1) so that it never waits behind a compute thread;
   * comm_rt_rc is how that went (0, or -errno), set before comm_tid. */
  int comm_rt_wanted;
  int comm_rt_rc;
  long cpus_note_busy, cpus_note_cpus; /* threads wanting a CPU, CPUs */

  pthread_t thread;
  int have_thread;
  /* The communication thread's kernel id; set by it under mu (done_cv
   * tells dr_pg_init), then never changed. */
  _Atomic int comm_tid;
  pthread_mutex_t mu;
  pthread_cond_t queue_cv; /* work queued, or stop */
  pthread_cond_t done_cv;  /* some work completed */
  dr_work_t *head, *tail;
  int stop;
  uint64_t next_seq;
  dr_pg_activity_t *_Atomic activity; /* dr_pg_publish_activity's */
  _Atomic int broken;
  char broken_msg[320]; /* the first failure; set before broken */
};

/* ---- pg_boot.c --------------------------------------------------------- */

/* Meets the other ranks through the store and connects both links of
 * this rank; fills pg->order, pos, send, recv and describe. */
int dr__pg_bootstrap(dr_pg_t *pg, const dr_pg_config_t *cfg, char *err,
                     size_t err_len);

/* ---- link.c ------------------------------------------------------------ */

void dr__link_init(dr_link_t *l);
void dr__link_close(dr_link_t *l);

/* Padding that follows a step of n_bytes on this link. */
size_t dr__link_pad(const dr_link_t *l, size_t n_bytes);

/* Non-blocking: moves up to n bytes; returns how many (0: would block) or
 * -EPIPE when the peer went away (l->gone set). */
long dr__link_send(dr_link_t *l, const uint8_t *src, size_t n);
/* TCP only: nh bytes of head then n of src in one system call (one
 * segment on the wire, one wake-up of the peer); returns how many in
 * all, as dr__link_send. */
long dr__link_send_head(dr_link_t *l, const uint8_t *head, size_t nh,
                        const uint8_t *src, size_t n);
/* Commits n bytes of padding; 1 done, 0 would block. */
int dr__link_send_pad(dr_link_t *l, size_t n);

/* What a receive does with the bytes: COPY them in; COPY_STREAM them in
 * with non-temporal stores (the last copy of a large collective, which
 * this thread never reads again: the stores skip the cache and the
 * read-for-ownership of lines that are only overwritten); SUM them
 * (dst += in, fp32); SUM_DIV them and divide the sum by div. */
typedef enum {
  DR_ROP_COPY = 0,
  DR_ROP_COPY_STREAM,
  DR_ROP_SUM,
  DR_ROP_SUM_DIV,
  DR_ROP_MAX,     /* dst = max(dst, in), fp32 */
  DR_ROP_SUM_F16, /* dst += in, fp16 (half.h) */
  DR_ROP_SUM_BF16 /* dst += in, bf16 */
} dr_rop_t;
/* The element size of a reduction (4 or 2); 1 for a copy. */
size_t dr__rop_elem_bytes(dr_rop_t op);
/* Collectives of at least this many bytes stream their last copy. */
#define DR_PG_STREAM_BYTES (16u << 20)
/* Receives up to n bytes into dst as op says. Reductions complete whole
 * floats only. Returns bytes of dst completed, or -EPIPE. */
long dr__link_recv(dr_link_t *l, uint8_t *dst, size_t n, dr_rop_t op,
                   float div);
int dr__link_recv_pad(dr_link_t *l, size_t n);

/* Waits until the send link has room for send_wait bytes (0: not
 * waited on) or the receive link has data (recv_wait: the bytes the
 * caller is sure to get, at least 1; 0: not waited on), at most until
 * deadline_ns. On TCP the socket's SO_RCVLOWAT is raised toward
 * recv_wait (at most DR_PG_TCP_LOWAT, less what the stage holds), so that
 * a wait ends once per that many bytes rather than per segment. Returns
 * 0 (look again), -ETIMEDOUT, or a failure code with *f filled: an abort
 * record from a neighbour, or the waited-on peer gone. */
int dr__pg_wait(dr_pg_t *pg, size_t send_wait, size_t recv_wait,
                uint64_t deadline_ns, uint64_t seq, dr_pg_fail_t *f);

/* Reads an abort record from a neighbour without waiting; 1 with *f
 * filled, else 0. */
int dr__pg_poll_abort(dr_pg_t *pg, dr_pg_fail_t *f);

/* Fills *f for a peer that went away, unless its abort record arrives
 * within the grace time, which then fills *f instead. */
void dr__pg_peer_failure(dr_pg_t *pg, dr_link_t *l, uint64_t seq,
                         dr_pg_fail_t *f);

/* Tells both neighbours (abort record, shared-memory abort flag). */
void dr__pg_abort(dr_pg_t *pg, const dr_pg_fail_t *f);

/* ---- coll.c ------------------------------------------------------------ */

/* Runs w on the ring. 0, or a failure code with *f filled. */
int dr__coll_run(dr_pg_t *pg, dr_work_t *w, uint64_t deadline_ns,
                 dr_pg_fail_t *f);

/* ---- coll_hdr.c -------------------------------------------------------- */

/* Every collective, on every link, starts with this header (then, on
 * shared memory, padding to DR_PG_SHM_ALIGN); each rank sends its own to
 * the right and checks its left neighbour's before any of its data. */
#define DR_COLL_HDR_BYTES 32u

typedef struct {
  uint64_t seq;     /* the group's collective counter: 1, 2, ... */
  uint64_t n_bytes; /* dr_work_t's n_bytes; 0 for a barrier */
  uint32_t kind;    /* dr_work_kind_t */
  uint32_t op;      /* all-reduce: dr_pg_op_t | dr_pg_dtype_t << 8; else 0 */
  uint32_t root;    /* broadcast: the root rank; else 0 */
} dr_coll_hdr_t;

/* What differs between two headers: a mask of these (0: in step). */
enum {
  DR_HDR_SEQ = 1u << 0,
  DR_HDR_KIND = 1u << 1,
  DR_HDR_OP = 1u << 2,
  DR_HDR_ROOT = 1u << 3,
  DR_HDR_SIZE = 1u << 4
};

/* "allreduce", "broadcast", ...; "collective" for an unknown kind. */
const char *dr__work_kind_name(uint32_t kind);
void dr__coll_hdr_of(const dr_work_t *w, dr_coll_hdr_t *h);
void dr__coll_hdr_encode(uint8_t out[DR_COLL_HDR_BYTES],
                         const dr_coll_hdr_t *h);
/* 0, or -1 for bytes that are not a header (bad magic). */
int dr__coll_hdr_decode(const uint8_t in[DR_COLL_HDR_BYTES],
                        dr_coll_hdr_t *h);
unsigned dr__coll_hdr_diff(const dr_coll_hdr_t *mine,
                           const dr_coll_hdr_t *peer);
/* "allreduce #553 of 34.0 KiB", "broadcast #12 of 4 B from rank 0",
 * "barrier #9"; with_op adds an all-reduce's op: "allreduce (sum) #5 of
 * 8 B". */
void dr__coll_hdr_describe(const dr_coll_hdr_t *h, int with_op, char *out,
                           size_t out_len);
/* Checks the header bytes that peer_rank sent against this rank's own:
 * 0 when they match, else DR_PG_EMISMATCH with *f filled ("out of step:
 * rank 1 is in allreduce #553 of 4 B, rank 0 in allreduce #553 of 34.0
 * KiB"). */
int dr__coll_hdr_check(const uint8_t peer_bytes[DR_COLL_HDR_BYTES],
                       const dr_coll_hdr_t *mine, uint32_t my_rank,
                       uint32_t peer_rank, dr_pg_fail_t *f);

/* ---- helpers ----------------------------------------------------------- */

/* Little-endian fields of the bootstrap messages and abort records. */
static inline void dr__put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static inline void dr__put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t dr__get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t dr__get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* "4.0 MiB", "28 B" */
void dr__fmt_bytes(char *out, size_t out_len, uint64_t n_bytes);
/* "allreduce #12 (4.0 MiB)" */
void dr__work_describe(const dr_work_t *w, char *out, size_t out_len);

/* pg.c: runs w (on whichever thread runs the queue); drops a reference. */
void dr__work_run(dr_pg_t *pg, dr_work_t *w);
void dr__work_unref(dr_work_t *w);
/* pg.c: the queue's first work, taken off it (mu held); NULL if empty. */
dr_work_t *dr__pg_pop_locked(dr_pg_t *pg);
/* pg_schedule.c: after the links exist, sets inline_run, comm_rt_wanted
 * and the note. */
void dr__pg_choose_schedule(dr_pg_t *pg, dr_pg_schedule_t want);
/* On the communication thread, as it starts: its priority (above). */
void dr__pg_comm_priority(dr_pg_t *pg);
/* After the communication thread started: the note says its priority. */
void dr__pg_note_priority(dr_pg_t *pg);
/* Inline: runs the queue in order until w is done. */
void dr__pg_run_until(dr_pg_t *pg, dr_work_t *w);

#endif /* DR_PG_INTERNAL_H */
