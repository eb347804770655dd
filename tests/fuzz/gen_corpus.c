/* Writes the seed corpus of fuzz_decode: one file per message type, each a
 * selector byte (0x01: authenticated, default limits; see fuzz_decode.c)
 * followed by one valid frame of that type.
 *   usage: gen_corpus DIR
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "wire.h"

#define SELECTOR 0x01

static int encode(dr_buf_t *b, uint8_t type) {
  static const uint8_t nonce[DR_NONCE_LEN] = {1, 2, 3, 4, 5, 6, 7, 8};
  const dr_bytes_t keys[] = {dr_str("rank/0"), dr_str(""), dr_str("addr/1")};
  const dr_bytes_t id = {nonce, sizeof(nonce)};
  const dr_join_t j = {dr_str("job7"), dr_str("node-a"), dr_str("10.0.0.2"),
                       8,              DR_NONE,          29500,
                       id};
  const dr_assign_t a = {3, 1, 2, 16, 8, dr_str("10.0.0.1"), 29501, id, 1, 3};
  const dr_failure_t f = {3, 9, 1, 4242, -1, 11, DR_FAIL_SIGNAL,
                          dr_str("segfault")};
  switch (type) {
  case DR_MSG_HELLO:
    return dr_enc_hello(b, 1, dr_str("job7"), dr_str("node-a"));
  case DR_MSG_WELCOME:
    return dr_enc_welcome(b, 1, 1, id);
  case DR_MSG_AUTH:
    return dr_enc_auth(b, 2, id);
  case DR_MSG_OK:
    return dr_enc_ok(b, 2);
  case DR_MSG_ERROR:
    return dr_enc_error(b, 3, DR_ENOTFOUND, dr_str("key not found"));
  case DR_MSG_SET:
    return dr_enc_set(b, 3, 1, dr_str("k"), dr_str("value"));
  case DR_MSG_GET:
    return dr_enc_get(b, 4, 1, dr_str("k"), 1000);
  case DR_MSG_VALUE:
    return dr_enc_value(b, 4, dr_str("value"));
  case DR_MSG_ADD:
    return dr_enc_add(b, 5, 0, dr_str("counter"), -1);
  case DR_MSG_INT:
    return dr_enc_int(b, 5, 41);
  case DR_MSG_CAS:
    return dr_enc_cas(b, 6, 1, dr_str("lead"), dr_str(""), dr_str("me"));
  case DR_MSG_DELETE:
    return dr_enc_delete(b, 7, 1, dr_str("k"));
  case DR_MSG_MULTI_GET:
    return dr_enc_multi_get(b, 8, 1, keys, 3, 500);
  case DR_MSG_VALUES:
    return dr_enc_values(b, 8, keys, 3);
  case DR_MSG_CHECK:
    return dr_enc_check(b, 9, 1, keys, 3);
  case DR_MSG_BARRIER:
    return dr_enc_barrier(b, 10, 1, dr_str("init"), 4, 30000);
  case DR_MSG_JOIN:
    return dr_enc_join(b, 11, &j);
  case DR_MSG_ASSIGN:
    return dr_enc_assign(b, 11, &a);
  case DR_MSG_HEARTBEAT:
    return dr_enc_heartbeat(b, 12, 3);
  case DR_MSG_FAILURE:
    return dr_enc_failure(b, 13, &f);
  case DR_MSG_SUCCESS:
    return dr_enc_success(b, 14, 3);
  case DR_MSG_RESTART:
    return dr_enc_restart(b, 0, 4, 1, dr_str("rank 9 crashed"));
  case DR_MSG_STOP:
    return dr_enc_stop(b, 0, 3, dr_str("restart budget spent"));
  case DR_MSG_RESUME: {
    const dr_resume_t r = {dr_str("job7"), dr_str("node-a"), 3, 1, 2, 16, 8,
                           1};
    return dr_enc_resume(b, 15, &r);
  }
  case DR_MSG_LEAVE: {
    const dr_leave_t l = {3, 15, dr_str("SIGTERM")};
    return dr_enc_leave(b, 16, &l);
  }
  default:
    return DR_ETYPE;
  }
}

static int write_seed(const char *dir, uint8_t type, const dr_buf_t *b) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%02u-%s", dir, type, dr_msg_name(type));
  FILE *fp = fopen(path, "wb");
  if (fp == NULL) {
    fprintf(stderr, "gen_corpus: fopen(%s) failed: %s\n", path,
            strerror(errno));
    return -1;
  }
  int ok = fputc(SELECTOR, fp) != EOF &&
           fwrite(b->data, 1, b->len, fp) == b->len;
  if (fclose(fp) != 0 || !ok) {
    fprintf(stderr, "gen_corpus: writing %s failed: %s\n", path,
            strerror(errno));
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  dr_buf_t b;
  dr_buf_init(&b);
  int n = 0;
  for (uint8_t t = 1; t < DR__MSG_MAX; t++) {
    dr_buf_reset(&b);
    int rc = encode(&b, t);
    if (rc != 0) {
      fprintf(stderr, "gen_corpus: encoding %s failed: %s\n", dr_msg_name(t),
              dr_strerror(rc));
      dr_buf_free(&b);
      return 1;
    }
    if (write_seed(argv[1], t, &b) != 0) {
      dr_buf_free(&b);
      return 1;
    }
    n++;
  }
  dr_buf_free(&b);
  printf("gen_corpus: %d seeds in %s\n", n, argv[1]);
  return 0;
}
