/* The shared secret: from a file or the environment, required of every
 * client, never logged. */
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

#define FILE_SECRET "file-secret-7f3a9c"
#define ENV_SECRET "env-secret-51d2e8"

static int try_open(dr_h_fixture_t *fx, const char *secret, char *err,
                    size_t err_len) {
  dr_client_t *c = NULL;
  int rc =
      dr_h_client_open(fx->srv, NULL, "guest", secret,
                       secret != NULL ? strlen(secret) : 0, &c, err, err_len);
  dr_client_close(&c);
  fprintf(stderr, "  secret %s: %s (%s)\n", secret != NULL ? "given" : "none",
          dr_err_name(rc), err);
  return rc;
}

/* Without the secret a client is refused; with a wrong one too; with the
 * right one it can use the store and join. */
static void check_secret_enforced(dr_h_fixture_t *fx, const char *secret) {
  char err[512];
  assert_int_equal(try_open(fx, NULL, err, sizeof(err)), DR_ENOAUTH);
  assert_int_equal(try_open(fx, "not-the-secret", err, sizeof(err)), DR_EAUTH);

  dr_client_t *c = dr_h_open_secret(fx, "member", secret);
  assert_int_equal(dr_client_set(c, 0, "k", "v", 1), 0);
  uint8_t *v = NULL;
  size_t n = 0;
  int rc = dr_client_get(c, 0, "k", 0, &v, &n);
  free(v);
  assert_int_equal(rc, 0);
  assert_int_equal(n, 1);
  dr_join_t j;
  dr_assignment_t a;
  dr_h_join_fill(&j, DR_H_RUN_ID, "member", "", 1, DR_NONE, 0, "");
  rc = dr_client_join(c, &j, 10000, &a);
  uint32_t nnodes = a.nnodes;
  dr_assignment_free(&a);
  assert_int_equal(rc, 0);
  assert_int_equal(nnodes, 1);
}

DR_H_TEST(test_secret_file_enforced) {
  /* A trailing newline in the file is not part of the secret. */
  const char *path = dr_h_write_file(fx, "secret", FILE_SECRET "\n");
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--secret-file", path),
             NULL);
  check_secret_enforced(fx, FILE_SECRET);
}

DR_H_TEST(test_secret_env_enforced) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30"),
             DR_H_ARGS("DDPRUN_SECRET=" ENV_SECRET));
  check_secret_enforced(fx, ENV_SECRET);
}

DR_H_TEST(test_no_secret_needs_no_auth) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30"), NULL);
  dr_client_t *c = dr_h_open(fx, "open");
  assert_int_equal(dr_client_set(c, 0, "k", "v", 1), 0);
}

/* Expects r to get no answer but ERROR or a close within 2 s. */
static void expect_refused(dr_h_raw_t *r, const char *what) {
  dr_msg_t m;
  int rc = dr_h_raw_recv(r, 2000, &m);
  if (rc == 0 && m.type != DR_MSG_ERROR)
    fail_msg("%s before AUTH was answered with %s", what, dr_msg_name(m.type));
  if (rc == 0)
    fprintf(stderr, "  %s before AUTH: ERROR %s\n", what,
            dr_err_name(-(int)m.f[0].u));
  else
    fprintf(stderr, "  %s before AUTH: %s\n", what, dr_err_name(rc));
  assert_true(rc == 0 || rc == DR_ECLOSED);
}

