/* Internals of the checkpoint module, shared by its files: ckpt_format.c
 * (the header's encoding and CRC), ckpt_read.c (opening, verifying,
 * reading), ckpt_write.c (the atomic write) and ckpt_dir.c (the
 * directory's listing, newest-valid search and pruning). */
#ifndef DR_CKPT_INTERNAL_H
#define DR_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ckpt.h"

/* The payload moves through a buffer of this many bytes: no allocation
 * of the payload's size, on either side. */
#define DR__CKPT_CHUNK_BYTES (1u << 16)
#define DR__CKPT_CHUNK_ELEMS (DR__CKPT_CHUNK_BYTES / 4) /* fp32 */
/* A temporary file is the final name + this + the writer's pid. */
#define DR__CKPT_TMP_TAG ".tmp."

/* Writes the message to err (when err is not NULL and n > 0) and returns
 * code, so that a failure reads `return dr__ckpt_fail(...)`. */
int dr__ckpt_fail(char *err, size_t n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The message of a failed dr_open_regular() of path (-EISDIR, DR_ENOTREG
 * or -errno); returns rc. */
int dr__ckpt_not_a_file(char *err, size_t n, const char *path, int rc);

/* Encodes h as a header of the current version into b
 * (DR_CKPT_HEADER_BYTES), the header CRC included. */
void dr__ckpt_encode(const dr_ckpt_header_t *h, uint8_t *b);

/* Checks the magic and the (version, header size) pair of the first 16
 * bytes of a file; *hb receives the header size. */
int dr__ckpt_check_prefix(const uint8_t *b, const char *path, uint32_t *hb,
                          char *err, size_t n);

/* Checks and decodes a whole header (dr__ckpt_check_prefix passed: b
 * holds the header size it found). */
int dr__ckpt_decode(const uint8_t *b, const char *path, dr_ckpt_header_t *h,
                    char *err, size_t n);

/* The payload is little-endian fp32: a big-endian host swaps each float's
 * bytes on the way in and out. */
static inline int dr__ckpt_host_is_le(void) {
  const uint16_t one = 1;
  uint8_t b;
  memcpy(&b, &one, 1);
  return b == 1;
}

static inline void dr__ckpt_swap32(void *buf, size_t n_elems) {
  uint8_t *p = buf;
  for (size_t i = 0; i < n_elems; i++, p += 4) {
    uint8_t t = p[0];
    p[0] = p[3];
    p[3] = t;
    t = p[1];
    p[1] = p[2];
    p[2] = t;
  }
}

#endif /* DR_CKPT_INTERNAL_H */
