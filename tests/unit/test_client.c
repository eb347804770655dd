/* The blocking client against a scripted fake server (fake_server.h):
 * each test pairs the client's calls with the script the server runs.
 *
 * One file, past the few hundred lines of the rule: the project keeps one
 * cmocka executable per module, and every test here drives the one
 * module, proto/client.c, through the same fake server; its helper code is
 * in fake_server.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "client.h"
#include "errors.h"
#include "fake_server.h"
#include "wire.h"

/* Upper bounds on elapsed time only catch a hang: a loaded machine (ctest
 * -j2, sanitizers) may take seconds longer than the deadline under test. */
#define HANG_SLACK_MS 10000

#define BIG_VALUE (16u << 20)

static const char secret[] = "s3cret";

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the client's side ----------------------------------------------------- */

static dr_client_opts_t opts_for(const fake_t *s) {
  dr_client_opts_t o;
  memset(&o, 0, sizeof(o));
  o.host = "127.0.0.1";
  o.port = s->port;
  o.run_id = "job7";
  o.client_host = "node-a";
  o.connect_timeout_ms = 5000;
  o.io_timeout_ms = 5000;
  return o;
}

static void open_client(fake_t *s, const dr_client_opts_t *o) {
  char err[256];
  int rc = dr_client_open(o, &s->client, err, sizeof(err));
  if (rc != 0)
    fail_msg("dr_client_open: %s (%s)", dr_strerror(rc), err);
  assert_non_null(s->client);
  assert_true(dr_client_fd(s->client) >= 0);
}

/* ---- tests ------------------------------------------------------------------ */

static void script_set(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_SET, &m);
  SRV_CHECK(s, m.f[0].u == 3 && str_eq(m.f[1].b, "k") &&
                   bytes_eq(m.f[2].b, "v\0w", 3));
  SRV_SEND(s, dr_enc_ok(&s->out, m.req_id));
  srv_wait_eof(s);
}

static void test_open_and_set(void **state) {
  fake_t *s = *state;
  fake_start(s, script_set);
  dr_client_opts_t o = opts_for(s);
  open_client(s, &o);
  assert_int_equal(dr_client_set(s->client, 3, "k", "v\0w", 3), 0);
  assert_string_equal(dr_client_errmsg(s->client), "");
  fake_finish(s);
}

static void script_every_request(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);

  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_CHECK(s, m.f[0].u == 1 && str_eq(m.f[1].b, "k") && m.f[2].u == 250);
  SRV_SEND(s, dr_enc_value(&s->out, m.req_id, dr_str("hello")));

  SRV_EXPECT(s, DR_MSG_ADD, &m);
  SRV_CHECK(s, str_eq(m.f[1].b, "n") && (int64_t)m.f[2].u == -3);
  SRV_SEND(s, dr_enc_int(&s->out, m.req_id, -2));

  SRV_EXPECT(s, DR_MSG_CAS, &m);
  SRV_CHECK(s, str_eq(m.f[1].b, "lead") && m.f[2].b.len == 0 &&
                   str_eq(m.f[3].b, "me"));
  SRV_SEND(s, dr_enc_value(&s->out, m.req_id, dr_str("me")));

  SRV_EXPECT(s, DR_MSG_DELETE, &m);
  SRV_CHECK(s, m.f[0].u == 2 && str_eq(m.f[1].b, "gone"));
  SRV_SEND(s, dr_enc_int(&s->out, m.req_id, 1));

  SRV_EXPECT(s, DR_MSG_MULTI_GET, &m);
  SRV_CHECK(s, m.f[1].l.count == 3 && m.f[2].u == 100);
  dr_bytes_t vals[3] = {dr_str("a"), dr_str(""), dr_str("ccc")};
  SRV_SEND(s, dr_enc_values(&s->out, m.req_id, vals, 3));

  SRV_EXPECT(s, DR_MSG_CHECK, &m);
  SRV_CHECK(s, m.f[1].l.count == 2);
  SRV_SEND(s, dr_enc_int(&s->out, m.req_id, 1));

  SRV_EXPECT(s, DR_MSG_BARRIER, &m);
  SRV_CHECK(s, str_eq(m.f[1].b, "init") && m.f[2].u == 4 && m.f[3].u == 700);
  SRV_SEND(s, dr_enc_ok(&s->out, m.req_id));

  SRV_EXPECT(s, DR_MSG_JOIN, &m);
  dr_join_t j;
  SRV_CHECK(s, dr_msg_join(&m, &j) == 0);
  SRV_CHECK(s, str_eq(j.run_id, "job7") && j.nproc == 8 &&
                   j.node_rank == DR_NONE && j.master_port_offer == 29500);
  /* The JOIN echoes the WELCOME's stamp, with when it arrived and when
   * the JOIN left on the client's clock. */
  SRV_CHECK(s, j.clock.echo_us == FAKE_TX_US && j.clock.echo_rx_us != 0 &&
                   j.clock.tx_us >= j.clock.echo_rx_us);
  uint8_t nccl_id[128];
  for (size_t i = 0; i < sizeof(nccl_id); i++)
    nccl_id[i] = (uint8_t)i;
  dr_assign_t a = {4,     1, 2, 16, 8, dr_str("10.0.0.1"), 29501,
                   {nccl_id, sizeof(nccl_id)}, 1, 3, -1234, 56, {0},
                   DR_NONE, NULL, 0, {0, NULL, 0}, 1, DR_NO_RANK,
                   NULL, 0, {0, NULL, 0}};
  SRV_SEND(s, dr_enc_assign(&s->out, m.req_id, &a));

  SRV_EXPECT(s, DR_MSG_HEARTBEAT, &m);
  dr_heartbeat_t h;
  SRV_CHECK(s, dr_msg_heartbeat(&m, &h) == 0 && h.gen == 4);
  /* The stamp was echoed once, by the JOIN. */
  SRV_CHECK(s, h.clock.echo_us == 0 && h.clock.echo_rx_us == 0 &&
                   h.clock.tx_us >= j.clock.tx_us);
  SRV_EXPECT(s, DR_MSG_FAILURE, &m);
  dr_failure_t f;
  SRV_CHECK(s, dr_msg_failure(&m, &f) == 0);
  SRV_CHECK(s, f.rank == 9 && f.exit_code == -1 && f.signal == 11 &&
                   str_eq(f.message, "segfault"));
  SRV_EXPECT(s, DR_MSG_SUCCESS, &m);
  SRV_CHECK(s, m.f[0].u == 4);
  /* A push that arrives while the client waits in dr_client_recv(). */
  SRV_SEND(s, dr_enc_stop(&s->out, 0, 0, dr_str("job done")));
  srv_wait_eof(s);
}

