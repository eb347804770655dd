/* Typed views of the status messages (ROUND_STATUS, RANKS, STATUS,
 * JOB_STATUS, STACKS, STACK_DUMP) and the iterators of their records
 * (wire.h, "Records"). A view checks every record of its message, so
 * that the iterators only read. */
#include "wire.h"

#include "errors.h"
#include "wire_be.h"

#define EXPECT(m, t)                                                         \
  do {                                                                       \
    if ((m)->type != DR_MSG_##t)                                             \
      return DR_EUNEXPECTED;                                                 \
  } while (0)

static int fits_u32(uint64_t v) { return v <= UINT32_MAX; }

const char *dr_job_state_name(uint32_t st) {
  switch (st) {
#define DR__JS_NAME(name, v, str)                                            \
  case v:                                                                    \
    return str;
    DR_JOB_STATES(DR__JS_NAME)
#undef DR__JS_NAME
  default:
    return "unknown";
  }
}

const char *dr_node_state_name(uint32_t st) {
  switch (st) {
#define DR__NS_NAME(name, v, str)                                            \
  case v:                                                                    \
    return str;
    DR_NODE_STATES(DR__NS_NAME)
#undef DR__NS_NAME
  default:
    return "unknown";
  }
}

const char *dr_rank_state_name(uint32_t st) {
  switch (st) {
#define DR__RS_NAME(name, v, str)                                            \
  case v:                                                                    \
    return str;
    DR_RANK_STATES(DR__RS_NAME)
#undef DR__RS_NAME
  default:
    return "unknown";
  }
}

/* The checks of one record kind: 0 or DR_EBADARG. */
static int node_ok(dr_bytes_t it) {
  if (it.len < DR_NODE_REC_LEN || it.len - DR_NODE_REC_LEN > DR_HOST_MAX)
    return DR_EBADARG;
  return dr__load_be32(it.p + 12) < DR__NS_N ? 0 : DR_EBADARG;
}

static int rank_ok(dr_bytes_t it) {
  if (it.len != DR_RANK_REC_LEN)
    return DR_EBADARG;
  return dr__load_be32(it.p + 16) < DR__RS_N ? 0 : DR_EBADARG;
}

static int stack_ok(dr_bytes_t it) {
  return it.len >= DR_STACK_REC_LEN ? 0 : DR_EBADARG;
}

static int env_ok(dr_bytes_t it) {
  return it.len >= DR_ENV_REC_LEN &&
                 it.len - DR_ENV_REC_LEN <= DR_ENV_SUMMARY_MAX
             ? 0
             : DR_EBADARG;
}

static int u32_ok(dr_bytes_t it) { return it.len == 4 ? 0 : DR_EBADARG; }

static int peer_ok(dr_bytes_t it) {
  return it.len >= DR_PEER_REC_LEN && it.len - DR_PEER_REC_LEN <= DR_HOST_MAX
             ? 0
             : DR_EBADARG;
}

static int check_list(const dr_list_t *l, int (*ok)(dr_bytes_t)) {
  uint32_t pos = 0;
  dr_bytes_t it;
  while (dr_list_next(l, &pos, &it))
    if (ok(it) != 0)
      return DR_EBADARG;
  return 0;
}

int dr_node_rec_next(const dr_list_t *l, uint32_t *pos, dr_node_rec_t *o) {
  dr_bytes_t it;
  if (!dr_list_next(l, pos, &it))
    return 0;
  o->node_rank = dr__load_be32(it.p);
  o->nproc = dr__load_be32(it.p + 4);
  o->first_rank = dr__load_be32(it.p + 8);
  o->state = dr__load_be32(it.p + 12);
  o->hb_age_ms = dr__load_be64(it.p + 16);
  o->report_age_ms = dr__load_be64(it.p + 24);
  o->host.p = it.p + DR_NODE_REC_LEN;
  o->host.len = it.len - DR_NODE_REC_LEN;
  return 1;
}

int dr_rank_rec_next(const dr_list_t *l, uint32_t *pos, dr_rank_rec_t *o) {
  dr_bytes_t it;
  if (!dr_list_next(l, pos, &it))
    return 0;
  o->rank = dr__load_be32(it.p);
  o->local_rank = dr__load_be32(it.p + 4);
  o->node_rank = dr__load_be32(it.p + 8);
  o->pid = dr__load_be32(it.p + 12);
  o->state = dr__load_be32(it.p + 16);
  o->exit_code = (int32_t)dr__load_be32(it.p + 20);
  o->signal = dr__load_be32(it.p + 24);
  o->step = dr__load_be64(it.p + 28);
  o->step_age_ms = dr__load_be64(it.p + 36);
  o->rate_milli = dr__load_be64(it.p + 44);
  o->rss_bytes = dr__load_be64(it.p + 52);
  o->rss_peak_bytes = dr__load_be64(it.p + 60);
  o->cpu_milli = dr__load_be32(it.p + 68);
  o->gpu_mem_bytes = dr__load_be64(it.p + 72);
  o->gpu_util = dr__load_be32(it.p + 80);
  o->gpu_used_bytes = dr__load_be64(it.p + 84);
  o->gpu_total_bytes = dr__load_be64(it.p + 92);
  return 1;
}

int dr_stack_rec_next(const dr_list_t *l, uint32_t *pos, dr_stack_rec_t *o) {
  dr_bytes_t it;
  if (!dr_list_next(l, pos, &it))
    return 0;
  o->rank = dr__load_be32(it.p);
  o->node_rank = dr__load_be32(it.p + 4);
  o->pid = dr__load_be32(it.p + 8);
  o->code = dr__load_be32(it.p + 12);
  o->text.p = it.p + DR_STACK_REC_LEN;
  o->text.len = it.len - DR_STACK_REC_LEN;
  return 1;
}

int dr_env_rec_next(const dr_list_t *l, uint32_t *pos, dr_env_rec_t *o) {
  dr_bytes_t it;
  if (!dr_list_next(l, pos, &it))
    return 0;
  o->node_rank = dr__load_be32(it.p);
  o->text.p = it.p + DR_ENV_REC_LEN;
  o->text.len = it.len - DR_ENV_REC_LEN;
  return 1;
}

/* envs: none, or one env record per node record, in their order and with
 * their node ranks (the nodes already checked). */
static int envs_ok(const dr_list_t *envs, const dr_list_t *nodes) {
  if (envs->count == 0)
    return 0;
  if (envs->count != nodes->count || check_list(envs, env_ok) != 0)
    return DR_EBADARG;
  uint32_t pe = 0, pn = 0;
  dr_env_rec_t e;
  dr_node_rec_t n;
  while (dr_env_rec_next(envs, &pe, &e) && dr_node_rec_next(nodes, &pn, &n))
    if (e.node_rank != n.node_rank)
      return DR_EBADARG;
  return 0;
}

int dr_rank_u32_next(const dr_list_t *l, uint32_t *pos, uint32_t *out) {
  dr_bytes_t it;
  if (!dr_list_next(l, pos, &it))
    return 0;
  *out = dr__load_be32(it.p);
  return 1;
}

int dr_msg_round_status(const dr_msg_t *m, dr_round_status_t *o) {
  EXPECT(m, ROUND_STATUS);
  for (int i = 1; i <= 4; i++)
    if (!fits_u32(m->f[i].u))
      return DR_EBADARG;
  if (!fits_u32(m->f[7].u) || check_list(&m->f[8].l, node_ok) != 0 ||
      check_list(&m->f[9].l, u32_ok) != 0 || m->f[9].l.count > m->f[7].u)
    return DR_EBADARG;
  o->gen = m->f[0].u;
  o->joined = (uint32_t)m->f[1].u;
  o->min_nodes = (uint32_t)m->f[2].u;
  o->max_nodes = (uint32_t)m->f[3].u;
  o->needed = (uint32_t)m->f[4].u;
  o->waited_ms = m->f[5].u;
  o->last_call_ms = m->f[6].u;
  o->n_missing = (uint32_t)m->f[7].u;
  o->nodes = m->f[8].l;
  o->missing = m->f[9].l;
  return 0;
}

int dr_msg_ranks(const dr_msg_t *m, dr_ranks_t *o) {
  EXPECT(m, RANKS);
  if (check_list(&m->f[1].l, rank_ok) != 0)
    return DR_EBADARG;
  o->gen = m->f[0].u;
  o->ranks = m->f[1].l;
  return 0;
}

int dr_msg_status(const dr_msg_t *m, dr_status_req_t *o) {
  EXPECT(m, STATUS);
  if (m->f[0].u & ~(uint64_t)(DR_STATUS_STACKS | DR_STATUS_ENV))
    return DR_EBADARG; /* a flag this build does not know */
  o->flags = (uint32_t)m->f[0].u;
  o->wait_ms = m->f[1].u;
  return 0;
}

int dr_msg_job_status(const dr_msg_t *m, dr_job_status_t *o) {
  EXPECT(m, JOB_STATUS);
  if (m->f[1].u >= DR__JS_N)
    return DR_EBADARG;
  for (int i = 2; i <= 5; i++)
    if (!fits_u32(m->f[i].u))
      return DR_EBADARG;
  if (m->f[6].u != DR_NONE && !fits_u32(m->f[6].u))
    return DR_EBADARG;
  if (check_list(&m->f[9].l, node_ok) != 0 ||
      check_list(&m->f[10].l, rank_ok) != 0 ||
      check_list(&m->f[11].l, stack_ok) != 0 ||
      envs_ok(&m->f[12].l, &m->f[9].l) != 0)
    return DR_EBADARG;
  o->gen = m->f[0].u;
  o->state = (uint32_t)m->f[1].u;
  o->restarts_used = (uint32_t)m->f[2].u;
  o->max_restarts = (uint32_t)m->f[3].u;
  o->min_nodes = (uint32_t)m->f[4].u;
  o->max_nodes = (uint32_t)m->f[5].u;
  o->exit_code = m->f[6].u;
  o->reason = m->f[7].b;
  o->elapsed_ms = m->f[8].u;
  o->nodes = m->f[9].l;
  o->ranks = m->f[10].l;
  o->stacks = m->f[11].l;
  o->envs = m->f[12].l;
  return 0;
}

int dr_msg_stacks(const dr_msg_t *m, dr_stacks_req_t *o) {
  EXPECT(m, STACKS);
  o->id = m->f[0].u;
  o->gen = m->f[1].u;
  return 0;
}

int dr_msg_stack_dump(const dr_msg_t *m, dr_stack_dump_t *o) {
  EXPECT(m, STACK_DUMP);
  if (check_list(&m->f[1].l, stack_ok) != 0)
    return DR_EBADARG;
  o->id = m->f[0].u;
  o->stacks = m->f[1].l;
  return 0;
}

int dr_peer_list_check(const dr_list_t *l) {
  if (l->count > DR_PEERS_MAX)
    return DR_EBADARG;
  return check_list(l, peer_ok);
}

int dr_peer_rec_next(const dr_list_t *l, uint32_t *pos, dr_peer_rec_t *o) {
  dr_bytes_t it;
  if (!dr_list_next(l, pos, &it))
    return 0;
  o->node_rank = dr__load_be32(it.p);
  o->port = dr__load_be32(it.p + 4);
  o->roles = dr__load_be32(it.p + 8);
  o->ckpt_step = dr__load_be64(it.p + 16);
  o->addr.p = it.p + DR_PEER_REC_LEN;
  o->addr.len = it.len - DR_PEER_REC_LEN;
  return 1;
}
