/* Frame encoders: one function per message type, all built from the same
 * begin / put / end steps so the schema in wire.h is the only layout. */
#include "errors.h"
#include "wire.h"
#include "wire_be.h"
#include "wire_frame.h"

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

static void put_clock(dr__frame_t *f, const dr_clock_stamp_t *c) {
  dr__put_u64(f, c != NULL ? c->echo_us : 0);
  dr__put_u64(f, c != NULL ? c->echo_rx_us : 0);
  dr__put_u64(f, c != NULL ? c->tx_us : 0);
}

int dr_enc_hello(dr_buf_t *b, uint32_t req, dr_bytes_t run_id,
                 dr_bytes_t host) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_HELLO, req);
  dr__put_bytes(&f, run_id);
  dr__put_bytes(&f, host);
  return dr__frame_end(&f);
}

int dr_enc_welcome(dr_buf_t *b, uint32_t req, int auth_required,
                   dr_bytes_t nonce, uint64_t tx_us) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_WELCOME, req);
  dr__put_u64(&f, auth_required ? 1 : 0);
  dr__put_bytes(&f, nonce);
  dr__put_u64(&f, tx_us);
  return dr__frame_end(&f);
}

int dr_enc_auth(dr_buf_t *b, uint32_t req, dr_bytes_t mac) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_AUTH, req);
  dr__put_bytes(&f, mac);
  return dr__frame_end(&f);
}

int dr_enc_ok(dr_buf_t *b, uint32_t req) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_OK, req);
  return dr__frame_end(&f);
}

int dr_enc_error(dr_buf_t *b, uint32_t req, int code, dr_bytes_t message) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_ERROR, req);
  dr__put_u64(&f, (uint64_t)(code < 0 ? -(int64_t)code : code));
  dr__put_bytes(&f, message);
  return dr__frame_end(&f);
}

int dr_enc_set(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               dr_bytes_t value) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_SET, req);
  dr__put_u64(&f, gen);
  dr__put_bytes(&f, key);
  dr__put_bytes(&f, value);
  return dr__frame_end(&f);
}

int dr_enc_get(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               uint64_t wait_ms) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_GET, req);
  dr__put_u64(&f, gen);
  dr__put_bytes(&f, key);
  dr__put_u64(&f, wait_ms);
  return dr__frame_end(&f);
}

int dr_enc_value(dr_buf_t *b, uint32_t req, dr_bytes_t value) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_VALUE, req);
  dr__put_bytes(&f, value);
  return dr__frame_end(&f);
}

int dr_enc_add(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               int64_t delta) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_ADD, req);
  dr__put_u64(&f, gen);
  dr__put_bytes(&f, key);
  dr__put_u64(&f, (uint64_t)delta);
  return dr__frame_end(&f);
}

int dr_enc_int(dr_buf_t *b, uint32_t req, int64_t value) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_INT, req);
  dr__put_u64(&f, (uint64_t)value);
  return dr__frame_end(&f);
}

int dr_enc_cas(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               dr_bytes_t expected, dr_bytes_t desired) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_CAS, req);
  dr__put_u64(&f, gen);
  dr__put_bytes(&f, key);
  dr__put_bytes(&f, expected);
  dr__put_bytes(&f, desired);
  return dr__frame_end(&f);
}

int dr_enc_delete(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_DELETE, req);
  dr__put_u64(&f, gen);
  dr__put_bytes(&f, key);
  return dr__frame_end(&f);
}

int dr_enc_multi_get(dr_buf_t *b, uint32_t req, uint64_t gen,
                     const dr_bytes_t *keys, size_t n_keys, uint64_t wait_ms) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_MULTI_GET, req);
  dr__put_u64(&f, gen);
  dr__put_list(&f, keys, n_keys);
  dr__put_u64(&f, wait_ms);
  return dr__frame_end(&f);
}

int dr_enc_values(dr_buf_t *b, uint32_t req, const dr_bytes_t *values,
                  size_t n_values) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_VALUES, req);
  dr__put_list(&f, values, n_values);
  return dr__frame_end(&f);
}

int dr_enc_check(dr_buf_t *b, uint32_t req, uint64_t gen,
                 const dr_bytes_t *keys, size_t n_keys) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_CHECK, req);
  dr__put_u64(&f, gen);
  dr__put_list(&f, keys, n_keys);
  return dr__frame_end(&f);
}

int dr_enc_barrier(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t name,
                   uint64_t n, uint64_t wait_ms) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_BARRIER, req);
  dr__put_u64(&f, gen);
  dr__put_bytes(&f, name);
  dr__put_u64(&f, n);
  dr__put_u64(&f, wait_ms);
  return dr__frame_end(&f);
}