static void test_every_request(void **state) {
  fake_t *s = *state;
  fake_start(s, script_every_request);
  dr_client_opts_t o = opts_for(s);
  open_client(s, &o);
  dr_client_t *c = s->client;

  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(c, 1, "k", 250, &v, &n), 0);
  assert_int_equal(n, 5);
  assert_string_equal((char *)v, "hello"); /* NUL-terminated */
  free(v);

  int64_t r = 0;
  assert_int_equal(dr_client_add(c, 1, "n", -3, &r), 0);
  assert_int_equal(r, -2);

  assert_int_equal(dr_client_cas(c, 1, "lead", NULL, 0, "me", 2, &v, &n), 0);
  assert_int_equal(n, 2);
  assert_memory_equal(v, "me", 3);
  free(v);

  int deleted = 0;
  assert_int_equal(dr_client_delete(c, 2, "gone", &deleted), 0);
  assert_int_equal(deleted, 1);

  const char *keys[] = {"a", "b", "c"};
  dr_bytes_t *vals = NULL;
  assert_int_equal(dr_client_multi_get(c, 1, keys, 3, 100, &vals), 0);
  assert_int_equal(vals[0].len, 1);
  assert_memory_equal(vals[0].p, "a", 1);
  assert_int_equal(vals[1].len, 0);
  assert_int_equal(vals[2].len, 3);
  assert_string_equal((const char *)vals[2].p, "ccc");
  free(vals);

  int all = 0;
  assert_int_equal(dr_client_check(c, 1, keys, 2, &all), 0);
  assert_int_equal(all, 1);

  assert_int_equal(dr_client_barrier(c, 1, "init", 4, 700), 0);

  dr_join_t j = {dr_str("job7"), dr_str("node-a"), dr_str(""), 8, DR_NONE,
                 29500,          dr_str(""),        {0, 0, 0}, 0, DR_NONE,
                 0,              0,                 0,  dr_str(""),
                 dr_str("")};
  dr_assignment_t a;
  assert_int_equal(dr_client_join(c, &j, 1000, &a), 0);
  assert_int_equal(a.gen, 4);
  assert_int_equal(a.node_rank, 1);
  assert_int_equal(a.nnodes, 2);
  assert_int_equal(a.world_size, 16);
  assert_int_equal(a.first_rank, 8);
  assert_string_equal(a.master_addr, "10.0.0.1");
  assert_int_equal(a.master_port, 29501);
  assert_int_equal(a.bootstrap_len, 128);
  for (size_t i = 0; i < a.bootstrap_len; i++)
    assert_int_equal(a.bootstrap[i], (uint8_t)i);
  assert_int_equal(a.restart_count, 1);
  assert_int_equal(a.max_restarts, 3);
  assert_int_equal(a.clock_offset_us, -1234);
  assert_int_equal(a.clock_uncertainty_us, 56);
  dr_assignment_free(&a);
  assert_null(a.master_addr);
  assert_null(a.bootstrap);

  assert_int_equal(dr_client_heartbeat(c, 4), 0);
  dr_failure_t f = {4, 9, 1, 1234, -1, 11, DR_FAIL_SIGNAL, dr_str("segfault")};
  assert_int_equal(dr_client_report_failure(c, &f), 0);
  assert_int_equal(dr_client_report_success(c, 4), 0);

  dr_msg_t m;
  assert_int_equal(dr_client_recv(c, 5000, &m), 0);
  assert_int_equal(m.type, DR_MSG_STOP);
  assert_int_equal(m.req_id, 0);
  assert_int_equal(m.f[0].u, 0);
  assert_int_equal(m.f[1].b.len, 8);
  assert_int_equal(dr_client_recv(c, 0, &m), -ETIMEDOUT);
  fake_finish(s);
}

