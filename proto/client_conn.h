/* The client's connection core, internal to proto/: the client object, its
 * receive buffer, the queue of server pushes and request/reply matching.
 * client.c builds the public calls on it.
 *
 * Push queue: q[0..n_q), oldest first, never more than
 * DR_CLIENT_MAX_PUSHES (the rules are in client.h): a server that pushes
 * without pause costs a bounded queue, not memory without end.
 *
 * Receive buffer: rbuf[0..rlen) holds bytes read but not yet consumed. The
 * frame last handed out occupies rbuf[0..rskip) and stays there until the
 * next read, because the caller's dr_msg_t borrows from it. The buffer
 * grows only to what dr_decode() asks for, which the limits cap.
 */
#ifndef DR_CLIENT_CONN_H
#define DR_CLIENT_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "session.h"
#include "wire.h"
#include "mono.h"

/* A frame the server pushed while a reply was awaited: an owned copy. */
typedef struct {
  uint8_t type;
  size_t len;
  uint8_t data[];
} dr__push_t;

struct dr_client {
  int fd;
  int broken; /* 0, or the code that left the stream unusable */
  uint32_t last_req;
  int io_timeout_ms;
  dr_decoder_t dec;
  uint8_t *rbuf;
  size_t rlen, rcap, rskip;
  dr_buf_t wbuf; /* the request being sent */
  dr__push_t *q[DR_CLIENT_MAX_PUSHES];
  size_t n_q;
  dr__push_t *popped; /* what the last dr_client_recv() message borrows */
  dr_sess_t sess;     /* the protocol: handshake, JOIN, RESUME */
  char errmsg[1024];
};

/* Starts a call: clears the last error message and wbuf, and returns a
 * fresh non-zero request id. DR_EBADARG for a NULL client. */
int dr__client_begin(dr_client_t *c, uint32_t *id);

/* Copies an error message (truncated to fit, NUL-terminated). */
void dr__client_set_errmsg(dr_client_t *c, const void *p, size_t n_bytes);

/* Sends the frame in wbuf before deadline_ms. The frame must pass the
 * client's own decoder (DR_ETOOBIG otherwise): a field over the limits
 * would only get the connection closed by the server. */
int dr__client_send(dr_client_t *c, int64_t deadline_ms);

/* Sends wbuf (request id) and waits up to io timeout + wait_ms for the
 * reply of type want, queueing pushes that come first and dropping late
 * replies to earlier requests. The deadline holds however fast frames
 * come: it is checked after every frame, not only when the socket has
 * nothing to read. An ERROR reply returns its code and fills errmsg;
 * another type returns DR_EUNEXPECTED. *m borrows from the client until
 * its next call. */
int dr__client_request(dr_client_t *c, uint32_t id, uint64_t wait_ms,
                       uint8_t want, dr_msg_t *m);
/* The same with an absolute deadline ((int64_t)dr_mono_ms() clock). */
int dr__client_request_until(dr_client_t *c, uint32_t id, int64_t deadline,
                             uint8_t want, dr_msg_t *m);

/* The next pushed message: from the queue, else from the socket before
 * deadline_ms. Same return codes as dr_client_recv(). */
int dr__client_next_push(dr_client_t *c, int64_t deadline_ms, dr_msg_t *m);

/* Frees the buffers and the queue; does not close fd or free c. */
void dr__client_release(dr_client_t *c);

#endif /* DR_CLIENT_CONN_H */
