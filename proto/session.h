/* The client side of the rendezvous protocol, without I/O: the handshake
 * (HELLO, WELCOME, AUTH, OK), JOIN and its assignment, RESUME, heartbeats
 * with their clock stamps, the status of the round being waited for, and
 * the server's orders and requests, as typed events. Both
 * clients drive it: the blocking client (client.c) and the agent's libuv
 * connection (agent/agent_rdzv.c), so the tests of the one exercise the
 * code the other runs.
 *
 * The caller owns the I/O: it sends the frames the session encodes into
 * the buffer it passes, and feeds every frame the server sends to
 * dr_sess_on_frame(), which may encode a frame to send back (AUTH) and
 * says what happened. Request ids are the caller's; the session remembers
 * those of its JOIN and RESUME to recognise their answers. Never logs, never
 * allocates but for the secret's copy and an assignment it hands over.
 */
#ifndef DR_SESSION_H
#define DR_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "clock_offset.h"
#include "wire.h"

typedef enum {
  DR_SESS_NONE,      /* nothing for the caller (a frame was consumed) */
  DR_SESS_READY,     /* the handshake is done */
  DR_SESS_ASSIGNED,  /* the JOIN's assignment: ev->asg, the caller's now */
  DR_SESS_RESUMED,   /* the RESUME was accepted: the generation goes on */
  DR_SESS_REFUSED,   /* the server said no (ERROR): ev->code, ev->text;
                        ev->to says which request (JOIN, RESUME, HELLO, ...) */
  DR_SESS_RESTART,   /* order: stop the workers, join generation ev->gen */
  DR_SESS_STOP,      /* order: stop with ev->exit_code */
  DR_SESS_HEARTBEAT, /* the server is alive */
  DR_SESS_ROUND,     /* the forming round this node waits in: ev->round */
  DR_SESS_STACKS,    /* request: the workers' stacks, as STACK_DUMP ev->id */
  DR_SESS_OTHER      /* another message (a store reply): the caller's */
} dr_sess_ev_type_t;

typedef struct {
  dr_sess_ev_type_t type;
  uint8_t to;             /* REFUSED: the message type refused */
  int code;               /* REFUSED: the server's code (negative) */
  uint64_t gen;           /* RESTART, HEARTBEAT, STACKS */
  uint64_t id;            /* STACKS: what the answer quotes */
  uint32_t restart_count; /* RESTART */
  int exit_code;          /* STOP */
  dr_bytes_t text;        /* REFUSED, RESTART, STOP: borrowed from the frame */
  dr_assignment_t asg;    /* ASSIGNED: owned by the caller from then on */
  dr_round_status_t round; /* ROUND: borrowed from the frame */
} dr_sess_event_t;

typedef struct {
  int state;             /* see session.c */
  /* The clock of this side's stamps (wire.h, "Clocks"): the server's
   * last stamp (WELCOME, HEARTBEAT) and when it arrived, on this clock,
   * are echoed once by the next JOIN, RESUME or HEARTBEAT; 0 once
   * echoed. */
  dr_clock_fn clock;
  void *clock_ctx;
  uint64_t srv_tx_us, srv_rx_us;
  char *run_id;
  uint8_t *secret;       /* copied; wiped once the handshake is done */
  size_t secret_len;
  uint32_t hello_req, join_req, resume_req;
  char errmsg[256];      /* why dr_sess_on_frame failed */
} dr_sess_t;

/* Copies run_id and the secret (NULL: none). 0 or -ENOMEM. */
int dr_sess_init(dr_sess_t *s, const char *run_id, const uint8_t *secret,
                 size_t secret_len);
/* Wipes the secret and frees the copies. */
void dr_sess_free(dr_sess_t *s);
int dr_sess_ready(const dr_sess_t *s);
/* The clock this side stamps with: fn(ctx); NULL = dr_clock_now_us. */
void dr_sess_set_clock(dr_sess_t *s, dr_clock_fn fn, void *ctx);

/* Each appends one frame to out: 0 or a negative code. JOIN, RESUME and
 * HEARTBEAT carry this side's clock stamp (j->clock and q->clock are
 * ignored): the frame should be sent at once. */
int dr_sess_hello(dr_sess_t *s, uint32_t req, const char *host,
                  dr_buf_t *out);
int dr_sess_join(dr_sess_t *s, uint32_t req, const dr_join_t *j,
                 dr_buf_t *out);
int dr_sess_resume(dr_sess_t *s, uint32_t req, const dr_resume_t *q,
                   dr_buf_t *out);
int dr_sess_heartbeat(dr_sess_t *s, uint32_t req, uint64_t gen,
                      dr_buf_t *out);

/* A frame from the server, handed over as soon as it is read (its arrival
 * is stamped here). 0 and *ev filled (a frame to send back, using
 * request id reply_req, is appended to out), or a negative code with
 * s->errmsg when the server broke the protocol or the handshake cannot
 * go on (DR_ENOAUTH: a secret is required and none was given); the
 * connection is then of no more use. */
int dr_sess_on_frame(dr_sess_t *s, const dr_msg_t *m, uint32_t reply_req,
                     dr_buf_t *out, dr_sess_event_t *ev);

/* An owned copy of an assignment: 0 or -ENOMEM (out is then empty). */
int dr_assignment_copy(const dr_assign_t *a, dr_assignment_t *out);

#endif /* DR_SESSION_H */
