/* The rendezvous core's outbox: orders and their texts. A text never
 * moves once written (blocks that are only added to until the clear), so
 * an order handed out stays valid while more are added. */
#include "rdzv_internal.h"
#include "grow.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_BLOCK 65536u

struct dr__rdzv_text {
  struct dr__rdzv_text *next;
  size_t used, cap;
  char data[];
};

/* Room for n bytes that will not move: NULL when out of memory. */
static char *text_room(dr_rdzv_t *r, size_t n) {
  struct dr__rdzv_text *b = r->text_head;
  if (b == NULL || b->cap - b->used < n) {
    size_t cap = n > TEXT_BLOCK ? n : TEXT_BLOCK;
    struct dr__rdzv_text *nb = malloc(sizeof(*nb) + cap);
    if (nb == NULL)
      return NULL;
    nb->next = b;
    nb->used = 0;
    nb->cap = cap;
    r->text_head = b = nb;
  }
  char *p = b->data + b->used;
  b->used += n;
  return p;
}

const char *dr__rdzv_textf(dr_rdzv_t *r, const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  if (n < 0)
    return "";
  char *p = text_room(r, (size_t)n + 1);
  if (p == NULL)
    return "";
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  return p;
}

const char *dr__rdzv_text(dr_rdzv_t *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const char *t = dr__rdzv_textf(r, fmt, ap);
  va_end(ap);
  return t;
}

dr_rdzv_order_t *dr__rdzv_order(dr_rdzv_t *r, dr_rdzv_order_kind_t kind,
                                dr_rdzv_peer_t *peer) {
  static dr_rdzv_order_t lost; /* out of memory: written, never handed out */
  dr_rdzv_order_t *p = dr_grow(r->out, &r->cap_out, r->n_out + 1,
                               sizeof(*p), 64);
  if (p == NULL) {
    memset(&lost, 0, sizeof(lost));
    return &lost;
  }
  r->out = p;
  dr_rdzv_order_t *o = &r->out[r->n_out++];
  memset(o, 0, sizeof(*o));
  o->kind = kind;
  o->peer = peer;
  o->text = "";
  return o;
}

void dr__rdzv_order_text(dr_rdzv_t *r, dr_rdzv_order_kind_t kind,
                         dr_rdzv_peer_t *peer, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const char *t = dr__rdzv_textf(r, fmt, ap);
  va_end(ap);
  dr__rdzv_order(r, kind, peer)->text = t;
}

void dr__rdzv_error(dr_rdzv_t *r, dr_rdzv_peer_t *p, uint32_t req, int code,
                    const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const char *t = dr__rdzv_textf(r, fmt, ap);
  va_end(ap);
  dr_rdzv_order_t *o = dr__rdzv_order(r, DR_RDZV_ERROR, p);
  o->req = req;
  o->code = code;
  o->text = t;
}

void dr__rdzv_event(dr_rdzv_t *r, const char *name, const char *fmt, ...) {
  if (!r->cfg.events)
    return;
  va_list ap;
  va_start(ap, fmt);
  const char *t = dr__rdzv_textf(r, fmt, ap);
  va_end(ap);
  dr_rdzv_order_t *o = dr__rdzv_order(r, DR_RDZV_EVENT, NULL);
  o->name = name;
  o->text = t;
}

const dr_rdzv_order_t *dr_rdzv_orders(const dr_rdzv_t *r, size_t *n) {
  *n = r->n_out;
  return r->out;
}

void dr_rdzv_orders_clear(dr_rdzv_t *r) {
  r->n_out = 0;
  /* Keep one block for the next event's texts. */
  struct dr__rdzv_text *b = r->text_head;
  while (b != NULL && b->next != NULL) {
    struct dr__rdzv_text *next = b->next;
    free(b);
    b = next;
  }
  if (b != NULL)
    b->used = 0;
  r->text_head = b;
}

void dr__rdzv_orders_free(dr_rdzv_t *r) {
  dr_rdzv_orders_clear(r);
  free(r->text_head);
  r->text_head = NULL;
  free(r->out);
  r->out = NULL;
  r->n_out = r->cap_out = 0;
}
