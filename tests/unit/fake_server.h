/* The scripted fake server of the client's tests (test_client.c).
 *
 * The fake server is a thread with a socket bound to port 0 on loopback; it
 * accepts one connection and runs the test's script, which reads the
 * client's frames and writes the replies. The thread never calls cmocka
 * (its asserts would longjmp across threads): it records the first
 * failure, and the test checks it after joining the thread (fake_finish).
 * Every wait of the script is bounded (SRV_WAIT_MS), so a broken client
 * fails the test instead of hanging it.
 *
 * A script uses the SRV_* macros, which record a failure and return from
 * the script. */
#ifndef DR_FAKE_SERVER_H
#define DR_FAKE_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "wire.h"

#define SRV_WAIT_MS 10000 /* bound on every wait of the fake server */

typedef struct fake fake_t;
typedef void (*script_fn)(fake_t *s);

struct fake {
  int lfd;
  int conn;
  uint16_t port;
  int listen_delay_ms; /* > 0: listen() only after this long */
  size_t read_chunk;   /* > 0: recv() at most this much at a time */
  int bytewise;        /* send replies one byte per send() */
  int flood_stale;     /* script_flood: late replies instead of pushes */
  script_fn script;
  pthread_t thread;
  int running;
  char failure[256]; /* first failure of the script, "" if none */
  dr_decoder_t dec;
  uint8_t *rbuf;
  size_t rcap;
  dr_buf_t out;
  uint32_t last_id;     /* request id of the last frame read */
  dr_client_t *client;  /* the test's client, closed before the join */
};

/* cmocka fixtures: *state becomes a fake_t that is not yet started. */
int fake_setup(void **state);
int fake_teardown(void **state);

/* Starts the fake server on loopback of family (AF_INET or AF_INET6) with
 * script. With listen_delay_ms set, the port is bound (so no one else
 * takes it) but refuses connections until the delay passes. 0, or -1 when
 * the socket cannot be bound. */
int fake_start_family(fake_t *s, int family, script_fn script);
/* The same on AF_INET; asserts success. */
void fake_start(fake_t *s, script_fn script);
/* Closes the client, joins the server, and fails on the script's failure. */
void fake_finish(fake_t *s);

/* Binds a loopback socket to port 0 (family AF_INET or AF_INET6). Returns
 * the socket and *port, or -1. */
int bind_loopback(int family, uint16_t *port);

/* Records the script's first failure: what failed, at line. */
void srv_fail(fake_t *s, int line, const char *what);
/* Reads one frame; *m borrows from the server's buffer until the next. 0,
 * 1 at EOF before any byte, -1 on error or timeout. */
int srv_read(fake_t *s, dr_msg_t *m);
/* Reads one frame of type want with a fresh non-zero request id; else
 * records a failure at line and returns -1. */
int srv_expect(fake_t *s, uint8_t want, dr_msg_t *m, int line);
/* Sends n bytes (one byte per send() with s->bytewise). 0 or -1. */
int srv_send_raw(fake_t *s, const uint8_t *p, size_t n);
/* Waits for the client to close its end. */
void srv_wait_eof(fake_t *s);
/* HELLO from job7/node-a, then WELCOME without auth; else records a
 * failure at line and returns -1. */
int srv_hello(fake_t *s, int line);

int bytes_eq(dr_bytes_t b, const void *p, size_t n);
int str_eq(dr_bytes_t b, const char *s);

/* The fake server's clock stamp in its WELCOME. */
#define FAKE_TX_US 1000000000000000ull

/* The script's checks: each records a failure and returns from the
 * script when it does not hold. */
#define SRV_CHECK(s, cond)                                                   \
  do {                                                                       \
    if (!(cond)) {                                                           \
      srv_fail((s), __LINE__, #cond);                                        \
      return;                                                                \
    }                                                                        \
  } while (0)

#define SRV_EXPECT(s, type, m)                                               \
  do {                                                                       \
    if (srv_expect((s), (type), (m), __LINE__) != 0)                         \
      return;                                                                \
  } while (0)

/* Sends what the script encoded into s->out. */
#define SRV_SEND(s, encode)                                                  \
  do {                                                                       \
    dr_buf_reset(&(s)->out);                                                 \
    SRV_CHECK((s), (encode) == 0);                                           \
    SRV_CHECK((s), srv_send_raw((s), (s)->out.data, (s)->out.len) == 0);     \
  } while (0)

#define SRV_HELLO(s)                                                         \
  do {                                                                       \
    if (srv_hello((s), __LINE__) != 0)                                       \
      return;                                                                \
  } while (0)

#endif /* DR_FAKE_SERVER_H */
