/* Integration-test harness: runs ddprun-rdzv as a child process on
 * loopback and talks to it with the blocking client or with raw sockets.
 *
 * Every test runs inside a fixture (dr_h_setup / dr_h_teardown) that owns a
 * private temporary directory, the server process, the clients, the raw
 * connections and the threads the test started. Teardown releases all of
 * them on every path, including after a failed assertion: it stops the
 * server first (SIGTERM, then SIGKILL after a grace), which unblocks any
 * thread still waiting on it, joins the threads, then closes the clients.
 * The server also gets SIGKILL from the kernel if the test process dies.
 *
 * Waits are event-driven and bounded: the port file is watched with
 * inotify, the server's exit with a pidfd. Nothing here guesses a port.
 *
 * cmocka's assertions are not thread-safe: threads record results, and the
 * test thread asserts after joining them.
 */
#ifndef DR_HARNESS_H
#define DR_HARNESS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "client.h"
#include "errors.h"
#include "wire.h"

#define DR_H_ADDR "127.0.0.1"
#define DR_H_RUN_ID "itest-job"
#define DR_H_MAX_CLIENTS 64
#define DR_H_MAX_RAW 16
#define DR_H_MAX_THREADS 64

/* A NULL-terminated list of strings, for server arguments and environment:
 * DR_H_ARGS("--nnodes", "2:3"). */
#define DR_H_ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- clocks ------------------------------------------------------------ */

/* CLOCK_MONOTONIC in milliseconds. */
double dr_h_now_ms(void);
/* Sleeps ms milliseconds. Only for delays that are part of a scenario (a
 * peer that arrives late), never to wait for readiness. */
void dr_h_sleep_ms(int ms);

/* ---- the server process ------------------------------------------------- */

typedef struct dr_h_server dr_h_server_t;

/* Starts ddprun-rdzv in dir with
 *   --host 127.0.0.1 --port 0 --port-file DIR/port [--rdzv-id DR_H_RUN_ID]
 *   [--log-level info] ARGS...
 * (the bracketed ones only when args does not give them), stdout and
 * stderr to DIR/server.log, and the test's environment without
 * DDPRUN_SECRET plus env ("K=V", may be NULL). Waits up to 15 s for the
 * port file. Returns 0 and *out, or a negative code with a reason printed
 * to stderr (exec failure, early exit with its log, timeout). */
int dr_h_server_start(const char *dir, const char *const *args,
                      const char *const *env, dr_h_server_t **out);

uint16_t dr_h_server_port(const dr_h_server_t *s);
const char *dr_h_server_run_id(const dr_h_server_t *s);
pid_t dr_h_server_pid(const dr_h_server_t *s);
const char *dr_h_server_log_path(const dr_h_server_t *s);

/* Waits up to timeout_ms for the server to exit on its own. Returns 0 and
 * its waitpid() status, or -ETIMEDOUT. */
int dr_h_server_wait(dr_h_server_t *s, int timeout_ms, int *status);

/* Stops the server (SIGTERM, SIGKILL after grace_ms), reaps it and frees
 * *s; sets *s to NULL. Returns 0, or -1 when the server misbehaved: it
 * needed SIGKILL, died of a signal we did not send, or its log holds a
 * sanitizer report. The reason goes to stderr. NULL is fine. */
int dr_h_server_stop(dr_h_server_t **s, int grace_ms);

/* 1 when the server's log contains needle, waiting up to timeout_ms for it
 * to appear; 0 otherwise. */
int dr_h_log_contains(const dr_h_server_t *s, const char *needle,
                      int timeout_ms);

/* Prints the last max_lines lines of a server log to stderr. */
void dr_h_log_dump(const char *log_path, int max_lines);

/* Describes a waitpid() status: "exited with code 3", "killed by signal
 * SIGSEGV (core dumped)". Returns buf. */
const char *dr_h_status_str(int status, char *buf, size_t n_bytes);

/* ---- raw connections ---------------------------------------------------- */

/* A socket with a receive buffer, for speaking the protocol by hand. */
typedef struct {
  int fd;
  size_t len;  /* bytes in buf */
  size_t drop; /* size of the frame handed out last, dropped next call */
  uint8_t buf[65536 + DR_FRAME_HDR_LEN];
} dr_h_raw_t;