static void script_handshake_only(fake_t *s) {
  SRV_HELLO(s);
  srv_wait_eof(s);
}

/* The server's port refuses connections for a while, then listens: the
 * client retries with backoff and gets in. */
static void test_connect_retries_until_listener(void **state) {
  fake_t *s = *state;
  s->listen_delay_ms = 300;
  fake_start(s, script_handshake_only);
  dr_client_opts_t o = opts_for(s);
  int64_t t0 = now_ms();
  open_client(s, &o);
  int64_t took = now_ms() - t0;
  assert_true(took >= 250);  /* it did wait for the listener */
  assert_true(took < 3000 + HANG_SLACK_MS); /* backoff is capped at 1 s */
  fake_finish(s);
}

/* A port that is bound but never listens refuses every attempt; the
 * client gives up at its connect deadline. */
static void test_connect_refused_times_out(void **state) {
  fake_t *s = *state;
  s->lfd = bind_loopback(AF_INET, &s->port);
  assert_true(s->lfd >= 0);
  dr_client_opts_t o = opts_for(s);
  o.connect_timeout_ms = 300;
  char err[256];
  dr_client_t *c = (dr_client_t *)&err; /* must be reset to NULL */
  int64_t t0 = now_ms();
  assert_int_equal(dr_client_open(&o, &c, err, sizeof(err)), -ETIMEDOUT);
  int64_t took = now_ms() - t0;
  assert_null(c);
  assert_true(took >= 290);
  assert_true(took < 300 + HANG_SLACK_MS);
  assert_non_null(strstr(err, "Connection refused"));
  assert_non_null(strstr(err, "127.0.0.1"));
}

static void script_ignore_get(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_CHECK(s, m.f[2].u == 0);
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_CHECK(s, m.f[2].u == 200);
  srv_wait_eof(s);
}

/* A reply that never comes: -ETIMEDOUT after io_timeout_ms, plus the
 * request's own wait_ms. */
static void test_reply_timeout(void **state) {
  fake_t *s = *state;
  fake_start(s, script_ignore_get);
  dr_client_opts_t o = opts_for(s);
  o.io_timeout_ms = 300;
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  int64_t t0 = now_ms();
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), -ETIMEDOUT);
  int64_t took = now_ms() - t0;
  assert_true(took >= 290 && took < 300 + HANG_SLACK_MS);
  assert_null(v);
  t0 = now_ms();
  assert_int_equal(dr_client_get(s->client, 1, "k", 200, &v, &n), -ETIMEDOUT);
  took = now_ms() - t0;
  assert_true(took >= 490 && took < 500 + HANG_SLACK_MS);
  fake_finish(s);
}

static void script_late_reply(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_GET, &m);
  uint32_t first = m.req_id;
  /* The client gave up on the first request and sent a second. */
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_SEND(s, dr_enc_value(&s->out, first, dr_str("stale")));
  SRV_SEND(s, dr_enc_value(&s->out, m.req_id, dr_str("fresh")));
  srv_wait_eof(s);
}

/* A reply to a request that already timed out is dropped, not taken for
 * the answer to the next one. */
static void test_late_reply_dropped(void **state) {
  fake_t *s = *state;
  fake_start(s, script_late_reply);
  dr_client_opts_t o = opts_for(s);
  o.io_timeout_ms = 200;
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), -ETIMEDOUT);
  assert_int_equal(dr_client_get(s->client, 1, "k", 3000, &v, &n), 0);
  assert_string_equal((char *)v, "fresh");
  free(v);
  fake_finish(s);
}

