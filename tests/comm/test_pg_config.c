/* The process group's configuration from the environment, and a group of
 * one, which needs no store and completes every collective at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "pg.h"

static const char *const vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "DDPRUN_RDZV_ENDPOINT", "DDPRUN_RUN_ID", "DDPRUN_GENERATION",
    "DDPRUN_SECRET_FILE", "DDPRUN_SECRET", "DR_PG_FORCE_TCP"};

static int clear_env(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
    unsetenv(vars[i]);
  return 0;
}

static void set_job(const char *rank, const char *world) {
  setenv("RANK", rank, 1);
  setenv("WORLD_SIZE", world, 1);
  setenv("DDPRUN_RDZV_ENDPOINT", "127.0.0.1:29400", 1);
  setenv("DDPRUN_RUN_ID", "job7", 1);
  setenv("DDPRUN_GENERATION", "3", 1);
}

static void test_alone(void **state) {
  (void)state;
  dr_pg_config_t c;
  char err[256];
  assert_int_equal(dr_pg_config_from_env(&c, err, sizeof(err)), 0);
  assert_int_equal(c.rank, 0);
  assert_int_equal(c.world, 1);
  assert_null(c.store_host);
  assert_int_equal(c.force_tcp, 0);
  dr_pg_config_free(&c);
}

static void test_job(void **state) {
  (void)state;
  set_job("2", "4");
  setenv("LOCAL_RANK", "0", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  setenv("DDPRUN_SECRET", "s3cret", 1);
  setenv("DR_PG_FORCE_TCP", "1", 1);
  dr_pg_config_t c;
  char err[256];
  assert_int_equal(dr_pg_config_from_env(&c, err, sizeof(err)), 0);
  assert_int_equal(c.rank, 2);
  assert_int_equal(c.world, 4);
  assert_int_equal(c.local_rank, 0);
  assert_int_equal(c.local_world, 2);
  assert_string_equal(c.store_host, "127.0.0.1");
  assert_int_equal(c.store_port, 29400);
  assert_string_equal(c.run_id, "job7");
  assert_int_equal(c.gen, 3);
  assert_int_equal(c.secret_len, 6);
  assert_memory_equal(c.secret, "s3cret", 6);
  assert_int_equal(c.force_tcp, 1);
  dr_pg_config_free(&c);
  assert_null(c.secret);

  setenv("DDPRUN_RDZV_ENDPOINT", "[::1]:7", 1);
  assert_int_equal(dr_pg_config_from_env(&c, err, sizeof(err)), 0);
  assert_string_equal(c.store_host, "::1");
  assert_int_equal(c.store_port, 7);
  dr_pg_config_free(&c);
}

static void expect_bad(const char *name, const char *value,
                       const char *in_msg) {
  dr_pg_config_t c;
  char err[256] = "";
  set_job("1", "2");
  if (value == NULL)
    unsetenv(name);
  else
    setenv(name, value, 1);
  assert_int_equal(dr_pg_config_from_env(&c, err, sizeof(err)), DR_EBADARG);
  assert_non_null(strstr(err, in_msg));
  dr_pg_config_free(&c);
  clear_env(NULL);
}

static void test_bad(void **state) {
  (void)state;
  expect_bad("WORLD_SIZE", NULL, "RANK is set but WORLD_SIZE is not");
  expect_bad("RANK", "2", "RANK='2'");
  expect_bad("RANK", "-1", "RANK='-1'");
  expect_bad("RANK", "1x", "RANK='1x'");
  expect_bad("WORLD_SIZE", "0", "WORLD_SIZE='0'");
  expect_bad("DDPRUN_RDZV_ENDPOINT", NULL, "DDPRUN_RDZV_ENDPOINT is not set");
  expect_bad("DDPRUN_RDZV_ENDPOINT", "host", "is not HOST:PORT");
  expect_bad("DDPRUN_RDZV_ENDPOINT", "host:0", "is not HOST:PORT");
  expect_bad("DDPRUN_RDZV_ENDPOINT", "host:65536", "is not HOST:PORT");
  expect_bad("DDPRUN_GENERATION", NULL, "DDPRUN_GENERATION");
  expect_bad("LOCAL_RANK", "5", "LOCAL_RANK='5'");
  expect_bad("DDPRUN_SECRET_FILE", "/nonexistent/secret", "secret");
}

static void test_group_of_one(void **state) {
  (void)state;
  dr_pg_config_t c;
  char err[256];
  assert_int_equal(dr_pg_config_from_env(&c, err, sizeof(err)), 0);
  dr_pg_t *pg;
  assert_int_equal(dr_pg_init(&c, &pg, err, sizeof(err)), 0);
  assert_int_equal(dr_pg_rank(pg), 0);
  assert_int_equal(dr_pg_world(pg), 1);
  assert_non_null(dr_pg_describe(pg));

  float x[3] = {1.5f, -2.0f, 3.0f};
  dr_work_t *w;
  assert_int_equal(dr_pg_allreduce(pg, x, 3, DR_PG_AVG, &w), 0);
  assert_true(dr_work_done(w));
  assert_true(dr_work_start_us(w) > 0);
  assert_true(dr_work_end_us(w) >= dr_work_start_us(w));
  assert_int_equal(dr_work_wait(&w, err, sizeof(err)), 0);
  assert_null(w);
  assert_true(x[0] == 1.5f && x[1] == -2.0f && x[2] == 3.0f);

  char in[5] = "abcd", out[5] = "";
  assert_int_equal(dr_pg_allgather_sync(pg, in, 5, out, err, sizeof(err)), 0);
  assert_string_equal(out, "abcd");
  assert_int_equal(dr_pg_broadcast_sync(pg, in, 5, 0, err, sizeof(err)), 0);
  assert_int_equal(dr_pg_barrier_sync(pg, err, sizeof(err)), 0);
  assert_int_equal(dr_pg_allreduce_sync(pg, x, 0, DR_PG_SUM, err,
                                        sizeof(err)), 0);
  assert_int_equal(dr_pg_broadcast(pg, in, 5, 1, &w), DR_EBADARG);
  dr_pg_destroy(&pg);
  assert_null(pg);
  dr_pg_config_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_alone, clear_env, clear_env),
      cmocka_unit_test_setup_teardown(test_job, clear_env, clear_env),
      cmocka_unit_test_setup_teardown(test_bad, clear_env, clear_env),
      cmocka_unit_test_setup_teardown(test_group_of_one, clear_env,
                                      clear_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
