/* Raw frames for the wire codec's tests (test_wire.c): frames built
 * byte by byte, for what the encoders cannot produce (a declared length
 * over a cap, a wrong field kind, a bad magic or version). */
#ifndef DR_WIRE_RAW_H
#define DR_WIRE_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* Room for a JOIN whose env is one byte over DR_ENV_SUMMARY_MAX. */
typedef struct {
  uint8_t b[16384];
  size_t len;
} raw_t;

void raw_u8(raw_t *r, uint8_t v);
void raw_be32(raw_t *r, uint32_t v);
void raw_be64(raw_t *r, uint64_t v);
/* n filler bytes, 'a' to 'z' over and over. */
void raw_fill(raw_t *r, size_t n);
/* Starts a frame of type with protocol version (request id 7); its body
 * length is set by raw_end. */
void raw_begin_v(raw_t *r, uint8_t version, uint8_t type);
/* The same with DR_PROTO_VERSION. */
void raw_begin(raw_t *r, uint8_t type);
/* A u64 field. */
void raw_u64f(raw_t *r, uint64_t v);
/* A bytes field declaring `declared` bytes, followed by n filler bytes. */
void raw_bytesf(raw_t *r, uint32_t declared, size_t n);
/* A list field's head: its count; the items follow (raw_item). */
void raw_listf(raw_t *r, uint32_t count);
/* A list item declaring `declared` bytes, followed by n filler bytes. */
void raw_item(raw_t *r, uint32_t declared, size_t n);
/* Sets the header's body length to what was appended. */
void raw_end(raw_t *r);
/* Sets the header's body length to body, whatever was appended. */
void raw_set_body_len(raw_t *r, uint32_t body);
/* Decodes r with d: the error code when the decode fails (asserting that
 * nothing was consumed), 0 when it succeeds, 1 when it needs more. */
int raw_error(const dr_decoder_t *d, const raw_t *r);

#endif /* DR_WIRE_RAW_H */
