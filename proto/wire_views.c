/* Typed views of decoded messages: every field by name, integers checked
 * against the width of their struct member. The decoder has already
 * checked the schema (number, order and kind of fields). */
#include "wire.h"

#include <limits.h>
#include <string.h>

#include "errors.h"

static int fits_u32(uint64_t v) { return v <= UINT32_MAX; }

/* Three u64 fields from index i: any values (0 = none) are valid. */
static dr_clock_stamp_t clock_at(const dr_msg_t *m, int i) {
  dr_clock_stamp_t c = {m->f[i].u, m->f[i + 1].u, m->f[i + 2].u};
  return c;
}

#define EXPECT(m, t)                                                         \
  do {                                                                       \
    if ((m)->type != DR_MSG_##t)                                             \
      return DR_EUNEXPECTED;                                                 \
  } while (0)

int dr_msg_hello(const dr_msg_t *m, dr_hello_t *o) {
  EXPECT(m, HELLO);
  o->run_id = m->f[0].b;
  o->host = m->f[1].b;
  return 0;
}

int dr_msg_welcome(const dr_msg_t *m, dr_welcome_t *o) {
  EXPECT(m, WELCOME);
  if (m->f[0].u > 1)
    return DR_EBADARG;
  o->auth_required = (int)m->f[0].u;
  o->nonce = m->f[1].b;
  o->tx_us = m->f[2].u;
  return 0;
}

int dr_msg_auth(const dr_msg_t *m, dr_auth_t *o) {
  EXPECT(m, AUTH);
  o->mac = m->f[0].b;
  return 0;
}

int dr_msg_error(const dr_msg_t *m, dr_error_t *o) {
  EXPECT(m, ERROR);
  /* A code this build does not know still travels back as one. */
  o->code = m->f[0].u > 0 && m->f[0].u <= INT_MAX ? -(int)m->f[0].u
                                                   : DR_EREMOTE;
  o->message = m->f[1].b;
  return 0;
}

int dr_msg_store_req(const dr_msg_t *m, dr_store_req_t *o) {
  dr_store_req_t z = {0};
  *o = z;
  o->gen = m->f[0].u;
  switch (m->type) {
  case DR_MSG_SET:
    o->key = m->f[1].b;
    o->value = m->f[2].b;
    return 0;
  case DR_MSG_GET:
    o->key = m->f[1].b;
    o->wait_ms = m->f[2].u;
    return 0;
  case DR_MSG_ADD:
    o->key = m->f[1].b;
    o->delta = (int64_t)m->f[2].u;
    return 0;
  case DR_MSG_CAS:
    o->key = m->f[1].b;
    o->expected = m->f[2].b;
    o->value = m->f[3].b;
    return 0;
  case DR_MSG_DELETE:
    o->key = m->f[1].b;
    return 0;
  case DR_MSG_MULTI_GET:
    o->keys = m->f[1].l;
    o->wait_ms = m->f[2].u;
    return 0;
  case DR_MSG_CHECK:
    o->keys = m->f[1].l;
    return 0;
  case DR_MSG_BARRIER:
    o->key = m->f[1].b;
    o->n = m->f[2].u;
    o->wait_ms = m->f[3].u;
    return 0;
  default:
    return DR_EUNEXPECTED;
  }
}

int dr_msg_value(const dr_msg_t *m, dr_bytes_t *value) {
  EXPECT(m, VALUE);
  *value = m->f[0].b;
  return 0;
}

int dr_msg_int(const dr_msg_t *m, int64_t *value) {
  EXPECT(m, INT);
  *value = (int64_t)m->f[0].u;
  return 0;
}

int dr_msg_values(const dr_msg_t *m, dr_list_t *values) {
  EXPECT(m, VALUES);
  *values = m->f[0].l;
  return 0;
}

int dr_msg_join(const dr_msg_t *m, dr_join_t *o) {
  EXPECT(m, JOIN);
  if (!fits_u32(m->f[3].u) || !fits_u32(m->f[5].u))
    return DR_EBADARG;
  o->run_id = m->f[0].b;
  o->host = m->f[1].b;
  o->addr = m->f[2].b;
  o->nproc = (uint32_t)m->f[3].u;
  o->node_rank = m->f[4].u;
  o->master_port_offer = (uint32_t)m->f[5].u;
  o->bootstrap_offer = m->f[6].b;
  o->clock = clock_at(m, 7);
  if (!fits_u32(m->f[10].u) || m->f[10].u > 65535)
    return DR_EBADARG;
  o->ckpt_port = (uint32_t)m->f[10].u;
  o->ckpt_step = m->f[11].u;
  if (m->f[12].u > 65535 || m->f[14].u > 1)
    return DR_EBADARG;
  o->standby_port = (uint32_t)m->f[12].u;
  o->term = m->f[13].u;
  o->hosts_server = (uint32_t)m->f[14].u;
  if (m->f[15].b.len > DR_ENV_SUMMARY_MAX ||
      m->f[16].b.len > DR_SOCKET_IFNAME_MAX)
    return DR_EBADARG;
  o->env = m->f[15].b;
  o->socket_ifname = m->f[16].b;
  return 0;
}

int dr_msg_assign(const dr_msg_t *m, dr_assign_t *o) {
  EXPECT(m, ASSIGN);
  static const int u32_fields[] = {1, 2, 3, 4, 6, 8, 9};
  for (size_t i = 0; i < sizeof(u32_fields) / sizeof(u32_fields[0]); i++)
    if (!fits_u32(m->f[u32_fields[i]].u))
      return DR_EBADARG;
  o->gen = m->f[0].u;
  o->node_rank = (uint32_t)m->f[1].u;
  o->nnodes = (uint32_t)m->f[2].u;
  o->world_size = (uint32_t)m->f[3].u;
  o->first_rank = (uint32_t)m->f[4].u;
  o->master_addr = m->f[5].b;
  o->master_port = (uint32_t)m->f[6].u;
  o->bootstrap = m->f[7].b;
  o->restart_count = (uint32_t)m->f[8].u;
  o->max_restarts = (uint32_t)m->f[9].u;
  o->clock_offset_us = (int64_t)m->f[10].u;
  o->clock_uncertainty_us = m->f[11].u;
  if (m->f[12].b.len != DR_RESUME_TOKEN_LEN)
    return DR_EBADARG;
  memcpy(o->resume_token, m->f[12].b.p, DR_RESUME_TOKEN_LEN);
  o->ckpt_step = m->f[13].u;
  if (dr_peer_list_check(&m->f[14].l) != 0)
    return DR_EBADARG;
  o->peer_recs = NULL;
  o->n_peer_recs = 0;
  o->peers = m->f[14].l;
  if (!fits_u32(m->f[16].u) || m->f[17].l.count > DR_SUCCESSORS_MAX ||
      dr_peer_list_check(&m->f[17].l) != 0)
    return DR_EBADARG;
  o->term = m->f[15].u;
  o->server_node = (uint32_t)m->f[16].u;
  o->succ_recs = NULL;
  o->n_succ_recs = 0;
  o->successors = m->f[17].l;
  return 0;
}

int dr_msg_heartbeat(const dr_msg_t *m, dr_heartbeat_t *o) {
  EXPECT(m, HEARTBEAT);
  o->gen = m->f[0].u;
  o->clock = clock_at(m, 1);
  return 0;
}

int dr_msg_failure(const dr_msg_t *m, dr_failure_t *o) {
  EXPECT(m, FAILURE);
  for (int i = 1; i <= 6; i++)
    if (!fits_u32(m->f[i].u))
      return DR_EBADARG;
  if (m->f[6].u >= DR__FAIL_KIND_N)
    return DR_EBADARG;
  o->gen = m->f[0].u;
  o->rank = (uint32_t)m->f[1].u;
  o->local_rank = (uint32_t)m->f[2].u;
  o->pid = (uint32_t)m->f[3].u;
  o->exit_code = (int32_t)(uint32_t)m->f[4].u;
  o->signal = (int32_t)(uint32_t)m->f[5].u;
  o->kind = (dr_fail_kind_t)m->f[6].u;
  o->message = m->f[7].b;
  return 0;
}

int dr_msg_success(const dr_msg_t *m, uint64_t *gen) {
  EXPECT(m, SUCCESS);
  *gen = m->f[0].u;
  return 0;
}

int dr_msg_restart(const dr_msg_t *m, dr_restart_t *o) {
  EXPECT(m, RESTART);
  if (!fits_u32(m->f[1].u))
    return DR_EBADARG;
  o->gen = m->f[0].u;
  o->restart_count = (uint32_t)m->f[1].u;
  o->reason = m->f[2].b;
  return 0;
}

int dr_msg_stop(const dr_msg_t *m, dr_stop_t *o) {
  EXPECT(m, STOP);
  if (!fits_u32(m->f[0].u))
    return DR_EBADARG;
  o->exit_code = (int)(int32_t)(uint32_t)m->f[0].u;
  o->reason = m->f[1].b;
  return 0;
}

int dr_msg_resume(const dr_msg_t *m, dr_resume_t *o) {
  EXPECT(m, RESUME);
  for (int i = 3; i <= 7; i++)
    if (!fits_u32(m->f[i].u))
      return DR_EBADARG;
  o->run_id = m->f[0].b;
  o->host = m->f[1].b;
  o->gen = m->f[2].u;
  o->node_rank = (uint32_t)m->f[3].u;
  o->nnodes = (uint32_t)m->f[4].u;
  o->world_size = (uint32_t)m->f[5].u;
  o->nproc = (uint32_t)m->f[6].u;
  o->restart_count = (uint32_t)m->f[7].u;
  o->clock = clock_at(m, 8);
  if (m->f[11].b.len != DR_RESUME_TOKEN_LEN)
    return DR_EBADARG;
  memcpy(o->resume_token, m->f[11].b.p, DR_RESUME_TOKEN_LEN);
  o->term = m->f[12].u;
  return 0;
}

int dr_msg_leave(const dr_msg_t *m, dr_leave_t *o) {
  EXPECT(m, LEAVE);
  if (!fits_u32(m->f[1].u))
    return DR_EBADARG;
  o->gen = m->f[0].u;
  o->signal = (uint32_t)m->f[1].u;
  o->reason = m->f[2].b;
  return 0;
}
