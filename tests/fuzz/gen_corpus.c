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
  const dr_clock_stamp_t ck = {1700000000000000ull, 1699999999750100ull,
                               1699999999750400ull};
  const dr_join_t j = {dr_str("job7"),
                       dr_str("node-a"),
                       dr_str("10.0.0.2"),
                       8,
                       DR_NONE,
                       29500,
                       id,
                       ck,
                       41000,
                       12,
                       41001,
                       2,
                       1,
                       dr_str("env: GPUs: none\nbinding: local rank 0: "
                              "cpus 0-3\n"),
                       dr_str("^docker,lo")};
  const dr_peer_rec_t peers[1] = {
      {0, 41000, DR_PEER_HOLDER, 12, {(const uint8_t *)"10.0.0.1", 8}}};
  const dr_assign_t a = {3,     1,           2,     16,     8,
                         dr_str("10.0.0.1"), 29501, id,     1,
                         3,     250000,      150,   {0},    12,
                         peers, 1,           {0, NULL, 0},  2,
                         0,     NULL,        0,     {0, NULL, 0}};
  const dr_resume_t q = {dr_str("job7"), dr_str("node-a"), 3, 1, 2, 16, 8, 1,
                         ck, {0}, 2};
  const dr_leave_t l = {3, 15, dr_str("ddprun on 'node-a' received SIGTERM")};
  const dr_failure_t f = {3, 9, 1, 4242, -1, 11, DR_FAIL_SIGNAL,
                          dr_str("segfault")};
  const dr_node_rec_t nodes[] = {
      {0, 2, 0, DR_NS_RUNNING, 150, 400, dr_str("node-a")},
      {DR_NO_RANK, 2, DR_NO_RANK, DR_NS_WAITING, DR_NONE, DR_NONE,
       dr_str("node-b")}};
  const dr_rank_rec_t ranks[] = {
      {0, 0, 0, 4242, DR_RS_RUNNING, 0, 0, 1200, 80, 12500, 3ull << 30,
       4ull << 30, 1500, 5ull << 30, 88, 70ull << 30, 80ull << 30},
      {1, 1, 0, 4243, DR_RS_KILLED, 0, 9, DR_NONE, DR_NONE, DR_NONE,
       DR_NONE, 4ull << 30, DR_NO_U32, DR_NONE, DR_NO_U32, DR_NONE,
       DR_NONE}};
  const dr_stack_rec_t stacks[] = {
      {0, 0, 4242, 0, dr_str("#0 main () at train.c:1\n")},
      {1, 0, 4243, 3, dr_str("rank 1 is not running (killed)")}};
  /* One per node record, with its node rank; node-b's not known. */
  const dr_env_rec_t envs[] = {
      {0, dr_str("env: GPUs: none\nbinding: local rank 0: cpus 0-3\n")},
      {DR_NO_RANK, dr_str("")}};
  switch (type) {
  case DR_MSG_HELLO:
    return dr_enc_hello(b, 1, dr_str("job7"), dr_str("node-a"));
  case DR_MSG_WELCOME:
    return dr_enc_welcome(b, 1, 1, id, ck.echo_us);
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
    return dr_enc_heartbeat(b, 12, 3, &ck);
  case DR_MSG_FAILURE:
    return dr_enc_failure(b, 13, &f);
  case DR_MSG_SUCCESS:
    return dr_enc_success(b, 14, 3);
  case DR_MSG_RESTART:
    return dr_enc_restart(b, 0, 4, 1, dr_str("rank 9 crashed"));
  case DR_MSG_STOP:
    return dr_enc_stop(b, 0, 3, dr_str("restart budget spent"));
  case DR_MSG_RESUME:
    return dr_enc_resume(b, 15, &q);
  case DR_MSG_LEAVE:
    return dr_enc_leave(b, 0, &l);
  case DR_MSG_ROUND_STATUS: {
    const dr_round_status_t st = {3, 2, 3, 3, 1, 1400, DR_NONE, 1,
                                  {0, NULL, 0}, {0, NULL, 0}};
    const uint32_t missing[] = {2};
    return dr_enc_round_status(b, 0, &st, nodes, 2, missing, 1);
  }
  case DR_MSG_RANKS:
    return dr_enc_ranks(b, 0, 3, ranks, 2);
  case DR_MSG_STATUS:
    return dr_enc_status(b, 16, DR_STATUS_STACKS | DR_STATUS_ENV, 10000);
  case DR_MSG_JOB_STATUS: {
    const dr_job_status_t js = {3, DR_JS_RUNNING, 1, 3, 2, 2, DR_NONE,
                                dr_str(""), 12000, {0, NULL, 0},
                                {0, NULL, 0}, {0, NULL, 0}, {0, NULL, 0}};
    return dr_enc_job_status(b, 16, &js, nodes, 2, ranks, 2, stacks, 2,
                             envs, 2);
  }
  case DR_MSG_STACKS:
    return dr_enc_stacks(b, 0, 7, 3);
  case DR_MSG_STACK_DUMP:
    return dr_enc_stack_dump(b, 0, 7, stacks, 2);
  case DR_MSG_CKPT_PUT: {
    const dr_ckpt_put_t p = {dr_str("job7"), dr_str("ckpt-0000000190.bin"),
                             DR_CKPT_FILE, 6, 190, 0};
    return dr_enc_ckpt_put(b, 17, &p);
  }
  case DR_MSG_CKPT_ENTRY: {
    const dr_ckpt_entry_t e = {dr_str("shards/0.pt"), DR_CKPT_FILE, 6};
    return dr_enc_ckpt_entry(b, 17, &e);
  }
  case DR_MSG_CKPT_DATA:
    return dr_enc_ckpt_data(b, 17, dr_str("value!"));
  case DR_MSG_CKPT_END:
    return dr_enc_ckpt_end(b, 17, id);
  case DR_MSG_CKPT_GET: {
    const dr_ckpt_get_t g = {dr_str("job7"), dr_str(""), 190};
    return dr_enc_ckpt_get(b, 18, &g);
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
