/* The key-value store: values, blocking reads, atomic counters, barriers,
 * and the scopes of generations. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Upper bounds on elapsed time only catch a hang: a loaded machine (ctest
 * -j2, sanitizers) may take seconds longer than the deadline under test. */
#define HANG_SLACK_MS 10000

#define ADD_CLIENTS 32
#define ADDS_PER_CLIENT 1000
#define BARRIER_N 8
#define BARRIER_ROUNDS 2
/* Arrivals at a barrier are this far apart, so that the arrivals span
 * (BARRIER_N - 1) * stagger, well over the release spread allowed. */
#define BARRIER_STAGGER_MS 30
/* No rank leaves before the last arrives (checked exactly); their
 * releases are then together, within what a loaded machine allows. */
#define BARRIER_SPREAD_MS HANG_SLACK_MS

/* At debug level the server logs each request that starts to wait: the
 * tests wait for that line, not for a while. */
static void start_store(dr_h_fixture_t *fx) {
  dr_h_start(fx, DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                           "--log-level", "debug"),
             NULL);
}

static void set_str(dr_client_t *c, uint64_t gen, const char *key,
                    const char *value) {
  int rc = dr_client_set(c, gen, key, value, strlen(value));
  if (rc != 0)
    fail_msg("SET %s in gen %d: %s (%s)", key, (int)gen, dr_err_name(rc),
             dr_client_errmsg(c));
}

static void assert_get(dr_client_t *c, uint64_t gen, const char *key,
                       const char *want) {
  uint8_t *v = NULL;
  size_t n = 0;
  int rc = dr_client_get(c, gen, key, 0, &v, &n);
  if (rc != 0)
    fail_msg("GET %s in gen %d: %s (%s)", key, (int)gen, dr_err_name(rc),
             dr_client_errmsg(c));
  int same = n == strlen(want) && memcmp(v, want, n) == 0;
  if (!same)
    fprintf(stderr, "  GET %s: got \"%.*s\", want \"%s\"\n", key, (int)n,
            (const char *)v, want);
  free(v);
  assert_true(same);
}

static int get_rc(dr_client_t *c, uint64_t gen, const char *key) {
  uint8_t *v = NULL;
  size_t n = 0;
  int rc = dr_client_get(c, gen, key, 0, &v, &n);
  free(v);
  return rc;
}

DR_H_TEST(test_set_get_and_missing) {
  start_store(fx);
  dr_client_t *c = dr_h_open(fx, "kv");
  assert_int_equal(get_rc(c, 0, "missing"), DR_ENOTFOUND);
  set_str(c, 0, "k", "v1");
  assert_get(c, 0, "k", "v1");
  set_str(c, 0, "k", "second value");
  assert_get(c, 0, "k", "second value");

  /* Values are bytes, NULs included; the copy is NUL-terminated. */
  static const uint8_t bin[5] = {'a', 0, 'b', 0xff, 0};
  assert_int_equal(dr_client_set(c, 0, "bin", bin, sizeof(bin)), 0);
  uint8_t *v = NULL;
  size_t n = 0;
  int rc = dr_client_get(c, 0, "bin", 0, &v, &n);
  int same = rc == 0 && n == sizeof(bin) && memcmp(v, bin, n) == 0 && v[n] == 0;
  free(v);
  assert_int_equal(rc, 0);
  assert_true(same);

  /* Another client sees the same store. */
  dr_client_t *other = dr_h_open(fx, "kv2");
  assert_get(other, 0, "k", "second value");
}

typedef struct {
  dr_client_t *c;
  const char *key;
  uint64_t wait_ms;
  int rc;
  char value[64];
  double t_start, t_end;
} getter_t;

static void *getter_main(void *arg) {
  getter_t *g = arg;
  uint8_t *v = NULL;
  size_t n = 0;
  g->t_start = dr_h_now_ms();
  g->rc = dr_client_get(g->c, 0, g->key, g->wait_ms, &v, &n);
  g->t_end = dr_h_now_ms();
  if (g->rc == 0)
    snprintf(g->value, sizeof(g->value), "%.*s", (int)n, (const char *)v);
  free(v);
  return NULL;
}

