/* The collective header (worker/comm/coll_hdr.c) and its check in the
 * ring engine (coll.c).
 *
 * First the header alone: its bytes, what each field's difference is
 * called, the message for each kind of mismatch. Then two ranks of one
 * ring, as two threads of this process joined by TCP socket pairs or by
 * shared-memory rings (the transports of link.c): collectives that agree
 * complete with the right result; for each kind of mismatch (sequence
 * number, kind, size, op, root, a zero-byte collective against one with
 * data) both ranks fail at once with DR_PG_EMISMATCH, each naming both
 * collectives, long before the timeout. The threads never call cmocka;
 * they report through their results.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"
#include "pg_internal.h"
#include "mono.h"

/* ---- the header alone ---------------------------------------------------- */

static dr_coll_hdr_t hdr(uint32_t kind, uint64_t seq, uint64_t n_bytes,
                         uint32_t op, uint32_t root) {
  dr_coll_hdr_t h = {.seq = seq, .n_bytes = n_bytes, .kind = kind, .op = op,
                     .root = root};
  return h;
}

static void test_round_trip(void **state) {
  (void)state;
  dr_coll_hdr_t h = hdr(DR_WORK_BROADCAST, 0x0102030405060708ull, 34816, 0,
                        7), back;
  uint8_t b[DR_COLL_HDR_BYTES];
  dr__coll_hdr_encode(b, &h);
  /* Little-endian, magic first. */
  assert_memory_equal(b, "DRCH", 4);
  assert_int_equal(b[4], DR_WORK_BROADCAST);
  assert_int_equal(b[8], 0x08);
  assert_int_equal(b[15], 0x01);
  assert_int_equal(dr__coll_hdr_decode(b, &back), 0);
  assert_int_equal(dr__coll_hdr_diff(&h, &back), 0);
  assert_int_equal(back.root, 7);
  b[0] ^= 1;
  assert_int_equal(dr__coll_hdr_decode(b, &back), -1);
  b[0] ^= 1;
  b[31] = 1; /* the reserved word must be zero */
  assert_int_equal(dr__coll_hdr_decode(b, &back), -1);
}

static void test_of_work(void **state) {
  (void)state;
  dr_work_t w;
  memset(&w, 0, sizeof(w));
  dr_coll_hdr_t h;
  w.kind = DR_WORK_ALLREDUCE;
  w.seq = 5;
  w.n_bytes = 4096;
  w.op = DR_PG_AVG;
  w.root = 3; /* not an all-reduce's business */
  dr__coll_hdr_of(&w, &h);
  assert_true(h.seq == 5 && h.n_bytes == 4096 && h.op == DR_PG_AVG &&
              h.root == 0 && h.kind == DR_WORK_ALLREDUCE);
  w.kind = DR_WORK_BROADCAST;
  dr__coll_hdr_of(&w, &h);
  assert_true(h.root == 3 && h.op == 0 && h.n_bytes == 4096);
  w.kind = DR_WORK_BARRIER;
  dr__coll_hdr_of(&w, &h);
  assert_true(h.root == 0 && h.op == 0 && h.n_bytes == 0);
}

static void test_describe(void **state) {
  (void)state;
  char s[96];
  dr_coll_hdr_t h = hdr(DR_WORK_ALLREDUCE, 553, 34816, DR_PG_AVG, 0);
  dr__coll_hdr_describe(&h, 0, s, sizeof(s));
  assert_string_equal(s, "allreduce #553 of 34.0 KiB");
  dr__coll_hdr_describe(&h, 1, s, sizeof(s));
  assert_string_equal(s, "allreduce (average) #553 of 34.0 KiB");
  h = hdr(DR_WORK_BROADCAST, 12, 4, 0, 2);
  dr__coll_hdr_describe(&h, 1, s, sizeof(s));
  assert_string_equal(s, "broadcast #12 of 4 B from rank 2");
  h = hdr(DR_WORK_ALLGATHER, 1, 3u << 20, 0, 0);
  dr__coll_hdr_describe(&h, 0, s, sizeof(s));
  assert_string_equal(s, "allgather #1 of 3.0 MiB");
  h = hdr(DR_WORK_BARRIER, 9, 0, 0, 0);
  dr__coll_hdr_describe(&h, 0, s, sizeof(s));
  assert_string_equal(s, "barrier #9");
  h = hdr(77, 9, 8, 0, 0);
  dr__coll_hdr_describe(&h, 0, s, sizeof(s));
  assert_string_equal(s, "collective of kind 77 #9 of 8 B");
}