static void script_pushes(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_SEND(s, dr_enc_heartbeat(&s->out, 0, 1, NULL));
  SRV_SEND(s, dr_enc_restart(&s->out, 0, 7, 2, dr_str("rank 3 died")));
  SRV_SEND(s, dr_enc_stop(&s->out, 0, 4, dr_str("stopping")));
  SRV_SEND(s, dr_enc_heartbeat(&s->out, 0, 2, NULL));
  SRV_SEND(s, dr_enc_value(&s->out, m.req_id, dr_str("v")));
  srv_wait_eof(s);
}

/* Pushes that arrive while a reply is awaited are queued in order, a newer
 * HEARTBEAT replacing an older one, and handed out by dr_client_recv(). */
static void test_pushes_queued(void **state) {
  fake_t *s = *state;
  fake_start(s, script_pushes);
  dr_client_opts_t o = opts_for(s);
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), 0);
  assert_string_equal((char *)v, "v");
  free(v);

  dr_msg_t m;
  assert_int_equal(dr_client_recv(s->client, 0, &m), 0);
  assert_int_equal(m.type, DR_MSG_RESTART);
  assert_int_equal(m.req_id, 0);
  assert_int_equal(m.f[0].u, 7);
  assert_int_equal(m.f[1].u, 2);
  assert_int_equal(m.f[2].b.len, strlen("rank 3 died"));
  assert_memory_equal(m.f[2].b.p, "rank 3 died", m.f[2].b.len);
  assert_int_equal(dr_client_recv(s->client, 0, &m), 0);
  assert_int_equal(m.type, DR_MSG_STOP);
  assert_int_equal(m.f[0].u, 4);
  assert_int_equal(dr_client_recv(s->client, 0, &m), 0);
  assert_int_equal(m.type, DR_MSG_HEARTBEAT);
  assert_int_equal(m.f[0].u, 2);
  assert_int_equal(dr_client_recv(s->client, 0, &m), -ETIMEDOUT);
  fake_finish(s);
}

/* ---- a server that pushes without pause ----------------------------------- */

#define BURST_CYCLES 10000u
/* A flooding server stops after this long, past any client's hang bound:
 * a client that never gives up fails the test instead of hanging it. */
#define FLOOD_MAX_MS (HANG_SLACK_MS + 5000)

/* Cycle i of a burst: one push of every type, each numbered i. */
static int enc_cycle(dr_buf_t *b, uint64_t i) {
  dr_round_status_t st;
  memset(&st, 0, sizeof(st));
  st.gen = i;
  st.last_call_ms = DR_NONE;
  if (dr_enc_heartbeat(b, 0, i, NULL) != 0 ||
      dr_enc_restart(b, 0, i, 1, dr_str("rank 0 died")) != 0 ||
      dr_enc_stop(b, 0, (int)i, dr_str("stopping")) != 0 ||
      dr_enc_round_status(b, 0, &st, NULL, 0, NULL, 0) != 0)
    return -1;
  return dr_enc_stacks(b, 0, i, 1);
}

static void script_push_burst(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_GET, &m);
  uint32_t id = m.req_id;
  for (uint64_t i = 1; i <= BURST_CYCLES; i += 100) {
    dr_buf_reset(&s->out);
    for (uint64_t k = i; k < i + 100; k++)
      SRV_CHECK(s, enc_cycle(&s->out, k) == 0);
    SRV_CHECK(s, srv_send_raw(s, s->out.data, s->out.len) == 0);
  }
  SRV_SEND(s, dr_enc_value(&s->out, id, dr_str("v")));
  srv_wait_eof(s);
}

/* 50,000 pushes before the reply: the queue keeps DR_CLIENT_MAX_PUSHES of
 * them, not all. The newest of each type that keeps one, in the order
 * they came, and the newest STACKS requests in the rest. */
static void test_push_burst_bounded(void **state) {
  fake_t *s = *state;
  fake_start(s, script_push_burst);
  dr_client_opts_t o = opts_for(s);
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), 0);
  assert_string_equal((char *)v, "v");
  free(v);
  const uint64_t last = BURST_CYCLES;
  static const struct {
    uint8_t type;
    uint64_t back; /* its number: last - back */
  } want[] = {{DR_MSG_STACKS, 3},    {DR_MSG_STACKS, 2},
              {DR_MSG_STACKS, 1},    {DR_MSG_HEARTBEAT, 0},
              {DR_MSG_RESTART, 0},   {DR_MSG_STOP, 0},
              {DR_MSG_ROUND_STATUS, 0}, {DR_MSG_STACKS, 0}};
  assert_int_equal(sizeof(want) / sizeof(want[0]), DR_CLIENT_MAX_PUSHES);
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    dr_msg_t m;
    assert_int_equal(dr_client_recv(s->client, 0, &m), 0);
    assert_string_equal(dr_msg_name(m.type), dr_msg_name(want[i].type));
    assert_int_equal(m.f[0].u, last - want[i].back);
  }
  dr_msg_t m;
  assert_int_equal(dr_client_recv(s->client, 0, &m), -ETIMEDOUT);
  fake_finish(s);
}

