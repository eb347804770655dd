/* The rendezvous core's check across the nodes of a round
 * (rdzv_core_ifname.c), without a socket: NCCL_SOCKET_IFNAME as each
 * node's JOIN says it, compared as the round completes; when the values
 * differ (or some nodes set it and others do not), one event (and one
 * warning in the log, of the same text) naming each value with its hosts,
 * node 0's value first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv_fixture.h"

#define EVENT "socket_ifname_differs"

static int setup_fixed3(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.min_nodes = c.max_nodes = 3;
  return fx_setup_with(state, &c);
}

static int setup_fixed6(void **state) {
  dr_rdzv_config_t c = fx_config();
  c.min_nodes = c.max_nodes = FX_PEERS;
  return fx_setup_with(state, &c);
}

/* Peers 0..n-1 join with the values in v (NULL: unset) and any rank. */
static void join_all(fx_t *f, int n, const char *const *v) {
  for (int i = 0; i < n; i++) {
    dr_join_t j = fx_join_msg(f, i, 2, DR_NONE);
    j.socket_ifname = dr_str(v[i]);
    fx_join_with(f, i, &j);
  }
  if (f->r.state == DR_JOB_FORMING)
    fx_at(f, dr_rdzv_next_due(&f->r));
  assert_int_equal(f->r.state, DR_JOB_RUNNING);
}

/* The EVENT's values, asserted to be the only one of the batch. */
static const char *differs(const fx_t *f) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_got; i++)
    n += f->got[i].kind == DR_RDZV_EVENT &&
         strcmp(f->got[i].name, EVENT) == 0;
  assert_int_equal(n, 1);
  return fx_event(f, EVENT)->text;
}

static void test_same_everywhere_says_nothing(void **state) {
  fx_t *f = *state;
  const char *const v[3] = {"eth0", "eth0", "eth0"};
  join_all(f, 3, v);
  assert_null(fx_event(f, EVENT));
  assert_non_null(fx_event(f, "round_complete"));
}

static void test_unset_everywhere_says_nothing(void **state) {
  fx_t *f = *state;
  const char *const v[3] = {NULL, "", NULL};
  join_all(f, 3, v);
  assert_null(fx_event(f, EVENT));
}

static void test_values_differ(void **state) {
  fx_t *f = *state;
  const char *const v[3] = {"eth0", "eth0", "ib0"};
  join_all(f, 3, v);
  const char *t = differs(f);
  fx_assert_has(t, "\"gen\":1,\"variable\":\"NCCL_SOCKET_IFNAME\"");
  fx_assert_has(t, "\"values\":\"'eth0' on node-0 and node-1, 'ib0' on "
                   "node-2\"");
}

/* Set on some nodes, unset on others: NCCL picks an interface there. */
static void test_some_unset(void **state) {
  fx_t *f = *state;
  const char *const v[2] = {NULL, "^docker,lo"};
  join_all(f, 2, v); /* 2 of 2:3, at the last call */
  fx_assert_has(differs(f), "\"values\":\"unset on node-0, '^docker,lo' on "
                            "node-1\"");
}

/* The values in the order of their first node by node rank; a byte that
 * is not printable is '?'. */
static void test_order_and_bytes(void **state) {
  fx_t *f = *state;
  const char *const v[3] = {"ib\x1b", "eth0", "ib\x1b"};
  join_all(f, 3, v);
  fx_assert_has(differs(f), "\"values\":\"'ib?' on node-0 and node-2, "
                            "'eth0' on node-1\"");
}

/* Bounded: four hosts of a value, five values, then counts. */
static void test_many_hosts(void **state) {
  fx_t *f = *state;
  const char *const v[FX_PEERS] = {"eth0", "eth0", "eth0",
                                   "eth0", "eth0", "ib0"};
  join_all(f, FX_PEERS, v);
  fx_assert_has(differs(f), "\"values\":\"'eth0' on node-0, node-1, node-2, "
                            "node-3 and 1 more, 'ib0' on node-5\"");
}

static void test_many_values(void **state) {
  fx_t *f = *state;
  const char *const v[FX_PEERS] = {"a", "b", "c", "d", "e", "f"};
  join_all(f, FX_PEERS, v);
  fx_assert_has(differs(f), "\"values\":\"'a' on node-0, 'b' on node-1, "
                            "'c' on node-2, 'd' on node-3, 'e' on node-4, "
                            "and 1 other value on 1 node\"");
}

/* Every round that completes is checked, with the values of its JOINs. */
static void test_each_round(void **state) {
  fx_t *f = *state;
  const char *const v[3] = {"eth0", "eth1", "eth0"};
  join_all(f, 3, v);
  fx_assert_has(differs(f), "\"gen\":1,");
  fx_fail(f, 1, 2, 1, 0); /* rank 2 exits 1: every node restarts */
  assert_int_equal(f->r.gen, 2);
  const char *const w[3] = {"eth1", "eth1", "eth1"};
  join_all(f, 3, w);
  assert_null(fx_event(f, EVENT));
  fx_fail(f, 0, 0, 1, 0);
  const char *const x[3] = {"eth1", NULL, "eth1"};
  join_all(f, 3, x);
  fx_assert_has(differs(f), "\"gen\":3,\"variable\":\"NCCL_SOCKET_IFNAME\","
                            "\"values\":\"'eth1' on node-0 and node-2, unset "
                            "on node-1\"");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_same_everywhere_says_nothing,
                                      setup_fixed3, fx_teardown),
      cmocka_unit_test_setup_teardown(test_unset_everywhere_says_nothing,
                                      setup_fixed3, fx_teardown),
      cmocka_unit_test_setup_teardown(test_values_differ, setup_fixed3,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(test_some_unset, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_order_and_bytes, setup_fixed3,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(test_many_hosts, setup_fixed6,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(test_many_values, setup_fixed6,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(test_each_round, setup_fixed3,
                                      fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
