/* The metrics endpoint's request classifier: every prefix of a valid head
 * waits, the complete head is served, and each kind of bad request gets
 * its status as early as it can be known. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "server_internal.h"

#define CAP 4096

static int classify(const char *req, dr_http_target_t *t) {
  return dr__http_classify(req, strlen(req), CAP, t);
}

static void test_valid_and_prefixes(void **state) {
  (void)state;
  static const struct {
    const char *req;
    dr_http_target_t target;
  } ok[] = {
      {"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
       DR_HTTP_METRICS},
      {"GET /healthz HTTP/1.0\r\n\r\n", DR_HTTP_HEALTHZ},
      {"GET /metrics?name[]=up HTTP/1.1\n\n", DR_HTTP_METRICS},
      {"GET http://h:9/healthz HTTP/1.1\r\nHost: h\r\n\r\n", DR_HTTP_HEALTHZ},
  };
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    size_t n = strlen(ok[i].req);
    for (size_t k = 0; k < n; k++) {
      dr_http_target_t t = (dr_http_target_t)-1;
      int code = dr__http_classify(ok[i].req, k, CAP, &t);
      if (code != 0)
        fail_msg("prefix %zu of request %zu answered %d", k, i, code);
    }
    dr_http_target_t t = (dr_http_target_t)-1;
    assert_int_equal(dr__http_classify(ok[i].req, n, CAP, &t), 200);
    assert_int_equal(t, ok[i].target);
  }
}

static void test_errors(void **state) {
  (void)state;
  static const struct {
    const char *req;
    int code;
  } bad[] = {
      {"POST /metrics HTTP/1.1\r\n\r\n", 405},
      {"HEAD /metrics HTTP/1.1\r\n\r\n", 405},
      {"DELETE /x HTTP/1.1\r\n", 405}, /* known at the line's end */
      {"GET /metric HTTP/1.1\r\n", 404},
      {"GET /metrics/ HTTP/1.1\r\n", 404},
      {"GET / HTTP/1.1\r\n", 404},
      {"GET /metrics HTTP/2.0\r\n", 400},
      {"GET /metrics\r\n", 400},
      {"GET  /metrics HTTP/1.1\r\n", 400},
      {"GET metrics HTTP/1.1\r\n", 400},
      {"GET /metrics HTTP/1.1 x\r\n", 400},
      {"GET /met\trics HTTP/1.1\r\n", 400},
      {"GET /met\rrics HTTP/1.1\r\n", 400},
      {"get /metrics HTTP/1.1\r\n", 400},    /* at the first byte */
      {"\x16\x03\x01\x02\x00", 400},         /* a TLS hello */
      {"\r\nGET /metrics HTTP/1.1\r\n", 400},
      {"GET http://host HTTP/1.1\r\n", 400},
      {" GET /metrics HTTP/1.1\r\n", 400},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    dr_http_target_t t;
    int code = classify(bad[i].req, &t);
    if (code != bad[i].code)
      fail_msg("request %zu answered %d, not %d", i, code, bad[i].code);
  }
}

static void test_too_large(void **state) {
  (void)state;
  static char buf[CAP];
  dr_http_target_t t;
  /* A request line that never ends. */
  memset(buf, 'a', sizeof(buf));
  memcpy(buf, "GET /", 5);
  assert_int_equal(dr__http_classify(buf, CAP - 1, CAP, &t), 0);
  assert_int_equal(dr__http_classify(buf, CAP, CAP, &t), 431);
  /* A valid line whose header fields never end. */
  const char *line = "GET /metrics HTTP/1.1\r\nX-Pad: ";
  memcpy(buf, line, strlen(line));
  assert_int_equal(dr__http_classify(buf, CAP - 1, CAP, &t), 0);
  assert_int_equal(dr__http_classify(buf, CAP, CAP, &t), 431);
  /* The same head that ends just within the cap is served. */
  memcpy(buf + CAP - 4, "\r\n\r\n", 4);
  assert_int_equal(dr__http_classify(buf, CAP, CAP, &t), 200);
  assert_int_equal(t, DR_HTTP_METRICS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid_and_prefixes),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_too_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
