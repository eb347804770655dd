/* The ops of each step's backward pass (dr_dg_op_t, diag_trace.h): the
 * backward spans of the pass the step's bwd_t0_us starts (the spans of an
 * earlier pass of an accumulating step start before it), grouped by name,
 * their self times summed.
 *
 * Self time: on one thread, a backward op that starts inside another
 * (activation checkpointing's reentrant backward runs the recomputed
 * segment's ops inside CheckpointFunctionBackward) is taken out of that
 * one's time, so nested time counts once, as the innermost op's. Ops on
 * different threads are apart: their times add.
 *
 * The names: a table of the interned pointers the readers pass, hashed
 * on the pointer, so that a trace's many thousand backward spans find
 * their name in constant time however many distinct names it holds. */
#include "diag_read_internal.h"
#include "grow.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the names --------------------------------------------------------- */

static size_t hash(const char *p, size_t mask) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x & mask;
}

static void place(size_t *slot, size_t n_slot, const char *name, size_t i) {
  size_t h = hash(name, n_slot - 1);
  while (slot[h] != 0)
    h = (h + 1) & (n_slot - 1);
  slot[h] = i + 1;
}

/* Doubles the slots and places every name again. */
static int rehash(dr__opnames_t *t) {
  size_t n_slot = t->n_slot > 0 ? t->n_slot * 2 : 64;
  if (n_slot > SIZE_MAX / sizeof(size_t) / 2)
    return -ENOMEM;
  size_t *slot = calloc(n_slot, sizeof(*slot));
  if (slot == NULL)
    return -ENOMEM;
  for (size_t i = 0; i < t->n; i++)
    place(slot, n_slot, t->v[i], i);
  free(t->slot);
  t->slot = slot;
  t->n_slot = n_slot;
  return 0;
}

int dr__opnames_index(dr__opnames_t *t, const char *name, uint64_t *index) {
  if (t->n_slot > 0) {
    const size_t mask = t->n_slot - 1;
    for (size_t h = hash(name, mask); t->slot[h] != 0; h = (h + 1) & mask)
      if (t->v[t->slot[h] - 1] == name) {
        *index = t->slot[h] - 1;
        return 0;
      }
  }
  if ((t->n + 1) * 2 > t->n_slot && rehash(t) != 0)
    return -ENOMEM;
  const char **v = dr_grow(t->v, &t->cap, t->n + 1, sizeof(*v), 64);
  if (v == NULL)
    return -ENOMEM;
  t->v = v;
  t->v[t->n] = name;
  place(t->slot, t->n_slot, name, t->n);
  *index = t->n++;
  return 0;
}

void dr__opnames_free(dr__opnames_t *t) {
  free(t->v);
  free(t->slot);
  memset(t, 0, sizeof(*t));
}

/* ---- the ops of each step ---------------------------------------------- */

typedef struct {
  size_t step;
  int64_t tid;
  double t0, t1, self_us;
  uint64_t name;
} item_t;

/* By step, thread, start, the outer of two with one start first. */
static int by_thread(const void *a, const void *b) {
  const item_t *x = a, *y = b;
  if (x->step != y->step)
    return x->step < y->step ? -1 : 1;
  if (x->tid != y->tid)
    return x->tid < y->tid ? -1 : 1;
  if (x->t0 != y->t0)
    return x->t0 < y->t0 ? -1 : 1;
  return (x->t1 < y->t1) - (x->t1 > y->t1);
}

/* By step, name, start: one order of addition, so one sum. */
static int by_name(const void *a, const void *b) {
  const item_t *x = a, *y = b;
  if (x->step != y->step)
    return x->step < y->step ? -1 : 1;
  if (x->name != y->name)
    return x->name < y->name ? -1 : 1;
  return (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* name into dst, cut to DR_DG_OP_NAME - 1 bytes before a UTF-8
 * character that would not fit whole, its control bytes made '?' (the
 * text report prints it as it is, one line per op). */
static void copy_name(char *dst, const char *name) {
  size_t n = strlen(name);
  if (n >= DR_DG_OP_NAME) {
    n = DR_DG_OP_NAME - 1;
    while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
      n--;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    dst[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
  }
  dst[n] = '\0';
}

/* Takes each item's nested items' time out of its own (see the top). */
static void self_times(item_t *v, size_t n, size_t *stack) {
  size_t depth = 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && (v[i].step != v[i - 1].step || v[i].tid != v[i - 1].tid))
      depth = 0;
    while (depth > 0 && v[stack[depth - 1]].t1 <= v[i].t0)
      depth--;
    if (depth > 0) {
      item_t *outer = &v[stack[depth - 1]];
      double end = v[i].t1 < outer->t1 ? v[i].t1 : outer->t1;
      outer->self_us -= end - v[i].t0;
    }
    stack[depth++] = i;
  }
  for (size_t i = 0; i < n; i++)
    if (v[i].self_us < 0) /* overlapping children of one op */
      v[i].self_us = 0;
}

int dr__build_ops(const dr__build_t *b, const size_t *step_of,
                  dr_dg_step_t *steps, size_t n_steps) {
  size_t n = 0;
  for (size_t i = 0; i < b->n; i++) {
    const dr__span_t *s = &b->sp[i];
    size_t k = step_of[i];
    if (s->role != DR__SP_BWD || k >= n_steps || s->aux >= b->names.n ||
        steps[k].bwd_t0_us < 0 || s->t0 < steps[k].bwd_t0_us)
      continue;
    n++;
  }
  if (n == 0)
    return 0;
  item_t *v = malloc(n * sizeof(*v));
  size_t *stack = malloc(n * sizeof(*stack));
  if (v == NULL || stack == NULL) {
    free(v);
    free(stack);
    return -ENOMEM;
  }
  size_t m = 0;
  for (size_t i = 0; i < b->n; i++) {
    const dr__span_t *s = &b->sp[i];
    size_t k = step_of[i];
    if (s->role != DR__SP_BWD || k >= n_steps || s->aux >= b->names.n ||
        steps[k].bwd_t0_us < 0 || s->t0 < steps[k].bwd_t0_us)
      continue;
    v[m++] = (item_t){k, s->tid, s->t0, s->t1, s->dur, s->aux};
  }
  dr__sort(v, n, sizeof(*v), by_thread);
  self_times(v, n, stack);
  free(stack);
  dr__sort(v, n, sizeof(*v), by_name);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0;) {
    /* Items i..j are one step's. */
    size_t j = i, kinds = 0;
    for (; j < n && v[j].step == v[i].step; j++)
      kinds += j == i || v[j].name != v[j - 1].name;
    dr_dg_step_t *st = &steps[v[i].step];
    st->bwd_ops = calloc(kinds, sizeof(*st->bwd_ops));
    if (st->bwd_ops == NULL) {
      rc = -ENOMEM;
      break;
    }
    for (size_t x = i; x < j; x++) {
      if (x == i || v[x].name != v[x - 1].name)
        copy_name(st->bwd_ops[st->n_bwd_ops++].name, b->names.v[v[x].name]);
      dr_dg_op_t *op = &st->bwd_ops[st->n_bwd_ops - 1];
      op->self_us += v[x].self_us;
      if (op->n_runs < UINT32_MAX)
        op->n_runs++;
    }
    i = j;
  }
  free(v);
  return rc;
}
