/* Clock offsets: the four-timestamp arithmetic on known exchanges, its
 * bound on random ones, the min-round-trip window, and the session's
 * stamps (what a JOIN, RESUME and HEARTBEAT echo) under a test clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "clock_offset.h"
#include "errors.h"
#include "session.h"
#include "wire.h"

/* An arbitrary server time (2023), in microseconds. */
#define T0 1700000000000000ull

/* The four timestamps of one exchange with a node whose clock is theta
 * behind the server's (theta = server - node), the delays d1 (server to
 * node) and d2 (back), and the node holding the stamp for hold. */
typedef struct {
  uint64_t t1, t2, t3, t4;
} exchange_t;

static exchange_t exchange(int64_t theta, uint64_t d1, uint64_t d2,
                           uint64_t hold) {
  exchange_t e;
  e.t1 = T0;
  e.t2 = (uint64_t)((int64_t)(e.t1 + d1) - theta); /* on the node's clock */
  e.t3 = e.t2 + hold;
  e.t4 = (uint64_t)((int64_t)e.t3 + theta) + d2; /* back on the server's */
  return e;
}

static dr_clock_sample_t sample_of(exchange_t e) {
  dr_clock_sample_t x;
  assert_int_equal(dr_clock_sample(e.t1, e.t2, e.t3, e.t4, &x), 0);
  return x;
}

/* ---- the arithmetic ------------------------------------------------------ */

/* A node 250 ms behind over a symmetric path: exact, and the hold (until
 * its next heartbeat) does not count in the round trip. */
static void test_symmetric_exact(void **state) {
  (void)state;
  dr_clock_sample_t x = sample_of(exchange(250000, 100, 100, 300000));
  assert_int_equal(x.offset_us, 250000);
  assert_int_equal(x.rtt_us, 200);
  assert_int_equal(dr_clock_uncertainty_us(&x), 100);
  /* Ahead instead: a negative offset. */
  x = sample_of(exchange(-37123, 40, 40, 0));
  assert_int_equal(x.offset_us, -37123);
  assert_int_equal(x.rtt_us, 80);
}

/* Hand-computed: t1 = T0, t2 = T0 - 249000, t3 = t2 + 500, t4 = T0 +
 * 2500. theta = ((t1 - t2) + (t4 - t3)) / 2 = (249000 + 251000) / 2,
 * rtt = 2500 - 500. */
static void test_known_stamps(void **state) {
  (void)state;
  dr_clock_sample_t x;
  uint64_t t2 = T0 - 249000, t3 = t2 + 500;
  assert_int_equal(dr_clock_sample(T0, t2, t3, T0 + 2500, &x), 0);
  assert_int_equal(x.offset_us, 250000);
  assert_int_equal(x.rtt_us, 2000);
  assert_int_equal(dr_clock_uncertainty_us(&x), 1000);
}

/* Sent at once (t2 == t3), the estimate is (t1 + t3) / 2 - t2 on the
 * server's two times around the node's one. */
static void test_no_hold(void **state) {
  (void)state;
  uint64_t t1 = T0, t2 = T0 - 5000, t4 = T0 + 1001;
  dr_clock_sample_t x;
  assert_int_equal(dr_clock_sample(t1, t2, t2, t4, &x), 0);
  assert_int_equal(x.offset_us, (int64_t)((t1 + t4) / 2) - (int64_t)t2);
  assert_int_equal(x.rtt_us, 1001);
  assert_int_equal(dr_clock_uncertainty_us(&x), 501); /* rounded up */
}

/* An asymmetric path misleads by half the difference of the delays, never
 * more than the uncertainty; on random exchanges too. */
