/* ckpeer: a hostile checkpoint peer, for the checkpoint plane's tests. It
 * connects to an agent's checkpoint port and misbehaves in one way, then
 * reports how the agent answered.
 *
 *   ckpeer garbage HOST PORT
 *       Sends bytes that are not a frame.
 *   ckpeer badsum HOST PORT RUN_ID NAME [SECRET_FILE]
 *       Passes the handshake (with the secret in SECRET_FILE when given),
 *       then pushes a file checkpoint NAME of 5 bytes with a wrong
 *       checksum.
 *   ckpeer wrongsecret HOST PORT RUN_ID
 *       Answers the handshake's challenge with a secret that is not the
 *       job's.
 *   ckpeer otherjob HOST PORT RUN_ID
 *       Presents a run id that is not the job's.
 *
 * Prints "refused CODE_NAME: MESSAGE" when the agent answered ERROR, then
 * "closed" when it closed the connection. Exits 0 when the agent refused
 * and closed, 1 when it did anything else (took the copy, kept the
 * connection past the deadline), 2 on bad usage. Every wait is bounded
 * (10 s).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "ckpt_io.h"
#include "errors.h"
#include "session.h"
#include "wire.h"

#define TIMEOUT_MS 10000

/* Prints the agent's ERROR (refused: one was printed already) and waits
 * for the end of the stream. */
static int expect_refusal(dr_ckpt_conn_t *c, int refused) {
  for (;;) {
    dr_msg_t m;
    int rc = dr_ckpt_recv(c, &m);
    if (rc == DR_ECLOSED) {
      printf("closed\n");
      return refused ? 0 : 1;
    }
    if (rc != 0) {
      printf("error %s\n", dr_err_name(rc));
      return 1;
    }
    dr_error_t e;
    if (dr_msg_error(&m, &e) == 0) {
      printf("refused %s: %.*s\n", dr_err_name(e.code), (int)e.message.len,
             (const char *)e.message.p);
      refused = 1;
    } else if (m.type != DR_MSG_OK && m.type != DR_MSG_WELCOME) {
      printf("answered %s\n", dr_msg_name(m.type));
      return 1;
    }
  }
}

static int handshake(dr_ckpt_conn_t *c, const char *run_id,
                     const uint8_t *secret, size_t secret_len) {
  dr_sess_t s;
  if (dr_sess_init(&s, run_id, secret, secret_len) != 0)
    return -1;
  int rc = dr_sess_hello(&s, 1, "ckpeer", &c->out);
  while (rc == 0 && (rc = dr_ckpt_send(c)) == 0) {
    dr_msg_t m;
    dr_sess_event_t ev;
    if ((rc = dr_ckpt_recv(c, &m)) != 0 ||
        (rc = dr_sess_on_frame(&s, &m, 1, &c->out, &ev)) != 0)
      break;
    if (ev.type == DR_SESS_READY)
      break;
    if (ev.type == DR_SESS_REFUSED) {
      printf("refused %s: %.*s\n", dr_err_name(ev.code), (int)ev.text.len,
             (const char *)ev.text.p);
      rc = ev.code;
      break;
    }
  }
  dr_sess_free(&s);
  c->dec.authed = rc == 0;
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: ckpeer garbage|badsum|wrongsecret|otherjob "
                    "HOST PORT [RUN_ID [NAME [SECRET_FILE]]]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *mode = argv[1];
  dr_ckpt_conn_t c;
  int rc = dr_ckpt_connect(argv[2], (uint16_t)atoi(argv[3]), -1, TIMEOUT_MS,
                           &c);
  if (rc != 0) {
    fprintf(stderr, "ckpeer: connect: %s\n", dr_strerror(rc));
    return 2;
  }
  int out = 2;
  if (strcmp(mode, "garbage") == 0) {
    static const char junk[] = "\x16\x03\x01 this is not a ddprun frame";
    dr_buf_append(&c.out, junk, sizeof(junk) - 1);
    dr_ckpt_send(&c);
    out = expect_refusal(&c, 0);
  } else if (strcmp(mode, "wrongsecret") == 0 && argc >= 5) {
    static const uint8_t wrong[] = "not-the-secret";
    rc = handshake(&c, argv[4], wrong, sizeof(wrong) - 1);
    out = rc == DR_EAUTH ? expect_refusal(&c, 1) : 1;
  } else if (strcmp(mode, "otherjob") == 0 && argc >= 5) {
    char other[256];
    snprintf(other, sizeof(other), "%s-other", argv[4]);
    rc = handshake(&c, other, NULL, 0);
    out = rc == DR_ERUNID ? expect_refusal(&c, 1) : 1;
  } else if (strcmp(mode, "badsum") == 0 && argc >= 6) {
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    if (argc >= 7 && dr_auth_secret_load(argv[6], &secret, &secret_len) != 0)
      return 2;
    rc = handshake(&c, argv[4], secret, secret_len);
    if (secret != NULL)
      dr_auth_secret_free(&secret, secret_len);
    if (rc != 0) {
      out = 1;
    } else {
      uint64_t step = 0;
      for (const char *p = argv[5]; *p; p++)
        if (*p >= '0' && *p <= '9')
          step = step * 10 + (uint64_t)(*p - '0');
      dr_ckpt_put_t put = {dr_str(argv[4]), dr_str(argv[5]), DR_CKPT_FILE, 5,
                           step, 0};
      uint8_t sum[DR_CKPT_SUM_LEN] = {0xde, 0xad};
      dr_bytes_t sb = {sum, sizeof(sum)};
      dr_enc_ckpt_put(&c.out, 1, &put);
      dr_enc_ckpt_data(&c.out, 1, dr_str("bytes"));
      dr_enc_ckpt_end(&c.out, 1, sb);
      dr_ckpt_send(&c);
      out = expect_refusal(&c, 0);
    }
  } else {
    fprintf(stderr, "ckpeer: unknown mode or missing arguments\n");
  }
  dr_ckpt_conn_close(&c);
  return out;
}
