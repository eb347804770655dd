/* The wire codec: round trips of every message type, every prefix, every
 * length cap, every decode error, the typed views and allocation failure.
 * The sample messages are in wire_samples.c, the hand-built frames in
 * wire_raw.c.
 *
 * One file, past the few hundred lines of the rule: the project keeps one
 * cmocka executable per module, and these are the tests of one module,
 * proto/wire.h (the codec and its typed views), on one fixture. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "wire.h"
#include "wire_raw.h"
#include "wire_samples.h"

/* Every message type, in the order of the protocol's table. */
static const uint8_t all_types[] = {
#define X(name, id, schema, doc) DR_MSG_##name,
    DR_MSG_TYPES(X)
#undef X
};
#define N_TYPES (sizeof(all_types) / sizeof(all_types[0]))

/* ---- a counting allocator ------------------------------------------------- */

typedef struct {
  size_t n_calls;
  size_t peak_bytes; /* largest block asked for */
  int fail;          /* refuse every request that allocates */
  int in_decode;     /* set around dr_decode(): no allocation may happen */
} counter_t;

static void *count_alloc(void *ctx, void *ptr, size_t n_bytes) {
  counter_t *c = ctx;
  assert_false(c->in_decode);
  if (n_bytes == 0) {
    free(ptr);
    return NULL;
  }
  c->n_calls++;
  if (n_bytes > c->peak_bytes)
    c->peak_bytes = n_bytes;
  return c->fail ? NULL : realloc(ptr, n_bytes);
}

static void buf_with(dr_buf_t *b, counter_t *c) {
  dr_buf_init(b);
  memset(c, 0, sizeof(*c));
  b->alloc = count_alloc;
  b->alloc_ctx = c;
}

/* Decodes src the way a server reads a socket: the receive buffer starts
 * empty and grows only by what NEED_MORE asks for. Returns the status of
 * the last dr_decode() and leaves the allocator's counts in *c. */
static dr_decode_status_t serve(const dr_decoder_t *d, const uint8_t *src,
                                size_t n, counter_t *c, int *err) {
  dr_buf_t in;
  dr_msg_t m;
  size_t off = 0, consumed, need;
  buf_with(&in, c);
  for (;;) {
    c->in_decode = 1;
    dr_decode_status_t st =
        dr_decode(d, in.data, in.len, &m, &consumed, &need, err);
    c->in_decode = 0;
    if (st != DR_DECODE_NEED_MORE || off == n) {
      dr_buf_free(&in);
      return st;
    }
    assert_true(need > in.len);
    assert_int_equal(dr_buf_reserve(&in, need - in.len), 0);
    size_t take = need - in.len < n - off ? need - in.len : n - off;
    assert_int_equal(dr_buf_append(&in, src + off, take), 0);
    off += take;
  }
}

/* ---- fixtures -------------------------------------------------------------- */

/* Limits small enough that every cap is quick to cross. */
static const dr_limits_t small = {.max_frame_unauth = 64,
                                  .max_frame = 1024,
                                  .max_str = 8,
                                  .max_key = 16,
                                  .max_value = 32,
                                  .max_blob = 24,
                                  .max_count = 3};

typedef struct {
  dr_decoder_t dflt; /* default limits, authenticated */
  dr_decoder_t lim;  /* `small`, authenticated */
  dr_decoder_t pre;  /* `small`, before authentication */
  dr_buf_t b;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  init_lists();
  dr_decoder_init(&f->dflt, NULL);
  f->dflt.authed = 1;
  dr_decoder_init(&f->lim, &small);
  f->lim.authed = 1;
  dr_decoder_init(&f->pre, &small);
  dr_buf_init(&f->b);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  dr_buf_free(&f->b);
  free(f);
  return 0;
}

/* ---- round trips and prefixes --------------------------------------------- */

static void test_table_covers_every_type(void **state) {
  assert_int_equal(N_TYPES, DR__MSG_MAX - 1);
  for (size_t i = 0; i < N_TYPES; i++) {
    assert_int_equal(all_types[i], i + 1);
    assert_non_null(dr_msg_schema(all_types[i]));
    assert_string_not_equal(dr_msg_name(all_types[i]), "UNKNOWN");
    assert_true(strlen(dr_msg_schema(all_types[i])) <= DR_MAX_FIELDS);
  }
  assert_null(dr_msg_schema(0));
  assert_null(dr_msg_schema(DR__MSG_MAX));
  assert_string_equal(dr_msg_name(0), "UNKNOWN");
  assert_string_equal(dr_msg_name(DR_MSG_SET), "SET");
}

static void test_round_trip_every_type(void **state) {
  fx_t *f = *state;
  for (size_t i = 0; i < N_TYPES; i++) {
    uint8_t t = all_types[i];
    dr_msg_t m;
    size_t consumed, need;
    int err;
    dr_buf_reset(&f->b);
    assert_int_equal(encode_sample(&f->b, t, REQ + t), 0);
    assert_int_equal(dr_decode(&f->dflt, f->b.data, f->b.len, &m, &consumed,
                               &need, &err),
                     DR_DECODE_OK);
    assert_int_equal(err, 0);
    assert_int_equal(consumed, f->b.len);
    assert_int_equal(m.version, DR_PROTO_VERSION);
    assert_int_equal(m.type, t);
    assert_int_equal(m.req_id, REQ + t);
    assert_int_equal(m.body_len, f->b.len - DR_FRAME_HDR_LEN);
    const char *schema = dr_msg_schema(t);
    assert_int_equal(m.n_fields, strlen(schema));
    for (uint32_t k = 0; k < m.n_fields; k++) {
      uint8_t want = schema[k] == 'u' ? DR_FIELD_U64
                     : schema[k] == 'K' || schema[k] == 'V' || schema[k] == 'B'
                         ? DR_FIELD_LIST
                         : DR_FIELD_BYTES;
      assert_int_equal(m.f[k].kind, want);
    }
    check_sample(&m);
  }
}

/* Frames back to back decode one at a time; consumed marks the boundary. */
static void test_stream_of_frames(void **state) {
  fx_t *f = *state;
  dr_buf_reset(&f->b);
  for (size_t i = 0; i < N_TYPES; i++)
    assert_int_equal(encode_sample(&f->b, all_types[i], (uint32_t)i), 0);
  size_t off = 0;
  for (size_t i = 0; i < N_TYPES; i++) {
    dr_msg_t m;
    size_t consumed, need;
    int err;
    assert_int_equal(dr_decode(&f->dflt, f->b.data + off, f->b.len - off, &m,
                               &consumed, &need, &err),
                     DR_DECODE_OK);
    assert_int_equal(m.type, all_types[i]);
    assert_int_equal(m.req_id, i);
    check_sample(&m);
    off += consumed;
  }
  assert_int_equal(off, f->b.len);
}

/* Every strict prefix needs more, and says exactly how much. Each prefix
 * sits in its own exactly-sized block so a sanitizer sees any over-read. */
