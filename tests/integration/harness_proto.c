/* The harness' raw-protocol helpers: a node past its handshake, and the
 * next frame of a type. See harness.h. */
#include "harness.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

dr_h_raw_t *dr_h_hello(dr_h_fixture_t *fx, const char *host) {
  dr_h_raw_t *r = dr_h_raw(fx);
  dr_msg_t m;
  dr_enc_hello(&fx->buf, 1, dr_str(DR_H_RUN_ID), dr_str(host));
  assert_int_equal(dr_h_raw_send_buf(r, &fx->buf), 0);
  assert_int_equal(dr_h_raw_recv(r, 2000, &m), 0);
  assert_int_equal(m.type, DR_MSG_WELCOME);
  return r;
}

int dr_h_recv_type(dr_h_raw_t *r, uint8_t want, int timeout_ms,
                   dr_msg_t *m) {
  double deadline = dr_h_now_ms() + timeout_ms;
  for (;;) {
    double left = deadline - dr_h_now_ms();
    int rc = dr_h_raw_recv(r, left > 0 ? (int)left : 0, m);
    if (rc != 0)
      return rc;
    if (m->type == want)
      return 0;
    if (m->type != DR_MSG_HEARTBEAT && m->type != DR_MSG_ROUND_STATUS)
      return DR_EUNEXPECTED;
  }
}
