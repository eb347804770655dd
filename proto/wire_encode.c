/* Frame encoders: one function per message type, all built from the same
 * begin / put / end steps so the schema in wire.h is the only layout. */
#include "errors.h"
#include "wire.h"
#include "wire_be.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void dr_buf_init(dr_buf_t *b) { memset(b, 0, sizeof(*b)); }

void dr_buf_reset(dr_buf_t *b) {
  b->len = 0;
  b->err = 0;
}

void dr_buf_free(dr_buf_t *b) {
  if (b->data != NULL) {
    if (b->alloc != NULL)
      b->alloc(b->alloc_ctx, b->data, 0);
    else
      free(b->data);
  }
  b->data = NULL;
  b->len = b->cap = 0;
}

int dr_buf_reserve(dr_buf_t *b, size_t n_bytes) {
  if (b->err != 0)
    return b->err;
  if (n_bytes > SIZE_MAX / 2 - b->len)
    return b->err = -ENOMEM;
  size_t want = b->len + n_bytes;
  if (want <= b->cap)
    return 0;
  size_t cap = b->cap != 0 ? b->cap : 256;
  while (cap < want)
    cap *= 2;
  void *p = b->alloc != NULL ? b->alloc(b->alloc_ctx, b->data, cap)
                             : realloc(b->data, cap);
  if (p == NULL)
    return b->err = -ENOMEM;
  b->data = p;
  b->cap = cap;
  return 0;
}

int dr_buf_append(dr_buf_t *b, const void *p, size_t n_bytes) {
  int rc = dr_buf_reserve(b, n_bytes);
  if (rc != 0)
    return rc;
  if (n_bytes > 0)
    memcpy(b->data + b->len, p, n_bytes);
  b->len += n_bytes;
  return 0;
}

/* A frame under construction: where its header starts in the buffer. */
typedef struct {
  dr_buf_t *b;
  size_t start;
} frame_t;

static frame_t frame_begin(dr_buf_t *b, uint8_t type, uint32_t req) {
  frame_t f = {b, b->len};
  uint8_t hdr[DR_FRAME_HDR_LEN];
  hdr[0] = (uint8_t)(DR_PROTO_MAGIC >> 8);
  hdr[1] = (uint8_t)(DR_PROTO_MAGIC & 0xff);
  hdr[2] = DR_PROTO_VERSION;
  hdr[3] = type;
  dr__store_be32(hdr + 4, req);
  dr__store_be32(hdr + 8, 0);
  dr_buf_append(b, hdr, sizeof(hdr));
  return f;
}

static void put_u64(frame_t *f, uint64_t v) {
  uint8_t x[9];
  x[0] = DR_FIELD_U64;
  dr__store_be64(x + 1, v);
  dr_buf_append(f->b, x, sizeof(x));
}

static void put_len(frame_t *f, uint8_t kind, size_t n) {
  uint8_t x[5];
  if (n > UINT32_MAX) {
    if (f->b->err == 0)
      f->b->err = DR_ETOOBIG;
    return;
  }
  x[0] = kind;
  dr__store_be32(x + 1, (uint32_t)n);
  dr_buf_append(f->b, x, sizeof(x));
}

static void put_clock(frame_t *f, const dr_clock_stamp_t *c) {
  put_u64(f, c != NULL ? c->echo_us : 0);
  put_u64(f, c != NULL ? c->echo_rx_us : 0);
  put_u64(f, c != NULL ? c->tx_us : 0);
}

static void put_bytes(frame_t *f, dr_bytes_t v) {
  put_len(f, DR_FIELD_BYTES, v.len);
  dr_buf_append(f->b, v.p, v.len);
}

static void put_list(frame_t *f, const dr_bytes_t *items, size_t n) {
  put_len(f, DR_FIELD_LIST, n);
  for (size_t i = 0; i < n; i++) {
    uint8_t x[4];
    dr__store_be32(x, items[i].len);
    dr_buf_append(f->b, x, sizeof(x));
    dr_buf_append(f->b, items[i].p, items[i].len);
  }
}

