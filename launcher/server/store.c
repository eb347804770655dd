/* The key-value store: two scopes (the job, and the current generation),
 * blocking GET / MULTI_GET and BARRIER with deadlines. Waiters are indexed
 * by the one key they still miss, so a SET wakes only those it concerns.
 * One file past 600 lines: every operation reads and writes that index,
 * whose invariants are kept in one place. */
#include "server_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "errors.h"
#include "log.h"

typedef struct kv {
  UT_hash_handle hh;
  uint8_t *val;
  uint32_t val_len;
  uint32_t key_len;
  char key[];
} kv_t;

/* Waiters parked on one key (GET, MULTI_GET) or one barrier name. */
typedef struct park {
  UT_hash_handle hh;
  dr_waiter_t *head;
  uint64_t n;       /* barrier: arrivals it waits for */
  uint64_t arrived; /* barrier: arrivals so far */
  uint32_t key_len;
  char key[];
} park_t;

typedef struct {
  kv_t *kv;
  park_t *keys;     /* key -> waiters missing it */
  park_t *barriers; /* name -> arrivals */
} scope_t;

struct dr_store {
  scope_t scope[2]; /* 0: job, 1: current generation */
  uint64_t ops_by_type[DR__MSG_MAX];
  uint64_t stale;
  size_t n_waiters;
};

struct dr_waiter {
  dr_server_t *srv; /* the connection may be freed before the timer closes */
  dr_conn_t *conn;
  uint32_t req;
  uint8_t type;  /* DR_MSG_GET, DR_MSG_MULTI_GET or DR_MSG_BARRIER */
  int finished;  /* answered or dropped; memory lives until the timer closes */
  int scope;
  uint64_t wait_ms;
  uv_timer_t timer;
  uint32_t n_keys;
  dr_bytes_t *keys; /* into the same allocation as the waiter */
  park_t *park;     /* where it is parked */
  dr_waiter_t *park_prev, *park_next;
  dr_waiter_t *conn_prev, *conn_next;
};

int dr__store_new(dr_store_t **out) {
  *out = calloc(1, sizeof(**out));
  return *out != NULL ? 0 : -ENOMEM;
}

static void park_free_all(park_t **table) {
  park_t *p, *tmp;
  HASH_ITER(hh, *table, p, tmp) {
    HASH_DEL(*table, p);
    free(p);
  }
}

static void scope_clear(scope_t *sc) {
  kv_t *e, *tmp;
  HASH_ITER(hh, sc->kv, e, tmp) {
    HASH_DEL(sc->kv, e);
    free(e->val);
    free(e);
  }
  park_free_all(&sc->keys);
  park_free_all(&sc->barriers);
}

void dr__store_free(dr_store_t **st) {
  if (*st == NULL)
    return;
  scope_clear(&(*st)->scope[0]);
  scope_clear(&(*st)->scope[1]);
  free(*st);
  *st = NULL;
}

void dr__store_stats(const dr_store_t *st, dr_store_stats_t *out) {
  memcpy(out->ops, st->ops_by_type, sizeof(out->ops));
  out->stale = st->stale;
  out->keys_job = HASH_COUNT(st->scope[0].kv);
  out->keys_gen = HASH_COUNT(st->scope[1].kv);
  out->waiters = st->n_waiters;
}

static kv_t *kv_find(scope_t *sc, dr_bytes_t key) {
  kv_t *e = NULL;
  HASH_FIND(hh, sc->kv, key.p, key.len, e);
  return e;
}

static park_t *park_get(park_t **table, dr_bytes_t key, int create) {
  park_t *p = NULL;
  HASH_FIND(hh, *table, key.p, key.len, p);
  if (p == NULL && create) {
    p = calloc(1, sizeof(*p) + key.len);
    if (p == NULL)
      return NULL;
    p->key_len = key.len;
    memcpy(p->key, key.p, key.len);
    HASH_ADD_KEYPTR(hh, *table, p->key, p->key_len, p);
  }
  return p;
}

static void park_link(dr_waiter_t *w, park_t *p) {
  w->park = p;
  w->park_prev = NULL;
  w->park_next = p->head;
  if (p->head != NULL)
    p->head->park_prev = w;
  p->head = w;
}

static void park_unlink(dr_waiter_t *w) {
  park_t *p = w->park;
  if (p == NULL)
    return;
  if (w->park_prev != NULL)
    w->park_prev->park_next = w->park_next;
  else
    p->head = w->park_next;
  if (w->park_next != NULL)
    w->park_next->park_prev = w->park_prev;
  w->park = NULL;
}