/* Connects to 127.0.0.1:port. 0 or -errno. */
int dr_h_raw_connect(dr_h_raw_t *r, uint16_t port);
/* Sends all of p. 0 or -errno (no SIGPIPE). */
int dr_h_raw_send(dr_h_raw_t *r, const void *p, size_t n_bytes);
/* Sends the frames encoded in b and empties it. 0, b's encoding error,
 * or -errno. */
int dr_h_raw_send_buf(dr_h_raw_t *r, dr_buf_t *b);
/* Receives one frame within timeout_ms. *msg borrows from r until the next
 * call. Returns 0, -ETIMEDOUT, DR_ECLOSED (EOF or reset), a decode error,
 * or -errno. */
int dr_h_raw_recv(dr_h_raw_t *r, int timeout_ms, dr_msg_t *msg);
/* Reads and discards frames until the peer closes. Returns 0 once closed,
 * -ETIMEDOUT when still open after timeout_ms. */
int dr_h_raw_wait_closed(dr_h_raw_t *r, int timeout_ms);
void dr_h_raw_close(dr_h_raw_t *r);

/* ---- clients ------------------------------------------------------------ */

/* Opens a client of s presenting host as its host name; run_id NULL means
 * the server's. Connect timeout 5 s, I/O timeout 10 s. Same returns as
 * dr_client_open; errbuf may be NULL. */
int dr_h_client_open(const dr_h_server_t *s, const char *run_id,
                     const char *host, const void *secret, size_t secret_len,
                     dr_client_t **out, char *errbuf, size_t errbuf_len);

/* Fills a JOIN for the server's run id. Strings are borrowed. */
void dr_h_join_fill(dr_join_t *j, const char *run_id, const char *host,
                    const char *addr, uint32_t nproc, uint64_t node_rank,
                    uint32_t master_port_offer, const char *bootstrap_offer);

/* An order the server pushed (RESTART or STOP), copied out of the frame. */
typedef struct {
  uint8_t type;           /* DR_MSG_RESTART or DR_MSG_STOP; 0 = none yet */
  uint64_t gen;           /* RESTART */
  uint32_t restart_count; /* RESTART */
  int exit_code;          /* STOP */
  char reason[2048]; /* room for a failure's account with its whole
                        message (DR_FAILURE_MSG_MAX) */
  double t_ms; /* when it was received (dr_h_now_ms) */
} dr_h_order_t;

/* Copies a RESTART or STOP. DR_EUNEXPECTED for other types. */
int dr_h_order_from_msg(const dr_msg_t *m, dr_h_order_t *o);

/* One agent's side of a wait for orders: see dr_h_agents_run. */
typedef struct {
  dr_client_t *c;
  uint64_t gen;   /* generation its heartbeats carry */
  int silent;     /* 1: sends no heartbeats and expects no order */
  double last_hb; /* when its last heartbeat was sent */
  int rc;         /* error of a failed heartbeat or receive, else 0 */
  int server_hbs; /* HEARTBEATs the server pushed to it */
  dr_h_order_t order;
} dr_h_agent_t;

/* Drives n agents until every non-silent one has received an order or
 * timeout_ms passes: each non-silent agent sends HEARTBEAT(gen) every
 * hb_every_ms (0: never); the server's heartbeats are counted and
 * skipped. Returns 0
 * when every non-silent agent got an order, -ETIMEDOUT, or the first
 * agent's error. */
int dr_h_agents_run(dr_h_agent_t *a, size_t n, int hb_every_ms, int timeout_ms);

/* Checks that nothing but heartbeats was pushed to c so far: a CHECK round
 * trip first, so every frame the server sent before its reply is already
 * in. Returns 0 when none, 1 (and *o) when an order was pushed, or an
 * error. */
int dr_h_no_order(dr_client_t *c, dr_h_order_t *o);

/* ---- the fixture -------------------------------------------------------- */