/* RESTART pushes, each numbered, or late replies to the HELLO, without
 * pause until the client hangs up, or FLOOD_MAX_MS. The late replies go
 * out as one large block sent again and again: the client drops them
 * faster than they could be encoded one by one, and must find its socket
 * never empty. */
static void script_flood(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  uint32_t hello_id = s->last_id;
  SRV_EXPECT(s, DR_MSG_GET, &m);
  int64_t t0 = now_ms();
  dr_buf_reset(&s->out);
  for (int k = 0; s->flood_stale && k < 16384; k++)
    SRV_CHECK(s, dr_enc_value(&s->out, hello_id, dr_str("late")) == 0);
  for (uint64_t i = 1;;) {
    if (!s->flood_stale) {
      dr_buf_reset(&s->out);
      for (int k = 0; k < 64; k++, i++)
        SRV_CHECK(s, dr_enc_restart(&s->out, 0, i, 1,
                                    dr_str("rank 0 died")) == 0);
    }
    if (srv_send_raw(s, s->out.data, s->out.len) != 0)
      return; /* the client hung up */
    SRV_CHECK(s, now_ms() - t0 < FLOOD_MAX_MS);
  }
}

/* A server that always has pushes ready cannot hold a request past its
 * deadline, and the pushes read meanwhile are not all kept. */
static void test_push_flood_deadline(void **state) {
  fake_t *s = *state;
  fake_start(s, script_flood);
  dr_client_opts_t o = opts_for(s);
  o.io_timeout_ms = 500;
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  int64_t t0 = now_ms();
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), -ETIMEDOUT);
  int64_t took = now_ms() - t0;
  assert_true(took >= 490 && took < 500 + HANG_SLACK_MS);
  assert_null(v);
  /* The queue held one RESTART, the newest read (the first send alone
   * brought 64); the next one comes from the socket. */
  dr_msg_t m;
  assert_int_equal(dr_client_recv(s->client, 0, &m), 0);
  assert_int_equal(m.type, DR_MSG_RESTART);
  uint64_t newest = m.f[0].u;
  assert_true(newest > 1);
  assert_int_equal(dr_client_recv(s->client, 0, &m), 0);
  assert_int_equal(m.type, DR_MSG_RESTART);
  assert_int_equal(m.f[0].u, newest + 1);
  fake_finish(s);
}

/* Late replies without pause, which are dropped, hold neither a request
 * nor dr_client_recv() past its deadline. */
static void test_stale_flood_deadline(void **state) {
  fake_t *s = *state;
  s->flood_stale = 1;
  fake_start(s, script_flood);
  dr_client_opts_t o = opts_for(s);
  o.io_timeout_ms = 500;
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  int64_t t0 = now_ms();
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), -ETIMEDOUT);
  int64_t took = now_ms() - t0;
  assert_true(took >= 490 && took < 500 + HANG_SLACK_MS);
  dr_msg_t m;
  t0 = now_ms();
  assert_int_equal(dr_client_recv(s->client, 300, &m), -ETIMEDOUT);
  took = now_ms() - t0;
  assert_true(took >= 290 && took < 300 + HANG_SLACK_MS);
  fake_finish(s);
}

static void script_errors(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_SEND(s, dr_enc_error(&s->out, m.req_id, DR_ENOTFOUND,
                           dr_str("key 'k' not found")));
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_SEND(s, dr_enc_error(&s->out, m.req_id, -ETIMEDOUT,
                           dr_str("key 'k' not set within 50 ms")));
  SRV_EXPECT(s, DR_MSG_JOIN, &m);
  SRV_SEND(s, dr_enc_error(&s->out, m.req_id, DR_EDUPRANK,
                           dr_str("node rank 1 is taken by node-b")));
  SRV_EXPECT(s, DR_MSG_BARRIER, &m);
  SRV_SEND(s, dr_enc_error(&s->out, m.req_id, 0, dr_str("no code")));
  SRV_EXPECT(s, DR_MSG_SET, &m);
  SRV_SEND(s, dr_enc_ok(&s->out, m.req_id));
  srv_wait_eof(s);
}