static void on_waiter_closed(uv_handle_t *h) {
  dr_waiter_t *w = h->data;
  dr_server_t *s = w->srv;
  free(w);
  dr__server_handle_closed(s);
}

/* Unlinks the waiter everywhere and frees it (after its timer closes). An
 * empty park is removed from its table. */
static void waiter_finish(dr_store_t *st, dr_waiter_t *w) {
  if (w->finished)
    return;
  w->finished = 1;
  st->n_waiters--;
  park_t *p = w->park;
  park_unlink(w);
  if (p != NULL && p->head == NULL) {
    scope_t *sc = &st->scope[w->scope];
    if (w->type == DR_MSG_BARRIER)
      HASH_DEL(sc->barriers, p);
    else
      HASH_DEL(sc->keys, p);
    free(p);
  }
  dr_conn_t *c = w->conn;
  if (w->conn_prev != NULL)
    w->conn_prev->conn_next = w->conn_next;
  else
    c->waiters = w->conn_next;
  if (w->conn_next != NULL)
    w->conn_next->conn_prev = w->conn_prev;
  uv_timer_stop(&w->timer);
  uv_close((uv_handle_t *)&w->timer, on_waiter_closed);
}

static const char *key_text(dr_bytes_t k, char *out, size_t n) {
  return dr_log_sample(k.p, k.len, out, n);
}

/* Answers a GET / MULTI_GET whose keys all exist. */
static void reply_values(dr_conn_t *c, scope_t *sc, uint8_t type,
                         uint32_t req, const dr_bytes_t *keys, uint32_t n) {
  dr_buf_t *out = &c->srv->out;
  if (type == DR_MSG_GET) {
    kv_t *e = kv_find(sc, keys[0]);
    dr_bytes_t v = {e->val, e->val_len};
    if (dr_enc_value(out, req, v) == 0)
      dr__conn_send(c);
    return;
  }
  dr_bytes_t stack[16] = {{NULL, 0}};
  dr_bytes_t *vals = n <= 16 ? stack : malloc(n * sizeof(*vals));
  if (vals == NULL) {
    dr__conn_send_error(c, req, -ENOMEM, "out of memory");
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    kv_t *e = kv_find(sc, keys[i]);
    vals[i].p = e->val;
    vals[i].len = e->val_len;
  }
  int rc = dr_enc_values(out, req, vals, n);
  if (vals != stack)
    free(vals);
  if (rc == 0)
    dr__conn_send(c);
  else
    dr__conn_send_error(c, req, rc, "reply too large");
}

/* Index of the first key not in the scope, or n when all exist. */
static uint32_t first_missing(scope_t *sc, const dr_bytes_t *keys,
                              uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (kv_find(sc, keys[i]) == NULL)
      return i;
  return n;
}

/* Wakes the waiters parked on key: answers those now complete, re-parks
 * the others on their next missing key. */
static void wake_key(dr_store_t *st, int scope, dr_bytes_t key) {
  scope_t *sc = &st->scope[scope];
  park_t *p = park_get(&sc->keys, key, 0);
  if (p == NULL)
    return;
  dr_waiter_t *list = p->head;
  p->head = NULL;
  HASH_DEL(sc->keys, p);
  free(p);
  /* Detach first: a reply below may close a connection, which finishes
   * its waiters, some of them further down this list. */
  for (dr_waiter_t *w = list; w != NULL; w = w->park_next)
    w->park = NULL;
  while (list != NULL) {
    dr_waiter_t *w = list;
    list = w->park_next;
    if (w->finished)
      continue;
    uint32_t miss = first_missing(sc, w->keys, w->n_keys);
    if (miss == w->n_keys) {
      reply_values(w->conn, sc, w->type, w->req, w->keys, w->n_keys);
      waiter_finish(st, w);
      continue;
    }
    park_t *q = park_get(&sc->keys, w->keys[miss], 1);
    if (q == NULL) {
      dr__conn_send_error(w->conn, w->req, -ENOMEM, "out of memory");
      waiter_finish(st, w);
      continue;
    }
    park_link(w, q);
  }
}

