/* The origin index of a checkpoint directory (DIR/.ddprun/origins,
 * ckpt_store.h): which node rank wrote each checkpoint a peer sent. Not
 * thread-safe; the store holds its lock around every call. */
#ifndef DR_CKPT_INDEX_H
#define DR_CKPT_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_rules.h"

typedef struct {
  char name[DR_CKPT_NAME_MAX + 1];
  uint32_t origin;
} dr_ckpt_origin_t;

typedef struct {
  dr_ckpt_origin_t *e;
  size_t n, cap;
} dr_ckpt_index_t;

/* Reads the file `origins` under metafd: one "<node rank> <name>" per
 * line. A missing file is an empty index; a line that is not of that form,
 * or whose name is not a checkpoint's, is skipped. 0 or -errno / -ENOMEM. */
int dr_ckpt_index_load(dr_ckpt_index_t *x, int metafd);
/* Writes it whole under a temporary name, fsyncs, and renames it over
 * `origins`: a reader sees the old index or the new one. 0 or -errno. */
int dr_ckpt_index_save(const dr_ckpt_index_t *x, int metafd);

/* name's origin, or DR_CKPT_LOCAL (ckpt_store.h) when it has none. */
uint32_t dr_ckpt_index_get(const dr_ckpt_index_t *x, const char *name);
/* Records (or replaces) name's origin. 0 or -ENOMEM. */
int dr_ckpt_index_set(dr_ckpt_index_t *x, const char *name, uint32_t origin);
/* Forgets name: 1 when it was there, else 0. */
int dr_ckpt_index_drop(dr_ckpt_index_t *x, const char *name);

void dr_ckpt_index_free(dr_ckpt_index_t *x);

#endif /* DR_CKPT_INDEX_H */
