/* Hostile and broken peers: garbage, oversized frames, idle connections,
 * wrong protocol versions and run ids. Each costs only its own connection. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Upper bounds on elapsed time only catch a hang: a loaded machine (ctest
 * -j2, sanitizers) may take seconds longer than the deadline under test. */
#define HANG_SLACK_MS 10000

#define SECRET "robust-secret-0b7e"
/* The handshake timeout of tests that are not about it: a close within
 * CLOSE_WAIT_MS cannot be that timeout. */
#define HS_OFF "30"
#define CLOSE_WAIT_MS 1000

/* A frame header by hand, declaring body_len bytes that never follow. */
static void send_header(dr_h_raw_t *r, uint8_t type, uint32_t body_len) {
  uint8_t h[DR_FRAME_HDR_LEN] = {0x44,
                                 0x52,
                                 DR_PROTO_VERSION,
                                 type,
                                 0,
                                 0,
                                 0,
                                 1,
                                 (uint8_t)(body_len >> 24),
                                 (uint8_t)(body_len >> 16),
                                 (uint8_t)(body_len >> 8),
                                 (uint8_t)body_len};
  assert_int_equal(dr_h_raw_send(r, h, sizeof(h)), 0);
}

/* HELLO and the server's WELCOME; returns auth_required. */
static int raw_hello(dr_h_raw_t *r, dr_buf_t *b) {
  dr_msg_t m;
  dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str("raw"));
  assert_int_equal(dr_h_raw_send_buf(r, b), 0);
  assert_int_equal(dr_h_raw_recv(r, 2000, &m), 0);
  assert_int_equal(m.type, DR_MSG_WELCOME);
  return (int)m.f[0].u;
}

static void assert_closed_within(dr_h_raw_t *r, int ms, const char *what) {
  double t0 = dr_h_now_ms();
  int rc = dr_h_raw_wait_closed(r, ms);
  fprintf(stderr, "  %s: %s after %.0f ms\n", what,
          rc == 0 ? "closed" : "still open", dr_h_now_ms() - t0);
  assert_int_equal(rc, 0);
}

/* c still gets right answers. */
static void assert_serves(dr_client_t *c, const char *key) {
  assert_int_equal(dr_client_set(c, 0, key, "ok", 2), 0);
  uint8_t *v = NULL;
  size_t n = 0;
  int rc = dr_client_get(c, 0, key, 0, &v, &n);
  int same = rc == 0 && n == 2 && memcmp(v, "ok", 2) == 0;
  free(v);
  assert_true(same);
}

DR_H_TEST(test_garbage_drops_only_its_connection) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--handshake-timeout", HS_OFF),
             NULL);
  dr_client_t *good = dr_h_open(fx, "good");
  assert_serves(good, "before");

  /* Not a ddprun peer at all. */
  static const char http[] = "GET /index.html HTTP/1.1\r\nHost: rdzv\r\n\r\n";
  dr_h_raw_t *bad = dr_h_raw(fx);
  assert_int_equal(dr_h_raw_send(bad, http, sizeof(http) - 1), 0);
  assert_closed_within(bad, CLOSE_WAIT_MS, "HTTP request");
  assert_serves(good, "after-http");
  /* The log shows what the peer sent, printably. */
  int logged = dr_h_log_contains(fx->srv, "GET /index", 2000);
  if (!logged)
    dr_h_log_dump(dr_h_server_log_path(fx->srv), 20);
  assert_true(logged);

  /* Garbage after a valid handshake. */
  dr_buf_t *b = &fx->buf;
  dr_h_raw_t *bad2 = dr_h_raw(fx);
  assert_int_equal(raw_hello(bad2, b), 0);
  uint8_t junk[64];
  memset(junk, 0xff, sizeof(junk));
  assert_int_equal(dr_h_raw_send(bad2, junk, sizeof(junk)), 0);
  assert_closed_within(bad2, CLOSE_WAIT_MS, "junk after HELLO");

  /* A well-framed message of the wrong schema. */
  dr_h_raw_t *bad3 = dr_h_raw(fx);
  assert_int_equal(raw_hello(bad3, b), 0);
  dr_enc_int(b, 2, 42); /* a reply type, never a request */
  assert_int_equal(dr_h_raw_send_buf(bad3, b), 0);
  dr_msg_t m;
  int rc;
  /* It may be answered with ERROR; it must not be served. */
  while ((rc = dr_h_raw_recv(bad3, 500, &m)) == 0)
    assert_int_equal(m.type, DR_MSG_ERROR);
  assert_true(rc == DR_ECLOSED || rc == -ETIMEDOUT);

  assert_serves(good, "after-junk");
}