static void test_every_prefix_needs_more(void **state) {
  fx_t *f = *state;
  for (size_t i = 0; i < N_TYPES; i++) {
    dr_buf_reset(&f->b);
    assert_int_equal(encode_sample(&f->b, all_types[i], REQ), 0);
    for (size_t k = 0; k < f->b.len; k++) {
      uint8_t *p = malloc(k > 0 ? k : 1);
      assert_non_null(p);
      memcpy(p, f->b.data, k);
      dr_msg_t m;
      size_t consumed = 99, need = 0;
      int err = 99;
      assert_int_equal(dr_decode(&f->dflt, p, k, &m, &consumed, &need, &err),
                       DR_DECODE_NEED_MORE);
      assert_int_equal(need, k < DR_FRAME_HDR_LEN ? DR_FRAME_HDR_LEN
                                                  : f->b.len);
      assert_int_equal(consumed, 0);
      assert_int_equal(err, 0);
      free(p);
    }
  }
}

/* A server-like read loop decodes every sample, reserving no more than
 * the frame (rounded up to the buffer's power-of-two growth). */
static void test_server_loop_reserves_only_need(void **state) {
  fx_t *f = *state;
  for (size_t i = 0; i < N_TYPES; i++) {
    counter_t c;
    int err;
    dr_buf_reset(&f->b);
    assert_int_equal(encode_sample(&f->b, all_types[i], REQ), 0);
    assert_int_equal(serve(&f->dflt, f->b.data, f->b.len, &c, &err),
                     DR_DECODE_OK);
    assert_true(c.peak_bytes <= 2 * f->b.len || c.peak_bytes == 256);
  }
}

/* ---- length caps ------------------------------------------------------------ */

/* The frame is refused with DR_ETOOBIG by a server-like loop that never
 * reserves more than the frame's capped size. */
static void expect_too_big(const dr_decoder_t *d, const raw_t *r) {
  counter_t c;
  int err = 0;
  assert_int_equal(serve(d, r->b, r->len, &c, &err), DR_DECODE_ERROR);
  assert_int_equal(err, DR_ETOOBIG);
  uint32_t cap = d->authed ? d->lim.max_frame : d->lim.max_frame_unauth;
  /* dr_buf_t starts at 256 bytes and doubles. */
  size_t bound = 2 * (DR_FRAME_HDR_LEN + (size_t)cap);
  assert_true(c.peak_bytes <= (bound > 256 ? bound : 256));
}

static void expect_ok(const dr_decoder_t *d, const raw_t *r) {
  counter_t c;
  int err = 0;
  assert_int_equal(serve(d, r->b, r->len, &c, &err), DR_DECODE_OK);
}

static void test_frame_over_max_frame(void **state) {
  fx_t *f = *state;
  const uint32_t lens[] = {small.max_frame + 1, 0x7fffffffu, 0xffffffffu};
  for (size_t i = 0; i < 3; i++) {
    raw_t r;
    raw_begin(&r, DR_MSG_OK);
    raw_set_body_len(&r, lens[i]);
    counter_t c;
    int err;
    /* Only the header is ever read: the body is never reserved. */
    assert_int_equal(serve(&f->lim, r.b, r.len, &c, &err), DR_DECODE_ERROR);
    assert_int_equal(err, DR_ETOOBIG);
    assert_true(c.peak_bytes <= 256);
    assert_int_equal(raw_error(&f->dflt, &r),
                     lens[i] > f->dflt.lim.max_frame ? DR_ETOOBIG : 1);
  }
  raw_t r;
  raw_begin(&r, DR_MSG_OK);
  raw_set_body_len(&r, small.max_frame);
  dr_msg_t m;
  size_t consumed, need;
  int err;
  assert_int_equal(dr_decode(&f->lim, r.b, r.len, &m, &consumed, &need, &err),
                   DR_DECODE_NEED_MORE);
  assert_int_equal(need, DR_FRAME_HDR_LEN + small.max_frame);
}

/* A VALUES frame whose body is body_len bytes: items of 32, n and 0. */
static void values_frame(raw_t *r, uint32_t body_len) {
  uint32_t mid = body_len - 5 - (4 + 32) - 4 - 4;
  raw_begin(r, DR_MSG_VALUES);
  raw_listf(r, 3);
  raw_item(r, 32, 32);
  raw_item(r, mid, mid);
  raw_item(r, 0, 0);
  raw_end(r);
  assert_int_equal(r->len, DR_FRAME_HDR_LEN + body_len);
}

static void test_frame_over_unauth_cap(void **state) {
  fx_t *f = *state;
  raw_t r;
  values_frame(&r, small.max_frame_unauth);
  expect_ok(&f->pre, &r);
  values_frame(&r, small.max_frame_unauth + 1);
  expect_too_big(&f->pre, &r);
  expect_ok(&f->lim, &r); /* the same frame after authentication */
  raw_set_body_len(&r, 0xffffffffu);
  expect_too_big(&f->pre, &r);
}

/* One field of the given schema class at its cap passes, cap+1 and a
 * declared 4 GiB fail with DR_ETOOBIG (never DR_ETRUNC: the cap comes
 * first). */
static void byte_field_frame(raw_t *r, uint8_t type, uint32_t declared,
                             size_t n) {
  raw_begin(r, type);
  switch (type) {
  case DR_MSG_HELLO: /* s: run_id */
    raw_bytesf(r, declared, n);
    raw_bytesf(r, 1, 1);
    break;
  case DR_MSG_SET: /* k then v */
    raw_u64f(r, 1);
    raw_bytesf(r, declared, n);
    raw_bytesf(r, 1, 1);
    break;
  case DR_MSG_VALUE: /* v */
    raw_bytesf(r, declared, n);
    break;
  case DR_MSG_ERROR: /* b */
    raw_u64f(r, 5);
    raw_bytesf(r, declared, n);
    break;
  default:
    fail();
  }
  raw_end(r);
}

static void check_byte_cap(const fx_t *f, uint8_t type, uint32_t cap) {
  raw_t r;
  byte_field_frame(&r, type, cap, cap);
  expect_ok(&f->lim, &r);
  byte_field_frame(&r, type, cap + 1, cap + 1);
  expect_too_big(&f->lim, &r);
  byte_field_frame(&r, type, 0xffffffffu, 0);
  expect_too_big(&f->lim, &r);
  assert_int_equal(raw_error(&f->lim, &r), DR_ETOOBIG);
}

static void test_str_cap(void **state) {
  check_byte_cap(*state, DR_MSG_HELLO, small.max_str);
}

static void test_key_cap(void **state) {
  check_byte_cap(*state, DR_MSG_SET, small.max_key);
}

static void test_value_cap(void **state) {
  check_byte_cap(*state, DR_MSG_VALUE, small.max_value);
  fx_t *f = *state;
  raw_t r; /* the value field of SET, after a key */
  raw_begin(&r, DR_MSG_SET);
  raw_u64f(&r, 1);
  raw_bytesf(&r, 1, 1);
  raw_bytesf(&r, small.max_value + 1, small.max_value + 1);
  raw_end(&r);
  expect_too_big(&f->lim, &r);
}

static void test_blob_cap(void **state) {
  check_byte_cap(*state, DR_MSG_ERROR, small.max_blob);
}

/* A MULTI_GET (key list) or VALUES (value list) with count items of
 * item_len bytes; the last item declares last_declared. */
static void list_frame(raw_t *r, uint8_t type, uint32_t count,
                       uint32_t item_len, uint32_t last_declared) {
  raw_begin(r, type);
  if (type == DR_MSG_MULTI_GET)
    raw_u64f(r, 1);
  raw_listf(r, count);
  for (uint32_t i = 0; i < count; i++) {
    uint32_t d = i + 1 == count ? last_declared : item_len;
    raw_item(r, d, d == 0xffffffffu ? 0 : d);
  }
  if (type == DR_MSG_MULTI_GET)
    raw_u64f(r, 0);
  raw_end(r);
}