/* ERROR replies come back as the server's code with its message. */
static void test_error_replies(void **state) {
  fake_t *s = *state;
  fake_start(s, script_errors);
  dr_client_opts_t o = opts_for(s);
  open_client(s, &o);
  dr_client_t *c = s->client;
  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(c, 1, "k", 0, &v, &n), DR_ENOTFOUND);
  assert_string_equal(dr_client_errmsg(c), "key 'k' not found");
  assert_int_equal(dr_client_get(c, 1, "k", 50, &v, &n), -ETIMEDOUT);
  assert_string_equal(dr_client_errmsg(c), "key 'k' not set within 50 ms");
  dr_join_t j = {dr_str("job7"), dr_str("node-a"), dr_str(""), 8, 1, 0,
                 dr_str(""),     {0, 0, 0}, 0, DR_NONE, 0, 0, 0,
                 dr_str(""),     dr_str("")};
  dr_assignment_t a;
  assert_int_equal(dr_client_join(c, &j, 100, &a), DR_EDUPRANK);
  assert_string_equal(dr_client_errmsg(c), "node rank 1 is taken by node-b");
  assert_null(a.master_addr);
  assert_int_equal(dr_client_barrier(c, 1, "b", 2, 0), DR_EREMOTE);
  assert_string_equal(dr_client_errmsg(c), "no code");
  assert_int_equal(dr_client_set(c, 1, "k", "v", 1), 0);
  assert_string_equal(dr_client_errmsg(c), "");
  fake_finish(s);
}

static void script_refuse_hello(fake_t *s) {
  dr_msg_t m;
  SRV_EXPECT(s, DR_MSG_HELLO, &m);
  SRV_SEND(s, dr_enc_error(&s->out, m.req_id, DR_ERUNID,
                           dr_str("run id 'job7' is not this job's ('job8')")));
  srv_wait_eof(s);
}

static void test_handshake_refused(void **state) {
  fake_t *s = *state;
  fake_start(s, script_refuse_hello);
  dr_client_opts_t o = opts_for(s);
  char err[256];
  assert_int_equal(dr_client_open(&o, &s->client, err, sizeof(err)),
                   DR_ERUNID);
  assert_null(s->client);
  assert_string_equal(err, "run id 'job7' is not this job's ('job8')");
  fake_finish(s);
}

static void script_auth(fake_t *s) {
  dr_msg_t m;
  uint8_t nonce[DR_NONCE_LEN];
  SRV_EXPECT(s, DR_MSG_HELLO, &m);
  dr_auth_nonce(nonce);
  SRV_SEND(s, dr_enc_welcome(&s->out, m.req_id, 1,
                             (dr_bytes_t){nonce, sizeof(nonce)}, FAKE_TX_US));
  if (srv_read(s, &m) != 0)
    return; /* a client without a secret hangs up here */
  SRV_CHECK(s, m.type == DR_MSG_AUTH);
  if (dr_auth_verify((const uint8_t *)secret, strlen(secret), nonce,
                     dr_str("job7"), m.f[0].b) != 0) {
    SRV_SEND(s, dr_enc_error(&s->out, m.req_id, DR_EAUTH,
                             dr_str("authentication failed for node-a")));
    srv_wait_eof(s);
    return;
  }
  SRV_SEND(s, dr_enc_ok(&s->out, m.req_id));
  SRV_EXPECT(s, DR_MSG_SET, &m);
  SRV_SEND(s, dr_enc_ok(&s->out, m.req_id));
  srv_wait_eof(s);
}

static void test_auth_without_secret(void **state) {
  fake_t *s = *state;
  fake_start(s, script_auth);
  dr_client_opts_t o = opts_for(s);
  char err[256];
  assert_int_equal(dr_client_open(&o, &s->client, err, sizeof(err)),
                   DR_ENOAUTH);
  assert_string_equal(err, "the server requires a shared secret: pass "
                           "--secret-file or set DDPRUN_SECRET");
  fake_finish(s);
}

static void test_auth_ok(void **state) {
  fake_t *s = *state;
  fake_start(s, script_auth);
  dr_client_opts_t o = opts_for(s);
  o.secret = (const uint8_t *)secret;
  o.secret_len = strlen(secret);
  open_client(s, &o);
  assert_int_equal(dr_client_set(s->client, 1, "k", "v", 1), 0);
  fake_finish(s);
}