int dr_enc_join(dr_buf_t *b, uint32_t req, const dr_join_t *j) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_JOIN, req);
  dr__put_bytes(&f, j->run_id);
  dr__put_bytes(&f, j->host);
  dr__put_bytes(&f, j->addr);
  dr__put_u64(&f, j->nproc);
  dr__put_u64(&f, j->node_rank);
  dr__put_u64(&f, j->master_port_offer);
  dr__put_bytes(&f, j->bootstrap_offer);
  put_clock(&f, &j->clock);
  dr__put_u64(&f, j->ckpt_port);
  dr__put_u64(&f, j->ckpt_step);
  dr__put_u64(&f, j->standby_port);
  dr__put_u64(&f, j->term);
  dr__put_u64(&f, j->hosts_server);
  dr__put_bytes(&f, j->env);
  dr__put_bytes(&f, j->socket_ifname);
  return dr__frame_end(&f);
}

static void put_peer_recs(dr__frame_t *f, const dr_peer_rec_t *v, size_t n);

int dr_enc_assign(dr_buf_t *b, uint32_t req, const dr_assign_t *a) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_ASSIGN, req);
  dr__put_u64(&f, a->gen);
  dr__put_u64(&f, a->node_rank);
  dr__put_u64(&f, a->nnodes);
  dr__put_u64(&f, a->world_size);
  dr__put_u64(&f, a->first_rank);
  dr__put_bytes(&f, a->master_addr);
  dr__put_u64(&f, a->master_port);
  dr__put_bytes(&f, a->bootstrap);
  dr__put_u64(&f, a->restart_count);
  dr__put_u64(&f, a->max_restarts);
  dr__put_u64(&f, (uint64_t)a->clock_offset_us);
  dr__put_u64(&f, a->clock_uncertainty_us);
  dr__put_bytes(&f, (dr_bytes_t){a->resume_token, DR_RESUME_TOKEN_LEN});
  dr__put_u64(&f, a->ckpt_step);
  put_peer_recs(&f, a->peer_recs, a->n_peer_recs);
  dr__put_u64(&f, a->term);
  dr__put_u64(&f, a->server_node);
  put_peer_recs(&f, a->succ_recs, a->n_succ_recs);
  return dr__frame_end(&f);
}

int dr_enc_heartbeat(dr_buf_t *b, uint32_t req, uint64_t gen,
                     const dr_clock_stamp_t *clock) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_HEARTBEAT, req);
  dr__put_u64(&f, gen);
  put_clock(&f, clock);
  return dr__frame_end(&f);
}

int dr_enc_failure(dr_buf_t *b, uint32_t req, const dr_failure_t *x) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_FAILURE, req);
  dr__put_u64(&f, x->gen);
  dr__put_u64(&f, x->rank);
  dr__put_u64(&f, x->local_rank);
  dr__put_u64(&f, x->pid);
  dr__put_u64(&f, (uint32_t)x->exit_code);
  dr__put_u64(&f, (uint32_t)x->signal);
  dr__put_u64(&f, (uint64_t)x->kind);
  dr__put_bytes(&f, x->message);
  return dr__frame_end(&f);
}

int dr_enc_success(dr_buf_t *b, uint32_t req, uint64_t gen) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_SUCCESS, req);
  dr__put_u64(&f, gen);
  return dr__frame_end(&f);
}

int dr_enc_restart(dr_buf_t *b, uint32_t req, uint64_t gen,
                   uint32_t restart_count, dr_bytes_t reason) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_RESTART, req);
  dr__put_u64(&f, gen);
  dr__put_u64(&f, restart_count);
  dr__put_bytes(&f, reason);
  return dr__frame_end(&f);
}

int dr_enc_stop(dr_buf_t *b, uint32_t req, int exit_code, dr_bytes_t reason) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_STOP, req);
  dr__put_u64(&f, (uint32_t)exit_code);
  dr__put_bytes(&f, reason);
  return dr__frame_end(&f);
}

int dr_enc_resume(dr_buf_t *b, uint32_t req, const dr_resume_t *r) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_RESUME, req);
  dr__put_bytes(&f, r->run_id);
  dr__put_bytes(&f, r->host);
  dr__put_u64(&f, r->gen);
  dr__put_u64(&f, r->node_rank);
  dr__put_u64(&f, r->nnodes);
  dr__put_u64(&f, r->world_size);
  dr__put_u64(&f, r->nproc);
  dr__put_u64(&f, r->restart_count);
  put_clock(&f, &r->clock);
  dr__put_bytes(&f, (dr_bytes_t){r->resume_token, DR_RESUME_TOKEN_LEN});
  dr__put_u64(&f, r->term);
  return dr__frame_end(&f);
}

int dr_enc_leave(dr_buf_t *b, uint32_t req, const dr_leave_t *l) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_LEAVE, req);
  dr__put_u64(&f, l->gen);
  dr__put_u64(&f, l->signal);
  dr__put_bytes(&f, l->reason);
  return dr__frame_end(&f);
}

/* ---- the job's status: lists of records (wire.h, "Records") ------------ */