typedef struct {
  dr_client_t *c;
  dr_join_t j;
  int wait_ms;
  int rc;
  dr_assignment_t a;
  char errmsg[512];
  double t_sent; /* just before the JOIN was sent */
  double t_done; /* when the answer came */
  int done;      /* guarded by the fixture's lock */
} dr_h_join_t;

typedef struct {
  char dir[256];
  char log_path[300];
  dr_h_server_t *srv;
  dr_client_t *clients[DR_H_MAX_CLIENTS];
  size_t n_clients;
  dr_h_raw_t *raws[DR_H_MAX_RAW];
  size_t n_raws;
  pthread_t threads[DR_H_MAX_THREADS];
  size_t n_threads;
  size_t n_joined;
  dr_h_join_t *joins[DR_H_MAX_THREADS];
  size_t n_joins;
  pthread_mutex_t lock; /* guards dr_h_join_t.done */
  pthread_cond_t cond;  /* signalled when a join is done */
  dr_buf_t buf;         /* scratch encoding buffer for raw frames */
  int passed;           /* set by DR_H_TEST when the body returns */
} dr_h_fixture_t;

/* cmocka fixtures. Teardown dumps the server's log when the test failed
 * and fails itself when the server misbehaved (see dr_h_server_stop). */
int dr_h_setup(void **state);
int dr_h_teardown(void **state);

/* Defines a cmocka test whose body receives the fixture as fx. */
#define DR_H_TEST(name)                                                        \
  static void name##_body(dr_h_fixture_t *fx);                                 \
  static void name(void **state) {                                             \
    dr_h_fixture_t *fx_ = *state;                                              \
    name##_body(fx_);                                                          \
    fx_->passed = 1;                                                           \
  }                                                                            \
  static void name##_body(dr_h_fixture_t *fx)

/* Starts the fixture's server (asserts success). */
void dr_h_start(dr_h_fixture_t *fx, const char *const *args,
                const char *const *env);

/* Writes a file in the fixture's directory and returns its path (static
 * storage, valid until the next call). */
const char *dr_h_write_file(dr_h_fixture_t *fx, const char *name,
                            const char *content);

/* Opens a client owned by the fixture (asserts success). */
dr_client_t *dr_h_open(dr_h_fixture_t *fx, const char *host);
dr_client_t *dr_h_open_secret(dr_h_fixture_t *fx, const char *host,
                              const char *secret);
/* Closes one of the fixture's clients before teardown. */
void dr_h_close(dr_h_fixture_t *fx, dr_client_t **c);

/* Connects a raw socket owned by the fixture (asserts success). */
dr_h_raw_t *dr_h_raw(dr_h_fixture_t *fx);

/* A raw connection of the fixture past its handshake (HELLO with the
 * server's run id and host, WELCOME; no secret), asserted. */
dr_h_raw_t *dr_h_hello(dr_h_fixture_t *fx, const char *host);

/* The next frame of type want within timeout_ms, skipping heartbeats (and,
 * when want is not it, ROUND_STATUS): 0 and *m, DR_EUNEXPECTED for another
 * type, or dr_h_raw_recv's error. */
int dr_h_recv_type(dr_h_raw_t *r, uint8_t want, int timeout_ms,
                   dr_msg_t *m);

/* Starts fn(arg) on a thread the fixture joins at teardown at the latest.
 * Returns 0 or -errno. */
int dr_h_thread(dr_h_fixture_t *fx, void *(*fn)(void *), void *arg);
/* Joins every thread started so far. */
void dr_h_join_threads(dr_h_fixture_t *fx);

/* Starts dr_client_join(c, j, wait_ms) on a thread; the result lands in
 * the returned record (owned by the fixture) once dr_h_join_threads()
 * returned. j's strings must outlive the thread. */
dr_h_join_t *dr_h_join_async(dr_h_fixture_t *fx, dr_client_t *c,
                             const dr_join_t *j, int wait_ms);

/* Waits up to timeout_ms for the first of n asynchronous joins to finish
 * and returns it (its fields may then be read), or NULL. */
dr_h_join_t *dr_h_join_wait_any(dr_h_fixture_t *fx, dr_h_join_t *const *jts,
                                size_t n, int timeout_ms);

#endif /* DR_HARNESS_H */