DR_H_TEST(test_blocking_get_wakes_on_set) {
  start_store(fx);
  dr_client_t *setter = dr_h_open(fx, "setter");
  getter_t g = {
      dr_h_open(fx, "getter"), "late-key", 60000, -EINPROGRESS, "", 0, 0};
  assert_int_equal(dr_h_thread(fx, getter_main, &g), 0);
  /* The scenario: the value is published once the reader waits for it. */
  assert_true(dr_h_log_contains(fx->srv, "in GET for 'late-key'", 5000));
  assert_int_equal(get_rc(setter, 0, "late-key"), DR_ENOTFOUND);
  double t_set = dr_h_now_ms();
  int set_rc = dr_client_set(setter, 0, "late-key", "here", 4);
  dr_h_join_threads(fx);
  fprintf(stderr, "  GET woke %.1f ms after the SET, %.0f ms after asking\n",
          g.t_end - t_set, g.t_end - g.t_start);
  assert_int_equal(set_rc, 0);
  assert_int_equal(g.rc, 0);
  assert_string_equal(g.value, "here");
  /* Woken by the SET, not by its deadline of 60 s. */
  assert_true(g.t_end - t_set < HANG_SLACK_MS);
}

DR_H_TEST(test_blocking_get_times_out_cleanly) {
  start_store(fx);
  dr_client_t *c = dr_h_open(fx, "waiter");
  uint8_t *v = NULL;
  size_t n = 0;
  double t0 = dr_h_now_ms();
  int rc = dr_client_get(c, 0, "never", 300, &v, &n);
  double took = dr_h_now_ms() - t0;
  free(v);
  fprintf(stderr, "  GET wait 300 ms: %s after %.0f ms\n", dr_err_name(rc),
          took);
  assert_int_equal(rc, -ETIMEDOUT);
  assert_true(took >= 290);
  assert_true(took < 300 + HANG_SLACK_MS);
  /* The connection is still in step: the next answers are the right ones. */
  set_str(c, 0, "never", "now");
  assert_get(c, 0, "never", "now");
  assert_int_equal(get_rc(c, 0, "still-missing"), DR_ENOTFOUND);
}

typedef struct {
  dr_client_t *c;
  int64_t *results; /* ADDS_PER_CLIENT slots */
  int rc;
} adder_t;