static void test_list_count_cap(void **state) {
  fx_t *f = *state;
  const uint8_t types[] = {DR_MSG_MULTI_GET, DR_MSG_VALUES};
  for (int i = 0; i < 2; i++) {
    raw_t r;
    list_frame(&r, types[i], small.max_count, 2, 2);
    expect_ok(&f->lim, &r);
    list_frame(&r, types[i], small.max_count + 1, 2, 2);
    expect_too_big(&f->lim, &r);
    /* A huge count with no items behind it: still the cap, not TRUNC. */
    raw_begin(&r, types[i]);
    if (types[i] == DR_MSG_MULTI_GET)
      raw_u64f(&r, 1);
    raw_listf(&r, 0xffffffffu);
    raw_end(&r);
    expect_too_big(&f->lim, &r);
  }
}

static void test_list_item_cap(void **state) {
  fx_t *f = *state;
  const uint8_t types[] = {DR_MSG_MULTI_GET, DR_MSG_VALUES};
  const uint32_t caps[] = {small.max_key, small.max_value};
  for (int i = 0; i < 2; i++) {
    raw_t r;
    list_frame(&r, types[i], 2, 1, caps[i]);
    expect_ok(&f->lim, &r);
    list_frame(&r, types[i], 2, 1, caps[i] + 1);
    expect_too_big(&f->lim, &r);
    list_frame(&r, types[i], 2, 1, 0xffffffffu);
    expect_too_big(&f->lim, &r);
  }
  /* CHECK lists keys too. */
  raw_t r;
  raw_begin(&r, DR_MSG_CHECK);
  raw_u64f(&r, 1);
  raw_listf(&r, 1);
  raw_item(&r, small.max_key + 1, small.max_key + 1);
  raw_end(&r);
  expect_too_big(&f->lim, &r);
}

/* ---- decode errors -------------------------------------------------------- */

static void test_bad_magic(void **state) {
  fx_t *f = *state;
  dr_msg_t m;
  size_t consumed, need;
  int err;
  const uint8_t one[] = {'G'};
  assert_int_equal(dr_decode(&f->dflt, one, 1, &m, &consumed, &need, &err),
                   DR_DECODE_ERROR);
  assert_int_equal(err, DR_EMAGIC);
  const char http[] = "GET / HTTP/1.1\r\n";
  assert_int_equal(dr_decode(&f->dflt, (const uint8_t *)http, strlen(http),
                             &m, &consumed, &need, &err),
                   DR_DECODE_ERROR);
  assert_int_equal(err, DR_EMAGIC);
  raw_t r;
  raw_begin(&r, DR_MSG_OK);
  raw_end(&r);
  r.b[1] = 'X';
  assert_int_equal(raw_error(&f->dflt, &r), DR_EMAGIC);
  r.b[0] = 0;
  r.b[1] = 'R';
  assert_int_equal(raw_error(&f->dflt, &r), DR_EMAGIC);
}

static void test_bad_version(void **state) {
  fx_t *f = *state;
  const uint8_t versions[] = {0, DR_PROTO_VERSION + 1, 255};
  for (int i = 0; i < 3; i++) {
    raw_t r;
    raw_begin_v(&r, versions[i], DR_MSG_OK);
    raw_end(&r);
    assert_int_equal(raw_error(&f->dflt, &r), DR_EVERSION);
  }
}

static void test_unknown_type(void **state) {
  fx_t *f = *state;
  const uint8_t types[] = {0, DR__MSG_MAX, 100, 255};
  for (int i = 0; i < 4; i++) {
    raw_t r;
    raw_begin(&r, types[i]);
    raw_end(&r);
    assert_int_equal(raw_error(&f->dflt, &r), DR_ETYPE);
  }
}

static void test_wrong_field_kind(void **state) {
  fx_t *f = *state;
  raw_t r;
  raw_begin(&r, DR_MSG_SET); /* gen as bytes */
  raw_bytesf(&r, 1, 1);
  raw_bytesf(&r, 1, 1);
  raw_bytesf(&r, 1, 1);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_EFIELD);
  raw_begin(&r, DR_MSG_MULTI_GET); /* keys as bytes, not a list */
  raw_u64f(&r, 1);
  raw_bytesf(&r, 1, 1);
  raw_u64f(&r, 1);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_EFIELD);
  raw_begin(&r, DR_MSG_VALUE); /* a list where bytes belong */
  raw_listf(&r, 0);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_EFIELD);
  const uint8_t bad_kinds[] = {0, 4, 255};
  for (int i = 0; i < 3; i++) {
    raw_begin(&r, DR_MSG_INT);
    raw_u8(&r, bad_kinds[i]);
    raw_be64(&r, 1);
    raw_end(&r);
    assert_int_equal(raw_error(&f->dflt, &r), DR_EFIELD);
  }
}

static void test_truncated_field(void **state) {
  fx_t *f = *state;
  raw_t r;
  raw_begin(&r, DR_MSG_INT); /* empty body: the field is missing */
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRUNC);
  raw_begin(&r, DR_MSG_INT); /* half a u64 */
  raw_u8(&r, DR_FIELD_U64);
  raw_be32(&r, 1);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRUNC);
  raw_begin(&r, DR_MSG_SET); /* missing the last fields */
  raw_u64f(&r, 1);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRUNC);
  raw_begin(&r, DR_MSG_VALUE); /* declares 10 bytes, has 3 */
  raw_bytesf(&r, 10, 3);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRUNC);
  raw_begin(&r, DR_MSG_VALUE); /* length cut short */
  raw_u8(&r, DR_FIELD_BYTES);
  raw_u8(&r, 0);
  raw_u8(&r, 0);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRUNC);
  raw_begin(&r, DR_MSG_VALUES); /* count 2, one item */
  raw_listf(&r, 2);
  raw_item(&r, 1, 1);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRUNC);
  raw_begin(&r, DR_MSG_VALUES); /* item length cut short */
  raw_listf(&r, 1);
  raw_u8(&r, 0);
  raw_u8(&r, 0);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRUNC);
  raw_begin(&r, DR_MSG_VALUES); /* item declares more than is left */
  raw_listf(&r, 1);
  raw_item(&r, 8, 2);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRUNC);
}

static void test_trailing_bytes(void **state) {
  fx_t *f = *state;
  raw_t r;
  raw_begin(&r, DR_MSG_OK);
  raw_u8(&r, 0);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRAILING);
  raw_begin(&r, DR_MSG_INT); /* an extra field */
  raw_u64f(&r, 1);
  raw_u64f(&r, 2);
  raw_end(&r);
  assert_int_equal(raw_error(&f->dflt, &r), DR_ETRAILING);
}

/* ---- typed views ------------------------------------------------------------ */

