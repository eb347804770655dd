#include "auth.h"

#include "errors.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DR_AUTH_CONTEXT "ddprun-auth-v1"
#define DR_SECRET_MAX 4096

int dr_auth_init(void) { return sodium_init() < 0 ? -ENOSYS : 0; }

void dr_auth_nonce(uint8_t nonce[DR_NONCE_LEN]) {
  randombytes_buf(nonce, DR_NONCE_LEN);
}

void dr_auth_mac(const uint8_t *secret, size_t secret_len,
                 const uint8_t nonce[DR_NONCE_LEN], dr_bytes_t run_id,
                 uint8_t mac[DR_MAC_LEN]) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, secret, secret_len);
  crypto_auth_hmacsha256_update(&st, (const uint8_t *)DR_AUTH_CONTEXT,
                                sizeof(DR_AUTH_CONTEXT) - 1);
  crypto_auth_hmacsha256_update(&st, nonce, DR_NONCE_LEN);
  crypto_auth_hmacsha256_update(&st, run_id.p, run_id.len);
  crypto_auth_hmacsha256_final(&st, mac);
  sodium_memzero(&st, sizeof(st));
}

int dr_auth_verify(const uint8_t *secret, size_t secret_len,
                   const uint8_t nonce[DR_NONCE_LEN], dr_bytes_t run_id,
                   dr_bytes_t mac) {
  uint8_t want[DR_MAC_LEN];
  if (mac.len != DR_MAC_LEN)
    return DR_EAUTH;
  dr_auth_mac(secret, secret_len, nonce, run_id, want);
  int rc = sodium_memcmp(want, mac.p, DR_MAC_LEN) == 0 ? 0 : DR_EAUTH;
  sodium_memzero(want, sizeof(want));
  return rc;
}

static int read_file(const char *path, uint8_t *buf, size_t cap,
                     size_t *n_out) {
  int fd;
  do
    fd = open(path, O_RDONLY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return -errno;
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int e = -errno;
      close(fd);
      return e;
    }
    if (r == 0)
      break;
    n += (size_t)r;
    if (n == cap) {
      close(fd);
      return DR_EBADARG; /* over DR_SECRET_MAX */
    }
  }
  close(fd);
  *n_out = n;
  return 0;
}

int dr_auth_secret_load(const char *path, uint8_t **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  uint8_t *buf = malloc(DR_SECRET_MAX + 1);
  if (buf == NULL)
    return -ENOMEM;
  size_t n = 0;
  if (path != NULL && path[0] != '\0') {
    int rc = read_file(path, buf, DR_SECRET_MAX + 1, &n);
    if (rc != 0) {
      sodium_memzero(buf, DR_SECRET_MAX + 1);
      free(buf);
      return rc;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
      n--;
  } else {
    const char *env = getenv("DDPRUN_SECRET");
    if (env == NULL) {
      free(buf);
      return 0;
    }
    n = strlen(env);
    if (n > DR_SECRET_MAX) {
      free(buf);
      return DR_EBADARG;
    }
    memcpy(buf, env, n);
  }
  if (n == 0) {
    free(buf);
    return DR_EBADARG;
  }
  *out = buf;
  *out_len = n;
  return 0;
}

void dr_auth_secret_free(uint8_t **secret, size_t len) {
  if (*secret == NULL)
    return;
  sodium_memzero(*secret, len);
  free(*secret);
  *secret = NULL;
}

int dr_auth_equal(const uint8_t *a, const uint8_t *b, size_t n) {
  return sodium_memcmp(a, b, n) == 0;
}
