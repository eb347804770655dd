/* Shared-secret authentication: the MAC and loading the secret. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "errors.h"

static const uint8_t secret[] = "correct horse battery staple";
#define SECRET_LEN (sizeof(secret) - 1)

/* ---- MAC ---------------------------------------------------------------- */

typedef struct {
  uint8_t nonce[DR_NONCE_LEN];
  uint8_t mac[DR_MAC_LEN];
  dr_bytes_t run_id;
} mac_fixture_t;

static int mac_setup(void **state) {
  mac_fixture_t *f = calloc(1, sizeof(*f));
  if (f == NULL || dr_auth_init() != 0)
    return -1;
  dr_auth_nonce(f->nonce);
  f->run_id = dr_str("job7");
  dr_auth_mac(secret, SECRET_LEN, f->nonce, f->run_id, f->mac);
  *state = f;
  return 0;
}

static int mac_teardown(void **state) {
  free(*state);
  return 0;
}

static dr_bytes_t mac_bytes(const uint8_t *p, uint32_t n) {
  dr_bytes_t b = {p, n};
  return b;
}

static void test_mac_verifies(void **state) {
  mac_fixture_t *f = *state;
  assert_int_equal(dr_auth_verify(secret, SECRET_LEN, f->nonce, f->run_id,
                                  mac_bytes(f->mac, DR_MAC_LEN)),
                   0);
}

static void test_mac_is_deterministic(void **state) {
  mac_fixture_t *f = *state;
  uint8_t again[DR_MAC_LEN];
  dr_auth_mac(secret, SECRET_LEN, f->nonce, f->run_id, again);
  assert_memory_equal(again, f->mac, DR_MAC_LEN);
}

static void test_wrong_secret(void **state) {
  mac_fixture_t *f = *state;
  static const uint8_t other[] = "correct horse battery stapler";
  assert_int_equal(dr_auth_verify(other, sizeof(other) - 1, f->nonce,
                                  f->run_id, mac_bytes(f->mac, DR_MAC_LEN)),
                   DR_EAUTH);
  /* A prefix of the secret is a different secret. */
  assert_int_equal(dr_auth_verify(secret, SECRET_LEN - 1, f->nonce, f->run_id,
                                  mac_bytes(f->mac, DR_MAC_LEN)),
                   DR_EAUTH);
}

static void test_wrong_nonce(void **state) {
  mac_fixture_t *f = *state;
  uint8_t nonce[DR_NONCE_LEN];
  memcpy(nonce, f->nonce, sizeof(nonce));
  nonce[DR_NONCE_LEN - 1] ^= 1;
  assert_int_equal(dr_auth_verify(secret, SECRET_LEN, nonce, f->run_id,
                                  mac_bytes(f->mac, DR_MAC_LEN)),
                   DR_EAUTH);
}

static void test_wrong_run_id(void **state) {
  mac_fixture_t *f = *state;
  assert_int_equal(dr_auth_verify(secret, SECRET_LEN, f->nonce,
                                  dr_str("job8"),
                                  mac_bytes(f->mac, DR_MAC_LEN)),
                   DR_EAUTH);
  assert_int_equal(dr_auth_verify(secret, SECRET_LEN, f->nonce, dr_str(""),
                                  mac_bytes(f->mac, DR_MAC_LEN)),
                   DR_EAUTH);
}

static void test_wrong_mac(void **state) {
  mac_fixture_t *f = *state;
  uint8_t mac[DR_MAC_LEN + 1];
  memcpy(mac, f->mac, DR_MAC_LEN);
  mac[DR_MAC_LEN] = 0;
  assert_int_equal(dr_auth_verify(secret, SECRET_LEN, f->nonce, f->run_id,
                                  mac_bytes(mac, DR_MAC_LEN - 1)),
                   DR_EAUTH);
  assert_int_equal(dr_auth_verify(secret, SECRET_LEN, f->nonce, f->run_id,
                                  mac_bytes(mac, DR_MAC_LEN + 1)),
                   DR_EAUTH);
  assert_int_equal(dr_auth_verify(secret, SECRET_LEN, f->nonce, f->run_id,
                                  mac_bytes(mac, 0)),
                   DR_EAUTH);
  mac[7] ^= 0x80;
  assert_int_equal(dr_auth_verify(secret, SECRET_LEN, f->nonce, f->run_id,
                                  mac_bytes(mac, DR_MAC_LEN)),
                   DR_EAUTH);
}

/* ---- loading the secret -------------------------------------------------- */

typedef struct {
  char dir[PATH_MAX];
  char path[PATH_MAX + 16];
} dir_fixture_t;