DR_H_TEST(test_unauthenticated_client_gets_nothing) {
  const char *path = dr_h_write_file(fx, "secret", FILE_SECRET);
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--secret-file", path),
             NULL);
  dr_client_t *member = dr_h_open_secret(fx, "member", FILE_SECRET);
  assert_int_equal(dr_client_set(member, 0, "private", "data", 4), 0);

  dr_buf_t *b = &fx->buf;
  dr_msg_t m;

  /* HELLO is answered with a challenge, and a GET without AUTH gets no
   * value. */
  dr_h_raw_t *r = dr_h_raw(fx);
  dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str("intruder"));
  assert_int_equal(dr_h_raw_send_buf(r, b), 0);
  assert_int_equal(dr_h_raw_recv(r, 2000, &m), 0);
  assert_int_equal(m.type, DR_MSG_WELCOME);
  assert_int_equal(m.f[0].u, 1);
  assert_int_equal(m.f[1].b.len, DR_NONCE_LEN);
  dr_enc_get(b, 2, 0, dr_str("private"), 0);
  assert_int_equal(dr_h_raw_send_buf(r, b), 0);
  expect_refused(r, "GET");

  /* Nor does a JOIN get an assignment. */
  dr_h_raw_t *r2 = dr_h_raw(fx);
  dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str("intruder"));
  assert_int_equal(dr_h_raw_send_buf(r2, b), 0);
  assert_int_equal(dr_h_raw_recv(r2, 2000, &m), 0);
  assert_int_equal(m.type, DR_MSG_WELCOME);
  dr_join_t j;
  dr_h_join_fill(&j, DR_H_RUN_ID, "intruder", "", 1, DR_NONE, 0, "");
  dr_enc_join(b, 2, &j);
  assert_int_equal(dr_h_raw_send_buf(r2, b), 0);
  expect_refused(r2, "JOIN");

  /* Nor a request sent in place of HELLO. */
  dr_h_raw_t *r3 = dr_h_raw(fx);
  dr_enc_get(b, 1, 0, dr_str("private"), 0);
  assert_int_equal(dr_h_raw_send_buf(r3, b), 0);
  expect_refused(r3, "GET without HELLO");

  /* The member was not disturbed. */
  uint8_t *v = NULL;
  size_t n = 0;
  int rc = dr_client_get(member, 0, "private", 0, &v, &n);
  free(v);
  assert_int_equal(rc, 0);
}

/* Sends raw (frames or bytes) on a new connection and collects every
 * answer until the server closes; fails when an answer holds needle. */
static void expect_no_leak(dr_h_fixture_t *fx, const void *raw, size_t n,
                           int then_auth, const char *needle,
                           const char *what) {
  dr_h_raw_t *r = dr_h_raw(fx);
  assert_int_equal(dr_h_raw_send(r, raw, n), 0);
  dr_msg_t m;
  int rc, answers = 0;
  while ((rc = dr_h_raw_recv(r, 2000, &m)) == 0) {
    answers++;
    /* Every field of every answer, as bytes. */
    for (uint32_t i = 0; i < m.n_fields; i++) {
      const dr_field_t *f = &m.f[i];
      const uint8_t *p = f->kind == DR_FIELD_LIST ? f->l.p : f->b.p;
      size_t len = f->kind == DR_FIELD_LIST ? f->l.len : f->b.len;
      if (f->kind != DR_FIELD_U64 && len > 0 &&
          memmem(p, len, needle, strlen(needle)) != NULL)
        fail_msg("%s: the %s answer names the job: %.*s", what,
                 dr_msg_name(m.type), (int)len, (const char *)p);
    }
    if (m.type == DR_MSG_ERROR)
      fprintf(stderr, "  %s: ERROR %.*s\n", what, (int)m.f[1].b.len,
              (const char *)m.f[1].b.p);
    if (then_auth && m.type == DR_MSG_WELCOME) {
      uint8_t mac[DR_MAC_LEN] = {0};
      dr_enc_auth(&fx->buf, 2, (dr_bytes_t){mac, sizeof(mac)});
      assert_int_equal(dr_h_raw_send_buf(r, &fx->buf), 0);
    }
  }
  assert_int_equal(rc, DR_ECLOSED);
  assert_true(answers >= 1);
}

DR_H_TEST(test_unauthenticated_answers_name_nothing_of_the_job) {
  static const char job[] = "job-7f3e-private-name";
  const char *path = dr_h_write_file(fx, "secret", FILE_SECRET);
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--handshake-timeout", "1", "--rdzv-id", job,
                       "--secret-file", path),
             NULL);
  dr_client_t *member = dr_h_open_secret(fx, "member", FILE_SECRET);
  assert_int_equal(dr_client_set(member, 0, "private", job, strlen(job)), 0);
  dr_buf_t b;
  dr_buf_init(&b);
  dr_join_t j;
  dr_h_join_fill(&j, job, "intruder", "", 1, DR_NONE, 0, "");

  /* Every way to be refused before authenticating. */
  dr_enc_hello(&b, 1, dr_str("a-guess"), dr_str("intruder"));
  expect_no_leak(fx, b.data, b.len, 0, job, "wrong run id");
  dr_buf_reset(&b);
  dr_enc_hello(&b, 1, dr_str(job), dr_str("intruder"));
  b.data[2] = DR_PROTO_VERSION + 1;
  expect_no_leak(fx, b.data, b.len, 0, job, "another version");
  dr_buf_reset(&b);
  expect_no_leak(fx, "GET / HTTP/1.0\r\n\r\n", 18, 0, job, "not ddprun");
  dr_enc_get(&b, 1, 0, dr_str("private"), 0);
  expect_no_leak(fx, b.data, b.len, 0, job, "GET before HELLO");
  dr_buf_reset(&b);
  dr_enc_join(&b, 1, &j);
  expect_no_leak(fx, b.data, b.len, 0, job, "JOIN before HELLO");
  dr_buf_reset(&b);
  /* With the right run id: WELCOME, then no AUTH, a wrong one, none. */
  dr_enc_hello(&b, 1, dr_str(job), dr_str("intruder"));
  dr_enc_get(&b, 2, 0, dr_str("private"), 0);
  expect_no_leak(fx, b.data, b.len, 0, job, "GET instead of AUTH");
  dr_buf_reset(&b);
  dr_enc_hello(&b, 1, dr_str(job), dr_str("intruder"));
  expect_no_leak(fx, b.data, b.len, 1, job, "wrong AUTH");
  dr_buf_reset(&b);
  dr_enc_hello(&b, 1, dr_str(job), dr_str("intruder"));
  expect_no_leak(fx, b.data, b.len, 0, job, "no AUTH (timeout)");
  dr_buf_free(&b);
}

