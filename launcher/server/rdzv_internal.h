/* Internals of the rendezvous core (rdzv_core.c, rdzv_core_resume.c,
 * rdzv_orders.c). See rdzv_core.h. */
#ifndef DR_RDZV_INTERNAL_H
#define DR_RDZV_INTERNAL_H

#include <stdarg.h>

#include "rdzv_core.h"

/* ---- rdzv_orders.c ------------------------------------------------------ */
/* A new order in the outbox (its text ""); never NULL (out of memory: a
 * scratch order that is never handed out). */
dr_rdzv_order_t *dr__rdzv_order(dr_rdzv_t *r, dr_rdzv_order_kind_t kind,
                                dr_rdzv_peer_t *peer);
/* An order whose text is formatted. */
void dr__rdzv_order_text(dr_rdzv_t *r, dr_rdzv_order_kind_t kind,
                         dr_rdzv_peer_t *peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* An ERROR to request req of p. */
void dr__rdzv_error(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req, int code,
                    const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An EVENT (when the job logs events). */
void dr__rdzv_event(dr_rdzv_t *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A text that lives until the orders are cleared ("" out of memory). */
const char *dr__rdzv_textf(dr_rdzv_t *r, const char *fmt, va_list ap);
const char *dr__rdzv_text(dr_rdzv_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void dr__rdzv_orders_free(dr_rdzv_t *r);

/* ---- rdzv_core.c -------------------------------------------------------- */
int dr__rdzv_list_push(dr_node_t ***arr, size_t *len, size_t *cap,
                       dr_node_t *n);
/* "ip:port" of n's connection, "gone" without one. */
const char *dr__rdzv_node_peer(const dr_node_t *n);
/* The forming round changed its members, or the state changed. */
void dr__rdzv_round_changed(dr_rdzv_t *r);
/* Completes the round when it may. */
void dr__rdzv_try_complete(dr_rdzv_t *r);
/* Arms or disarms the last call as the round crosses MIN. */
void dr__rdzv_update_last_call(dr_rdzv_t *r);
int dr__rdzv_round_push(dr_rdzv_t *r, dr_node_t *n);
void dr__rdzv_stop(dr_rdzv_t *r, int code, const char *reason);
/* Ends the running generation: every node restarts into the next. */
void dr__rdzv_restart_all(dr_rdzv_t *r, const char *reason);
/* After held claims are decided: nodes that joined meanwhile are taken in
 * by a restart, those beyond the job's maximum refused. */
void dr__rdzv_take_waiting(dr_rdzv_t *r);
void dr__rdzv_node_lost(dr_rdzv_t *r, dr_node_t *n, const char *why);
void dr__rdzv_node_free(dr_node_t *n);
/* Indexes the round just completed for dr_rdzv_peers(); frees the index. */
void dr__rdzv_peers_index(dr_rdzv_t *r);
void dr__rdzv_peers_free(dr_rdzv_t *r);
/* The armed last call has expired: the round completes if it may. */
void dr__rdzv_last_call_due(dr_rdzv_t *r);
/* 1, with the refusal sent, when the job has ended. */
int dr__rdzv_refuse_if_done(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req);
/* 1 when run_id is the job's. */
int dr__rdzv_is_run(const dr_rdzv_t *r, dr_bytes_t run_id);

/* ---- rdzv_core_ifname.c ------------------------------------------------- */
/* The round just completed (node ranks assigned): when its nodes'
 * NCCL_SOCKET_IFNAME differ, one warning and one event. */
void dr__rdzv_ifname_check(dr_rdzv_t *r);

/* ---- rdzv_core_resume.c ------------------------------------------------- */
/* nnodes places of a running generation for its nodes to claim with
 * token: 0, or -ENOMEM. */
int dr__resume_expect(dr_rdzv_t *r, uint64_t gen, uint32_t nnodes,
                      uint32_t world, const uint8_t *token);
/* Held claims are answered with code (DR_ESTALE, DR_ESTOPPED) and
 * reason. */
void dr__resume_end_claims(dr_rdzv_t *r, int code, const char *reason);
/* p's held claim, if any, goes. */
void dr__resume_drop_peer(dr_rdzv_t *r, dr_rdzv_peer_t *p);
/* Nodes that did not claim their places in time are lost; held claims
 * are decided at the deadline. */
void dr__resume_tick(dr_rdzv_t *r, uint64_t now);
void dr__resume_free(dr_rdzv_t *r);

/* rdzv_core_term.c. A JOIN or RESUME of term (what its node has seen):
 * refused (1) by a standby, or by a server that a higher term replaced
 * (which steps down); 0 when it goes on. */
int dr__term_refuse(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req,
                    uint64_t term);
/* 1 when the server may end the running generation with reason now; 0
 * when it must first hear a majority of the generation's nodes (the
 * action is then deferred and taken, or the server steps down, at a
 * tick). */
int dr__term_may_act(dr_rdzv_t *r, const char *reason);
/* The time passed: a deferred action, a takeover's lost place. */
void dr__term_tick(dr_rdzv_t *r, uint64_t now);
/* A round completed: its successors and the node hosting the server. */
void dr__term_index(dr_rdzv_t *r);
/* The server stops serving the job: its nodes are told why (STOP). */
void dr__term_step_down(dr_rdzv_t *r, const char *why);

#endif /* DR_RDZV_INTERNAL_H */