static void *adder_main(void *arg) {
  adder_t *a = arg;
  for (int i = 0; i < ADDS_PER_CLIENT; i++) {
    a->rc = dr_client_add(a->c, 0, "counter", 1, &a->results[i]);
    if (a->rc != 0)
      break;
  }
  return NULL;
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

DR_H_TEST(test_add_is_atomic_under_concurrency) {
  start_store(fx);
  enum { TOTAL = ADD_CLIENTS * ADDS_PER_CLIENT };
  int64_t *results = calloc(TOTAL, sizeof(*results));
  assert_non_null(results);
  adder_t ad[ADD_CLIENTS];
  for (int i = 0; i < ADD_CLIENTS; i++) {
    char host[32];
    snprintf(host, sizeof(host), "adder-%d", i);
    ad[i].c = dr_h_open(fx, host);
    ad[i].results = results + i * ADDS_PER_CLIENT;
    ad[i].rc = -EINPROGRESS;
  }
  double t0 = dr_h_now_ms();
  int started = 0;
  for (int i = 0; i < ADD_CLIENTS && started == i; i++)
    if (dr_h_thread(fx, adder_main, &ad[i]) == 0)
      started++;
  dr_h_join_threads(fx);
  double took = dr_h_now_ms() - t0;
  fprintf(stderr, "  %d ADDs from %d clients in %.0f ms\n", TOTAL, ADD_CLIENTS,
          took);
  int bad_rc = 0;
  for (int i = 0; i < ADD_CLIENTS; i++)
    if (ad[i].rc != 0 && bad_rc == 0)
      bad_rc = ad[i].rc;
  int64_t final = -1;
  int final_rc = dr_client_add(ad[0].c, 0, "counter", 0, &final);
  /* Every intermediate value was handed out exactly once. */
  qsort(results, TOTAL, sizeof(*results), cmp_i64);
  int64_t first_gap = 0;
  for (int64_t i = 0; i < TOTAL && first_gap == 0; i++)
    if (results[i] != i + 1)
      first_gap = i + 1;
  free(results);
  assert_int_equal(started, ADD_CLIENTS);
  assert_int_equal(bad_rc, 0);
  assert_int_equal(final_rc, 0);
  assert_int_equal(final, TOTAL);
  assert_int_equal(first_gap, 0);

  int64_t back = -1;
  assert_int_equal(dr_client_add(ad[0].c, 0, "counter", -TOTAL - 5, &back), 0);
  assert_int_equal(back, -5);
  assert_int_equal(dr_client_add(ad[0].c, 0, "fresh", 7, &back), 0);
  assert_int_equal(back, 7);
}

typedef struct {
  dr_client_t *c;
  int index;
  const char *name;
  uint64_t n;
  uint64_t wait_ms;
  int rounds;
  int rc[BARRIER_ROUNDS];
  double t_arrive[BARRIER_ROUNDS];
  double t_release[BARRIER_ROUNDS];
} barrier_arg_t;

static void *barrier_main(void *arg) {
  barrier_arg_t *b = arg;
  for (int r = 0; r < b->rounds; r++) {
    /* The scenario: arrivals are staggered, the last one comes late. */
    dr_h_sleep_ms(b->index * BARRIER_STAGGER_MS);
    b->t_arrive[r] = dr_h_now_ms();
    b->rc[r] = dr_client_barrier(b->c, 0, b->name, b->n, b->wait_ms);
    b->t_release[r] = dr_h_now_ms();
    if (b->rc[r] != 0)
      break;
  }
  return NULL;
}

static void barrier_init(dr_h_fixture_t *fx, barrier_arg_t *b, int n,
                         const char *name, uint64_t count, uint64_t wait_ms,
                         int rounds) {
  for (int i = 0; i < n; i++) {
    char host[32];
    snprintf(host, sizeof(host), "%s-%d", name, i);
    memset(&b[i], 0, sizeof(b[i]));
    b[i].c = dr_h_open(fx, host);
    b[i].index = i;
    b[i].name = name;
    b[i].n = count;
    b[i].wait_ms = wait_ms;
    b[i].rounds = rounds;
    for (int r = 0; r < BARRIER_ROUNDS; r++)
      b[i].rc[r] = -EINPROGRESS;
  }
}

static int barrier_run(dr_h_fixture_t *fx, barrier_arg_t *b, int n) {
  int started = 0;
  for (int i = 0; i < n && started == i; i++)
    if (dr_h_thread(fx, barrier_main, &b[i]) == 0)
      started++;
  dr_h_join_threads(fx);
  return started;
}

DR_H_TEST(test_barrier_releases_all_at_once) {
  start_store(fx);
  barrier_arg_t b[BARRIER_N];
  barrier_init(fx, b, BARRIER_N, "sync", BARRIER_N, 10000, BARRIER_ROUNDS);
  assert_int_equal(barrier_run(fx, b, BARRIER_N), BARRIER_N);
  /* The same barrier serves again once released. */
  for (int r = 0; r < BARRIER_ROUNDS; r++) {
    double last_arrival = 0, first_release = 1e300, last_release = 0;
    for (int i = 0; i < BARRIER_N; i++) {
      if (b[i].t_arrive[r] > last_arrival)
        last_arrival = b[i].t_arrive[r];
      if (b[i].t_release[r] < first_release)
        first_release = b[i].t_release[r];
      if (b[i].t_release[r] > last_release)
        last_release = b[i].t_release[r];
    }
    fprintf(stderr,
            "  round %d: first release %.1f ms after the last arrival, "
            "spread %.1f ms\n",
            r + 1, first_release - last_arrival, last_release - first_release);
    for (int i = 0; i < BARRIER_N; i++)
      assert_int_equal(b[i].rc[r], 0);
    assert_true(first_release >= last_arrival);
    assert_true(last_release - first_release < BARRIER_SPREAD_MS);
  }
}

DR_H_TEST(test_barrier_times_out_then_serves) {
  start_store(fx);
  barrier_arg_t b[3];
  barrier_init(fx, b, 2, "short", 3, 300, 1);
  assert_int_equal(barrier_run(fx, b, 2), 2);
  for (int i = 0; i < 2; i++) {
    double took = b[i].t_release[0] - b[i].t_arrive[0];
    fprintf(stderr, "  arrival %d: %s after %.0f ms\n", i,
            dr_err_name(b[i].rc[0]), took);
    assert_int_equal(b[i].rc[0], -ETIMEDOUT);
    assert_true(took >= 290);
    assert_true(took < 300 + HANG_SLACK_MS);
  }
  /* Timed-out arrivals do not count: three new ones are released. */
  barrier_init(fx, b, 3, "short", 3, 10000, 1);
  assert_int_equal(barrier_run(fx, b, 3), 3);
  for (int i = 0; i < 3; i++)
    assert_int_equal(b[i].rc[0], 0);
}

typedef struct {
  dr_client_t *c;
  int rc;
  char values[3][16];
} multi_arg_t;

static void *multi_main(void *arg) {
  multi_arg_t *m = arg;
  const char *const keys[3] = {"m1", "m2", "m3"};
  dr_bytes_t *vals = NULL;
  m->rc = dr_client_multi_get(m->c, 0, keys, 3, 5000, &vals);
  if (m->rc == 0)
    for (int i = 0; i < 3; i++)
      snprintf(m->values[i], sizeof(m->values[i]), "%.*s", (int)vals[i].len,
               (const char *)vals[i].p);
  free(vals);
  return NULL;
}

DR_H_TEST(test_multi_get_waits_for_all_keys) {
  start_store(fx);
  dr_client_t *c = dr_h_open(fx, "multi");
  set_str(c, 0, "m1", "one");
  set_str(c, 0, "m2", "two");
  multi_arg_t m = {dr_h_open(fx, "multi-wait"), -EINPROGRESS, {"", "", ""}};
  assert_int_equal(dr_h_thread(fx, multi_main, &m), 0);
  /* The scenario: the last key comes once the reader waits for all. */
  assert_true(dr_h_log_contains(fx->srv, "in MULTI_GET for 'm1' and more",
                                5000));
  int set_rc = dr_client_set(c, 0, "m3", "three", 5);
  dr_h_join_threads(fx);
  assert_int_equal(set_rc, 0);
  assert_int_equal(m.rc, 0);
  assert_string_equal(m.values[0], "one");
  assert_string_equal(m.values[1], "two");
  assert_string_equal(m.values[2], "three");

  const char *const part[2] = {"m1", "absent"};
  dr_bytes_t *vals = NULL;
  double t0 = dr_h_now_ms();
  int rc = dr_client_multi_get(c, 0, part, 2, 300, &vals);
  double took = dr_h_now_ms() - t0;
  free(vals);
  assert_int_equal(rc, -ETIMEDOUT);
  assert_true(took >= 290);
}

/* CAS in the job scope; the value after it lands in cur. */
static int cas_str(dr_client_t *c, const char *key, const char *expected,
                   const char *desired, char *cur, size_t cap) {
  uint8_t *v = NULL;
  size_t n = 0;
  int rc = dr_client_cas(c, 0, key, expected, strlen(expected), desired,
                         strlen(desired), &v, &n);
  snprintf(cur, cap, "%.*s", rc == 0 ? (int)n : 0,
           v != NULL ? (const char *)v : "");
  free(v);
  return rc;
}

DR_H_TEST(test_check_cas_delete) {
  start_store(fx);
  dr_client_t *c = dr_h_open(fx, "ops");
  int all = -1;
  const char *const one[1] = {"x"};
  const char *const two[2] = {"x", "y"};
  assert_int_equal(dr_client_check(c, 0, one, 1, &all), 0);
  assert_int_equal(all, 0);
  set_str(c, 0, "x", "1");
  assert_int_equal(dr_client_check(c, 0, one, 1, &all), 0);
  assert_int_equal(all, 1);
  assert_int_equal(dr_client_check(c, 0, two, 2, &all), 0);
  assert_int_equal(all, 0);
  set_str(c, 0, "y", "2");
  assert_int_equal(dr_client_check(c, 0, two, 2, &all), 0);
  assert_int_equal(all, 1);

  char cur[16];
  /* Absent and expected empty: set. */
  assert_int_equal(cas_str(c, "cas", "", "v1", cur, sizeof(cur)), 0);
  assert_string_equal(cur, "v1");
  /* Current equals expected: set. */
  assert_int_equal(cas_str(c, "cas", "v1", "v2", cur, sizeof(cur)), 0);
  assert_string_equal(cur, "v2");
  /* Mismatch: unchanged, and the answer is the current value. */
  assert_int_equal(cas_str(c, "cas", "wrong", "v3", cur, sizeof(cur)), 0);
  assert_string_equal(cur, "v2");
  assert_get(c, 0, "cas", "v2");
  /* Absent with an expected value: nothing is set. */
  assert_int_equal(cas_str(c, "cas-absent", "x", "v", cur, sizeof(cur)), 0);
  assert_string_equal(cur, "");
  assert_int_equal(get_rc(c, 0, "cas-absent"), DR_ENOTFOUND);

  int deleted = -1;
  assert_int_equal(dr_client_delete(c, 0, "x", &deleted), 0);
  assert_int_equal(deleted, 1);
  assert_int_equal(dr_client_delete(c, 0, "x", &deleted), 0);
  assert_int_equal(deleted, 0);
  assert_int_equal(get_rc(c, 0, "x"), DR_ENOTFOUND);
  assert_int_equal(dr_client_check(c, 0, two, 2, &all), 0);
  assert_int_equal(all, 0);
}

/* A store request for gen on a fresh connection: the refusal of a stale
 * generation is not assumed to leave the connection usable. */
static int set_on_fresh(dr_h_fixture_t *fx, uint64_t gen, const char *key) {
  dr_client_t *c = dr_h_open(fx, "scoped");
  int rc = dr_client_set(c, gen, key, "v", 1);
  fprintf(stderr, "  SET %s in gen %d: %s (%s)\n", key, (int)gen,
          dr_err_name(rc), dr_client_errmsg(c));
  dr_h_close(fx, &c);
  return rc;
}

static int get_on_fresh(dr_h_fixture_t *fx, uint64_t gen, const char *key) {
  dr_client_t *c = dr_h_open(fx, "scoped");
  int rc = get_rc(c, gen, key);
  dr_h_close(fx, &c);
  return rc;
}

DR_H_TEST(test_generation_scopes_and_stale_refused) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--max-restarts", "1",
                       "--heartbeat-timeout", "30"),
             NULL);
  dr_client_t *c = dr_h_open(fx, "scoped");
  /* Before any round, generation 1 is the round being formed. */
  set_str(c, 0, "scope", "job");
  set_str(c, 1, "scope", "gen1");
  assert_get(c, 0, "scope", "job");
  assert_get(c, 1, "scope", "gen1");
  assert_int_equal(set_on_fresh(fx, 2, "ahead"), DR_ESTALE);
  assert_int_equal(get_on_fresh(fx, 7, "scope"), DR_ESTALE);

  dr_client_t *agent = dr_h_open(fx, "agent");
  dr_join_t j;
  dr_assignment_t a;
  dr_h_join_fill(&j, DR_H_RUN_ID, "agent", "", 1, DR_NONE, 0, "");
  int rc = dr_client_join(agent, &j, 10000, &a);
  uint64_t gen = a.gen;
  dr_assignment_free(&a);
  assert_int_equal(rc, 0);
  assert_int_equal(gen, 1);
  dr_failure_t f;
  memset(&f, 0, sizeof(f));
  f.gen = 1;
  f.exit_code = 1;
  f.message = dr_str("crash");
  assert_int_equal(dr_client_report_failure(agent, &f), 0);
  dr_h_agent_t ag;
  memset(&ag, 0, sizeof(ag));
  ag.c = agent;
  ag.gen = 1;
  assert_int_equal(dr_h_agents_run(&ag, 1, 0, 5000), 0);
  assert_int_equal(ag.order.type, DR_MSG_RESTART);
  assert_int_equal(ag.order.gen, 2);

  /* Generation 2 is now current (being formed): 1 is over. */
  assert_int_equal(set_on_fresh(fx, 1, "scope"), DR_ESTALE);
  assert_int_equal(get_on_fresh(fx, 1, "scope"), DR_ESTALE);
  assert_int_equal(get_on_fresh(fx, 2, "scope"), DR_ENOTFOUND);
  dr_client_t *c2 = dr_h_open(fx, "scoped");
  set_str(c2, 2, "scope", "gen2");
  assert_get(c2, 2, "scope", "gen2");
  assert_get(c2, 0, "scope", "job");
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, dr_h_teardown)
      T(test_set_get_and_missing),
      T(test_blocking_get_wakes_on_set),
      T(test_blocking_get_times_out_cleanly),
      T(test_add_is_atomic_under_concurrency),
      T(test_barrier_releases_all_at_once),
      T(test_barrier_times_out_then_serves),
      T(test_multi_get_waits_for_all_keys),
      T(test_check_cas_delete),
      T(test_generation_scopes_and_stale_refused),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