/* Patches the body length; on failure drops the partial frame. */
static int frame_end(frame_t *f) {
  dr_buf_t *b = f->b;
  if (b->err == 0) {
    size_t body = b->len - f->start - DR_FRAME_HDR_LEN;
    if (body > UINT32_MAX)
      b->err = DR_ETOOBIG;
    else
      dr__store_be32(b->data + f->start + 8, (uint32_t)body);
  }
  int rc = b->err;
  if (rc != 0) {
    if (b->len > f->start)
      b->len = f->start;
    b->err = 0;
  }
  return rc;
}

int dr_enc_hello(dr_buf_t *b, uint32_t req, dr_bytes_t run_id,
                 dr_bytes_t host) {
  frame_t f = frame_begin(b, DR_MSG_HELLO, req);
  put_bytes(&f, run_id);
  put_bytes(&f, host);
  return frame_end(&f);
}

int dr_enc_welcome(dr_buf_t *b, uint32_t req, int auth_required,
                   dr_bytes_t nonce, uint64_t tx_us) {
  frame_t f = frame_begin(b, DR_MSG_WELCOME, req);
  put_u64(&f, auth_required ? 1 : 0);
  put_bytes(&f, nonce);
  put_u64(&f, tx_us);
  return frame_end(&f);
}

int dr_enc_auth(dr_buf_t *b, uint32_t req, dr_bytes_t mac) {
  frame_t f = frame_begin(b, DR_MSG_AUTH, req);
  put_bytes(&f, mac);
  return frame_end(&f);
}

int dr_enc_ok(dr_buf_t *b, uint32_t req) {
  frame_t f = frame_begin(b, DR_MSG_OK, req);
  return frame_end(&f);
}

int dr_enc_error(dr_buf_t *b, uint32_t req, int code, dr_bytes_t message) {
  frame_t f = frame_begin(b, DR_MSG_ERROR, req);
  put_u64(&f, (uint64_t)(code < 0 ? -(int64_t)code : code));
  put_bytes(&f, message);
  return frame_end(&f);
}

int dr_enc_set(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               dr_bytes_t value) {
  frame_t f = frame_begin(b, DR_MSG_SET, req);
  put_u64(&f, gen);
  put_bytes(&f, key);
  put_bytes(&f, value);
  return frame_end(&f);
}

int dr_enc_get(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               uint64_t wait_ms) {
  frame_t f = frame_begin(b, DR_MSG_GET, req);
  put_u64(&f, gen);
  put_bytes(&f, key);
  put_u64(&f, wait_ms);
  return frame_end(&f);
}

int dr_enc_value(dr_buf_t *b, uint32_t req, dr_bytes_t value) {
  frame_t f = frame_begin(b, DR_MSG_VALUE, req);
  put_bytes(&f, value);
  return frame_end(&f);
}

int dr_enc_add(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               int64_t delta) {
  frame_t f = frame_begin(b, DR_MSG_ADD, req);
  put_u64(&f, gen);
  put_bytes(&f, key);
  put_u64(&f, (uint64_t)delta);
  return frame_end(&f);
}

int dr_enc_int(dr_buf_t *b, uint32_t req, int64_t value) {
  frame_t f = frame_begin(b, DR_MSG_INT, req);
  put_u64(&f, (uint64_t)value);
  return frame_end(&f);
}

int dr_enc_cas(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               dr_bytes_t expected, dr_bytes_t desired) {
  frame_t f = frame_begin(b, DR_MSG_CAS, req);
  put_u64(&f, gen);
  put_bytes(&f, key);
  put_bytes(&f, expected);
  put_bytes(&f, desired);
  return frame_end(&f);
}

int dr_enc_delete(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key) {
  frame_t f = frame_begin(b, DR_MSG_DELETE, req);
  put_u64(&f, gen);
  put_bytes(&f, key);
  return frame_end(&f);
}

int dr_enc_multi_get(dr_buf_t *b, uint32_t req, uint64_t gen,
                     const dr_bytes_t *keys, size_t n_keys, uint64_t wait_ms) {
  frame_t f = frame_begin(b, DR_MSG_MULTI_GET, req);
  put_u64(&f, gen);
  put_list(&f, keys, n_keys);
  put_u64(&f, wait_ms);
  return frame_end(&f);
}

