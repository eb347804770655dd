/* Files built into the agent (cmake/embed.cmake writes the table). */
#ifndef DR_EMBEDDED_H
#define DR_EMBEDDED_H

#include <stddef.h>

typedef struct {
  const char *name; /* the file's base name */
  const unsigned char *data;
  size_t size;
} dr_embedded_t;

/* Ended by an entry whose name is NULL. */
extern const dr_embedded_t dr_embedded[];

#endif /* DR_EMBEDDED_H */