static void test_error_within_uncertainty(void **state) {
  (void)state;
  /* The way out slow: the node seems further ahead than it is, by half
   * the difference (estimate = theta - (d1 - d2) / 2). */
  dr_clock_sample_t x = sample_of(exchange(1000, 3000, 0, 10));
  assert_int_equal(x.offset_us, 1000 - 1500);
  assert_int_equal(dr_clock_uncertainty_us(&x), 1500);
  uint64_t seed = 42;
  for (int i = 0; i < 100000; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    int64_t theta = (int64_t)(seed >> 40) - (1 << 23); /* about +-8 s */
    uint64_t d1 = (seed >> 8) & 0xffff, d2 = (seed >> 24) & 0xffff;
    uint64_t hold = (seed >> 4) % DR_CLOCK_MAX_HOLD_US;
    x = sample_of(exchange(theta, d1, d2, hold));
    int64_t err = x.offset_us - theta;
    if (err < 0)
      err = -err;
    assert_true((uint64_t)err <= dr_clock_uncertainty_us(&x));
    assert_int_equal(x.rtt_us, d1 + d2);
  }
}

static void test_bad_stamps(void **state) {
  (void)state;
  dr_clock_sample_t x;
  exchange_t e = exchange(0, 10, 10, 5);
  /* A missing stamp. */
  assert_int_equal(dr_clock_sample(0, e.t2, e.t3, e.t4, &x), DR_EBADARG);
  assert_int_equal(dr_clock_sample(e.t1, 0, e.t3, e.t4, &x), DR_EBADARG);
  assert_int_equal(dr_clock_sample(e.t1, e.t2, 0, e.t4, &x), DR_EBADARG);
  assert_int_equal(dr_clock_sample(e.t1, e.t2, e.t3, 0, &x), DR_EBADARG);
  /* Out of order on one clock. */
  assert_int_equal(dr_clock_sample(e.t4 + 1, e.t2, e.t3, e.t4, &x),
                   DR_EBADARG);
  assert_int_equal(dr_clock_sample(e.t1, e.t3 + 1, e.t3, e.t4, &x),
                   DR_EBADARG);
  /* A hold longer than the whole exchange: a clock stepped meanwhile. */
  assert_int_equal(dr_clock_sample(e.t1, e.t2, e.t2 + 100, e.t1 + 50, &x),
                   DR_EBADARG);
  /* Held too long for the drift to be negligible. */
  e = exchange(0, 10, 10, DR_CLOCK_MAX_HOLD_US);
  assert_int_equal(dr_clock_sample(e.t1, e.t2, e.t3, e.t4, &x), 0);
  e = exchange(0, 10, 10, DR_CLOCK_MAX_HOLD_US + 1);
  assert_int_equal(dr_clock_sample(e.t1, e.t2, e.t3, e.t4, &x), DR_EBADARG);
  /* Garbage far past any real clock. */
  uint64_t far = 1ull << 62;
  assert_int_equal(dr_clock_sample(T0, far, far, T0 + 1, &x), DR_EBADARG);
  assert_int_equal(dr_clock_sample(T0, UINT64_MAX, UINT64_MAX, T0 + 1, &x),
                   DR_EBADARG);
}

/* ---- the window ---------------------------------------------------------- */

static dr_clock_sample_t mk(int64_t offset, uint64_t rtt) {
  dr_clock_sample_t x = {offset, rtt};
  return x;
}

static void test_filter_min_rtt(void **state) {
  (void)state;
  dr_clock_filter_t f;
  memset(&f, 0, sizeof(f));
  dr_clock_sample_t best;
  assert_int_equal(dr_clock_filter_best(&f, &best), DR_ENOTFOUND);
  dr_clock_sample_t a = mk(250900, 1800), b = mk(250050, 100),
                    c = mk(249000, 2000);
  dr_clock_filter_add(&f, &a);
  assert_int_equal(dr_clock_filter_best(&f, &best), 0);
  assert_int_equal(best.offset_us, 250900);
  dr_clock_filter_add(&f, &b);
  dr_clock_filter_add(&f, &c);
  assert_int_equal(dr_clock_filter_best(&f, &best), 0);
  assert_int_equal(best.offset_us, 250050);
  assert_int_equal(best.rtt_us, 100);
}

/* The best sample ages out after DR_CLOCK_WINDOW more: a clock that was
 * stepped is followed within a window. */