int dr_enc_values(dr_buf_t *b, uint32_t req, const dr_bytes_t *values,
                  size_t n_values) {
  frame_t f = frame_begin(b, DR_MSG_VALUES, req);
  put_list(&f, values, n_values);
  return frame_end(&f);
}

int dr_enc_check(dr_buf_t *b, uint32_t req, uint64_t gen,
                 const dr_bytes_t *keys, size_t n_keys) {
  frame_t f = frame_begin(b, DR_MSG_CHECK, req);
  put_u64(&f, gen);
  put_list(&f, keys, n_keys);
  return frame_end(&f);
}

int dr_enc_barrier(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t name,
                   uint64_t n, uint64_t wait_ms) {
  frame_t f = frame_begin(b, DR_MSG_BARRIER, req);
  put_u64(&f, gen);
  put_bytes(&f, name);
  put_u64(&f, n);
  put_u64(&f, wait_ms);
  return frame_end(&f);
}

int dr_enc_join(dr_buf_t *b, uint32_t req, const dr_join_t *j) {
  frame_t f = frame_begin(b, DR_MSG_JOIN, req);
  put_bytes(&f, j->run_id);
  put_bytes(&f, j->host);
  put_bytes(&f, j->addr);
  put_u64(&f, j->nproc);
  put_u64(&f, j->node_rank);
  put_u64(&f, j->master_port_offer);
  put_bytes(&f, j->bootstrap_offer);
  put_clock(&f, &j->clock);
  put_u64(&f, j->ckpt_port);
  put_u64(&f, j->ckpt_step);
  return frame_end(&f);
}

static void put_peer_recs(frame_t *f, const dr_peer_rec_t *v, size_t n);

int dr_enc_assign(dr_buf_t *b, uint32_t req, const dr_assign_t *a) {
  frame_t f = frame_begin(b, DR_MSG_ASSIGN, req);
  put_u64(&f, a->gen);
  put_u64(&f, a->node_rank);
  put_u64(&f, a->nnodes);
  put_u64(&f, a->world_size);
  put_u64(&f, a->first_rank);
  put_bytes(&f, a->master_addr);
  put_u64(&f, a->master_port);
  put_bytes(&f, a->bootstrap);
  put_u64(&f, a->restart_count);
  put_u64(&f, a->max_restarts);
  put_u64(&f, (uint64_t)a->clock_offset_us);
  put_u64(&f, a->clock_uncertainty_us);
  put_bytes(&f, (dr_bytes_t){a->resume_token, DR_RESUME_TOKEN_LEN});
  put_u64(&f, a->ckpt_step);
  put_peer_recs(&f, a->peer_recs, a->n_peer_recs);
  return frame_end(&f);
}

int dr_enc_heartbeat(dr_buf_t *b, uint32_t req, uint64_t gen,
                     const dr_clock_stamp_t *clock) {
  frame_t f = frame_begin(b, DR_MSG_HEARTBEAT, req);
  put_u64(&f, gen);
  put_clock(&f, clock);
  return frame_end(&f);
}

int dr_enc_failure(dr_buf_t *b, uint32_t req, const dr_failure_t *x) {
  frame_t f = frame_begin(b, DR_MSG_FAILURE, req);
  put_u64(&f, x->gen);
  put_u64(&f, x->rank);
  put_u64(&f, x->local_rank);
  put_u64(&f, x->pid);
  put_u64(&f, (uint32_t)x->exit_code);
  put_u64(&f, (uint32_t)x->signal);
  put_u64(&f, (uint64_t)x->kind);
  put_bytes(&f, x->message);
  return frame_end(&f);
}

int dr_enc_success(dr_buf_t *b, uint32_t req, uint64_t gen) {
  frame_t f = frame_begin(b, DR_MSG_SUCCESS, req);
  put_u64(&f, gen);
  return frame_end(&f);
}

int dr_enc_restart(dr_buf_t *b, uint32_t req, uint64_t gen,
                   uint32_t restart_count, dr_bytes_t reason) {
  frame_t f = frame_begin(b, DR_MSG_RESTART, req);
  put_u64(&f, gen);
  put_u64(&f, restart_count);
  put_bytes(&f, reason);
  return frame_end(&f);
}

