/* One growth rule for every array that doubles (the byte buffers of the
 * wire have theirs, dr_buf_t). Header-only, as mono.h. */
#ifndef DR_GROW_H
#define DR_GROW_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Room for at least need elements of size bytes in p, whose capacity is
 * *cap elements: p itself when it has it, else p reallocated to twice its
 * capacity (first when empty) or more, until need fits, with *cap updated.
 * NULL when out of memory or when the size would overflow: p is then
 * untouched and still the caller's. Use as
 *   T *q = dr_grow(a, &cap, n + 1, sizeof(*a), 16);
 *   if (q == NULL) return -ENOMEM;
 *   a = q; */
static inline void *dr_grow(void *p, size_t *cap, size_t need, size_t size,
                            size_t first) {
  if (need <= *cap && p != NULL)
    return p;
  size_t c = *cap != 0 ? *cap : (first != 0 ? first : 1);
  while (c < need)
    c = c > SIZE_MAX / 2 ? need : c * 2;
  if (size != 0 && c > SIZE_MAX / size)
    return NULL;
  void *q = realloc(p, c * size);
  if (q == NULL)
    return NULL;
  *cap = c;
  return q;
}

#endif /* DR_GROW_H */
