/* Shared-secret authentication: challenge-response over HMAC-SHA256.
 *
 * The server sends a random nonce in WELCOME; the client answers with
 *   mac = HMAC-SHA256(key = secret, msg = "ddprun-auth-v1" || nonce || run_id)
 * The secret never travels. The server compares in constant time.
 * Built on libsodium. Never logs; the secret is never copied anywhere but
 * the caller's buffer.
 */
#ifndef DR_AUTH_H
#define DR_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* Initialises libsodium; safe to call more than once. 0 or -ENOSYS. */
int dr_auth_init(void);

/* Fills nonce[DR_NONCE_LEN] with random bytes. */
void dr_auth_nonce(uint8_t nonce[DR_NONCE_LEN]);

/* Computes the client's answer into mac[DR_MAC_LEN]. */
void dr_auth_mac(const uint8_t *secret, size_t secret_len,
                 const uint8_t nonce[DR_NONCE_LEN], dr_bytes_t run_id,
                 uint8_t mac[DR_MAC_LEN]);

/* 0 when mac is the right answer, DR_EAUTH otherwise (also for a mac of the
 * wrong length). Constant time in the mac's contents. */
int dr_auth_verify(const uint8_t *secret, size_t secret_len,
                   const uint8_t nonce[DR_NONCE_LEN], dr_bytes_t run_id,
                   dr_bytes_t mac);

/* 1 when the n bytes at a and b are the same; constant time in their
 * contents (for tokens). */
int dr_auth_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* Reads a secret: from the file at path when path is non-NULL and not
 * empty, else from the environment variable DDPRUN_SECRET. Trailing
 * newlines of a file are dropped. On success *out is a malloc'd buffer the
 * caller wipes and frees with dr_auth_secret_free(); *out is NULL and
 * *out_len 0 when neither source is set. Returns 0, -errno on a read error,
 * DR_EBADARG for an empty secret or one over 4096 bytes. */
int dr_auth_secret_load(const char *path, uint8_t **out, size_t *out_len);
void dr_auth_secret_free(uint8_t **secret, size_t len);

#endif /* DR_AUTH_H */