int dr_enc_stop(dr_buf_t *b, uint32_t req, int exit_code, dr_bytes_t reason) {
  frame_t f = frame_begin(b, DR_MSG_STOP, req);
  put_u64(&f, (uint32_t)exit_code);
  put_bytes(&f, reason);
  return frame_end(&f);
}

int dr_enc_resume(dr_buf_t *b, uint32_t req, const dr_resume_t *r) {
  frame_t f = frame_begin(b, DR_MSG_RESUME, req);
  put_bytes(&f, r->run_id);
  put_bytes(&f, r->host);
  put_u64(&f, r->gen);
  put_u64(&f, r->node_rank);
  put_u64(&f, r->nnodes);
  put_u64(&f, r->world_size);
  put_u64(&f, r->nproc);
  put_u64(&f, r->restart_count);
  put_clock(&f, &r->clock);
  put_bytes(&f, (dr_bytes_t){r->resume_token, DR_RESUME_TOKEN_LEN});
  return frame_end(&f);
}

int dr_enc_leave(dr_buf_t *b, uint32_t req, const dr_leave_t *l) {
  frame_t f = frame_begin(b, DR_MSG_LEAVE, req);
  put_u64(&f, l->gen);
  put_u64(&f, l->signal);
  put_bytes(&f, l->reason);
  return frame_end(&f);
}

/* ---- the job's status: lists of records (wire.h, "Records") ------------ */

/* One list item: its length, then head[0..n_head) and tail. */
static void put_item(frame_t *f, const uint8_t *head, size_t n_head,
                     dr_bytes_t tail) {
  size_t n = n_head + tail.len;
  uint8_t x[4];
  if (n > UINT32_MAX) {
    if (f->b->err == 0)
      f->b->err = DR_ETOOBIG;
    return;
  }
  dr__store_be32(x, (uint32_t)n);
  dr_buf_append(f->b, x, sizeof(x));
  dr_buf_append(f->b, head, n_head);
  dr_buf_append(f->b, tail.p, tail.len);
}

static void put_peer_recs(frame_t *f, const dr_peer_rec_t *v, size_t n) {
  put_len(f, DR_FIELD_LIST, n);
  for (size_t i = 0; i < n; i++) {
    uint8_t h[DR_PEER_REC_LEN] = {0};
    dr__store_be32(h, v[i].node_rank);
    dr__store_be32(h + 4, v[i].port);
    dr__store_be32(h + 8, v[i].roles);
    dr__store_be64(h + 16, v[i].ckpt_step);
    put_item(f, h, sizeof(h), v[i].addr);
  }
}

static const dr_bytes_t no_tail = {NULL, 0};

static void put_node_recs(frame_t *f, const dr_node_rec_t *v, size_t n) {
  put_len(f, DR_FIELD_LIST, n);
  for (size_t i = 0; i < n; i++) {
    uint8_t h[DR_NODE_REC_LEN];
    dr__store_be32(h, v[i].node_rank);
    dr__store_be32(h + 4, v[i].nproc);
    dr__store_be32(h + 8, v[i].first_rank);
    dr__store_be32(h + 12, v[i].state);
    dr__store_be64(h + 16, v[i].hb_age_ms);
    dr__store_be64(h + 24, v[i].report_age_ms);
    put_item(f, h, sizeof(h), v[i].host);
  }
}

static void put_rank_recs(frame_t *f, const dr_rank_rec_t *v, size_t n) {
  put_len(f, DR_FIELD_LIST, n);
  for (size_t i = 0; i < n; i++) {
    uint8_t h[DR_RANK_REC_LEN];
    dr__store_be32(h, v[i].rank);
    dr__store_be32(h + 4, v[i].local_rank);
    dr__store_be32(h + 8, v[i].node_rank);
    dr__store_be32(h + 12, v[i].pid);
    dr__store_be32(h + 16, v[i].state);
    dr__store_be32(h + 20, (uint32_t)v[i].exit_code);
    dr__store_be32(h + 24, v[i].signal);
    dr__store_be64(h + 28, v[i].step);
    dr__store_be64(h + 36, v[i].step_age_ms);
    dr__store_be64(h + 44, v[i].rate_milli);
    put_item(f, h, sizeof(h), no_tail);
  }
}

