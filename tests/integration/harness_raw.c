/* The harness' raw connections: a socket to the server with a receive
 * buffer, for speaking the protocol by hand. See harness.h. */
#include "harness.h"
#include "harness_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int dr_h_raw_connect(dr_h_raw_t *r, uint16_t port) {
  r->len = 0;
  r->drop = 0;
  r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r->fd < 0)
    return -errno;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, DR_H_ADDR, &sa.sin_addr);
  int one = 1;
  setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int rc;
  do
    rc = connect(r->fd, (struct sockaddr *)&sa, sizeof(sa));
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    rc = -errno;
    close(r->fd);
    r->fd = -1;
    return rc;
  }
  return 0;
}

int dr_h_raw_send(dr_h_raw_t *r, const void *p, size_t n_bytes) {
  const uint8_t *b = p;
  while (n_bytes > 0) {
    ssize_t w = send(r->fd, b, n_bytes, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -errno;
    b += w;
    n_bytes -= (size_t)w;
  }
  return 0;
}

int dr_h_raw_send_buf(dr_h_raw_t *r, dr_buf_t *b) {
  int rc = b->err != 0 ? b->err : dr_h_raw_send(r, b->data, b->len);
  dr_buf_reset(b);
  return rc;
}

int dr_h_raw_recv(dr_h_raw_t *r, int timeout_ms, dr_msg_t *msg) {
  double deadline = dr_h_now_ms() + timeout_ms;
  if (r->drop > 0) {
    memmove(r->buf, r->buf + r->drop, r->len - r->drop);
    r->len -= r->drop;
    r->drop = 0;
  }
  dr_limits_t lim = dr_limits_default();
  dr_decoder_t d;
  dr_decoder_init(&d, &lim);
  d.authed = 1;
  for (;;) {
    if (r->len > 0) {
      size_t consumed = 0, need = 0;
      int err = 0;
      dr_decode_status_t st =
          dr_decode(&d, r->buf, r->len, msg, &consumed, &need, &err);
      if (st == DR_DECODE_OK) {
        r->drop = consumed;
        return 0;
      }
      if (st == DR_DECODE_ERROR)
        return err;
      if (need > sizeof(r->buf))
        return DR_ETOOBIG;
    }
    struct pollfd p = {r->fd, POLLIN, 0};
    int pr = poll(&p, 1, dr__h_ms_left(deadline));
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0)
      return -errno;
    if (pr == 0)
      return -ETIMEDOUT;
    ssize_t n = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return DR_ECLOSED;
    if (n < 0)
      return -errno;
    r->len += (size_t)n;
  }
}

int dr_h_raw_wait_closed(dr_h_raw_t *r, int timeout_ms) {
  double deadline = dr_h_now_ms() + timeout_ms;
  uint8_t sink[4096];
  for (;;) {
    struct pollfd p = {r->fd, POLLIN, 0};
    int pr = poll(&p, 1, dr__h_ms_left(deadline));
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      return -ETIMEDOUT;
    ssize_t n = recv(r->fd, sink, sizeof(sink), 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return 0;
    if (n < 0)
      return -errno;
  }
}

void dr_h_raw_close(dr_h_raw_t *r) {
  if (r->fd >= 0)
    close(r->fd);
  r->fd = -1;
}