static void test_auth_wrong_secret(void **state) {
  fake_t *s = *state;
  fake_start(s, script_auth);
  dr_client_opts_t o = opts_for(s);
  o.secret = (const uint8_t *)"s3cre7";
  o.secret_len = 6;
  char err[256];
  assert_int_equal(dr_client_open(&o, &s->client, err, sizeof(err)),
                   DR_EAUTH);
  assert_string_equal(err, "authentication failed for node-a");
  fake_finish(s);
}

static void script_bytewise(fake_t *s) {
  dr_msg_t m;
  s->bytewise = 1;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_SEND(s, dr_enc_restart(&s->out, 0, 3, 1, dr_str("node-b left")));
  SRV_SEND(s, dr_enc_value(&s->out, m.req_id, dr_str("one byte at a time")));
  srv_wait_eof(s);
}

/* Every frame arrives in one-byte pieces: short reads are stitched. */
static void test_short_reads(void **state) {
  fake_t *s = *state;
  fake_start(s, script_bytewise);
  dr_client_opts_t o = opts_for(s);
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), 0);
  assert_string_equal((char *)v, "one byte at a time");
  free(v);
  dr_msg_t m;
  assert_int_equal(dr_client_recv(s->client, 0, &m), 0);
  assert_int_equal(m.type, DR_MSG_RESTART);
  fake_finish(s);
}

static uint8_t *big_pattern(void) {
  uint8_t *p = malloc(BIG_VALUE);
  assert_non_null(p);
  for (size_t i = 0; i < BIG_VALUE; i++)
    p[i] = (uint8_t)(i * 2654435761u >> 24);
  return p;
}

static void script_big(fake_t *s) {
  dr_msg_t m;
  s->read_chunk = 4096; /* a slow reader: the client's sends come up short */
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_SET, &m);
  uint8_t *want = malloc(BIG_VALUE);
  SRV_CHECK(s, want != NULL);
  for (size_t i = 0; i < BIG_VALUE; i++)
    want[i] = (uint8_t)(i * 2654435761u >> 24);
  int same = bytes_eq(m.f[2].b, want, BIG_VALUE);
  SRV_SEND(s, dr_enc_ok(&s->out, m.req_id));
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_SEND(s, dr_enc_value(&s->out, m.req_id,
                           (dr_bytes_t){want, BIG_VALUE}));
  free(want);
  SRV_CHECK(s, same);
  srv_wait_eof(s);
}

/* A 16 MiB value each way: more than the socket buffers hold, so sends
 * return short and the receive buffer grows over many reads. */
static void test_large_values(void **state) {
  fake_t *s = *state;
  fake_start(s, script_big);
  dr_client_opts_t o = opts_for(s);
  o.io_timeout_ms = 20000;
  open_client(s, &o);
  uint8_t *p = big_pattern();
  assert_int_equal(dr_client_set(s->client, 1, "big", p, BIG_VALUE), 0);
  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(s->client, 1, "big", 0, &v, &n), 0);
  assert_int_equal(n, BIG_VALUE);
  assert_memory_equal(v, p, BIG_VALUE);
  free(v);
  free(p);
  fake_finish(s);
}

static void script_close_after_get(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_GET, &m);
}

/* The server hangs up while a reply is awaited; the client stays closed. */
static void test_eof(void **state) {
  fake_t *s = *state;
  fake_start(s, script_close_after_get);
  dr_client_opts_t o = opts_for(s);
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), DR_ECLOSED);
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), DR_ECLOSED);
  dr_msg_t m;
  assert_int_equal(dr_client_recv(s->client, 0, &m), DR_ECLOSED);
  fake_finish(s);
}

static void script_close_after_hello(fake_t *s) {
  dr_msg_t m;
  SRV_EXPECT(s, DR_MSG_HELLO, &m);
}

static void test_eof_during_handshake(void **state) {
  fake_t *s = *state;
  fake_start(s, script_close_after_hello);
  dr_client_opts_t o = opts_for(s);
  char err[256];
  assert_int_equal(dr_client_open(&o, &s->client, err, sizeof(err)),
                   DR_ECLOSED);
  assert_true(strlen(err) > 0);
  fake_finish(s);
}

static void script_unexpected(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_SEND(s, dr_enc_int(&s->out, m.req_id, 1)); /* GET wants VALUE */
  SRV_EXPECT(s, DR_MSG_GET, &m);
  SRV_SEND(s, dr_enc_ok(&s->out, m.req_id + 100)); /* never sent */
  srv_wait_eof(s);
}

static void test_unexpected_replies(void **state) {
  fake_t *s = *state;
  fake_start(s, script_unexpected);
  dr_client_opts_t o = opts_for(s);
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n),
                   DR_EUNEXPECTED);
  assert_null(v);
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n),
                   DR_EUNEXPECTED);
  fake_finish(s);
}