/* check(mine, peer's) as rank 1 against rank 0. */
static int check(dr_coll_hdr_t mine, dr_coll_hdr_t peer, dr_pg_fail_t *f) {
  uint8_t b[DR_COLL_HDR_BYTES];
  dr__coll_hdr_encode(b, &peer);
  memset(f, 0, sizeof(*f));
  return dr__coll_hdr_check(b, &mine, 1, 0, f);
}

static void test_check(void **state) {
  (void)state;
  dr_pg_fail_t f;
  dr_coll_hdr_t ar = hdr(DR_WORK_ALLREDUCE, 553, 34816, DR_PG_AVG, 0);
  assert_int_equal(check(ar, ar, &f), 0);
  assert_int_equal(dr__coll_hdr_diff(&ar, &ar), 0);

  struct {
    dr_coll_hdr_t peer;
    unsigned diff;
    const char *text;
  } cases[] = {
      {hdr(DR_WORK_ALLREDUCE, 553, 4, DR_PG_AVG, 0), DR_HDR_SIZE,
       "out of step: rank 1 is in allreduce #553 of 34.0 KiB, rank 0 in "
       "allreduce #553 of 4 B"},
      {hdr(DR_WORK_ALLREDUCE, 554, 34816, DR_PG_AVG, 0), DR_HDR_SEQ,
       "out of step: rank 1 is in allreduce #553 of 34.0 KiB, rank 0 in "
       "allreduce #554 of 34.0 KiB"},
      {hdr(DR_WORK_BROADCAST, 553, 4, 0, 0),
       DR_HDR_KIND | DR_HDR_OP | DR_HDR_SIZE,
       "out of step: rank 1 is in allreduce #553 of 34.0 KiB, rank 0 in "
       "broadcast #553 of 4 B from rank 0"},
      {hdr(DR_WORK_ALLREDUCE, 553, 34816, DR_PG_SUM, 0), DR_HDR_OP,
       "out of step: rank 1 is in allreduce (average) #553 of 34.0 KiB, "
       "rank 0 in allreduce (sum) #553 of 34.0 KiB"},
      {hdr(DR_WORK_BARRIER, 553, 0, 0, 0),
       DR_HDR_KIND | DR_HDR_OP | DR_HDR_SIZE,
       "out of step: rank 1 is in allreduce #553 of 34.0 KiB, rank 0 in "
       "barrier #553"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    assert_int_equal(dr__coll_hdr_diff(&ar, &cases[i].peer), cases[i].diff);
    assert_int_equal(check(ar, cases[i].peer, &f), DR_PG_EMISMATCH);
    assert_int_equal(f.code, DR_PG_EMISMATCH);
    assert_int_equal(f.origin, 1);
    assert_int_equal(f.blamed, 0);
    assert_int_equal(f.seq, 553);
    assert_string_equal(f.text, cases[i].text);
  }

  /* Broadcasts from different roots. */
  dr_coll_hdr_t b0 = hdr(DR_WORK_BROADCAST, 8, 64, 0, 0);
  dr_coll_hdr_t b1 = hdr(DR_WORK_BROADCAST, 8, 64, 0, 1);
  assert_int_equal(dr__coll_hdr_diff(&b0, &b1), DR_HDR_ROOT);
  assert_int_equal(check(b0, b1, &f), DR_PG_EMISMATCH);
  assert_string_equal(f.text, "out of step: rank 1 is in broadcast #8 of 64 B "
                              "from rank 0, rank 0 in broadcast #8 of 64 B "
                              "from rank 1");

  /* Bytes that are no header at all. */
  uint8_t junk[DR_COLL_HDR_BYTES];
  memset(junk, 0xab, sizeof(junk));
  assert_int_equal(dr__coll_hdr_check(junk, &ar, 1, 0, &f), DR_PG_EMISMATCH);
  assert_string_equal(f.text, "out of step: rank 1 is in allreduce #553 of "
                              "34.0 KiB, rank 0 sent bytes that are no "
                              "collective header (ab ab ab ab ...)");
  assert_string_equal(dr_strerror(DR_PG_EMISMATCH),
                      "collectives out of step (ranks in different ones)");
}

/* ---- two ranks of one ring ------------------------------------------------ */

#define TIMEOUT_MS 20000u
#define RING_BYTES (64u << 10)

typedef struct {
  dr_pg_t pg[2];
  int fds[4]; /* socket pairs 0 -> 1 and 1 -> 0 */
  uint32_t order[2];
} ring_t;

/* A world of 2: rank 0's send link is rank 1's receive link and back. */
static int ring_setup(ring_t *r, dr_link_kind_t kind) {
  memset(r, 0, sizeof(*r));
  r->order[0] = 0;
  r->order[1] = 1;
  for (int i = 0; i < 4; i++)
    r->fds[i] = -1;
  for (uint32_t k = 0; k < 2; k++) {
    dr_pg_t *pg = &r->pg[k];
    pg->rank = pg->pos = k;
    pg->world = 2;
    pg->order = r->order;
    pg->timeout_ms = TIMEOUT_MS;
    dr__link_init(&pg->send);
    dr__link_init(&pg->recv);
    pg->send.peer = pg->recv.peer = 1 - k;
    pg->send.sending = 1;
    pg->send.kind = pg->recv.kind = kind;
    pg->send.chunk = pg->recv.chunk = 4096;
  }
  for (uint32_t k = 0; k < 2; k++) {
    dr_link_t *s = &r->pg[k].send, *d = &r->pg[1 - k].recv;
    if (kind == DR_LINK_TCP) {
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, &r->fds[2 * k]) != 0)
        return -1;
      s->data_fd = r->fds[2 * k];
      d->data_fd = r->fds[2 * k + 1];
      fcntl(s->data_fd, F_SETFL, O_NONBLOCK);
      fcntl(d->data_fd, F_SETFL, O_NONBLOCK);
      d->stage_cap = d->chunk;
      d->stage = malloc(d->stage_cap);
      if (d->stage == NULL)
        return -1;
    } else {
      char name[64];
      snprintf(name, sizeof(name), "/dr-test-hdr-%d-%p-%u", (int)getpid(),
               (void *)r, k);
      if (dr_shm_ring_create(name, RING_BYTES, &s->ring, NULL) != 0 ||
          dr_shm_ring_open(name, &d->ring, NULL) != 0)
        return -1;
      dr_shm_ring_unlink(name);
    }
  }
  return 0;
}