static void put_stack_recs(frame_t *f, const dr_stack_rec_t *v, size_t n) {
  put_len(f, DR_FIELD_LIST, n);
  for (size_t i = 0; i < n; i++) {
    uint8_t h[DR_STACK_REC_LEN];
    dr__store_be32(h, v[i].rank);
    dr__store_be32(h + 4, v[i].node_rank);
    dr__store_be32(h + 8, v[i].pid);
    dr__store_be32(h + 12, v[i].code);
    put_item(f, h, sizeof(h), v[i].text);
  }
}

int dr_enc_round_status(dr_buf_t *b, uint32_t req, const dr_round_status_t *st,
                        const dr_node_rec_t *nodes, size_t n_nodes,
                        const uint32_t *missing, size_t n_missing) {
  frame_t f = frame_begin(b, DR_MSG_ROUND_STATUS, req);
  put_u64(&f, st->gen);
  put_u64(&f, st->joined);
  put_u64(&f, st->min_nodes);
  put_u64(&f, st->max_nodes);
  put_u64(&f, st->needed);
  put_u64(&f, st->waited_ms);
  put_u64(&f, st->last_call_ms);
  put_u64(&f, st->n_missing);
  put_node_recs(&f, nodes, n_nodes);
  put_len(&f, DR_FIELD_LIST, n_missing);
  for (size_t i = 0; i < n_missing; i++) {
    uint8_t x[4];
    dr__store_be32(x, missing[i]);
    put_item(&f, x, sizeof(x), no_tail);
  }
  return frame_end(&f);
}

int dr_enc_ranks(dr_buf_t *b, uint32_t req, uint64_t gen,
                 const dr_rank_rec_t *ranks, size_t n_ranks) {
  frame_t f = frame_begin(b, DR_MSG_RANKS, req);
  put_u64(&f, gen);
  put_rank_recs(&f, ranks, n_ranks);
  return frame_end(&f);
}

int dr_enc_status(dr_buf_t *b, uint32_t req, uint32_t flags,
                  uint64_t wait_ms) {
  frame_t f = frame_begin(b, DR_MSG_STATUS, req);
  put_u64(&f, flags);
  put_u64(&f, wait_ms);
  return frame_end(&f);
}

int dr_enc_job_status(dr_buf_t *b, uint32_t req, const dr_job_status_t *js,
                      const dr_node_rec_t *nodes, size_t n_nodes,
                      const dr_rank_rec_t *ranks, size_t n_ranks,
                      const dr_stack_rec_t *stacks, size_t n_stacks) {
  frame_t f = frame_begin(b, DR_MSG_JOB_STATUS, req);
  put_u64(&f, js->gen);
  put_u64(&f, js->state);
  put_u64(&f, js->restarts_used);
  put_u64(&f, js->max_restarts);
  put_u64(&f, js->min_nodes);
  put_u64(&f, js->max_nodes);
  put_u64(&f, js->exit_code);
  put_bytes(&f, js->reason);
  put_u64(&f, js->elapsed_ms);
  put_node_recs(&f, nodes, n_nodes);
  put_rank_recs(&f, ranks, n_ranks);
  put_stack_recs(&f, stacks, n_stacks);
  return frame_end(&f);
}

int dr_enc_stacks(dr_buf_t *b, uint32_t req, uint64_t id, uint64_t gen) {
  frame_t f = frame_begin(b, DR_MSG_STACKS, req);
  put_u64(&f, id);
  put_u64(&f, gen);
  return frame_end(&f);
}

int dr_enc_stack_dump(dr_buf_t *b, uint32_t req, uint64_t id,
                      const dr_stack_rec_t *stacks, size_t n_stacks) {
  frame_t f = frame_begin(b, DR_MSG_STACK_DUMP, req);
  put_u64(&f, id);
  put_stack_recs(&f, stacks, n_stacks);
  return frame_end(&f);
}
