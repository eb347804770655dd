/* One connection of the checkpoint peers, blocking, for the threads that
 * move checkpoints (never the agent's loop): frames of wire.h both ways,
 * every wait bounded by a deadline and ended at once when the plane stops.
 *
 * Each wait (a connect, room to send, bytes to read, a pause of the pace)
 * polls the socket and the plane's stop descriptor together: no progress
 * for timeout_ms is -ETIMEDOUT, the stop descriptor readable is
 * -ECANCELED. Never logs.
 */
#ifndef DR_CKPT_IO_H
#define DR_CKPT_IO_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

typedef struct {
  int fd;
  int stop_fd;    /* readable once the plane stops; -1: none */
  int timeout_ms; /* the longest wait without progress */
  dr_decoder_t dec;
  uint8_t *rbuf;  /* bytes read, not yet consumed; the last frame handed
                     out occupies [0, rskip) until the next receive */
  size_t rlen, rcap, rskip;
  dr_buf_t out;   /* the frames to send next (dr_ckpt_send) */
  char peer[96];  /* "ADDR:PORT", for messages */
} dr_ckpt_conn_t;

/* The limits of a peer connection: frames of a DATA chunk and a little
 * after the handshake, 4 KiB before; short strings and blobs. */
dr_limits_t dr_ckpt_limits(void);

/* Takes over fd (a connected TCP socket; made non-blocking here). */
void dr_ckpt_conn_init(dr_ckpt_conn_t *c, int fd, int stop_fd, int timeout_ms);

/* Connects to host:port, one attempt per address it resolves to, each
 * within timeout_ms: 0 and *c, or -ECONNREFUSED, -ETIMEDOUT, -ECANCELED,
 * -ENOENT (the name does not resolve), -errno. */
int dr_ckpt_connect(const char *host, uint16_t port, int stop_fd,
                    int timeout_ms, dr_ckpt_conn_t *c);

/* Sends every frame in c->out, then empties it. 0, -ETIMEDOUT,
 * -ECANCELED, DR_ECLOSED (the peer is gone) or -errno. */
int dr_ckpt_send(dr_ckpt_conn_t *c);

/* The next frame: 0 and *m (borrowed until the next call), or the
 * decoder's code (DR_EMAGIC, DR_ETOOBIG, ...: the stream is unusable),
 * DR_ECLOSED, -ETIMEDOUT, -ECANCELED, -errno. */
int dr_ckpt_recv(dr_ckpt_conn_t *c, dr_msg_t *m);

/* A printable sample of the bytes last received (for a message about a
 * peer that sent garbage) into out[n]. */
char *dr_ckpt_conn_sample(const dr_ckpt_conn_t *c, char *out, size_t n);

/* Waits ns nanoseconds, or less when stop_fd becomes readable (then
 * -ECANCELED). */
int dr_ckpt_pause(int stop_fd, uint64_t ns);

/* After an ERROR sent in the middle of the peer's stream: shuts this
 * side's writing and reads (and drops) what the peer still sends, until
 * it closes or for ms at most, so that the ERROR reaches it rather than
 * being lost to a reset. */
void dr_ckpt_linger(dr_ckpt_conn_t *c, int ms);

/* Closes the socket and frees the buffers. */
void dr_ckpt_conn_close(dr_ckpt_conn_t *c);

#endif /* DR_CKPT_IO_H */