static void test_views_reject_other_types(void **state) {
  fx_t *f = *state;
  for (size_t i = 0; i < N_TYPES; i++) {
    uint8_t t = all_types[i];
    dr_msg_t m;
    size_t consumed, need;
    int err;
    dr_join_t j;
    dr_assign_t a;
    dr_failure_t x;
    dr_resume_t q;
    dr_leave_t l;
    dr_buf_reset(&f->b);
    assert_int_equal(encode_sample(&f->b, t, 1), 0);
    assert_int_equal(dr_decode(&f->dflt, f->b.data, f->b.len, &m, &consumed,
                               &need, &err),
                     DR_DECODE_OK);
    assert_int_equal(dr_msg_join(&m, &j), t == DR_MSG_JOIN ? 0 : DR_EUNEXPECTED);
    assert_int_equal(dr_msg_assign(&m, &a),
                     t == DR_MSG_ASSIGN ? 0 : DR_EUNEXPECTED);
    assert_int_equal(dr_msg_failure(&m, &x),
                     t == DR_MSG_FAILURE ? 0 : DR_EUNEXPECTED);
    assert_int_equal(dr_msg_resume(&m, &q),
                     t == DR_MSG_RESUME ? 0 : DR_EUNEXPECTED);
    assert_int_equal(dr_msg_leave(&m, &l),
                     t == DR_MSG_LEAVE ? 0 : DR_EUNEXPECTED);
    if (t == DR_MSG_RESUME) { /* the sample's values, in order */
      assert_int_equal(q.gen, 12);
      assert_int_equal(q.node_rank, 1);
      assert_int_equal(q.nnodes, 2);
      assert_int_equal(q.world_size, 16);
      assert_int_equal(q.nproc, 8);
      assert_int_equal(q.restart_count, 3);
      assert_memory_equal(q.host.p, "node-a.example", q.host.len);
    }
    if (t == DR_MSG_LEAVE) {
      assert_int_equal(l.gen, 13);
      assert_int_equal(l.signal, 15);
    }
  }
}

/* Decodes r and applies the view of its type. */
static int view_of(const fx_t *f, const raw_t *r) {
  dr_msg_t m;
  size_t consumed, need;
  int err;
  dr_join_t j;
  dr_assign_t a;
  dr_failure_t x;
  dr_resume_t q;
  dr_leave_t l;
  assert_int_equal(dr_decode(&f->dflt, r->b, r->len, &m, &consumed, &need,
                             &err),
                   DR_DECODE_OK);
  if (m.type == DR_MSG_RESUME)
    return dr_msg_resume(&m, &q);
  if (m.type == DR_MSG_LEAVE)
    return dr_msg_leave(&m, &l);
  if (m.type == DR_MSG_JOIN)
    return dr_msg_join(&m, &j);
  if (m.type == DR_MSG_ASSIGN)
    return dr_msg_assign(&m, &a);
  return dr_msg_failure(&m, &x);
}

/* A JOIN whose env and socket_ifname are n_env and n_ifname bytes. */
static void join_frame_full(raw_t *r, uint64_t nproc, uint64_t node_rank,
                            uint64_t port, uint64_t ckpt_port, uint32_t n_env,
                            uint32_t n_ifname) {
  raw_begin(r, DR_MSG_JOIN);
  raw_bytesf(r, 1, 1);
  raw_bytesf(r, 1, 1);
  raw_bytesf(r, 0, 0);
  raw_u64f(r, nproc);
  raw_u64f(r, node_rank);
  raw_u64f(r, port);
  raw_bytesf(r, 0, 0);
  for (int i = 0; i < 3; i++) /* the clock stamp: any values */
    raw_u64f(r, UINT64_MAX - (uint64_t)i);
  raw_u64f(r, ckpt_port);
  raw_u64f(r, DR_NONE); /* ckpt_step: a full u64 */
  raw_u64f(r, 0);       /* standby_port */
  raw_u64f(r, DR_NONE); /* term: a full u64 */
  raw_u64f(r, 0);       /* hosts_server */
  raw_bytesf(r, n_env, n_env);
  raw_bytesf(r, n_ifname, n_ifname);
  raw_end(r);
}

static void join_frame_ckpt(raw_t *r, uint64_t nproc, uint64_t node_rank,
                            uint64_t port, uint64_t ckpt_port) {
  join_frame_full(r, nproc, node_rank, port, ckpt_port, 0, 0);
}

static void join_frame(raw_t *r, uint64_t nproc, uint64_t node_rank,
                       uint64_t port) {
  join_frame_ckpt(r, nproc, node_rank, port, 0);
}

/* Field i of type's schema is the resume token (ASSIGN's field 12,
 * RESUME's 11). */
static int is_token(uint8_t type, const char *schema, int i) {
  (void)schema;
  return (type == DR_MSG_ASSIGN && i == 12) ||
         (type == DR_MSG_RESUME && i == 11);
}

/* u64 values: the one at index `big` is 2^32, the others small. */
static void u64_frame(raw_t *r, uint8_t type, int big) {
  const char *schema = dr_msg_schema(type);
  raw_begin(r, type);
  for (int i = 0; schema[i] != '\0'; i++) {
    if (schema[i] == 'u')
      raw_u64f(r, i == big ? (1ull << 32) : 1);
    else if (is_token(type, schema, i))
      raw_bytesf(r, DR_RESUME_TOKEN_LEN, DR_RESUME_TOKEN_LEN);
    else if (schema[i] == 'B')
      raw_listf(r, 0);
    else
      raw_bytesf(r, 1, 1);
  }
  raw_end(r);
}

/* The resume token of ASSIGN and RESUME is exactly DR_RESUME_TOKEN_LEN
 * bytes. */
static void test_views_reject_short_tokens(void **state) {
  fx_t *f = *state;
  static const uint8_t types[2] = {DR_MSG_ASSIGN, DR_MSG_RESUME};
  static const uint32_t lens[3] = {0, DR_RESUME_TOKEN_LEN - 1,
                                   DR_RESUME_TOKEN_LEN + 1};
  for (int t = 0; t < 2; t++) {
    const char *schema = dr_msg_schema(types[t]);
    for (int l = 0; l < 3; l++) {
      raw_t r;
      raw_begin(&r, types[t]);
      for (int i = 0; schema[i] != '\0'; i++) {
        if (schema[i] == 'u')
          raw_u64f(&r, 1);
        else if (is_token(types[t], schema, i))
          raw_bytesf(&r, lens[l], lens[l]);
        else if (schema[i] == 'B')
          raw_listf(&r, 0);
        else
          raw_bytesf(&r, 1, 1);
      }
      raw_end(&r);
      assert_int_equal(view_of(f, &r), DR_EBADARG);
    }
  }
}

/* An ASSIGN's peers (list 14) or successors (list 17): at most
 * DR_PEERS_MAX and DR_SUCCESSORS_MAX, each a whole record. */
static void assign_with_list(raw_t *r, int list, uint32_t count,
                             uint32_t len) {
  const char *schema = dr_msg_schema(DR_MSG_ASSIGN);
  raw_begin(r, DR_MSG_ASSIGN);
  for (int i = 0; schema[i] != '\0'; i++) {
    if (schema[i] == 'u')
      raw_u64f(r, 1);
    else if (is_token(DR_MSG_ASSIGN, schema, i))
      raw_bytesf(r, DR_RESUME_TOKEN_LEN, DR_RESUME_TOKEN_LEN);
    else if (schema[i] == 'B') {
      uint32_t c = i == list ? count : 0;
      raw_listf(r, c);
      for (uint32_t k = 0; k < c; k++)
        raw_item(r, len, len);
    } else
      raw_bytesf(r, 1, 1);
  }
  raw_end(r);
}

static void assign_with_peers(raw_t *r, uint32_t count, uint32_t len) {
  assign_with_list(r, 14, count, len);
}

