/* Internals of the stacks' text functions, shared by their files:
 * stacks_parse.c (the tools' output read into frames), stacks_place.c
 * (what a frame is, and the kind of place of a stack) and stacks_where.c
 * (the place in one line). Pure and thread-safe, as stacks.h says. */
#ifndef DR_STACKS_INTERNAL_H
#define DR_STACKS_INTERNAL_H

#include <stddef.h>
#include <string.h>

#include "stacks.h"

/* The first len bytes of s into dst, cut to fit n, NUL-terminated. */
static inline void dr__stacks_copy(char *dst, size_t n, const char *s,
                                   size_t len) {
  if (n == 0)
    return;
  if (len >= n)
    len = n - 1;
  memcpy(dst, s, len);
  dst[len] = '\0';
}

static inline int dr__stacks_starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- stacks_place.c: what a frame is ------------------------------------ */

/* DR_PLACE_SLEEP or DR_PLACE_WAIT for a blocking call of libc or of the
 * C++ runtime, 0 for anything else. */
dr_place_t dr__stacks_wait_kind(const char *func);
/* 1 for a frame of the interpreter, of the C library's start-up and thread
 * entry, or of C++ library plumbing: never where a program "is". */
int dr__stacks_plumbing(const char *func);
/* 1 for a Python file of a library (site-packages, the standard library,
 * a frozen module). */
int dr__stacks_py_library(const char *file);
/* 1 for a Python frame of a collective (torch.distributed, DDP, ...). */
int dr__stacks_py_collective(const dr_frame_t *f);
/* DR_PLACE_SLEEP or DR_PLACE_WAIT for the kernel's function name of a
 * blocked task, 0 for anything else. */
dr_place_t dr__stacks_kernel_kind(const char *fn);
/* The place of a stack of native frames, from its innermost ones. */
dr_place_t dr__stacks_native_place(const dr_stack_t *s);
/* The innermost Python frame of s, or NULL. */
const dr_frame_t *dr__stacks_innermost_python(const dr_stack_t *s);

#endif /* DR_STACKS_INTERNAL_H */