/* One list item: its length, then head[0..n_head) and tail. */
static void put_item(dr__frame_t *f, const uint8_t *head, size_t n_head,
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

static void put_peer_recs(dr__frame_t *f, const dr_peer_rec_t *v, size_t n) {
  dr__put_len(f, DR_FIELD_LIST, n);
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

static void put_node_recs(dr__frame_t *f, const dr_node_rec_t *v, size_t n) {
  dr__put_len(f, DR_FIELD_LIST, n);
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

static void put_rank_recs(dr__frame_t *f, const dr_rank_rec_t *v, size_t n) {
  dr__put_len(f, DR_FIELD_LIST, n);
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
    dr__store_be64(h + 52, v[i].rss_bytes);
    dr__store_be64(h + 60, v[i].rss_peak_bytes);
    dr__store_be32(h + 68, v[i].cpu_milli);
    dr__store_be64(h + 72, v[i].gpu_mem_bytes);
    dr__store_be32(h + 80, v[i].gpu_util);
    dr__store_be64(h + 84, v[i].gpu_used_bytes);
    dr__store_be64(h + 92, v[i].gpu_total_bytes);
    put_item(f, h, sizeof(h), no_tail);
  }
}

static void put_stack_recs(dr__frame_t *f, const dr_stack_rec_t *v, size_t n) {
  dr__put_len(f, DR_FIELD_LIST, n);
  for (size_t i = 0; i < n; i++) {
    uint8_t h[DR_STACK_REC_LEN];
    dr__store_be32(h, v[i].rank);
    dr__store_be32(h + 4, v[i].node_rank);
    dr__store_be32(h + 8, v[i].pid);
    dr__store_be32(h + 12, v[i].code);
    put_item(f, h, sizeof(h), v[i].text);
  }
}

static void put_env_recs(dr__frame_t *f, const dr_env_rec_t *v, size_t n) {
  dr__put_len(f, DR_FIELD_LIST, n);
  for (size_t i = 0; i < n; i++) {
    uint8_t h[DR_ENV_REC_LEN] = {0};
    dr__store_be32(h, v[i].node_rank);
    put_item(f, h, sizeof(h), v[i].text);
  }
}

int dr_enc_round_status(dr_buf_t *b, uint32_t req, const dr_round_status_t *st,
                        const dr_node_rec_t *nodes, size_t n_nodes,
                        const uint32_t *missing, size_t n_missing) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_ROUND_STATUS, req);
  dr__put_u64(&f, st->gen);
  dr__put_u64(&f, st->joined);
  dr__put_u64(&f, st->min_nodes);
  dr__put_u64(&f, st->max_nodes);
  dr__put_u64(&f, st->needed);
  dr__put_u64(&f, st->waited_ms);
  dr__put_u64(&f, st->last_call_ms);
  dr__put_u64(&f, st->n_missing);
  put_node_recs(&f, nodes, n_nodes);
  dr__put_len(&f, DR_FIELD_LIST, n_missing);
  for (size_t i = 0; i < n_missing; i++) {
    uint8_t x[4];
    dr__store_be32(x, missing[i]);
    put_item(&f, x, sizeof(x), no_tail);
  }
  return dr__frame_end(&f);
}

int dr_enc_ranks(dr_buf_t *b, uint32_t req, uint64_t gen,
                 const dr_rank_rec_t *ranks, size_t n_ranks) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_RANKS, req);
  dr__put_u64(&f, gen);
  put_rank_recs(&f, ranks, n_ranks);
  return dr__frame_end(&f);
}

int dr_enc_status(dr_buf_t *b, uint32_t req, uint32_t flags,
                  uint64_t wait_ms) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_STATUS, req);
  dr__put_u64(&f, flags);
  dr__put_u64(&f, wait_ms);
  return dr__frame_end(&f);
}

int dr_enc_job_status(dr_buf_t *b, uint32_t req, const dr_job_status_t *js,
                      const dr_node_rec_t *nodes, size_t n_nodes,
                      const dr_rank_rec_t *ranks, size_t n_ranks,
                      const dr_stack_rec_t *stacks, size_t n_stacks,
                      const dr_env_rec_t *envs, size_t n_envs) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_JOB_STATUS, req);
  dr__put_u64(&f, js->gen);
  dr__put_u64(&f, js->state);
  dr__put_u64(&f, js->restarts_used);
  dr__put_u64(&f, js->max_restarts);
  dr__put_u64(&f, js->min_nodes);
  dr__put_u64(&f, js->max_nodes);
  dr__put_u64(&f, js->exit_code);
  dr__put_bytes(&f, js->reason);
  dr__put_u64(&f, js->elapsed_ms);
  put_node_recs(&f, nodes, n_nodes);
  put_rank_recs(&f, ranks, n_ranks);
  put_stack_recs(&f, stacks, n_stacks);
  put_env_recs(&f, envs, n_envs);
  return dr__frame_end(&f);
}

int dr_enc_stacks(dr_buf_t *b, uint32_t req, uint64_t id, uint64_t gen) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_STACKS, req);
  dr__put_u64(&f, id);
  dr__put_u64(&f, gen);
  return dr__frame_end(&f);
}

int dr_enc_stack_dump(dr_buf_t *b, uint32_t req, uint64_t id,
                      const dr_stack_rec_t *stacks, size_t n_stacks) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_STACK_DUMP, req);
  dr__put_u64(&f, id);
  put_stack_recs(&f, stacks, n_stacks);
  return dr__frame_end(&f);
}
