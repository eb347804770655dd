/* Building a frame field by field, internal to proto/: the one layout of
 * wire.h's header and fields, shared by its encoders (wire_encode.c,
 * wire_ckpt.c). A failed step sets the buffer's sticky error; the end
 * reports it and drops the partial frame. */
#ifndef DR_WIRE_FRAME_H
#define DR_WIRE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "errors.h"
#include "wire.h"
#include "wire_be.h"

/* A frame under construction: where its header starts in the buffer. */
typedef struct {
  dr_buf_t *b;
  size_t start;
} dr__frame_t;

static inline dr__frame_t dr__frame_begin(dr_buf_t *b, uint8_t type,
                                          uint32_t req) {
  dr__frame_t f = {b, b->len};
  uint8_t hdr[DR_FRAME_HDR_LEN];
  hdr[0] = (uint8_t)(DR_PROTO_MAGIC >> 8);
  hdr[1] = (uint8_t)(DR_PROTO_MAGIC & 0xff);
  hdr[2] = DR_PROTO_VERSION;
  hdr[3] = type;
  dr__store_be32(hdr + 4, req);
  dr__store_be32(hdr + 8, 0);
  dr_buf_append(b, hdr, sizeof(hdr));
  return f;
}

static inline void dr__put_u64(dr__frame_t *f, uint64_t v) {
  uint8_t x[9];
  x[0] = DR_FIELD_U64;
  dr__store_be64(x + 1, v);
  dr_buf_append(f->b, x, sizeof(x));
}

static inline void dr__put_len(dr__frame_t *f, uint8_t kind, size_t n) {
  uint8_t x[5];
  if (n > UINT32_MAX) {
    if (f->b->err == 0)
      f->b->err = DR_ETOOBIG;
    return;
  }
  x[0] = kind;
  dr__store_be32(x + 1, (uint32_t)n);
  dr_buf_append(f->b, x, sizeof(x));
}

static inline void dr__put_bytes(dr__frame_t *f, dr_bytes_t v) {
  dr__put_len(f, DR_FIELD_BYTES, v.len);
  dr_buf_append(f->b, v.p, v.len);
}

static inline void dr__put_list(dr__frame_t *f, const dr_bytes_t *items,
                                size_t n) {
  dr__put_len(f, DR_FIELD_LIST, n);
  for (size_t i = 0; i < n; i++) {
    uint8_t x[4];
    dr__store_be32(x, items[i].len);
    dr_buf_append(f->b, x, sizeof(x));
    dr_buf_append(f->b, items[i].p, items[i].len);
  }
}

/* Patches the body length; on failure drops the partial frame. */
static inline int dr__frame_end(dr__frame_t *f) {
  dr_buf_t *b = f->b;
  if (b->err == 0) {
    size_t body = b->len - f->start - DR_FRAME_HDR_LEN;
    if (body > UINT32_MAX)
      b->err = DR_ETOOBIG;
    else
      dr__store_be32(b->data + f->start + 8, (uint32_t)body);
  }
  int rc = b->err;
  if (rc != 0) {
    if (b->len > f->start)
      b->len = f->start;
    b->err = 0;
  }
  return rc;
}

#endif /* DR_WIRE_FRAME_H */