static void script_garbage(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_GET, &m);
  static const char junk[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
  SRV_CHECK(s, srv_send_raw(s, (const uint8_t *)junk, sizeof(junk) - 1) == 0);
  srv_wait_eof(s);
}

/* Bytes that are not a frame break the connection for good. */
static void test_garbage_reply(void **state) {
  fake_t *s = *state;
  fake_start(s, script_garbage);
  dr_client_opts_t o = opts_for(s);
  open_client(s, &o);
  uint8_t *v = NULL;
  size_t n = 0;
  assert_int_equal(dr_client_get(s->client, 1, "k", 0, &v, &n), DR_EMAGIC);
  assert_int_equal(dr_client_set(s->client, 1, "k", "v", 1), DR_EMAGIC);
  fake_finish(s);
}

static void script_set_small(fake_t *s) {
  dr_msg_t m;
  SRV_HELLO(s);
  SRV_EXPECT(s, DR_MSG_SET, &m);
  SRV_CHECK(s, str_eq(m.f[1].b, "short"));
  SRV_SEND(s, dr_enc_ok(&s->out, m.req_id));
  srv_wait_eof(s);
}

/* A request over the client's own limits is refused before it is sent. */
static void test_oversized_request_not_sent(void **state) {
  fake_t *s = *state;
  fake_start(s, script_set_small);
  dr_limits_t lim = dr_limits_default();
  lim.max_key = 8;
  lim.max_value = 16;
  dr_client_opts_t o = opts_for(s);
  o.limits = &lim;
  open_client(s, &o);
  char value[17] = "0123456789abcdef";
  assert_int_equal(dr_client_set(s->client, 1, "much-too-long", "v", 1),
                   DR_ETOOBIG);
  assert_int_equal(dr_client_set(s->client, 1, "short", value, 17),
                   DR_ETOOBIG);
  assert_int_equal(dr_client_set(s->client, 1, "short", value, 16), 0);
  fake_finish(s);
}

static void test_host_by_name(void **state) {
  fake_t *s = *state;
  fake_start(s, script_handshake_only);
  dr_client_opts_t o = opts_for(s);
  o.host = "localhost"; /* may resolve to ::1 first, which refuses */
  open_client(s, &o);
  fake_finish(s);
}

static void test_ipv6(void **state) {
  fake_t *s = *state;
  if (fake_start_family(s, AF_INET6, script_handshake_only) != 0)
    skip(); /* no IPv6 loopback here */
  dr_client_opts_t o = opts_for(s);
  o.host = "::1";
  open_client(s, &o);
  fake_finish(s);
}

static void test_bad_arguments(void **state) {
  dr_client_t *c = NULL;
  dr_client_opts_t o;
  memset(&o, 0, sizeof(o));
  char err[64];
  assert_int_equal(dr_client_open(&o, &c, err, sizeof(err)), DR_EBADARG);
  assert_int_equal(dr_client_open(NULL, &c, err, sizeof(err)), DR_EBADARG);
  assert_int_equal(dr_client_open(&o, NULL, NULL, 0), DR_EBADARG);
  assert_null(c);
  dr_client_close(&c);
  dr_client_close(NULL);
  assert_int_equal(dr_client_fd(NULL), -1);
  assert_string_equal(dr_client_errmsg(NULL), "");
  assert_int_equal(dr_client_set(NULL, 1, "k", "v", 1), DR_EBADARG);
  assert_int_equal(dr_client_heartbeat(NULL, 1), DR_EBADARG);
  dr_msg_t m;
  assert_int_equal(dr_client_recv(NULL, 0, &m), DR_EBADARG);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, fake_setup, fake_teardown)
  const struct CMUnitTest tests[] = {
      T(test_open_and_set),
      T(test_every_request),
      T(test_connect_retries_until_listener),
      T(test_connect_refused_times_out),
      T(test_reply_timeout),
      T(test_late_reply_dropped),
      T(test_pushes_queued),
      T(test_push_burst_bounded),
      T(test_push_flood_deadline),
      T(test_stale_flood_deadline),
      T(test_error_replies),
      T(test_handshake_refused),
      T(test_auth_without_secret),
      T(test_auth_ok),
      T(test_auth_wrong_secret),
      T(test_short_reads),
      T(test_large_values),
      T(test_eof),
      T(test_eof_during_handshake),
      T(test_unexpected_replies),
      T(test_garbage_reply),
      T(test_oversized_request_not_sent),
      T(test_host_by_name),
      T(test_ipv6),
      T(test_bad_arguments),
  };
#undef T
  if (dr_auth_init() != 0)
    return 1;
  return cmocka_run_group_tests(tests, NULL, NULL);
}

