/* Sample messages of every type for the wire codec's tests (test_wire.c):
 * each encoded with values that exercise its fields (binary bytes, empty
 * strings, integers wider than 32 bits, negative values in two's
 * complement, DR_NONE and DR_NO_RANK), and checked field by field after a
 * decode. */
#ifndef DR_WIRE_SAMPLES_H
#define DR_WIRE_SAMPLES_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* A request id with its top bit set. */
#define REQ 0x81020304u

/* A byte range of n bytes at p (p may be NULL when n is 0). */
dr_bytes_t mk(const void *p, size_t n);

/* Fills the sample lists of keys and values; call before the others. */
void init_lists(void);

/* Encodes the sample message of type into b with request id req: what
 * the dr_enc_* call returns. */
int encode_sample(dr_buf_t *b, uint8_t type, uint32_t req);

/* Asserts that m, decoded, is the sample of its type, field by field and
 * through its typed view. */
void check_sample(const dr_msg_t *m);

#endif /* DR_WIRE_SAMPLES_H */
