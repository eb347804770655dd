/* The scripted fake server of the client's tests. See fake_server.h. */
#include "fake_server.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void srv_fail(fake_t *s, int line, const char *what) {
  if (s->failure[0] == '\0')
    snprintf(s->failure, sizeof(s->failure), "fake server line %d: %s", line,
             what);
}

static int srv_wait(fake_t *s, int fd, short events) {
  struct pollfd p = {.fd = fd, .events = events, .revents = 0};
  int n;
  do
    n = poll(&p, 1, SRV_WAIT_MS);
  while (n < 0 && errno == EINTR);
  return n == 1 ? 0 : -1;
}

/* 0 when n bytes arrived, 1 at EOF before any, -1 on error or timeout. */
static int srv_recv_exact(fake_t *s, uint8_t *p, size_t n) {
  size_t off = 0;
  while (off < n) {
    if (srv_wait(s, s->conn, POLLIN) != 0)
      return -1;
    size_t want = n - off;
    if (s->read_chunk > 0 && want > s->read_chunk)
      want = s->read_chunk;
    ssize_t r = recv(s->conn, p + off, want, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return r == 0 && off == 0 ? 1 : -1;
    off += (size_t)r;
  }
  return 0;
}

/* Reads one frame; *m borrows from the server's buffer until the next. */
int srv_read(fake_t *s, dr_msg_t *m) {
  uint8_t hdr[DR_FRAME_HDR_LEN];
  int rc = srv_recv_exact(s, hdr, sizeof(hdr));
  if (rc != 0)
    return rc;
  size_t total = DR_FRAME_HDR_LEN + ((size_t)hdr[8] << 24 |
                                     (size_t)hdr[9] << 16 |
                                     (size_t)hdr[10] << 8 | hdr[11]);
  if (total > DR_FRAME_HDR_LEN + (64u << 20))
    return -1;
  if (total > s->rcap) {
    uint8_t *p = realloc(s->rbuf, total);
    if (p == NULL)
      return -1;
    s->rbuf = p;
    s->rcap = total;
  }
  memcpy(s->rbuf, hdr, sizeof(hdr));
  if (srv_recv_exact(s, s->rbuf + DR_FRAME_HDR_LEN,
                     total - DR_FRAME_HDR_LEN) != 0)
    return -1;
  size_t consumed, need;
  int err;
  if (dr_decode(&s->dec, s->rbuf, total, m, &consumed, &need, &err) !=
      DR_DECODE_OK)
    return -1;
  s->last_id = m->req_id;
  return 0;
}

/* Reads one frame of type want with a fresh non-zero request id. */
int srv_expect(fake_t *s, uint8_t want, dr_msg_t *m, int line) {
  uint32_t prev = s->last_id;
  if (srv_read(s, m) != 0) {
    srv_fail(s, line, "no frame from the client");
    return -1;
  }
  if (m->type != want) {
    srv_fail(s, line, dr_msg_name(m->type));
    return -1;
  }
  if (m->req_id == 0 || m->req_id == prev) {
    srv_fail(s, line, "request id is 0 or reused");
    return -1;
  }
  return 0;
}

int srv_send_raw(fake_t *s, const uint8_t *p, size_t n) {
  size_t off = 0;
  while (off < n) {
    size_t step = s->bytewise ? 1 : n - off;
    ssize_t w = send(s->conn, p + off, step, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && errno == EAGAIN) {
      if (srv_wait(s, s->conn, POLLOUT) != 0)
        return -1;
      continue;
    }
    if (w <= 0)
      return -1;
    off += (size_t)w;
  }
  return 0;
}

/* Sends what the script encoded into s->out. */

/* Waits for the client to close its end. */
void srv_wait_eof(fake_t *s) {
  uint8_t junk[4096];
  for (;;) {
    SRV_CHECK(s, srv_wait(s, s->conn, POLLIN) == 0);
    ssize_t r = recv(s->conn, junk, sizeof(junk), 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return;
  }
}

int bytes_eq(dr_bytes_t b, const void *p, size_t n) {
  return b.len == n && (n == 0 || memcmp(b.p, p, n) == 0);
}

int str_eq(dr_bytes_t b, const char *s) {
  return bytes_eq(b, s, strlen(s));
}

/* The fake server's clock stamp in its WELCOME. */
/* HELLO from job7/node-a, then WELCOME without auth. */
int srv_hello(fake_t *s, int line) {
  dr_msg_t m;
  if (srv_expect(s, DR_MSG_HELLO, &m, line) != 0)
    return -1;
  if (!str_eq(m.f[0].b, "job7") || !str_eq(m.f[1].b, "node-a")) {
    srv_fail(s, line, "HELLO fields");
    return -1;
  }
  dr_buf_reset(&s->out);
  if (dr_enc_welcome(&s->out, m.req_id, 0, dr_str(NULL), FAKE_TX_US) != 0 ||
      srv_send_raw(s, s->out.data, s->out.len) != 0) {
    srv_fail(s, line, "WELCOME not sent");
    return -1;
  }
  return 0;
}

static void *srv_main(void *arg) {
  fake_t *s = arg;
  if (s->listen_delay_ms > 0) {
    /* Simulates a server that comes up late: the client must retry. */
    struct timespec ts = {s->listen_delay_ms / 1000,
                          (long)(s->listen_delay_ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
    if (listen(s->lfd, 8) != 0) {
      srv_fail(s, __LINE__, "listen");
      return NULL;
    }
  }
  if (srv_wait(s, s->lfd, POLLIN) != 0) {
    srv_fail(s, __LINE__, "no client connected");
    return NULL;
  }
  s->conn = accept(s->lfd, NULL, NULL);
  if (s->conn < 0) {
    srv_fail(s, __LINE__, "accept");
    return NULL;
  }
  s->script(s);
  close(s->conn);
  s->conn = -1;
  return NULL;
}

/* Binds a loopback socket to port 0 (family AF_INET or AF_INET6). Returns
 * the socket and *port, or -1. */
int bind_loopback(int family, uint16_t *port) {
  struct sockaddr_storage ss;
  socklen_t len;
  memset(&ss, 0, sizeof(ss));
  if (family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  }
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (bind(fd, (struct sockaddr *)&ss, len) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                   : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

/* Starts the fake server. With listen_delay_ms set, the port is bound (so
 * no one else takes it) but refuses connections until the delay passes. */
int fake_start_family(fake_t *s, int family, script_fn script) {
  s->lfd = bind_loopback(family, &s->port);
  if (s->lfd < 0)
    return -1;
  if (s->listen_delay_ms == 0 && listen(s->lfd, 8) != 0)
    return -1;
  s->script = script;
  assert_int_equal(pthread_create(&s->thread, NULL, srv_main, s), 0);
  s->running = 1;
  return 0;
}

void fake_start(fake_t *s, script_fn script) {
  assert_int_equal(fake_start_family(s, AF_INET, script), 0);
}

/* Closes the client, joins the server, and fails on the script's failure. */
void fake_finish(fake_t *s) {
  dr_client_close(&s->client);
  if (s->running) {
    pthread_join(s->thread, NULL);
    s->running = 0;
  }
  if (s->failure[0] != '\0')
    fail_msg("%s", s->failure);
}

int fake_setup(void **state) {
  fake_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return -1;
  s->lfd = s->conn = -1;
  dr_decoder_init(&s->dec, NULL);
  s->dec.authed = 1;
  dr_buf_init(&s->out);
  *state = s;
  return 0;
}

int fake_teardown(void **state) {
  fake_t *s = *state;
  dr_client_close(&s->client);
  if (s->running)
    pthread_join(s->thread, NULL);
  if (s->lfd >= 0)
    close(s->lfd);
  free(s->rbuf);
  dr_buf_free(&s->out);
  free(s);
  return 0;
}