static void ring_teardown(ring_t *r) {
  for (int k = 0; k < 2; k++) {
    /* dr__link_close closes data_fd: each descriptor has one owner. */
    dr__link_close(&r->pg[k].send);
    dr__link_close(&r->pg[k].recv);
  }
}

typedef struct {
  dr_pg_t *pg;
  dr_work_t w;
  float buf[300];
  int rc;
  dr_pg_fail_t f;
  uint64_t took_ns;
} side_t;

static void *side_main(void *arg) {
  side_t *s = arg;
  uint64_t t0 = dr_mono_ns();
  s->w.pg = s->pg;
  s->w.buf = s->w.kind == DR_WORK_ALLGATHER ? s->buf + 150 : s->buf;
  s->w.in = s->buf;
  s->rc = dr__coll_run(s->pg, &s->w, t0 + (uint64_t)TIMEOUT_MS * 1000000u,
                       &s->f);
  s->took_ns = dr_mono_ns() - t0;
  return NULL;
}

/* What each rank runs: kind, seq, byte count, op, root. */
typedef struct {
  dr_work_kind_t kind;
  uint64_t seq;
  size_t n_bytes;
  dr_pg_op_t op;
  uint32_t root;
} call_t;

/* Runs a[k] on rank k, both at once; fills s[2]. */
static void run_pair(dr_link_kind_t kind, const call_t a[2], side_t s[2]) {
  ring_t r;
  assert_int_equal(ring_setup(&r, kind), 0);
  for (int k = 0; k < 2; k++) {
    memset(&s[k], 0, sizeof(s[k]));
    s[k].pg = &r.pg[k];
    s[k].w.kind = a[k].kind;
    s[k].w.seq = a[k].seq;
    s[k].w.n_bytes = a[k].n_bytes;
    s[k].w.op = a[k].op;
    s[k].w.root = a[k].root;
    for (int i = 0; i < 300; i++)
      s[k].buf[i] = (float)(i + 100 * k);
  }
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, side_main, &s[0]), 0);
  side_main(&s[1]);
  pthread_join(t, NULL);
  ring_teardown(&r);
}