static void test_filter_window_slides(void **state) {
  (void)state;
  dr_clock_filter_t f;
  memset(&f, 0, sizeof(f));
  dr_clock_sample_t best, good = mk(1000, 50);
  dr_clock_filter_add(&f, &good);
  for (uint32_t i = 0; i < DR_CLOCK_WINDOW - 1; i++) {
    dr_clock_sample_t x = mk(900000 + i, 400 + i);
    dr_clock_filter_add(&f, &x);
    assert_int_equal(dr_clock_filter_best(&f, &best), 0);
    assert_int_equal(best.offset_us, 1000);
  }
  dr_clock_sample_t x = mk(900100, 700);
  dr_clock_filter_add(&f, &x);
  assert_int_equal(f.n, DR_CLOCK_WINDOW);
  assert_int_equal(dr_clock_filter_best(&f, &best), 0);
  assert_int_equal(best.offset_us, 900000); /* rtt 400: the oldest left */
  /* Of equal round trips, the newest. */
  for (uint32_t i = 0; i < DR_CLOCK_WINDOW; i++) {
    dr_clock_sample_t y = mk(i, 10);
    dr_clock_filter_add(&f, &y);
  }
  assert_int_equal(dr_clock_filter_best(&f, &best), 0);
  assert_int_equal(best.offset_us, DR_CLOCK_WINDOW - 1);
}

static void test_now_is_realtime(void **state) {
  (void)state;
  uint64_t a = dr_clock_now_us(), b = dr_clock_now_us();
  assert_true(a > T0); /* after 2023 */
  assert_true(b >= a);
}

/* ---- the session's stamps ------------------------------------------------ */

/* A test clock: returns *ctx, then advances it by 7 us. */
static uint64_t fake_clock(void *ctx) {
  uint64_t *t = ctx;
  uint64_t v = *t;
  *t += 7;
  return v;
}

/* Decodes the single frame in b. */
static void decode(const dr_buf_t *b, dr_msg_t *m) {
  dr_decoder_t d;
  dr_decoder_init(&d, NULL);
  d.authed = 1;
  size_t used, need;
  int err;
  assert_int_equal(dr_decode(&d, b->data, b->len, m, &used, &need, &err),
                   DR_DECODE_OK);
  assert_int_equal(used, b->len);
}

/* Feeds the session one frame the server sent. */
static void feed(dr_sess_t *s, const dr_buf_t *frame, dr_sess_ev_type_t want) {
  dr_msg_t m;
  decode(frame, &m);
  dr_buf_t out;
  dr_buf_init(&out);
  dr_sess_event_t ev;
  assert_int_equal(dr_sess_on_frame(s, &m, 1, &out, &ev), 0);
  assert_int_equal(ev.type, want);
  dr_buf_free(&out);
}

/* WELCOME's stamp is echoed by the JOIN, a server HEARTBEAT's by the next
 * heartbeat, each once, with the arrival and departure on the session's
 * clock; the server's stamps then make one sample each. */