DR_H_TEST(test_huge_declared_length_closes) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--handshake-timeout", HS_OFF),
             NULL);
  dr_client_t *good = dr_h_open(fx, "good");
  dr_buf_t *b = &fx->buf;
  dr_h_raw_t *r = dr_h_raw(fx);
  assert_int_equal(raw_hello(r, b), 0);
  /* Over the 64 MiB frame cap; the body never comes, so only the header
   * can explain a close. */
  send_header(r, DR_MSG_SET, 0xfffffff0u);
  assert_closed_within(r, CLOSE_WAIT_MS, "4 GiB SET");
  /* The same as the very first frame. */
  dr_h_raw_t *r2 = dr_h_raw(fx);
  send_header(r2, DR_MSG_HELLO, 0x7fffffffu);
  assert_closed_within(r2, CLOSE_WAIT_MS, "2 GiB HELLO");
  assert_serves(good, "after-huge");
}

DR_H_TEST(test_oversized_frame_before_auth_closes) {
  const char *path = dr_h_write_file(fx, "secret", SECRET);
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--handshake-timeout", HS_OFF, "--secret-file", path),
             NULL);
  dr_client_t *good = dr_h_open_secret(fx, "good", SECRET);

  /* 1 MiB is within the cap for authenticated peers, not before. */
  dr_h_raw_t *r = dr_h_raw(fx);
  send_header(r, DR_MSG_HELLO, 1u << 20);
  assert_closed_within(r, CLOSE_WAIT_MS, "1 MiB HELLO");

  dr_buf_t *b = &fx->buf;
  dr_h_raw_t *r2 = dr_h_raw(fx);
  assert_int_equal(raw_hello(r2, b), 1);
  send_header(r2, DR_MSG_SET, 64u << 10);
  assert_closed_within(r2, CLOSE_WAIT_MS, "64 KiB SET after HELLO, no AUTH");

  assert_serves(good, "after-oversized");
}

DR_H_TEST(test_idle_connection_closed_after_handshake_timeout) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--handshake-timeout", "0.5"),
             NULL);
  dr_client_t *good = dr_h_open(fx, "good");
  double t0 = dr_h_now_ms();
  dr_h_raw_t *silent = dr_h_raw(fx);
  /* A HELLO that stops half-way. */
  dr_buf_t *b = &fx->buf;
  dr_h_raw_t *partial = dr_h_raw(fx);
  dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str("slow"));
  assert_int_equal(dr_h_raw_send(partial, b->data, 7), 0);
  dr_buf_reset(b);

  int rc1 = dr_h_raw_wait_closed(silent, 3000);
  double t1 = dr_h_now_ms() - t0;
  int rc2 = dr_h_raw_wait_closed(partial, 3000);
  double t2 = dr_h_now_ms() - t0;
  fprintf(stderr, "  silent: %s at %.0f ms; partial HELLO: %s at %.0f ms\n",
          rc1 == 0 ? "closed" : "open", t1, rc2 == 0 ? "closed" : "open", t2);
  assert_int_equal(rc1, 0);
  assert_int_equal(rc2, 0);
  assert_true(t1 >= 450 && t1 <= 500 + HANG_SLACK_MS);
  assert_true(t2 >= 450 && t2 <= 500 + HANG_SLACK_MS);
  /* A client past its handshake may stay idle. */
  assert_serves(good, "idle-is-fine");
}

DR_H_TEST(test_missing_auth_closed_after_handshake_timeout) {
  const char *path = dr_h_write_file(fx, "secret", SECRET);
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--handshake-timeout", "0.5", "--secret-file", path),
             NULL);
  dr_buf_t *b = &fx->buf;
  dr_h_raw_t *r = dr_h_raw(fx);
  double t0 = dr_h_now_ms();
  assert_int_equal(raw_hello(r, b), 1);
  int rc = dr_h_raw_wait_closed(r, 3000);
  double took = dr_h_now_ms() - t0;
  fprintf(stderr, "  HELLO without AUTH: %s at %.0f ms\n",
          rc == 0 ? "closed" : "open", took);
  assert_int_equal(rc, 0);
  assert_true(took >= 450 && took <= 500 + HANG_SLACK_MS);
}

typedef struct {
  dr_client_t *c;
  int rc;
  double took;
} arrival_t;

static void *arrive_main(void *arg) {
  arrival_t *a = arg;
  double t0 = dr_h_now_ms();
  a->rc = dr_client_barrier(a->c, 0, "left", 2, 5000);
  a->took = dr_h_now_ms() - t0;
  return NULL;
}