static void test_views_check_peers(void **state) {
  fx_t *f = *state;
  raw_t r;
  assign_with_peers(&r, DR_PEERS_MAX, DR_PEER_REC_LEN + 3);
  assert_int_equal(view_of(f, &r), 0);
  assign_with_peers(&r, DR_PEERS_MAX + 1, DR_PEER_REC_LEN);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
  assign_with_peers(&r, 1, DR_PEER_REC_LEN - 1);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
  assign_with_peers(&r, 1, DR_PEER_REC_LEN + DR_HOST_MAX + 1);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
  /* The successors: at most DR_SUCCESSORS_MAX whole records. */
  assign_with_list(&r, 17, DR_SUCCESSORS_MAX, DR_PEER_REC_LEN + 3);
  assert_int_equal(view_of(f, &r), 0);
  assign_with_list(&r, 17, DR_SUCCESSORS_MAX + 1, DR_PEER_REC_LEN);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
  assign_with_list(&r, 17, 1, DR_PEER_REC_LEN - 1);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
}

static void test_views_reject_wide_integers(void **state) {
  fx_t *f = *state;
  raw_t r;
  join_frame(&r, 8, DR_NONE, 29500); /* node_rank is a full u64 */
  assert_int_equal(view_of(f, &r), 0);
  join_frame_ckpt(&r, 8, 0, 0, 65535); /* the checkpoint port: a port */
  assert_int_equal(view_of(f, &r), 0);
  join_frame_ckpt(&r, 8, 0, 0, 65536);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
  join_frame(&r, 1ull << 32, 0, 0);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
  join_frame(&r, 1, 0, 1ull << 32);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
  /* ASSIGN: every u64 but gen (index 0), the clock's (10, 11), the
   * checkpoint step (13) and the term (15) is 32-bit. */
  const char *as = dr_msg_schema(DR_MSG_ASSIGN);
  for (int i = 0; as[i] != '\0'; i++) {
    if (as[i] != 'u')
      continue;
    u64_frame(&r, DR_MSG_ASSIGN, i);
    assert_int_equal(view_of(f, &r),
                     i == 0 || (i >= 10 && i != 16) ? 0 : DR_EBADARG);
  }
  /* FAILURE: rank, local_rank, pid, exit_code, signal are 32-bit, and the
   * kind one of the kinds. */
  for (int i = 0; i < 7; i++) {
    u64_frame(&r, DR_MSG_FAILURE, i);
    assert_int_equal(view_of(f, &r), i == 0 ? 0 : DR_EBADARG);
  }
  for (uint64_t kind = 0; kind <= DR__FAIL_KIND_N; kind++) {
    raw_begin(&r, DR_MSG_FAILURE);
    for (int i = 0; i < 6; i++)
      raw_u64f(&r, 1);
    raw_u64f(&r, kind);
    raw_bytesf(&r, 1, 1);
    raw_end(&r);
    assert_int_equal(view_of(f, &r), kind < DR__FAIL_KIND_N ? 0 : DR_EBADARG);
  }
  /* RESUME: every u64 but gen (index 2), the clock stamp (8..10) and the
   * term (12) is 32-bit; LEAVE: all but gen. */
  const char *rs = dr_msg_schema(DR_MSG_RESUME);
  for (int i = 0; rs[i] != '\0'; i++) {
    if (rs[i] != 'u')
      continue;
    u64_frame(&r, DR_MSG_RESUME, i);
    assert_int_equal(view_of(f, &r), i == 2 || i >= 8 ? 0 : DR_EBADARG);
  }
  u64_frame(&r, DR_MSG_LEAVE, 0);
  assert_int_equal(view_of(f, &r), 0);
  u64_frame(&r, DR_MSG_LEAVE, 1);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
}

/* The status views reject every malformed record, and no other type. */
static int status_view(const fx_t *f, const uint8_t *p, size_t n) {
  dr_msg_t m;
  size_t consumed, need;
  int err;
  assert_int_equal(dr_decode(&f->dflt, p, n, &m, &consumed, &need, &err),
                   DR_DECODE_OK);
  dr_round_status_t rs;
  dr_ranks_t rk;
  dr_status_req_t sq;
  dr_job_status_t js;
  dr_stacks_req_t kq;
  dr_stack_dump_t sd;
  int rc[6] = {dr_msg_round_status(&m, &rs), dr_msg_ranks(&m, &rk),
               dr_msg_status(&m, &sq),       dr_msg_job_status(&m, &js),
               dr_msg_stacks(&m, &kq),       dr_msg_stack_dump(&m, &sd)};
  static const uint8_t types[6] = {DR_MSG_ROUND_STATUS, DR_MSG_RANKS,
                                   DR_MSG_STATUS,       DR_MSG_JOB_STATUS,
                                   DR_MSG_STACKS,       DR_MSG_STACK_DUMP};
  int mine = DR_EUNEXPECTED;
  for (int i = 0; i < 6; i++) {
    if (types[i] == m.type)
      mine = rc[i];
    else
      assert_int_equal(rc[i], DR_EUNEXPECTED);
  }
  return mine;
}

static void test_status_views_other_types(void **state) {
  fx_t *f = *state;
  for (size_t i = 0; i < N_TYPES; i++) {
    dr_buf_reset(&f->b);
    assert_int_equal(encode_sample(&f->b, all_types[i], 1), 0);
    int rc = status_view(f, f->b.data, f->b.len);
    int status = all_types[i] >= DR_MSG_ROUND_STATUS &&
                 all_types[i] <= DR_MSG_STACK_DUMP;
    assert_int_equal(rc, status ? 0 : DR_EUNEXPECTED);
  }
}

/* The checkpoint peers' views refuse what the decoder lets through but
 * the protocol does not: a kind that is neither, an origin over 32 bits, a
 * directory entry with bytes, DATA over DR_CKPT_CHUNK, a checksum of
 * another length; and their encoders refuse to write them. */
static int ckpt_view(const fx_t *f, const raw_t *r) {
  dr_msg_t m;
  size_t consumed, need;
  int err;
  assert_int_equal(dr_decode(&f->dflt, r->b, r->len, &m, &consumed, &need,
                             &err),
                   DR_DECODE_OK);
  dr_ckpt_put_t p;
  dr_ckpt_entry_t e;
  dr_bytes_t x;
  switch (m.type) {
  case DR_MSG_CKPT_PUT:
    return dr_msg_ckpt_put(&m, &p);
  case DR_MSG_CKPT_ENTRY:
    return dr_msg_ckpt_entry(&m, &e);
  case DR_MSG_CKPT_DATA:
    return dr_msg_ckpt_data(&m, &x);
  default:
    return dr_msg_ckpt_end(&m, &x);
  }
}

static void put_frame(raw_t *r, uint64_t kind, uint64_t origin) {
  raw_begin(r, DR_MSG_CKPT_PUT);
  raw_bytesf(r, 4, 4);
  raw_bytesf(r, 6, 6);
  raw_u64f(r, kind);
  raw_u64f(r, 10);
  raw_u64f(r, 5);
  raw_u64f(r, origin);
  raw_end(r);
}

static void entry_frame(raw_t *r, uint64_t kind, uint64_t n_bytes) {
  raw_begin(r, DR_MSG_CKPT_ENTRY);
  raw_bytesf(r, 3, 3);
  raw_u64f(r, kind);
  raw_u64f(r, n_bytes);
  raw_end(r);
}