DR_H_TEST(test_secret_never_logged) {
  const char *path = dr_h_write_file(fx, "secret", FILE_SECRET);
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--secret-file", path, "--log-level", "debug"),
             NULL);
  char err[512];
  assert_int_equal(try_open(fx, NULL, err, sizeof(err)), DR_ENOAUTH);
  assert_int_equal(try_open(fx, "wrong-" FILE_SECRET, err, sizeof(err)),
                   DR_EAUTH);
  dr_client_t *c = dr_h_open_secret(fx, "member", FILE_SECRET);
  assert_int_equal(dr_client_set(c, 0, "k", "v", 1), 0);
  dr_h_close(fx, &c);
  /* Stopping flushes whatever the server would still say. */
  char log_path[300];
  snprintf(log_path, sizeof(log_path), "%s", dr_h_server_log_path(fx->srv));
  assert_int_equal(dr_h_server_stop(&fx->srv, 3000), 0);
  FILE *f = fopen(log_path, "r");
  assert_non_null(f);
  char line[4096];
  int leaked = 0, lines = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    lines++;
    if (strstr(line, FILE_SECRET) != NULL) {
      fprintf(stderr, "  leaked: %s", line);
      leaked = 1;
    }
  }
  fclose(f);
  fprintf(stderr, "  %d log lines checked\n", lines);
  assert_int_equal(leaked, 0);
}

/* A job of several nodes reachable beyond this host and without a secret
 * says once what that allows; loopback, one node or a secret say nothing. */
#define NO_SECRET_WARNING "without a shared secret: anyone who can reach"
DR_H_TEST(test_no_secret_warned_off_loopback) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "2:4", "--host", "0.0.0.0"), NULL);
  assert_true(dr_h_log_contains(fx->srv, NO_SECRET_WARNING, 0));
  assert_true(dr_h_log_contains(fx->srv, "set DDPRUN_SECRET or "
                                         "--secret-file on every node", 0));
}

DR_H_TEST(test_no_secret_quiet_where_harmless) {
  const char *path = dr_h_write_file(fx, "secret", FILE_SECRET "\n");
  const char *const *cases[3] = {
      DR_H_ARGS("--nnodes", "2"), /* loopback (the harness' --host) */
      DR_H_ARGS("--nnodes", "1", "--host", "0.0.0.0"),
      DR_H_ARGS("--nnodes", "2", "--host", "0.0.0.0", "--secret-file", path)};
  for (int i = 0; i < 3; i++) {
    dr_h_start(fx, cases[i], NULL);
    dr_client_t *c = dr_h_open_secret(fx, "probe", i == 2 ? FILE_SECRET : NULL);
    assert_int_equal(dr_client_set(c, 0, "k", "v", 1), 0);
    assert_false(dr_h_log_contains(fx->srv, NO_SECRET_WARNING, 0));
    dr_h_close(fx, &c);
    assert_int_equal(dr_h_server_stop(&fx->srv, 5000), 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
      T(test_secret_file_enforced),
      T(test_secret_env_enforced),
      T(test_no_secret_needs_no_auth),
      T(test_unauthenticated_client_gets_nothing),
      T(test_unauthenticated_answers_name_nothing_of_the_job),
      T(test_secret_never_logged),
      T(test_no_secret_warned_off_loopback),
      T(test_no_secret_quiet_where_harmless),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