static void test_session_echoes(void **state) {
  (void)state;
  uint64_t now = T0 - 250000; /* this side is 250 ms behind */
  dr_sess_t s;
  assert_int_equal(dr_sess_init(&s, "job7", NULL, 0), 0);
  dr_sess_set_clock(&s, fake_clock, &now);
  dr_buf_t b;
  dr_buf_init(&b);
  dr_msg_t m;

  assert_int_equal(dr_sess_hello(&s, 1, "node-a", &b), 0);
  dr_buf_reset(&b);
  assert_int_equal(dr_enc_welcome(&b, 1, 0, dr_str(NULL), T0 - 40), 0);
  feed(&s, &b, DR_SESS_READY); /* arrives at T0 - 250000 */

  dr_join_t j;
  memset(&j, 0, sizeof(j));
  j.run_id = dr_str("job7");
  j.host = dr_str("node-a");
  j.nproc = 1;
  j.node_rank = DR_NONE;
  j.clock.echo_us = 99; /* the caller's stamp is not used */
  dr_buf_reset(&b);
  assert_int_equal(dr_sess_join(&s, 2, &j, &b), 0); /* leaves at +7 */
  decode(&b, &m);
  dr_join_t got;
  assert_int_equal(dr_msg_join(&m, &got), 0);
  assert_int_equal(got.clock.echo_us, T0 - 40);
  assert_int_equal(got.clock.echo_rx_us, T0 - 250000);
  assert_int_equal(got.clock.tx_us, T0 - 250000 + 7);
  /* Read by the server at T0 + 7: the WELCOME took 40 us to arrive, the
   * JOIN none, so the estimate is off by half of 40, as bounded. */
  dr_clock_sample_t x;
  assert_int_equal(dr_clock_sample(got.clock.echo_us, got.clock.echo_rx_us,
                                   got.clock.tx_us, T0 + 7, &x),
                   0);
  assert_int_equal(x.offset_us, 250000 - 20);
  assert_int_equal(x.rtt_us, 40);
  assert_int_equal(dr_clock_uncertainty_us(&x), 20);

  /* Nothing heard since: the next heartbeat echoes nothing. */
  dr_buf_reset(&b);
  assert_int_equal(dr_sess_heartbeat(&s, 0, 1, &b), 0);
  decode(&b, &m);
  dr_heartbeat_t h;
  assert_int_equal(dr_msg_heartbeat(&m, &h), 0);
  assert_int_equal(h.gen, 1);
  assert_int_equal(h.clock.echo_us, 0);
  assert_int_equal(h.clock.echo_rx_us, 0);
  assert_int_equal(h.clock.tx_us, T0 - 250000 + 14);

  /* A server heartbeat, echoed by the next heartbeat only. */
  now = T0 - 150000;
  dr_clock_stamp_t st = {0, 0, T0 + 99000};
  dr_buf_reset(&b);
  assert_int_equal(dr_enc_heartbeat(&b, 0, 1, &st), 0);
  feed(&s, &b, DR_SESS_HEARTBEAT);
  now += 300000; /* held until the agent's own heartbeat */
  dr_buf_reset(&b);
  assert_int_equal(dr_sess_heartbeat(&s, 0, 1, &b), 0);
  decode(&b, &m);
  assert_int_equal(dr_msg_heartbeat(&m, &h), 0);
  assert_int_equal(h.clock.echo_us, T0 + 99000);
  assert_int_equal(h.clock.echo_rx_us, T0 - 150000);
  assert_int_equal(h.clock.tx_us, T0 + 150000 + 7);
  dr_buf_reset(&b);
  assert_int_equal(dr_sess_heartbeat(&s, 0, 1, &b), 0);
  decode(&b, &m);
  assert_int_equal(dr_msg_heartbeat(&m, &h), 0);
  assert_int_equal(h.clock.echo_us, 0);

  /* A RESUME echoes like a JOIN. */
  dr_buf_reset(&b);
  assert_int_equal(dr_enc_heartbeat(&b, 0, 1, &st), 0);
  feed(&s, &b, DR_SESS_HEARTBEAT);
  dr_resume_t q;
  memset(&q, 0, sizeof(q));
  q.run_id = dr_str("job7");
  dr_buf_reset(&b);
  assert_int_equal(dr_sess_resume(&s, 3, &q, &b), 0);
  decode(&b, &m);
  dr_resume_t gq;
  assert_int_equal(dr_msg_resume(&m, &gq), 0);
  assert_int_equal(gq.clock.echo_us, T0 + 99000);
  assert_int_equal(gq.clock.tx_us, gq.clock.echo_rx_us + 7);

  dr_buf_free(&b);
  dr_sess_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_symmetric_exact),
      cmocka_unit_test(test_known_stamps),
      cmocka_unit_test(test_no_hold),
      cmocka_unit_test(test_error_within_uncertainty),
      cmocka_unit_test(test_bad_stamps),
      cmocka_unit_test(test_filter_min_rtt),
      cmocka_unit_test(test_filter_window_slides),
      cmocka_unit_test(test_now_is_realtime),
      cmocka_unit_test(test_session_echoes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