static void agree(dr_link_kind_t kind) {
  side_t s[2];
  call_t ar[2] = {{DR_WORK_ALLREDUCE, 1, 1200, DR_PG_SUM, 0},
                  {DR_WORK_ALLREDUCE, 1, 1200, DR_PG_SUM, 0}};
  run_pair(kind, ar, s);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(s[k].rc, 0);
    for (int i = 0; i < 300; i++)
      assert_true(s[k].buf[i] == (float)(2 * i + 100));
  }
  call_t bc[2] = {{DR_WORK_BROADCAST, 2, 40, DR_PG_SUM, 1},
                  {DR_WORK_BROADCAST, 2, 40, DR_PG_SUM, 1}};
  run_pair(kind, bc, s);
  assert_int_equal(s[0].rc, 0);
  assert_int_equal(s[1].rc, 0);
  assert_true(s[0].buf[9] == 109.0f);
  call_t zero[2] = {{DR_WORK_ALLREDUCE, 3, 0, DR_PG_SUM, 0},
                    {DR_WORK_ALLREDUCE, 3, 0, DR_PG_SUM, 0}};
  run_pair(kind, zero, s);
  assert_int_equal(s[0].rc, 0);
  assert_int_equal(s[1].rc, 0);
  call_t bar[2] = {{DR_WORK_BARRIER, 4, 0, DR_PG_SUM, 0},
                   {DR_WORK_BARRIER, 4, 0, DR_PG_SUM, 0}};
  run_pair(kind, bar, s);
  assert_int_equal(s[0].rc, 0);
  assert_int_equal(s[1].rc, 0);
}

static void test_agree_tcp(void **state) {
  (void)state;
  agree(DR_LINK_TCP);
}

static void test_agree_shm(void **state) {
  (void)state;
  agree(DR_LINK_SHM);
}

/* Both ranks fail with DR_PG_EMISMATCH, each naming itself first and the
 * other second as want0 / want1 say, well within the timeout. */
static void disagree(dr_link_kind_t kind, call_t c0, call_t c1,
                     const char *want0, const char *want1) {
  side_t s[2];
  call_t a[2] = {c0, c1};
  run_pair(kind, a, s);
  const char *want[2] = {want0, want1};
  for (int k = 0; k < 2; k++) {
    assert_int_equal(s[k].rc, DR_PG_EMISMATCH);
    assert_int_equal(s[k].f.code, DR_PG_EMISMATCH);
    assert_int_equal(s[k].f.origin, (uint32_t)k);
    assert_int_equal(s[k].f.blamed, (uint32_t)(1 - k));
    assert_string_equal(s[k].f.text, want[k]);
    assert_true(s[k].took_ns < 2000000000ull);
  }
}

