/* Raw frames for the wire codec's tests. See wire_raw.h. */
#include "wire_raw.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

void raw_u8(raw_t *r, uint8_t v) {
  assert_true(r->len < sizeof(r->b));
  r->b[r->len++] = v;
}

void raw_be32(raw_t *r, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8)
    raw_u8(r, (uint8_t)(v >> s));
}

void raw_be64(raw_t *r, uint64_t v) {
  raw_be32(r, (uint32_t)(v >> 32));
  raw_be32(r, (uint32_t)v);
}

void raw_fill(raw_t *r, size_t n) {
  for (size_t i = 0; i < n; i++)
    raw_u8(r, (uint8_t)('a' + i % 26));
}

void raw_begin_v(raw_t *r, uint8_t version, uint8_t type) {
  r->len = 0;
  raw_u8(r, 'D');
  raw_u8(r, 'R');
  raw_u8(r, version);
  raw_u8(r, type);
  raw_be32(r, 7);
  raw_be32(r, 0); /* patched by raw_end */
}

void raw_begin(raw_t *r, uint8_t type) {
  raw_begin_v(r, DR_PROTO_VERSION, type);
}

void raw_u64f(raw_t *r, uint64_t v) {
  raw_u8(r, DR_FIELD_U64);
  raw_be64(r, v);
}

/* A bytes field declaring `declared` bytes, followed by n filler bytes. */
void raw_bytesf(raw_t *r, uint32_t declared, size_t n) {
  raw_u8(r, DR_FIELD_BYTES);
  raw_be32(r, declared);
  raw_fill(r, n);
}

void raw_listf(raw_t *r, uint32_t count) {
  raw_u8(r, DR_FIELD_LIST);
  raw_be32(r, count);
}

void raw_item(raw_t *r, uint32_t declared, size_t n) {
  raw_be32(r, declared);
  raw_fill(r, n);
}

void raw_end(raw_t *r) {
  uint32_t body = (uint32_t)(r->len - DR_FRAME_HDR_LEN);
  for (int i = 0; i < 4; i++)
    r->b[8 + i] = (uint8_t)(body >> (24 - 8 * i));
}

void raw_set_body_len(raw_t *r, uint32_t body) {
  for (int i = 0; i < 4; i++)
    r->b[8 + i] = (uint8_t)(body >> (24 - 8 * i));
}

int raw_error(const dr_decoder_t *d, const raw_t *r) {
  dr_msg_t m;
  size_t consumed, need;
  int err;
  dr_decode_status_t st = dr_decode(d, r->b, r->len, &m, &consumed, &need,
                                    &err);
  if (st != DR_DECODE_ERROR)
    return st == DR_DECODE_OK ? 0 : 1;
  assert_int_equal(consumed, 0);
  return err;
}