static void on_waiter_timeout(uv_timer_t *t) {
  dr_waiter_t *w = t->data;
  dr_store_t *st = w->conn->srv->store;
  char k[256];
  if (w->type == DR_MSG_BARRIER) {
    park_t *p = w->park;
    dr_bytes_t name = {(const uint8_t *)p->key, p->key_len};
    p->arrived--;
    dr__conn_send_error(w->conn, w->req, -ETIMEDOUT,
                        "barrier '%s': %" PRIu64 " of %" PRIu64
                        " arrived within %" PRIu64 " ms",
                        key_text(name, k, sizeof(k)), p->arrived + 1, p->n,
                        w->wait_ms);
  } else {
    scope_t *sc = &st->scope[w->scope];
    uint32_t miss = first_missing(sc, w->keys, w->n_keys);
    dr__conn_send_error(w->conn, w->req, -ETIMEDOUT,
                        "timed out after %" PRIu64 " ms waiting for key '%s'",
                        w->wait_ms,
                        key_text(w->keys[miss < w->n_keys ? miss : 0], k,
                                 sizeof(k)));
  }
  waiter_finish(st, w);
}

/* Allocates a waiter with a copy of the keys, linked to its connection,
 * its timer started. NULL when out of memory. */
static dr_waiter_t *waiter_new(dr_conn_t *c, const dr_msg_t *m, int scope,
                               const dr_bytes_t *keys, uint32_t n,
                               uint64_t wait_ms) {
  size_t bytes = 0;
  for (uint32_t i = 0; i < n; i++)
    bytes += keys[i].len;
  dr_waiter_t *w = calloc(1, sizeof(*w) + n * sizeof(dr_bytes_t) + bytes);
  if (w == NULL)
    return NULL;
  w->srv = c->srv;
  w->conn = c;
  w->req = m->req_id;
  w->type = m->type;
  w->scope = scope;
  w->wait_ms = wait_ms;
  w->n_keys = n;
  w->keys = (dr_bytes_t *)(w + 1);
  uint8_t *p = (uint8_t *)(w->keys + n);
  for (uint32_t i = 0; i < n; i++) {
    memcpy(p, keys[i].p, keys[i].len);
    w->keys[i].p = p;
    w->keys[i].len = keys[i].len;
    p += keys[i].len;
  }
  w->conn_next = c->waiters;
  if (c->waiters != NULL)
    c->waiters->conn_prev = w;
  c->waiters = w;
  uv_timer_init(c->srv->loop, &w->timer);
  w->timer.data = w;
  c->srv->n_handles_open++;
  uv_timer_start(&w->timer, on_waiter_timeout, wait_ms, 0);
  c->srv->store->n_waiters++;
  /* Also what a test waits for before it sets what the waiter waits on. */
  DR_DEBUG("%s (%s) waits up to %" PRIu64 " ms in %s for '%.*s'%s", c->rp.addr,
           c->rp.host, wait_ms, dr_msg_name(m->type),
           n > 0 ? (int)keys[0].len : 0, n > 0 ? (const char *)keys[0].p : "",
           n > 1 ? " and more" : "");
  return w;
}

static int kv_put(scope_t *sc, dr_bytes_t key, const void *val,
                  uint32_t val_len) {
  uint8_t *copy = malloc(val_len > 0 ? val_len : 1);
  if (copy == NULL)
    return -ENOMEM;
  if (val_len > 0)
    memcpy(copy, val, val_len);
  kv_t *e = kv_find(sc, key);
  if (e == NULL) {
    e = malloc(sizeof(*e) + key.len);
    if (e == NULL) {
      free(copy);
      return -ENOMEM;
    }
    e->key_len = key.len;
    memcpy(e->key, key.p, key.len);
    HASH_ADD_KEYPTR(hh, sc->kv, e->key, e->key_len, e);
  } else {
    free(e->val);
  }
  e->val = copy;
  e->val_len = val_len;
  return 0;
}

/* Collects the keys of a GET (one) or MULTI_GET (a list). */
static uint32_t collect_keys(const dr_msg_t *m, const dr_store_req_t *q,
                             dr_bytes_t *stack, uint32_t n_stack,
                             dr_bytes_t **out) {
  if (m->type == DR_MSG_GET) {
    stack[0] = q->key;
    *out = stack;
    return 1;
  }
  const dr_list_t *l = &q->keys;
  dr_bytes_t *keys = l->count <= n_stack ? stack : malloc(l->count * sizeof(*keys));
  if (keys == NULL) {
    *out = NULL;
    return 0;
  }
  uint32_t pos = 0, i = 0;
  while (dr_list_next(l, &pos, &keys[i]))
    i++;
  *out = keys;
  return i;
}