static void mismatches(dr_link_kind_t kind) {
  /* An extra small all-reduce on rank 1 before the gradients'. */
  disagree(kind, (call_t){DR_WORK_ALLREDUCE, 7, 1200, DR_PG_AVG, 0},
           (call_t){DR_WORK_ALLREDUCE, 7, 4, DR_PG_AVG, 0},
           "out of step: rank 0 is in allreduce #7 of 1.2 KiB, rank 1 in "
           "allreduce #7 of 4 B",
           "out of step: rank 1 is in allreduce #7 of 4 B, rank 0 in "
           "allreduce #7 of 1.2 KiB");
  disagree(kind, (call_t){DR_WORK_ALLREDUCE, 7, 8, DR_PG_SUM, 0},
           (call_t){DR_WORK_ALLREDUCE, 8, 8, DR_PG_SUM, 0},
           "out of step: rank 0 is in allreduce #7 of 8 B, rank 1 in "
           "allreduce #8 of 8 B",
           "out of step: rank 1 is in allreduce #8 of 8 B, rank 0 in "
           "allreduce #7 of 8 B");
  disagree(kind, (call_t){DR_WORK_BROADCAST, 3, 4, DR_PG_SUM, 0},
           (call_t){DR_WORK_ALLGATHER, 3, 4, DR_PG_SUM, 0},
           "out of step: rank 0 is in broadcast #3 of 4 B from rank 0, "
           "rank 1 in allgather #3 of 4 B",
           "out of step: rank 1 is in allgather #3 of 4 B, rank 0 in "
           "broadcast #3 of 4 B from rank 0");
  disagree(kind, (call_t){DR_WORK_ALLREDUCE, 2, 64, DR_PG_SUM, 0},
           (call_t){DR_WORK_ALLREDUCE, 2, 64, DR_PG_AVG, 0},
           "out of step: rank 0 is in allreduce (sum) #2 of 64 B, rank 1 in "
           "allreduce (average) #2 of 64 B",
           "out of step: rank 1 is in allreduce (average) #2 of 64 B, rank 0 "
           "in allreduce (sum) #2 of 64 B");
  /* The root's link carries no data in; its header still comes. */
  disagree(kind, (call_t){DR_WORK_BROADCAST, 4, 40, DR_PG_SUM, 0},
           (call_t){DR_WORK_BROADCAST, 4, 40, DR_PG_SUM, 1},
           "out of step: rank 0 is in broadcast #4 of 40 B from rank 0, "
           "rank 1 in broadcast #4 of 40 B from rank 1",
           "out of step: rank 1 is in broadcast #4 of 40 B from rank 1, "
           "rank 0 in broadcast #4 of 40 B from rank 0");
  disagree(kind, (call_t){DR_WORK_ALLREDUCE, 5, 0, DR_PG_SUM, 0},
           (call_t){DR_WORK_ALLREDUCE, 5, 1200, DR_PG_SUM, 0},
           "out of step: rank 0 is in allreduce #5 of 0 B, rank 1 in "
           "allreduce #5 of 1.2 KiB",
           "out of step: rank 1 is in allreduce #5 of 1.2 KiB, rank 0 in "
           "allreduce #5 of 0 B");
  disagree(kind, (call_t){DR_WORK_BARRIER, 6, 0, DR_PG_SUM, 0},
           (call_t){DR_WORK_ALLREDUCE, 6, 8, DR_PG_SUM, 0},
           "out of step: rank 0 is in barrier #6, rank 1 in allreduce #6 of "
           "8 B",
           "out of step: rank 1 is in allreduce #6 of 8 B, rank 0 in barrier "
           "#6");
}

static void test_mismatch_tcp(void **state) {
  (void)state;
  mismatches(DR_LINK_TCP);
}

static void test_mismatch_shm(void **state) {
  (void)state;
  mismatches(DR_LINK_SHM);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_of_work),
      cmocka_unit_test(test_describe),
      cmocka_unit_test(test_check),
      cmocka_unit_test(test_agree_tcp),
      cmocka_unit_test(test_agree_shm),
      cmocka_unit_test(test_mismatch_tcp),
      cmocka_unit_test(test_mismatch_shm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