static void test_ckpt_views_strict(void **state) {
  fx_t *f = *state;
  raw_t r;
  put_frame(&r, DR_CKPT_FILE, 7);
  assert_int_equal(ckpt_view(f, &r), 0);
  put_frame(&r, DR_CKPT_DIR, UINT32_MAX);
  assert_int_equal(ckpt_view(f, &r), 0);
  put_frame(&r, 0, 7);
  assert_int_equal(ckpt_view(f, &r), DR_EBADARG);
  put_frame(&r, 3, 7);
  assert_int_equal(ckpt_view(f, &r), DR_EBADARG);
  put_frame(&r, DR_CKPT_FILE, (uint64_t)UINT32_MAX + 1);
  assert_int_equal(ckpt_view(f, &r), DR_EBADARG);
  entry_frame(&r, DR_CKPT_FILE, 12);
  assert_int_equal(ckpt_view(f, &r), 0);
  entry_frame(&r, DR_CKPT_DIR, 0);
  assert_int_equal(ckpt_view(f, &r), 0);
  entry_frame(&r, DR_CKPT_DIR, 1);
  assert_int_equal(ckpt_view(f, &r), DR_EBADARG);
  entry_frame(&r, 9, 0);
  assert_int_equal(ckpt_view(f, &r), DR_EBADARG);
  for (uint32_t len = DR_CKPT_SUM_LEN - 1; len <= DR_CKPT_SUM_LEN + 1;
       len++) {
    raw_begin(&r, DR_MSG_CKPT_END);
    raw_bytesf(&r, len, len);
    raw_end(&r);
    assert_int_equal(ckpt_view(f, &r), len == DR_CKPT_SUM_LEN ? 0
                                                              : DR_EBADARG);
  }
  /* DATA one byte over the chunk: the decoder's value cap lets it in (it
   * is the store's), the view does not. Built by the encoder of VALUE,
   * whose schema is the same, then retyped. */
  dr_buf_t b;
  dr_buf_init(&b);
  uint8_t *big = calloc(1, DR_CKPT_CHUNK + 1);
  assert_non_null(big);
  dr_bytes_t over = {big, DR_CKPT_CHUNK + 1}, whole = {big, DR_CKPT_CHUNK};
  assert_int_equal(dr_enc_ckpt_data(&b, 1, over), DR_EBADARG);
  assert_int_equal(b.len, 0);
  assert_int_equal(dr_enc_ckpt_data(&b, 1, whole), 0);
  dr_msg_t m;
  size_t consumed, need;
  int err;
  assert_int_equal(dr_decode(&f->dflt, b.data, b.len, &m, &consumed, &need,
                             &err),
                   DR_DECODE_OK);
  dr_bytes_t got;
  assert_int_equal(dr_msg_ckpt_data(&m, &got), 0);
  assert_int_equal(got.len, DR_CKPT_CHUNK);
  dr_buf_reset(&b);
  assert_int_equal(dr_enc_value(&b, 1, over), 0);
  b.data[3] = DR_MSG_CKPT_DATA;
  assert_int_equal(dr_decode(&f->dflt, b.data, b.len, &m, &consumed, &need,
                             &err),
                   DR_DECODE_OK);
  assert_int_equal(dr_msg_ckpt_data(&m, &got), DR_EBADARG);
  dr_bytes_t short_sum = {big, DR_CKPT_SUM_LEN - 1};
  assert_int_equal(dr_enc_ckpt_end(&b, 1, short_sum), DR_EBADARG);
  free(big);
  dr_buf_free(&b);
}

/* One record of n bytes (first the u32s given, then filler) in a RANKS,
 * or the other list messages. */
static void rec_frame(raw_t *r, uint8_t type, const uint32_t *head,
                      size_t n_head, size_t n) {
  raw_begin(r, type);
  if (type == DR_MSG_RANKS || type == DR_MSG_STACK_DUMP)
    raw_u64f(r, 1);
  if (type == DR_MSG_ROUND_STATUS)
    for (int i = 0; i < 8; i++)
      raw_u64f(r, 1);
  raw_listf(r, 1);
  raw_be32(r, (uint32_t)n);
  for (size_t i = 0; i < n_head; i++)
    raw_be32(r, head[i]);
  raw_fill(r, n - 4 * n_head);
  if (type == DR_MSG_ROUND_STATUS)
    raw_listf(r, 0);
  raw_end(r);
}

static uint64_t be(const uint8_t *p, int n_bytes) {
  uint64_t v = 0;
  for (int i = 0; i < n_bytes; i++)
    v = v << 8 | p[i];
  return v;
}

/* A rank record's bytes: every field big-endian at its offset of wire.h,
 * the health figures of protocol 5 after rate_milli, 100 bytes in all. */
static void test_rank_record_layout(void **state) {
  fx_t *f = *state;
  dr_rank_rec_t x = {3,           1,           2,           4242,
                     DR_RS_RUNNING, -2,        0,           0x1122334455667788ull,
                     77,          12500,       5ull << 30,  7ull << 30,
                     1500,        0x0102030405060708ull, 96,
                     79ull << 30, 80ull << 30};
  dr_buf_reset(&f->b);
  assert_int_equal(dr_enc_ranks(&f->b, 0, 9, &x, 1), 0);
  dr_msg_t m;
  size_t consumed, need;
  int err;
  assert_int_equal(dr_decode(&f->dflt, f->b.data, f->b.len, &m, &consumed,
                             &need, &err),
                   DR_DECODE_OK);
  uint32_t pos = 0;
  dr_bytes_t it;
  assert_int_equal(dr_list_next(&m.f[1].l, &pos, &it), 1);
  assert_int_equal(it.len, DR_RANK_REC_LEN);
  assert_int_equal(DR_RANK_REC_LEN, 100);
  static const struct {
    int off, n_bytes;
  } at[] = {{0, 4},  {4, 4},  {8, 4},  {12, 4}, {16, 4}, {20, 4},
            {24, 4}, {28, 8}, {36, 8}, {44, 8}, {52, 8}, {60, 8},
            {68, 4}, {72, 8}, {80, 4}, {84, 8}, {92, 8}};
  const uint64_t want[] = {3,
                           1,
                           2,
                           4242,
                           DR_RS_RUNNING,
                           0xfffffffeu,
                           0,
                           0x1122334455667788ull,
                           77,
                           12500,
                           5ull << 30,
                           7ull << 30,
                           1500,
                           0x0102030405060708ull,
                           96,
                           79ull << 30,
                           80ull << 30};
  for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
    assert_int_equal(be(it.p + at[i].off, at[i].n_bytes), want[i]);
  assert_int_equal(at[16].off + at[16].n_bytes, DR_RANK_REC_LEN);
  /* And back through the view and its iterator. */
  dr_ranks_t rk;
  assert_int_equal(dr_msg_ranks(&m, &rk), 0);
  dr_rank_rec_t y;
  pos = 0;
  assert_int_equal(dr_rank_rec_next(&rk.ranks, &pos, &y), 1);
  assert_int_equal(y.exit_code, -2);
  assert_int_equal(y.step, x.step);
  assert_int_equal(y.rss_bytes, x.rss_bytes);
  assert_int_equal(y.rss_peak_bytes, x.rss_peak_bytes);
  assert_int_equal(y.cpu_milli, x.cpu_milli);
  assert_int_equal(y.gpu_mem_bytes, x.gpu_mem_bytes);
  assert_int_equal(y.gpu_util, x.gpu_util);
  assert_int_equal(y.gpu_used_bytes, x.gpu_used_bytes);
  assert_int_equal(y.gpu_total_bytes, x.gpu_total_bytes);
}