static void handle_get(dr_conn_t *c, const dr_msg_t *m,
                       const dr_store_req_t *q, int scope) {
  dr_store_t *st = c->srv->store;
  scope_t *sc = &st->scope[scope];
  dr_bytes_t stack[16], *keys;
  uint32_t n = collect_keys(m, q, stack, 16, &keys);
  if (keys == NULL) {
    dr__conn_send_error(c, m->req_id, -ENOMEM, "out of memory");
    return;
  }
  uint64_t wait_ms = q->wait_ms;
  uint32_t miss = first_missing(sc, keys, n);
  if (miss == n) {
    reply_values(c, sc, m->type, m->req_id, keys, n);
  } else if (wait_ms == 0) {
    char k[256];
    dr__conn_send_error(c, m->req_id, DR_ENOTFOUND, "key '%s' not found",
                        key_text(keys[miss], k, sizeof(k)));
  } else {
    park_t *p = park_get(&sc->keys, keys[miss], 1);
    dr_waiter_t *w = p != NULL ? waiter_new(c, m, scope, keys, n, wait_ms)
                               : NULL;
    if (w == NULL)
      dr__conn_send_error(c, m->req_id, -ENOMEM, "out of memory");
    else
      park_link(w, p);
  }
  if (keys != stack)
    free(keys);
}

static void handle_barrier(dr_conn_t *c, const dr_msg_t *m,
                           const dr_store_req_t *q, int scope) {
  dr_store_t *st = c->srv->store;
  scope_t *sc = &st->scope[scope];
  dr_bytes_t name = q->key;
  uint64_t n = q->n;
  char k[256];
  if (n == 0) {
    dr__conn_send_error(c, m->req_id, DR_EBADARG,
                        "barrier '%s' needs n >= 1",
                        key_text(name, k, sizeof(k)));
    return;
  }
  park_t *p = park_get(&sc->barriers, name, 1);
  if (p == NULL) {
    dr__conn_send_error(c, m->req_id, -ENOMEM, "out of memory");
    return;
  }
  if (p->n != 0 && p->n != n) {
    dr__conn_send_error(c, m->req_id, DR_EBADARG,
                        "barrier '%s' was entered with n=%" PRIu64
                        ", not %" PRIu64,
                        key_text(name, k, sizeof(k)), p->n, n);
    return;
  }
  p->n = n;
  dr_waiter_t *w = waiter_new(c, m, scope, NULL, 0, q->wait_ms);
  if (w == NULL) {
    if (p->head == NULL) {
      HASH_DEL(sc->barriers, p);
      free(p);
    }
    dr__conn_send_error(c, m->req_id, -ENOMEM, "out of memory");
    return;
  }
  park_link(w, p);
  if (++p->arrived < n)
    return;
  /* Everyone is here: release all at once. Detached first, as in
   * wake_key(), since a reply may close a connection. */
  dr_waiter_t *list = p->head;
  HASH_DEL(sc->barriers, p);
  free(p);
  for (dr_waiter_t *x = list; x != NULL; x = x->park_next)
    x->park = NULL;
  while (list != NULL) {
    dr_waiter_t *x = list;
    list = x->park_next;
    if (x->finished)
      continue;
    if (dr_enc_ok(&c->srv->out, x->req) == 0)
      dr__conn_send(x->conn);
    waiter_finish(st, x);
  }
}

static int parse_i64(const kv_t *e, int64_t *out) {
  char buf[32];
  if (e->val_len == 0 || e->val_len >= sizeof(buf))
    return -1;
  memcpy(buf, e->val, e->val_len);
  buf[e->val_len] = '\0';
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno != 0 || *end != '\0')
    return -1;
  *out = v;
  return 0;
}

static void handle_add(dr_conn_t *c, const dr_msg_t *m,
                       const dr_store_req_t *q, int scope) {
  scope_t *sc = &c->srv->store->scope[scope];
  dr_bytes_t key = q->key;
  int64_t cur = 0;
  kv_t *e = kv_find(sc, key);
  char k[256];
  if (e != NULL && parse_i64(e, &cur) != 0) {
    dr__conn_send_error(c, m->req_id, DR_EBADARG,
                        "key '%s' does not hold an integer",
                        key_text(key, k, sizeof(k)));
    return;
  }
  int64_t v = (int64_t)((uint64_t)cur + (uint64_t)q->delta); /* wraps */
  char text[32];
  int len = snprintf(text, sizeof(text), "%" PRId64, v);
  if (kv_put(sc, key, text, (uint32_t)len) != 0) {
    dr__conn_send_error(c, m->req_id, -ENOMEM, "out of memory");
    return;
  }
  if (dr_enc_int(&c->srv->out, m->req_id, v) == 0)
    dr__conn_send(c);
  wake_key(c->srv->store, scope, key);
}

