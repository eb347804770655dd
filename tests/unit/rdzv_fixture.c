/* See rdzv_fixture.h. */
#include "rdzv_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

dr_rdzv_config_t fx_config(void) {
  dr_rdzv_config_t c;
  memset(&c, 0, sizeof(c));
  c.run_id = FX_RUN_ID;
  c.min_nodes = 2;
  c.max_nodes = 3;
  c.max_restarts = 2;
  c.heartbeat_timeout_ms = 3000;
  c.last_call_timeout_ms = 1000;
  c.events = 1;
  return c;
}

int fx_setup_with(void **state, const dr_rdzv_config_t *cfg) {
  fx_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  for (int i = 0; i < FX_PEERS; i++) {
    dr_rdzv_peer_t *p = &f->peer[i];
    p->prev_rank = -1;
    snprintf(p->host, sizeof(p->host), "node-%d", i);
    snprintf(p->ip, sizeof(p->ip), "10.0.0.%d", i + 1);
    snprintf(p->addr, sizeof(p->addr), "10.0.0.%d:%d", i + 1, 40000 + i);
  }
  /* Time 0 is "never" to some of the core's fields: start later. */
  f->now = 100;
  if (dr_rdzv_init(&f->r, cfg, f->now) != 0) {
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

int fx_setup(void **state) {
  dr_rdzv_config_t c = fx_config();
  return fx_setup_with(state, &c);
}

int fx_teardown(void **state) {
  fx_t *f = *state;
  dr_rdzv_free(&f->r);
  free(f);
  return 0;
}

static int peer_index(const fx_t *f, const dr_rdzv_peer_t *p) {
  if (p == NULL)
    return FX_NOPEER;
  assert_true(p >= f->peer && p < f->peer + FX_PEERS);
  return (int)(p - f->peer);
}

void fx_take(fx_t *f) {
  f->n_got = 0;
  for (;;) {
    size_t n;
    const dr_rdzv_order_t *o = dr_rdzv_orders(&f->r, &n);
    if (n == 0)
      break;
    int closing[FX_MAX_GOT];
    size_t n_closing = 0;
    for (size_t i = 0; i < n; i++) {
      assert_true(f->n_got < FX_MAX_GOT);
      fx_order_t *g = &f->got[f->n_got++];
      memset(g, 0, sizeof(*g));
      g->kind = o[i].kind;
      g->peer = peer_index(f, o[i].peer);
      g->req = o[i].req;
      g->code = o[i].code;
      g->gen = o[i].gen;
      g->restart_count = o[i].restart_count;
      g->node_rank = o[i].node_rank;
      g->first_rank = o[i].first_rank;
      if (o[i].name != NULL)
        snprintf(g->name, sizeof(g->name), "%s", o[i].name);
      assert_non_null(o[i].text);
      snprintf(g->text, sizeof(g->text), "%s", o[i].text);
      if (g->kind == DR_RDZV_CLOSE)
        closing[n_closing++] = g->peer;
    }
    dr_rdzv_orders_clear(&f->r);
    /* As the shell does: a CLOSE is carried out by closing the
     * connection, which the core then hears of. */
    for (size_t i = 0; i < n_closing; i++)
      dr_rdzv_peer_closed(&f->r, &f->peer[closing[i]], "closed by order",
                          f->now);
  }
}

void fx_at(fx_t *f, uint64_t t) {
  f->now = t;
  dr_rdzv_tick(&f->r, t);
  fx_take(f);
}

void fx_heard(fx_t *f, int i) { f->peer[i].last_seen_ms = f->now; }

void fx_heard_all(fx_t *f) {
  for (int i = 0; i < FX_PEERS; i++)
    fx_heard(f, i);
}

dr_join_t fx_join_msg(fx_t *f, int i, uint32_t nproc, uint64_t rank) {
  dr_join_t j;
  memset(&j, 0, sizeof(j));
  j.run_id = dr_str(FX_RUN_ID);
  j.host = dr_str(f->peer[i].host);
  j.nproc = nproc;
  j.node_rank = rank;
  j.master_port_offer = 29500u + (uint32_t)i;
  j.ckpt_step = DR_NONE;
  return j;
}

void fx_join_with(fx_t *f, int i, const dr_join_t *j) {
  f->req[i] = ++f->next_req;
  dr_rdzv_join(&f->r, &f->peer[i], f->req[i], j, f->now);
  fx_take(f);
}

void fx_join(fx_t *f, int i, uint32_t nproc, uint64_t rank) {
  dr_join_t j = fx_join_msg(f, i, nproc, rank);
  fx_join_with(f, i, &j);
}

void fx_run(fx_t *f, int n) {
  for (int i = 0; i < n; i++)
    fx_join(f, i, 2, DR_NONE);
  if (f->r.state == DR_JOB_FORMING)
    fx_at(f, dr_rdzv_next_due(&f->r));
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
  assert_int_equal(fx_count(f, DR_RDZV_ASSIGN, FX_ANY), (size_t)n);
}

dr_failure_t fx_failure_msg(fx_t *f, int i, uint32_t rank, int exit_code,
                            int signal) {
  dr_failure_t x;
  memset(&x, 0, sizeof(x));
  x.gen = f->r.gen;
  x.rank = rank;
  x.local_rank = 0;
  x.pid = 4000u + (uint32_t)i;
  x.exit_code = exit_code;
  x.signal = signal;
  x.kind = signal != 0 ? DR_FAIL_SIGNAL : DR_FAIL_EXIT;
  return x;
}

void fx_fail_with(fx_t *f, int i, const dr_failure_t *x) {
  dr_rdzv_failure(&f->r, &f->peer[i], x, f->now);
  fx_take(f);
}

void fx_fail(fx_t *f, int i, uint32_t rank, int exit_code, int signal) {
  dr_failure_t x = fx_failure_msg(f, i, rank, exit_code, signal);
  fx_fail_with(f, i, &x);
}

void fx_success(fx_t *f, int i, uint64_t gen) {
  dr_rdzv_success(&f->r, &f->peer[i], gen, f->now);
  fx_take(f);
}

void fx_leave(fx_t *f, int i, uint32_t signal, const char *reason) {
  dr_leave_t l = {f->r.gen, signal, dr_str(reason)};
  dr_rdzv_leave(&f->r, &f->peer[i], &l);
  fx_take(f);
}

void fx_close(fx_t *f, int i, const char *why) {
  dr_rdzv_peer_closed(&f->r, &f->peer[i], why, f->now);
  fx_take(f);
}

dr_resume_t fx_resume_msg(fx_t *f, int i, uint64_t gen, uint32_t node_rank,
                          uint32_t nnodes, uint32_t world, uint32_t nproc,
                          uint32_t restart_count, const uint8_t *token) {
  dr_resume_t q;
  memset(&q, 0, sizeof(q));
  q.run_id = dr_str(FX_RUN_ID);
  q.host = dr_str(f->peer[i].host);
  q.gen = gen;
  q.node_rank = node_rank;
  q.nnodes = nnodes;
  q.world_size = world;
  q.nproc = nproc;
  q.restart_count = restart_count;
  memcpy(q.resume_token, token, sizeof(q.resume_token));
  return q;
}

void fx_resume_with(fx_t *f, int i, const dr_resume_t *q) {
  f->req[i] = ++f->next_req;
  dr_rdzv_resume(&f->r, &f->peer[i], f->req[i], q, f->now);
  fx_take(f);
}

static int matches(const fx_order_t *g, dr_rdzv_order_kind_t kind,
                   int peer) {
  return g->kind == kind && (peer == FX_ANY || g->peer == peer);
}

const fx_order_t *fx_find(const fx_t *f, dr_rdzv_order_kind_t kind,
                          int peer) {
  for (size_t i = 0; i < f->n_got; i++)
    if (matches(&f->got[i], kind, peer))
      return &f->got[i];
  return NULL;
}

size_t fx_count(const fx_t *f, dr_rdzv_order_kind_t kind, int peer) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_got; i++)
    n += matches(&f->got[i], kind, peer);
  return n;
}

const fx_order_t *fx_event(const fx_t *f, const char *name) {
  for (size_t i = 0; i < f->n_got; i++)
    if (f->got[i].kind == DR_RDZV_EVENT && strcmp(f->got[i].name, name) == 0)
      return &f->got[i];
  return NULL;
}

const fx_order_t *fx_must(const fx_t *f, dr_rdzv_order_kind_t kind,
                          int peer) {
  const fx_order_t *g = fx_find(f, kind, peer);
  if (g != NULL)
    return g;
  /* The batch, so that a failure says what came instead. */
  print_error("no order of kind %d for peer %d among %zu:\n", (int)kind, peer,
              f->n_got);
  for (size_t i = 0; i < f->n_got; i++)
    print_error("  kind %d peer %d code %d gen %llu: %s\n", (int)f->got[i].kind,
                f->got[i].peer, f->got[i].code,
                (unsigned long long)f->got[i].gen, f->got[i].text);
  fail();
  return NULL;
}

void fx_assert_has(const char *text, const char *phrase) {
  if (strstr(text, phrase) == NULL)
    fail_msg("\"%s\" does not contain \"%s\"", text, phrase);
}