static void test_status_views_strict(void **state) {
  fx_t *f = *state;
  raw_t r;
  /* A rank record is 100 bytes, its state (at 16) one of the states. */
  const uint32_t rank_ok[5] = {1, 0, 0, 99, DR_RS_KILLED};
  const uint32_t rank_bad[5] = {1, 0, 0, 99, DR__RS_N};
  rec_frame(&r, DR_MSG_RANKS, rank_ok, 5, DR_RANK_REC_LEN);
  assert_int_equal(status_view(f, r.b, r.len), 0);
  rec_frame(&r, DR_MSG_RANKS, rank_ok, 5, DR_RANK_REC_LEN - 1);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  rec_frame(&r, DR_MSG_RANKS, rank_ok, 5, DR_RANK_REC_LEN + 1);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  rec_frame(&r, DR_MSG_RANKS, rank_bad, 5, DR_RANK_REC_LEN);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  /* A node record: 32 bytes and a host of at most DR_HOST_MAX; its state
   * (at 12) one of the states. */
  const uint32_t node_ok[4] = {0, 1, 0, DR_NS_SUCCEEDED};
  const uint32_t node_bad[4] = {0, 1, 0, DR__NS_N};
  rec_frame(&r, DR_MSG_ROUND_STATUS, node_ok, 4, DR_NODE_REC_LEN);
  assert_int_equal(status_view(f, r.b, r.len), 0);
  rec_frame(&r, DR_MSG_ROUND_STATUS, node_ok, 4,
            DR_NODE_REC_LEN + DR_HOST_MAX);
  assert_int_equal(status_view(f, r.b, r.len), 0);
  rec_frame(&r, DR_MSG_ROUND_STATUS, node_ok, 4,
            DR_NODE_REC_LEN + DR_HOST_MAX + 1);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  rec_frame(&r, DR_MSG_ROUND_STATUS, node_ok, 4, DR_NODE_REC_LEN - 1);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  rec_frame(&r, DR_MSG_ROUND_STATUS, node_bad, 4, DR_NODE_REC_LEN);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  /* A stack record: at least its 16-byte head. */
  const uint32_t stack[4] = {0, 0, 1, 0};
  rec_frame(&r, DR_MSG_STACK_DUMP, stack, 4, DR_STACK_REC_LEN);
  assert_int_equal(status_view(f, r.b, r.len), 0);
  rec_frame(&r, DR_MSG_STACK_DUMP, stack, 3, DR_STACK_REC_LEN - 1);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  /* ROUND_STATUS: missing ranks are 4 bytes each, no more of them than
   * n_missing says; counts are 32-bit. */
  for (int c = 0; c < 4; c++) {
    raw_begin(&r, DR_MSG_ROUND_STATUS);
    for (int i = 0; i < 8; i++)
      raw_u64f(&r, c == 2 && i == 1 ? 1ull << 32 : c == 3 && i == 7 ? 0 : 1);
    raw_listf(&r, 0);
    raw_listf(&r, 1);
    raw_item(&r, c == 1 ? 3 : 4, c == 1 ? 3 : 4);
    raw_end(&r);
    assert_int_equal(status_view(f, r.b, r.len), c == 0 ? 0 : DR_EBADARG);
  }
  /* STATUS: the flags this build knows, and one it does not. */
  raw_begin(&r, DR_MSG_STATUS);
  raw_u64f(&r, DR_STATUS_STACKS | DR_STATUS_ENV);
  raw_u64f(&r, 0);
  raw_end(&r);
  assert_int_equal(status_view(f, r.b, r.len), 0);
  raw_begin(&r, DR_MSG_STATUS);
  raw_u64f(&r, DR_STATUS_ENV | 4);
  raw_u64f(&r, 0);
  raw_end(&r);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  /* JOB_STATUS: a state out of range; an exit code that is neither 32-bit
   * nor DR_NONE. */
  for (int c = 0; c < 4; c++) {
    raw_begin(&r, DR_MSG_JOB_STATUS);
    raw_u64f(&r, 1);
    raw_u64f(&r, c == 1 ? DR__JS_N : DR_JS_RUNNING);
    for (int i = 0; i < 4; i++)
      raw_u64f(&r, 1);
    raw_u64f(&r, c == 2 ? 1ull << 32 : c == 3 ? DR_NONE : 0);
    raw_bytesf(&r, 0, 0);
    raw_u64f(&r, 5);
    for (int i = 0; i < 4; i++)
      raw_listf(&r, 0);
    raw_end(&r);
    assert_int_equal(status_view(f, r.b, r.len),
                     c == 1 || c == 2 ? DR_EBADARG : 0);
  }
}

/* A JOIN's env and socket_ifname: up to their bounds, and not a byte
 * more (the decoder caps them only as blobs, 64 KiB). */
static void test_join_env_bounds(void **state) {
  fx_t *f = *state;
  raw_t r;
  join_frame_full(&r, 8, 0, 0, 0, DR_ENV_SUMMARY_MAX, DR_SOCKET_IFNAME_MAX);
  assert_int_equal(view_of(f, &r), 0);
  join_frame_full(&r, 8, 0, 0, 0, DR_ENV_SUMMARY_MAX + 1, 0);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
  join_frame_full(&r, 8, 0, 0, 0, 0, DR_SOCKET_IFNAME_MAX + 1);
  assert_int_equal(view_of(f, &r), DR_EBADARG);
  /* Through the encoder: the view borrows both from the frame. */
  static char env[DR_ENV_SUMMARY_MAX + 1];
  memset(env, 'e', sizeof(env) - 1);
  dr_join_t j;
  memset(&j, 0, sizeof(j));
  j.run_id = dr_str("job7");
  j.nproc = 1;
  j.env = mk(env, DR_ENV_SUMMARY_MAX);
  j.socket_ifname = dr_str("eth0");
  dr_buf_reset(&f->b);
  assert_int_equal(dr_enc_join(&f->b, 1, &j), 0);
  dr_msg_t m;
  size_t consumed, need;
  int err;
  assert_int_equal(dr_decode(&f->dflt, f->b.data, f->b.len, &m, &consumed,
                             &need, &err),
                   DR_DECODE_OK);
  dr_join_t got;
  assert_int_equal(dr_msg_join(&m, &got), 0);
  assert_int_equal(got.env.len, DR_ENV_SUMMARY_MAX);
  assert_memory_equal(got.env.p, env, DR_ENV_SUMMARY_MAX);
  assert_int_equal(got.socket_ifname.len, 4);
  assert_memory_equal(got.socket_ifname.p, "eth0", 4);
}

/* A JOB_STATUS of one node record (node rank 3) and its envs: count env
 * records each of head_len + n_text bytes, the node rank first. */
