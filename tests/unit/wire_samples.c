/* Sample messages of every type for the wire codec's tests. See
 * wire_samples.h. */
#include "wire_samples.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "errors.h"

static const uint8_t bin[] = {0, 1, 2, 0xff, 0, 'x'};
static const uint8_t nonce[DR_NONCE_LEN] = {
    1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
    17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

dr_bytes_t mk(const void *p, size_t n) {
  dr_bytes_t b = {p, (uint32_t)n};
  return b;
}

static const char *const s_keys[] = {"rank/0", "", "a/much/longer/key"};
static dr_bytes_t key_list[3];
static dr_bytes_t value_list[3];

void init_lists(void) {
  for (int i = 0; i < 3; i++)
    key_list[i] = dr_str(s_keys[i]);
  value_list[0] = mk(bin, sizeof(bin));
  value_list[1] = mk(NULL, 0);
  value_list[2] = dr_str("third");
}

/* Clock stamps: distinct, and wider than 32 bits as real ones are. */
static const dr_clock_stamp_t sample_clock = {
    1700000000123456ull, 1700000000223456ull, 1700000000323456ull};
#define SAMPLE_TX_US 1700000000000001ull

static void assert_clock(dr_clock_stamp_t got) {
  assert_int_equal(got.echo_us, sample_clock.echo_us);
  assert_int_equal(got.echo_rx_us, sample_clock.echo_rx_us);
  assert_int_equal(got.tx_us, sample_clock.tx_us);
}

/* A JOIN's summary: lines, each ending in '\n'. */
#define SAMPLE_ENV                                                           \
  "env: GPUs: none\n"                                                        \
  "env: NCCL and torch variables: NCCL_SOCKET_IFNAME=^lo,docker\n"
static dr_join_t sample_join(void) {
  dr_join_t j = {dr_str("job7"),      dr_str("node-a"),
                 dr_str("10.0.0.2"),  8,
                 3,                   29500,
                 mk(bin, sizeof(bin)), sample_clock,
                 41000,               0x0102030405ull,
                 41001,               0x0203040506ull,
                 1,                   dr_str(SAMPLE_ENV),
                 dr_str("^lo,docker")};
  return j;
}

/* An ASSIGN's peers: a replica and a holder of the newest checkpoint. */
static const dr_peer_rec_t sample_peers[2] = {
    {2, 41002, DR_PEER_REPLICA, DR_NONE, {(const uint8_t *)"10.0.0.3", 8}},
    {0, 41000, DR_PEER_HOLDER, 777, {(const uint8_t *)"10.0.0.1", 8}}};

/* An ASSIGN's successors: two standby servers. */
static const dr_peer_rec_t sample_succ[2] = {
    {1, 41011, DR_PEER_SUCCESSOR, DR_NONE, {(const uint8_t *)"10.0.0.2", 8}},
    {2, 41012, DR_PEER_SUCCESSOR, DR_NONE, {(const uint8_t *)"10.0.0.3", 8}}};

static dr_assign_t sample_assign(void) {
  /* A negative offset travels in two's complement. */
  dr_assign_t a = {0x1122334455667788ull,
                   1,
                   2,
                   16,
                   8,
                   dr_str("10.0.0.1"),
                   29501,
                   mk(nonce, sizeof(nonce)),
                   2,
                   3,
                   -250123,
                   42,
                   {0},
                   777,
                   sample_peers,
                   2,
                   {0, NULL, 0},
                   0x0304050607ull,
                   0,
                   sample_succ,
                   2,
                   {0, NULL, 0}};
  memcpy(a.resume_token, nonce + 7, sizeof(a.resume_token));
  return a;
}

static dr_failure_t sample_failure(void) {
  dr_failure_t f = {5, 13, 5, 4242, -1, 9, DR_FAIL_SIGNAL,
                    dr_str("killed by SIGKILL")};
  return f;
}

/* The status messages' records: every kind of value, DR_NONE and
 * DR_NO_RANK included, a negative exit code, an empty text. */
#define BYTES(s) {(const uint8_t *)(s), sizeof(s) - 1}
static const dr_node_rec_t s_nodes[2] = {
    {0, 8, 0, DR_NS_RUNNING, 120, 340, BYTES("node-a")},
    {DR_NO_RANK, 4, DR_NO_RANK, DR_NS_WAITING, DR_NONE, DR_NONE,
     BYTES("node-b.example")}};
static const dr_rank_rec_t s_ranks[2] = {
    /* Health figures past 32 bits where they are u64, and every byte of
     * the u32s set, so that a field cut short or moved shows. */
    {0, 0, 0, 4242, DR_RS_RUNNING, 0, 0, 0x100000001ull, 56, 12345,
     0x3123456789ull, 0x3223456789ull, 0x7654321u, 0x1400000002ull, 97,
     0x1500000003ull, 0x1600000004ull},
    {9, 1, 1, 4343, DR_RS_EXITED, -1, 0, DR_NONE, DR_NONE, DR_NONE,
     DR_NONE, 2ull << 30, DR_NO_U32, DR_NONE, DR_NO_U32, DR_NONE,
     DR_NONE}};
static const dr_stack_rec_t s_stacks[2] = {
    {0, 0, 4242, 0, BYTES("Thread 1 (main):\n  #0 step () at train.c:12\n")},
    {9, 1, 4343, ENOSYS, BYTES("")}};
/* One per node record, with its node rank; the second one not known. */
static const dr_env_rec_t s_envs[2] = {
    {0, BYTES("env: GPUs: none\nbinding: local rank 0: cpus 0-3\n")},
    {DR_NO_RANK, BYTES("")}};
static const uint32_t s_missing[2] = {2, 0xfffffffeu};

static dr_round_status_t sample_round(void) {
  dr_round_status_t st;
  memset(&st, 0, sizeof(st));
  st.gen = 15;
  st.joined = 2;
  st.min_nodes = 3;
  st.max_nodes = 5;
  st.needed = 1;
  st.waited_ms = 1333;
  st.last_call_ms = DR_NONE;
  st.n_missing = 3; /* of which the list holds 2 */
  return st;
}

static dr_job_status_t sample_job(void) {
  dr_job_status_t js;
  memset(&js, 0, sizeof(js));
  js.gen = 14;
  js.state = DR_JS_DONE;
  js.restarts_used = 1;
  js.max_restarts = 3;
  js.min_nodes = 2;
  js.max_nodes = 4;
  js.exit_code = 137;
  js.reason = dr_str("restart budget spent");
  js.elapsed_ms = 1500;
  return js;
}

/* A directory checkpoint wider than 32 bits, written by node 3. */
static dr_ckpt_put_t sample_put(void) {
  dr_ckpt_put_t p = {dr_str("job7"), dr_str("epoch3-step190"), DR_CKPT_DIR,
                     0x123456789ull, 190, 3};
  return p;
}

int encode_sample(dr_buf_t *b, uint8_t type, uint32_t req) {
  dr_join_t j = sample_join();
  dr_assign_t a = sample_assign();
  dr_failure_t f = sample_failure();
  switch (type) {
  case DR_MSG_HELLO:
    return dr_enc_hello(b, req, dr_str("job7"), dr_str("node-a.example"));
  case DR_MSG_WELCOME:
    return dr_enc_welcome(b, req, 1, mk(nonce, sizeof(nonce)), SAMPLE_TX_US);
  case DR_MSG_AUTH:
    return dr_enc_auth(b, req, mk(nonce, DR_MAC_LEN));
  case DR_MSG_OK:
    return dr_enc_ok(b, req);
  case DR_MSG_ERROR:
    return dr_enc_error(b, req, DR_ENOTFOUND, dr_str("key 'x' not found"));
  case DR_MSG_SET:
    return dr_enc_set(b, req, 3, dr_str("k/with/slash"), mk(bin, sizeof(bin)));
  case DR_MSG_GET:
    return dr_enc_get(b, req, 0, dr_str("rank/0"), 1500);
  case DR_MSG_VALUE:
    return dr_enc_value(b, req, mk(bin, sizeof(bin)));
  case DR_MSG_ADD:
    return dr_enc_add(b, req, 2, dr_str("counter"), -5);
  case DR_MSG_INT:
    return dr_enc_int(b, req, -42);
  case DR_MSG_CAS:
    return dr_enc_cas(b, req, 4, dr_str("leader"), mk(NULL, 0), dr_str("x"));
  case DR_MSG_DELETE:
    return dr_enc_delete(b, req, 5, dr_str("gone"));
  case DR_MSG_MULTI_GET:
    return dr_enc_multi_get(b, req, 6, key_list, 3, 250);
  case DR_MSG_VALUES:
    return dr_enc_values(b, req, value_list, 3);
  case DR_MSG_CHECK:
    return dr_enc_check(b, req, 7, key_list, 3);
  case DR_MSG_BARRIER:
    return dr_enc_barrier(b, req, 8, dr_str("init"), 16, 30000);
  case DR_MSG_JOIN:
    return dr_enc_join(b, req, &j);
  case DR_MSG_ASSIGN:
    return dr_enc_assign(b, req, &a);
  case DR_MSG_HEARTBEAT:
    return dr_enc_heartbeat(b, req, 9, &sample_clock);
  case DR_MSG_FAILURE:
    return dr_enc_failure(b, req, &f);
  case DR_MSG_SUCCESS:
    return dr_enc_success(b, req, 10);
  case DR_MSG_RESTART:
    return dr_enc_restart(b, req, 11, 2, dr_str("rank 3 exited with code 1"));
  case DR_MSG_STOP:
    return dr_enc_stop(b, req, 3, dr_str("restart budget spent"));
  case DR_MSG_RESUME: {
    dr_resume_t q = {dr_str("job7"), dr_str("node-a.example"), 12, 1, 2, 16,
                     8, 3, sample_clock, {0}, 0x0405060708ull};
    memcpy(q.resume_token, nonce + 3, sizeof(q.resume_token));
    return dr_enc_resume(b, req, &q);
  }
  case DR_MSG_LEAVE: {
    dr_leave_t l = {13, 15, dr_str("ddprun on 'node-a' received SIGTERM")};
    return dr_enc_leave(b, req, &l);
  }
  case DR_MSG_ROUND_STATUS: {
    dr_round_status_t st = sample_round();
    return dr_enc_round_status(b, req, &st, s_nodes, 2, s_missing, 2);
  }
  case DR_MSG_RANKS:
    return dr_enc_ranks(b, req, 16, s_ranks, 2);
  case DR_MSG_STATUS:
    return dr_enc_status(b, req, DR_STATUS_STACKS | DR_STATUS_ENV, 7000);
  case DR_MSG_JOB_STATUS: {
    dr_job_status_t js = sample_job();
    return dr_enc_job_status(b, req, &js, s_nodes, 2, s_ranks, 2, s_stacks,
                             2, s_envs, 2);
  }
  case DR_MSG_STACKS:
    return dr_enc_stacks(b, req, 0x123456789ull, 17);
  case DR_MSG_STACK_DUMP:
    return dr_enc_stack_dump(b, req, 0x123456789ull, s_stacks, 2);
  case DR_MSG_CKPT_PUT: {
    dr_ckpt_put_t p = sample_put();
    return dr_enc_ckpt_put(b, req, &p);
  }
  case DR_MSG_CKPT_ENTRY: {
    dr_ckpt_entry_t e = {dr_str("shards/rank0.pt"), DR_CKPT_FILE,
                         0x100000002ull};
    return dr_enc_ckpt_entry(b, req, &e);
  }
  case DR_MSG_CKPT_DATA:
    return dr_enc_ckpt_data(b, req, mk(bin, sizeof(bin)));
  case DR_MSG_CKPT_END:
    return dr_enc_ckpt_end(b, req, mk(nonce, DR_CKPT_SUM_LEN));
  case DR_MSG_CKPT_GET: {
    dr_ckpt_get_t g = {dr_str("job7"), dr_str(""), 190};
    return dr_enc_ckpt_get(b, req, &g);
  }
  default:
    fail_msg("no sample for type %u", type);
    return -1;
  }
}

static void assert_bytes(dr_bytes_t got, const void *p, size_t n) {
  assert_int_equal(got.len, n);
  if (n > 0)
    assert_memory_equal(got.p, p, n);
}

static void assert_str(dr_bytes_t got, const char *s) {
  assert_bytes(got, s, strlen(s));
}

static void assert_list(const dr_list_t *l, const dr_bytes_t *want, size_t n) {
  uint32_t pos = 0;
  dr_bytes_t item;
  size_t i = 0;
  assert_int_equal(l->count, n);
  while (dr_list_next(l, &pos, &item)) {
    assert_true(i < n);
    assert_bytes(item, want[i].p, want[i].len);
    i++;
  }
  assert_int_equal(i, n);
  assert_int_equal(pos, l->len);
}

static void check_nodes(const dr_list_t *l) {
  uint32_t pos = 0, i = 0;
  dr_node_rec_t x;
  assert_int_equal(l->count, 2);
  while (dr_node_rec_next(l, &pos, &x)) {
    const dr_node_rec_t *w = &s_nodes[i++];
    assert_int_equal(x.node_rank, w->node_rank);
    assert_int_equal(x.nproc, w->nproc);
    assert_int_equal(x.first_rank, w->first_rank);
    assert_int_equal(x.state, w->state);
    assert_int_equal(x.hb_age_ms, w->hb_age_ms);
    assert_int_equal(x.report_age_ms, w->report_age_ms);
    assert_bytes(x.host, w->host.p, w->host.len);
  }
  assert_int_equal(i, 2);
}

static void check_ranks(const dr_list_t *l) {
  uint32_t pos = 0, i = 0;
  dr_rank_rec_t x;
  assert_int_equal(l->count, 2);
  while (dr_rank_rec_next(l, &pos, &x)) {
    const dr_rank_rec_t *w = &s_ranks[i++];
    assert_int_equal(x.rank, w->rank);
    assert_int_equal(x.local_rank, w->local_rank);
    assert_int_equal(x.node_rank, w->node_rank);
    assert_int_equal(x.pid, w->pid);
    assert_int_equal(x.state, w->state);
    assert_int_equal(x.exit_code, w->exit_code);
    assert_int_equal(x.signal, w->signal);
    assert_int_equal(x.step, w->step);
    assert_int_equal(x.step_age_ms, w->step_age_ms);
    assert_int_equal(x.rate_milli, w->rate_milli);
    assert_int_equal(x.rss_bytes, w->rss_bytes);
    assert_int_equal(x.rss_peak_bytes, w->rss_peak_bytes);
    assert_int_equal(x.cpu_milli, w->cpu_milli);
    assert_int_equal(x.gpu_mem_bytes, w->gpu_mem_bytes);
    assert_int_equal(x.gpu_util, w->gpu_util);
    assert_int_equal(x.gpu_used_bytes, w->gpu_used_bytes);
    assert_int_equal(x.gpu_total_bytes, w->gpu_total_bytes);
  }
  assert_int_equal(i, 2);
}

static void check_stacks(const dr_list_t *l) {
  uint32_t pos = 0, i = 0;
  dr_stack_rec_t x;
  assert_int_equal(l->count, 2);
  while (dr_stack_rec_next(l, &pos, &x)) {
    const dr_stack_rec_t *w = &s_stacks[i++];
    assert_int_equal(x.rank, w->rank);
    assert_int_equal(x.node_rank, w->node_rank);
    assert_int_equal(x.pid, w->pid);
    assert_int_equal(x.code, w->code);
    assert_bytes(x.text, w->text.p, w->text.len);
  }
  assert_int_equal(i, 2);
}

static void check_envs(const dr_list_t *l) {
  uint32_t pos = 0, i = 0;
  dr_env_rec_t x;
  assert_int_equal(l->count, 2);
  while (dr_env_rec_next(l, &pos, &x)) {
    const dr_env_rec_t *w = &s_envs[i++];
    assert_int_equal(x.node_rank, w->node_rank);
    assert_bytes(x.text, w->text.p, w->text.len);
  }
  assert_int_equal(i, 2);
}

static void check_ckpt_sample(const dr_msg_t *m);

static void check_status_sample(const dr_msg_t *m) {
  switch (m->type) {
  case DR_MSG_ROUND_STATUS: {
    dr_round_status_t st, w = sample_round();
    assert_int_equal(dr_msg_round_status(m, &st), 0);
    assert_int_equal(st.gen, w.gen);
    assert_int_equal(st.joined, w.joined);
    assert_int_equal(st.min_nodes, w.min_nodes);
    assert_int_equal(st.max_nodes, w.max_nodes);
    assert_int_equal(st.needed, w.needed);
    assert_int_equal(st.waited_ms, w.waited_ms);
    assert_int_equal(st.last_call_ms, DR_NONE);
    assert_int_equal(st.n_missing, 3);
    check_nodes(&st.nodes);
    uint32_t pos = 0, k, i = 0;
    while (dr_rank_u32_next(&st.missing, &pos, &k))
      assert_int_equal(k, s_missing[i++]);
    assert_int_equal(i, 2);
    break;
  }
  case DR_MSG_RANKS: {
    dr_ranks_t q;
    assert_int_equal(dr_msg_ranks(m, &q), 0);
    assert_int_equal(q.gen, 16);
    check_ranks(&q.ranks);
    break;
  }
  case DR_MSG_STATUS: {
    dr_status_req_t q;
    assert_int_equal(dr_msg_status(m, &q), 0);
    assert_int_equal(q.flags, DR_STATUS_STACKS | DR_STATUS_ENV);
    assert_int_equal(q.wait_ms, 7000);
    break;
  }
  case DR_MSG_JOB_STATUS: {
    dr_job_status_t js, w = sample_job();
    assert_int_equal(dr_msg_job_status(m, &js), 0);
    assert_int_equal(js.gen, w.gen);
    assert_int_equal(js.state, w.state);
    assert_int_equal(js.restarts_used, w.restarts_used);
    assert_int_equal(js.max_restarts, w.max_restarts);
    assert_int_equal(js.min_nodes, w.min_nodes);
    assert_int_equal(js.max_nodes, w.max_nodes);
    assert_int_equal(js.exit_code, w.exit_code);
    assert_str(js.reason, "restart budget spent");
    assert_int_equal(js.elapsed_ms, w.elapsed_ms);
    check_nodes(&js.nodes);
    check_ranks(&js.ranks);
    check_stacks(&js.stacks);
    check_envs(&js.envs);
    break;
  }
  case DR_MSG_STACKS: {
    dr_stacks_req_t q;
    assert_int_equal(dr_msg_stacks(m, &q), 0);
    assert_int_equal(q.id, 0x123456789ull);
    assert_int_equal(q.gen, 17);
    break;
  }
  case DR_MSG_STACK_DUMP: {
    dr_stack_dump_t d;
    assert_int_equal(dr_msg_stack_dump(m, &d), 0);
    assert_int_equal(d.id, 0x123456789ull);
    check_stacks(&d.stacks);
    break;
  }
  default:
    check_ckpt_sample(m);
  }
}

void check_sample(const dr_msg_t *m) {
  const dr_field_t *f = m->f;
  dr_join_t j, wj = sample_join();
  dr_assign_t a, wa = sample_assign();
  dr_failure_t x, wx = sample_failure();
  dr_welcome_t w;
  dr_heartbeat_t h;
  dr_resume_t q;
  switch (m->type) {
  case DR_MSG_HELLO:
    assert_str(f[0].b, "job7");
    assert_str(f[1].b, "node-a.example");
    break;
  case DR_MSG_WELCOME:
    assert_int_equal(f[0].u, 1);
    assert_bytes(f[1].b, nonce, sizeof(nonce));
    assert_int_equal(dr_msg_welcome(m, &w), 0);
    assert_int_equal(w.auth_required, 1);
    assert_int_equal(w.tx_us, SAMPLE_TX_US);
    break;
  case DR_MSG_AUTH:
    assert_bytes(f[0].b, nonce, DR_MAC_LEN);
    break;
  case DR_MSG_OK:
    break;
  case DR_MSG_ERROR:
    /* The wire carries the positive value of the code. */
    assert_int_equal(f[0].u, (uint64_t)-(int64_t)DR_ENOTFOUND);
    assert_str(f[1].b, "key 'x' not found");
    break;
  case DR_MSG_SET:
    assert_int_equal(f[0].u, 3);
    assert_str(f[1].b, "k/with/slash");
    assert_bytes(f[2].b, bin, sizeof(bin));
    break;
  case DR_MSG_GET:
    assert_int_equal(f[0].u, 0);
    assert_str(f[1].b, "rank/0");
    assert_int_equal(f[2].u, 1500);
    break;
  case DR_MSG_VALUE:
    assert_bytes(f[0].b, bin, sizeof(bin));
    break;
  case DR_MSG_ADD:
    assert_int_equal(f[0].u, 2);
    assert_str(f[1].b, "counter");
    assert_int_equal((int64_t)f[2].u, -5);
    break;
  case DR_MSG_INT:
    assert_int_equal((int64_t)f[0].u, -42);
    break;
  case DR_MSG_CAS:
    assert_int_equal(f[0].u, 4);
    assert_str(f[1].b, "leader");
    assert_int_equal(f[2].b.len, 0);
    assert_str(f[3].b, "x");
    break;
  case DR_MSG_DELETE:
    assert_int_equal(f[0].u, 5);
    assert_str(f[1].b, "gone");
    break;
  case DR_MSG_MULTI_GET:
    assert_int_equal(f[0].u, 6);
    assert_list(&f[1].l, key_list, 3);
    assert_int_equal(f[2].u, 250);
    break;
  case DR_MSG_VALUES:
    assert_list(&f[0].l, value_list, 3);
    break;
  case DR_MSG_CHECK:
    assert_int_equal(f[0].u, 7);
    assert_list(&f[1].l, key_list, 3);
    break;
  case DR_MSG_BARRIER:
    assert_int_equal(f[0].u, 8);
    assert_str(f[1].b, "init");
    assert_int_equal(f[2].u, 16);
    assert_int_equal(f[3].u, 30000);
    break;
  case DR_MSG_JOIN:
    assert_int_equal(dr_msg_join(m, &j), 0);
    assert_bytes(j.run_id, wj.run_id.p, wj.run_id.len);
    assert_bytes(j.host, wj.host.p, wj.host.len);
    assert_bytes(j.addr, wj.addr.p, wj.addr.len);
    assert_int_equal(j.nproc, wj.nproc);
    assert_int_equal(j.node_rank, wj.node_rank);
    assert_int_equal(j.master_port_offer, wj.master_port_offer);
    assert_bytes(j.bootstrap_offer, wj.bootstrap_offer.p,
                 wj.bootstrap_offer.len);
    assert_clock(j.clock);
    assert_int_equal(j.ckpt_port, 41000);
    assert_int_equal(j.ckpt_step, 0x0102030405ull);
    assert_int_equal(j.standby_port, 41001);
    assert_int_equal(j.term, 0x0203040506ull);
    assert_int_equal(j.hosts_server, 1);
    assert_str(j.env, SAMPLE_ENV);
    assert_str(j.socket_ifname, "^lo,docker");
    break;
  case DR_MSG_ASSIGN:
    assert_int_equal(dr_msg_assign(m, &a), 0);
    assert_int_equal(a.gen, wa.gen);
    assert_int_equal(a.node_rank, wa.node_rank);
    assert_int_equal(a.nnodes, wa.nnodes);
    assert_int_equal(a.world_size, wa.world_size);
    assert_int_equal(a.first_rank, wa.first_rank);
    assert_bytes(a.master_addr, wa.master_addr.p, wa.master_addr.len);
    assert_int_equal(a.master_port, wa.master_port);
    assert_bytes(a.bootstrap, wa.bootstrap.p, wa.bootstrap.len);
    assert_int_equal(a.restart_count, wa.restart_count);
    assert_int_equal(a.max_restarts, wa.max_restarts);
    assert_int_equal(a.clock_offset_us, -250123);
    assert_int_equal(f[10].u, (uint64_t)(int64_t)-250123);
    assert_int_equal(a.clock_uncertainty_us, 42);
    assert_memory_equal(a.resume_token, wa.resume_token, DR_RESUME_TOKEN_LEN);
    assert_int_equal(a.ckpt_step, 777);
    assert_int_equal(a.peers.count, 2);
    {
      uint32_t pos = 0;
      dr_peer_rec_t p;
      for (int k = 0; dr_peer_rec_next(&a.peers, &pos, &p); k++) {
        assert_int_equal(p.node_rank, sample_peers[k].node_rank);
        assert_int_equal(p.port, sample_peers[k].port);
        assert_int_equal(p.roles, sample_peers[k].roles);
        assert_int_equal(p.ckpt_step, sample_peers[k].ckpt_step);
        assert_memory_equal(p.addr.p, sample_peers[k].addr.p, p.addr.len);
      }
    }
    assert_int_equal(a.term, 0x0304050607ull);
    assert_int_equal(a.server_node, 0);
    assert_int_equal(a.successors.count, 2);
    {
      uint32_t pos = 0;
      dr_peer_rec_t p;
      int k = 0;
      for (; dr_peer_rec_next(&a.successors, &pos, &p); k++) {
        assert_int_equal(p.node_rank, sample_succ[k].node_rank);
        assert_int_equal(p.port, sample_succ[k].port);
        assert_int_equal(p.roles, DR_PEER_SUCCESSOR);
        assert_memory_equal(p.addr.p, sample_succ[k].addr.p, p.addr.len);
      }
      assert_int_equal(k, 2);
    }
    break;
  case DR_MSG_HEARTBEAT:
    assert_int_equal(f[0].u, 9);
    assert_int_equal(dr_msg_heartbeat(m, &h), 0);
    assert_int_equal(h.gen, 9);
    assert_clock(h.clock);
    break;
  case DR_MSG_FAILURE:
    assert_int_equal(dr_msg_failure(m, &x), 0);
    assert_int_equal(x.gen, wx.gen);
    assert_int_equal(x.rank, wx.rank);
    assert_int_equal(x.local_rank, wx.local_rank);
    assert_int_equal(x.pid, wx.pid);
    assert_int_equal(x.exit_code, -1);
    assert_int_equal(x.signal, 9);
    assert_int_equal(x.kind, DR_FAIL_SIGNAL);
    assert_bytes(x.message, wx.message.p, wx.message.len);
    break;
  case DR_MSG_SUCCESS:
    assert_int_equal(f[0].u, 10);
    break;
  case DR_MSG_RESTART:
    assert_int_equal(f[0].u, 11);
    assert_int_equal(f[1].u, 2);
    assert_str(f[2].b, "rank 3 exited with code 1");
    break;
  case DR_MSG_STOP:
    assert_int_equal(f[0].u, 3);
    assert_str(f[1].b, "restart budget spent");
    break;
  case DR_MSG_RESUME: {
    static const uint64_t want[] = {12, 1, 2, 16, 8, 3};
    assert_str(f[0].b, "job7");
    assert_str(f[1].b, "node-a.example");
    for (int i = 2; i < 8; i++)
      assert_int_equal(f[i].u, want[i - 2]);
    assert_int_equal(dr_msg_resume(m, &q), 0);
    assert_clock(q.clock);
    assert_memory_equal(q.resume_token, nonce + 3, DR_RESUME_TOKEN_LEN);
    assert_int_equal(q.term, 0x0405060708ull);
    break;
  }
  case DR_MSG_LEAVE:
    assert_int_equal(f[0].u, 13);
    assert_int_equal(f[1].u, 15);
    assert_str(f[2].b, "ddprun on 'node-a' received SIGTERM");
    break;
  default:
    check_status_sample(m);
  }
}

/* The checkpoint peers' messages, through their views. */
static void check_ckpt_sample(const dr_msg_t *m) {
  switch (m->type) {
  case DR_MSG_CKPT_PUT: {
    dr_ckpt_put_t p, w = sample_put();
    assert_int_equal(dr_msg_ckpt_put(m, &p), 0);
    assert_str(p.run_id, "job7");
    assert_str(p.name, "epoch3-step190");
    assert_int_equal(p.kind, w.kind);
    assert_int_equal(p.total_bytes, w.total_bytes);
    assert_int_equal(p.step, 190);
    assert_int_equal(p.origin, 3);
    break;
  }
  case DR_MSG_CKPT_ENTRY: {
    dr_ckpt_entry_t e;
    assert_int_equal(dr_msg_ckpt_entry(m, &e), 0);
    assert_str(e.path, "shards/rank0.pt");
    assert_int_equal(e.kind, DR_CKPT_FILE);
    assert_int_equal(e.n_bytes, 0x100000002ull);
    break;
  }
  case DR_MSG_CKPT_DATA: {
    dr_bytes_t d;
    assert_int_equal(dr_msg_ckpt_data(m, &d), 0);
    assert_bytes(d, bin, sizeof(bin));
    break;
  }
  case DR_MSG_CKPT_END: {
    dr_bytes_t sum;
    assert_int_equal(dr_msg_ckpt_end(m, &sum), 0);
    assert_bytes(sum, nonce, DR_CKPT_SUM_LEN);
    break;
  }
  case DR_MSG_CKPT_GET: {
    dr_ckpt_get_t g;
    assert_int_equal(dr_msg_ckpt_get(m, &g), 0);
    assert_str(g.run_id, "job7");
    assert_int_equal(g.name.len, 0);
    assert_int_equal(g.step, 190);
    break;
  }
  default:
    fail_msg("unexpected type %u", m->type);
  }
}
