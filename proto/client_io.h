/* Socket plumbing of the blocking client, internal to proto/: a monotonic
 * clock, connect with retry, and send/receive bounded by a deadline.
 *
 * Deadlines are absolute times in milliseconds on (int64_t)dr_mono_ms()'s clock.
 * Every function returns 0 or a negative code and never logs.
 */
#ifndef DR_CLIENT_IO_H
#define DR_CLIENT_IO_H

#include <stddef.h>
#include <stdint.h>

#include "mono.h"


/* now + a_ms + b_ms, saturating far below INT64_MAX. */
int64_t dr__io_deadline(int64_t a_ms, uint64_t b_ms);

/* Resolves host (name or numeric, IPv4 or IPv6) and connects to port,
 * trying every address it resolves to. Refused, unreachable and timed-out
 * attempts (and a resolver that answers "try again") are retried with
 * exponential backoff from 10 ms to 1 s until deadline_ms.
 * On success *fd is a non-blocking, close-on-exec TCP socket with
 * TCP_NODELAY set; the caller closes it.
 * Returns 0; -ETIMEDOUT when the deadline passed; -ENOENT when the host does
 * not resolve; -EADDRNOTAVAIL when the resolver rejects it otherwise; or the
 * -errno of a connect failure that no retry can fix. *last_err is the last
 * failure of an attempt (0 if none), to explain a -ETIMEDOUT.
 * The resolver itself cannot be interrupted: a slow DNS server can hold one
 * getaddrinfo() call past the deadline. */
int dr__io_connect(const char *host, uint16_t port, int64_t deadline_ms,
                   int *fd, int *last_err);

/* Sends all n_bytes, waiting for room until deadline_ms. Never raises
 * SIGPIPE. *sent is how many bytes went out, also on failure, so the
 * caller knows whether the stream still starts at a frame boundary.
 * Returns 0, -ETIMEDOUT, DR_ECLOSED (EPIPE or ECONNRESET: the peer is
 * gone) or -errno. */
int dr__io_send_all(int fd, const void *p, size_t n_bytes, int64_t deadline_ms,
                    size_t *sent);

/* Receives between 1 and cap bytes into p, waiting until deadline_ms for the
 * first. Returns 0 and *got, DR_ECLOSED at end of stream or on a reset,
 * -ETIMEDOUT or -errno. A deadline already past still takes what is readable now. */
int dr__io_recv(int fd, void *p, size_t cap, int64_t deadline_ms, size_t *got);

#endif /* DR_CLIENT_IO_H */