static void handle_cas(dr_conn_t *c, const dr_msg_t *m,
                       const dr_store_req_t *q, int scope) {
  scope_t *sc = &c->srv->store->scope[scope];
  dr_bytes_t key = q->key, expected = q->expected, desired = q->value;
  kv_t *e = kv_find(sc, key);
  int swap = e == NULL ? expected.len == 0
                       : e->val_len == expected.len &&
                             memcmp(e->val, expected.p, expected.len) == 0;
  if (swap && kv_put(sc, key, desired.p, desired.len) != 0) {
    dr__conn_send_error(c, m->req_id, -ENOMEM, "out of memory");
    return;
  }
  e = kv_find(sc, key);
  dr_bytes_t cur = {e != NULL ? e->val : NULL, e != NULL ? e->val_len : 0};
  if (dr_enc_value(&c->srv->out, m->req_id, cur) == 0)
    dr__conn_send(c);
  if (swap)
    wake_key(c->srv->store, scope, key);
}

static void handle_check(dr_conn_t *c, const dr_msg_t *m,
                         const dr_store_req_t *q, int scope) {
  scope_t *sc = &c->srv->store->scope[scope];
  uint32_t pos = 0;
  dr_bytes_t k;
  int all = 1;
  while (all && dr_list_next(&q->keys, &pos, &k))
    all = kv_find(sc, k) != NULL;
  if (dr_enc_int(&c->srv->out, m->req_id, all) == 0)
    dr__conn_send(c);
}

void dr__store_handle(dr_conn_t *c, const dr_msg_t *m) {
  dr_server_t *s = c->srv;
  dr_store_t *st = s->store;
  dr_store_req_t q;
  if (dr_msg_store_req(m, &q) != 0)
    return; /* the dispatcher sends store requests only */
  uint64_t gen = q.gen;
  int scope;
  if (gen == 0) {
    scope = 0;
  } else if (gen == s->rdzv.gen && s->rdzv.state != DR_JOB_DONE) {
    scope = 1;
  } else {
    st->stale++;
    dr__conn_send_error(c, m->req_id, DR_ESTALE,
                        "generation %" PRIu64 " is not current (current: %" PRIu64
                        ")",
                        gen, s->rdzv.gen);
    return;
  }
  st->ops_by_type[m->type]++;
  switch (m->type) {
  case DR_MSG_SET:
    if (kv_put(&st->scope[scope], q.key, q.value.p, q.value.len) != 0) {
      dr__conn_send_error(c, m->req_id, -ENOMEM, "out of memory");
      return;
    }
    if (dr_enc_ok(&s->out, m->req_id) == 0)
      dr__conn_send(c);
    wake_key(st, scope, q.key);
    break;
  case DR_MSG_GET:
  case DR_MSG_MULTI_GET:
    handle_get(c, m, &q, scope);
    break;
  case DR_MSG_ADD:
    handle_add(c, m, &q, scope);
    break;
  case DR_MSG_CAS:
    handle_cas(c, m, &q, scope);
    break;
  case DR_MSG_DELETE: {
    kv_t *e = kv_find(&st->scope[scope], q.key);
    if (e != NULL) {
      HASH_DEL(st->scope[scope].kv, e);
      free(e->val);
      free(e);
    }
    if (dr_enc_int(&s->out, m->req_id, e != NULL) == 0)
      dr__conn_send(c);
    break;
  }
  case DR_MSG_CHECK:
    handle_check(c, m, &q, scope);
    break;
  case DR_MSG_BARRIER:
    handle_barrier(c, m, &q, scope);
    break;
  default:
    break;
  }
}

void dr__store_drop_conn(dr_conn_t *c) {
  dr_store_t *st = c->srv->store;
  while (c->waiters != NULL) {
    dr_waiter_t *w = c->waiters;
    if (w->type == DR_MSG_BARRIER && w->park != NULL)
      w->park->arrived--;
    waiter_finish(st, w);
  }
}

void dr__store_new_generation(dr_server_t *s) {
  dr_store_t *st = s->store;
  for (dr_conn_t *c = s->conns; c != NULL; c = c->next) {
    dr_waiter_t *w = c->waiters, *next;
    for (; w != NULL && c->state != DR_CONN_CLOSING; w = next) {
      next = w->conn_next;
      if (w->scope != 1)
        continue;
      dr__conn_send_error(c, w->req, DR_ESTALE,
                          "generation %" PRIu64 " ended while waiting",
                          s->rdzv.gen);
      waiter_finish(st, w);
    }
  }
  scope_clear(&st->scope[1]);
}