static int dir_setup(void **state) {
  dir_fixture_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  const char *tmp = getenv("TMPDIR");
  snprintf(f->dir, sizeof(f->dir), "%s/dr_auth_XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(f->dir) == NULL)
    return -1;
  snprintf(f->path, sizeof(f->path), "%s/secret", f->dir);
  if (unsetenv("DDPRUN_SECRET") != 0)
    return -1;
  *state = f;
  return 0;
}

static int dir_teardown(void **state) {
  dir_fixture_t *f = *state;
  unlink(f->path);
  rmdir(f->dir);
  unsetenv("DDPRUN_SECRET");
  free(f);
  return 0;
}

static void write_file(const char *path, const void *p, size_t n) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(p, 1, n, fp), n);
  assert_int_equal(fclose(fp), 0);
}

static void expect_secret(const char *path, const char *want) {
  uint8_t *s = NULL;
  size_t n = 0;
  assert_int_equal(dr_auth_secret_load(path, &s, &n), 0);
  assert_non_null(s);
  assert_int_equal(n, strlen(want));
  assert_memory_equal(s, want, n);
  dr_auth_secret_free(&s, n);
  assert_null(s);
}

static void expect_load_error(const char *path, int want) {
  uint8_t *s = (uint8_t *)"sentinel";
  size_t n = 99;
  assert_int_equal(dr_auth_secret_load(path, &s, &n), want);
  assert_null(s);
  assert_int_equal(n, 0);
}

static void test_load_file_strips_newlines(void **state) {
  dir_fixture_t *f = *state;
  write_file(f->path, "s3cret\n", 7);
  expect_secret(f->path, "s3cret");
  write_file(f->path, "s3cret\r\n\n", 9);
  expect_secret(f->path, "s3cret");
  write_file(f->path, "no newline", 10);
  expect_secret(f->path, "no newline");
  /* Only trailing newlines go; inner ones are part of the secret. */
  write_file(f->path, "a\nb\n", 4);
  expect_secret(f->path, "a\nb");
}

static void test_file_wins_over_env(void **state) {
  dir_fixture_t *f = *state;
  assert_int_equal(setenv("DDPRUN_SECRET", "from-env", 1), 0);
  write_file(f->path, "from-file\n", 10);
  expect_secret(f->path, "from-file");
}

static void test_load_env(void **state) {
  assert_int_equal(setenv("DDPRUN_SECRET", "from-env", 1), 0);
  expect_secret(NULL, "from-env");
  expect_secret("", "from-env");
}

static void test_no_source(void **state) {
  uint8_t *s = (uint8_t *)"sentinel";
  size_t n = 99;
  assert_int_equal(dr_auth_secret_load(NULL, &s, &n), 0);
  assert_null(s);
  assert_int_equal(n, 0);
}

static void test_missing_file(void **state) {
  dir_fixture_t *f = *state;
  expect_load_error(f->path, -ENOENT);
}

static void test_empty_secret(void **state) {
  dir_fixture_t *f = *state;
  write_file(f->path, "", 0);
  expect_load_error(f->path, DR_EBADARG);
  write_file(f->path, "\n", 1);
  expect_load_error(f->path, DR_EBADARG);
  assert_int_equal(setenv("DDPRUN_SECRET", "", 1), 0);
  expect_load_error(NULL, DR_EBADARG);
}

static void test_oversized_secret(void **state) {
  dir_fixture_t *f = *state;
  static char big[4097];
  memset(big, 'x', sizeof(big));
  write_file(f->path, big, 4096);
  uint8_t *s = NULL;
  size_t n = 0;
  assert_int_equal(dr_auth_secret_load(f->path, &s, &n), 0);
  assert_int_equal(n, 4096);
  dr_auth_secret_free(&s, n);
  write_file(f->path, big, sizeof(big));
  expect_load_error(f->path, DR_EBADARG);
}

int main(void) {
  const struct CMUnitTest mac_tests[] = {
      cmocka_unit_test(test_mac_verifies),
      cmocka_unit_test(test_mac_is_deterministic),
      cmocka_unit_test(test_wrong_secret),
      cmocka_unit_test(test_wrong_nonce),
      cmocka_unit_test(test_wrong_run_id),
      cmocka_unit_test(test_wrong_mac),
  };
  const struct CMUnitTest load_tests[] = {
      cmocka_unit_test_setup_teardown(test_load_file_strips_newlines,
                                      dir_setup, dir_teardown),
      cmocka_unit_test_setup_teardown(test_file_wins_over_env, dir_setup,
                                      dir_teardown),
      cmocka_unit_test_setup_teardown(test_load_env, dir_setup, dir_teardown),
      cmocka_unit_test_setup_teardown(test_no_source, dir_setup, dir_teardown),
      cmocka_unit_test_setup_teardown(test_missing_file, dir_setup,
                                      dir_teardown),
      cmocka_unit_test_setup_teardown(test_empty_secret, dir_setup,
                                      dir_teardown),
      cmocka_unit_test_setup_teardown(test_oversized_secret, dir_setup,
                                      dir_teardown),
  };
  int failed = cmocka_run_group_tests(mac_tests, mac_setup, mac_teardown);
  failed += cmocka_run_group_tests(load_tests, NULL, NULL);
  return failed;
}