DR_H_TEST(test_client_leaving_while_waiting) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--handshake-timeout", HS_OFF),
             NULL);
  dr_client_t *good = dr_h_open(fx, "good");
  dr_buf_t *b = &fx->buf;

  /* A blocking GET whose client goes away before the key is set. */
  dr_h_raw_t *r = dr_h_raw(fx);
  assert_int_equal(raw_hello(r, b), 0);
  dr_enc_get(b, 2, 0, dr_str("awaited"), 5000);
  assert_int_equal(dr_h_raw_send_buf(r, b), 0);
  /* A round trip on another connection gives the GET time to park. */
  assert_serves(good, "while-parked");
  dr_h_raw_close(r);

  /* A barrier arrival that goes away: it no longer counts. */
  dr_h_raw_t *r2 = dr_h_raw(fx);
  assert_int_equal(raw_hello(r2, b), 0);
  dr_enc_barrier(b, 2, 0, dr_str("left"), 2, 5000);
  assert_int_equal(dr_h_raw_send_buf(r2, b), 0);
  assert_serves(good, "while-arrived");
  dr_h_raw_close(r2);

  assert_serves(good, "after-leaving");
  assert_int_equal(dr_client_set(good, 0, "awaited", "v", 1), 0);

  arrival_t a[2] = {{dr_h_open(fx, "arrive-1"), -EINPROGRESS, 0},
                    {dr_h_open(fx, "arrive-2"), -EINPROGRESS, 0}};
  for (int i = 0; i < 2; i++)
    assert_int_equal(dr_h_thread(fx, arrive_main, &a[i]), 0);
  dr_h_join_threads(fx);
  for (int i = 0; i < 2; i++) {
    fprintf(stderr, "  barrier arrival %d: %s after %.0f ms\n", i,
            dr_err_name(a[i].rc), a[i].took);
    assert_int_equal(a[i].rc, 0);
  }
  assert_serves(good, "at-the-end");
}

/* Expects ERROR(code) as the answer, then a close. */
static void expect_error_then_close(dr_h_raw_t *r, int code, dr_msg_t *m) {
  int rc = dr_h_raw_recv(r, 2000, m);
  if (rc != 0)
    fail_msg("expected ERROR %s, got %s", dr_err_name(code), dr_err_name(rc));
  if (m->type != DR_MSG_ERROR)
    fail_msg("expected ERROR %s, got %s", dr_err_name(code),
             dr_msg_name(m->type));
  fprintf(stderr, "  ERROR %s: %.*s\n", dr_err_name(-(int)m->f[0].u),
          (int)m->f[1].b.len, (const char *)m->f[1].b.p);
  assert_int_equal(m->f[0].u, (uint64_t)-code);
}

DR_H_TEST(test_wrong_protocol_version_refused) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30"), NULL);
  dr_buf_t *b = &fx->buf;
  dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str("future"));
  assert_int_equal(b->err, 0);
  b->data[2] = DR_PROTO_VERSION + 1;
  dr_h_raw_t *r = dr_h_raw(fx);
  assert_int_equal(dr_h_raw_send_buf(r, b), 0);
  dr_msg_t m;
  expect_error_then_close(r, DR_EVERSION, &m);
  assert_closed_within(r, CLOSE_WAIT_MS, "after ERROR");
}

DR_H_TEST(test_wrong_run_id_error_then_close) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30"), NULL);
  dr_buf_t *b = &fx->buf;
  dr_enc_hello(b, 1, dr_str("someone-else"), dr_str("stranger"));
  dr_h_raw_t *r = dr_h_raw(fx);
  assert_int_equal(dr_h_raw_send_buf(r, b), 0);
  dr_msg_t m;
  expect_error_then_close(r, DR_ERUNID, &m);
  char msg[512];
  snprintf(msg, sizeof(msg), "%.*s", (int)m.f[1].b.len,
           (const char *)m.f[1].b.p);
  assert_non_null(strstr(msg, "someone-else"));
  /* The peer has not authenticated: nothing of this job in the answer. */
  assert_null(strstr(msg, DR_H_RUN_ID));
  assert_closed_within(r, CLOSE_WAIT_MS, "after ERROR");
  /* The operator's log says both. */
  assert_true(dr_h_log_contains(fx->srv, "'someone-else' is not this job's '"
                                         DR_H_RUN_ID "'", 2000));
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
      T(test_garbage_drops_only_its_connection),
      T(test_client_leaving_while_waiting),
      T(test_huge_declared_length_closes),
      T(test_oversized_frame_before_auth_closes),
      T(test_idle_connection_closed_after_handshake_timeout),
      T(test_missing_auth_closed_after_handshake_timeout),
      T(test_wrong_protocol_version_refused),
      T(test_wrong_run_id_error_then_close),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