static void job_status_envs(raw_t *r, uint32_t count, uint32_t node_rank,
                            uint32_t head_len, uint32_t n_text) {
  raw_begin(r, DR_MSG_JOB_STATUS);
  raw_u64f(r, 1);
  raw_u64f(r, DR_JS_RUNNING);
  for (int i = 0; i < 4; i++)
    raw_u64f(r, 1);
  raw_u64f(r, DR_NONE);
  raw_bytesf(r, 0, 0);
  raw_u64f(r, 5);
  raw_listf(r, 1); /* nodes: node 3, running, host "ab" */
  raw_be32(r, DR_NODE_REC_LEN + 2);
  raw_be32(r, 3);
  raw_be32(r, 1);
  raw_be32(r, 0);
  raw_be32(r, DR_NS_RUNNING);
  raw_be64(r, 0);
  raw_be64(r, 0);
  raw_fill(r, 2);
  raw_listf(r, 0);
  raw_listf(r, 0);
  raw_listf(r, count);
  for (uint32_t i = 0; i < count; i++) {
    raw_be32(r, head_len + n_text);
    if (head_len >= 4)
      raw_be32(r, node_rank);
    raw_fill(r, head_len - (head_len >= 4 ? 4 : 0) + n_text);
  }
  raw_end(r);
}

/* JOB_STATUS's envs: none, or one per node record with its node rank, each
 * text at most DR_ENV_SUMMARY_MAX. */
static void test_job_status_envs_strict(void **state) {
  fx_t *f = *state;
  raw_t r;
  job_status_envs(&r, 0, 3, DR_ENV_REC_LEN, 0);
  assert_int_equal(status_view(f, r.b, r.len), 0);
  job_status_envs(&r, 1, 3, DR_ENV_REC_LEN, DR_ENV_SUMMARY_MAX);
  assert_int_equal(status_view(f, r.b, r.len), 0);
  dr_msg_t m;
  size_t consumed, need;
  int err;
  assert_int_equal(dr_decode(&f->dflt, r.b, r.len, &m, &consumed, &need,
                             &err),
                   DR_DECODE_OK);
  dr_job_status_t js;
  assert_int_equal(dr_msg_job_status(&m, &js), 0);
  uint32_t pos = 0;
  dr_env_rec_t e;
  assert_int_equal(dr_env_rec_next(&js.envs, &pos, &e), 1);
  assert_int_equal(e.node_rank, 3);
  assert_int_equal(e.text.len, DR_ENV_SUMMARY_MAX);
  assert_int_equal(dr_env_rec_next(&js.envs, &pos, &e), 0);
  /* Over the bound, short of its head, another node's, more than one per
   * node record. */
  job_status_envs(&r, 1, 3, DR_ENV_REC_LEN, DR_ENV_SUMMARY_MAX + 1);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  job_status_envs(&r, 1, 3, DR_ENV_REC_LEN - 1, 0);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  job_status_envs(&r, 1, 4, DR_ENV_REC_LEN, 5);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
  job_status_envs(&r, 2, 3, DR_ENV_REC_LEN, 5);
  assert_int_equal(status_view(f, r.b, r.len), DR_EBADARG);
}

/* Lists of records (schema letter B) cap their items as blobs. */
static void test_record_list_cap(void **state) {
  fx_t *f = *state;
  raw_t r;
  const uint32_t stack[4] = {0, 0, 1, 0};
  rec_frame(&r, DR_MSG_STACK_DUMP, stack, 4, small.max_blob);
  expect_ok(&f->lim, &r);
  rec_frame(&r, DR_MSG_STACK_DUMP, stack, 4, small.max_blob + 1);
  expect_too_big(&f->lim, &r);
  raw_begin(&r, DR_MSG_RANKS);
  raw_u64f(&r, 1);
  raw_listf(&r, small.max_count + 1);
  raw_end(&r);
  expect_too_big(&f->lim, &r);
}

/* ---- encoder allocation failure ------------------------------------------- */

static void test_encoder_enomem_keeps_frames(void **state) {
  fx_t *f = *state;
  counter_t c;
  dr_buf_t b;
  buf_with(&b, &c);
  assert_int_equal(encode_sample(&b, DR_MSG_HELLO, 1), 0);
  assert_int_equal(encode_sample(&b, DR_MSG_INT, 2), 0);
  size_t len = b.len;
  uint8_t before[256];
  assert_true(len <= sizeof(before));
  memcpy(before, b.data, len);

  /* The header fits in what is allocated; the value needs to grow it. */
  static uint8_t big[4096];
  c.fail = 1;
  assert_int_equal(dr_enc_set(&b, 3, 1, dr_str("k"), mk(big, sizeof(big))),
                   -ENOMEM);
  assert_int_equal(b.len, len);
  assert_memory_equal(b.data, before, len);
  assert_int_equal(b.err, 0);
  for (size_t i = 0; i < N_TYPES; i++) {
    size_t at = b.len;
    int rc = encode_sample(&b, all_types[i], 9);
    /* Small frames may still fit; either way nothing earlier changes. */
    assert_true(rc == 0 || rc == -ENOMEM);
    if (rc != 0)
      assert_int_equal(b.len, at);
    assert_int_equal(b.err, 0);
    assert_memory_equal(b.data, before, len);
  }

  /* After the allocator recovers, encoding resumes where it was. */
  c.fail = 0;
  size_t kept = b.len;
  assert_int_equal(dr_enc_set(&b, 3, 1, dr_str("k"), mk(big, sizeof(big))),
                   0);
  dr_msg_t m;
  size_t consumed, need, off = 0;
  int err, n = 0;
  while (off < b.len) {
    assert_int_equal(dr_decode(&f->dflt, b.data + off, b.len - off, &m,
                               &consumed, &need, &err),
                     DR_DECODE_OK);
    if (off < kept)
      check_sample(&m);
    off += consumed;
    n++;
  }
  assert_true(n >= 3);
  assert_int_equal(m.type, DR_MSG_SET);
  assert_int_equal(m.f[2].b.len, sizeof(big));
  dr_buf_free(&b);
}

static void test_encoder_enomem_on_empty_buffer(void **state) {
  for (size_t i = 0; i < N_TYPES; i++) {
    counter_t c;
    dr_buf_t b;
    buf_with(&b, &c);
    c.fail = 1;
    assert_int_equal(encode_sample(&b, all_types[i], 1), -ENOMEM);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.err, 0);
    assert_true(c.n_calls >= 1);
    dr_buf_free(&b);
  }
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_table_covers_every_type),
      T(test_round_trip_every_type),
      T(test_stream_of_frames),
      T(test_every_prefix_needs_more),
      T(test_server_loop_reserves_only_need),
      T(test_frame_over_max_frame),
      T(test_frame_over_unauth_cap),
      T(test_str_cap),
      T(test_key_cap),
      T(test_value_cap),
      T(test_blob_cap),
      T(test_list_count_cap),
      T(test_list_item_cap),
      T(test_bad_magic),
      T(test_bad_version),
      T(test_unknown_type),
      T(test_wrong_field_kind),
      T(test_truncated_field),
      T(test_trailing_bytes),
      T(test_views_reject_other_types),
      T(test_views_reject_wide_integers),
      T(test_views_reject_short_tokens),
      T(test_views_check_peers),
      T(test_status_views_other_types),
      T(test_ckpt_views_strict),
      T(test_rank_record_layout),
      T(test_status_views_strict),
      T(test_join_env_bounds),
      T(test_job_status_envs_strict),
      T(test_record_list_cap),
      T(test_encoder_enomem_keeps_frames),
      T(test_encoder_enomem_on_empty_buffer),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}

