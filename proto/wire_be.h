/* Big-endian loads and stores, internal to proto/. */
#ifndef DR_WIRE_BE_H
#define DR_WIRE_BE_H

#include <stdint.h>

static inline uint32_t dr__load_be32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
         ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint64_t dr__load_be64(const uint8_t *p) {
  return ((uint64_t)dr__load_be32(p) << 32) | dr__load_be32(p + 4);
}

static inline void dr__store_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static inline void dr__store_be64(uint8_t *p, uint64_t v) {
  dr__store_be32(p, (uint32_t)(v >> 32));
  dr__store_be32(p + 4, (uint32_t)v);
}

#endif /* DR_WIRE_BE_H */
