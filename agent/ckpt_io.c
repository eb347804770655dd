/* A blocking connection of the checkpoint peers with a deadline on every
 * wait and the plane's stop descriptor beside it (ckpt_io.h). */
#include "ckpt_io.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"
#include "grow.h"
#include "log.h"
#include "mono.h"

dr_limits_t dr_ckpt_limits(void) {
  dr_limits_t l = dr_limits_default();
  l.max_frame_unauth = 4096;
  l.max_frame = DR_CKPT_CHUNK + 4096;
  l.max_value = DR_CKPT_CHUNK;
  l.max_blob = 4096;
  l.max_count = 16;
  return l;
}

void dr_ckpt_conn_init(dr_ckpt_conn_t *c, int fd, int stop_fd,
                       int timeout_ms) {
  memset(c, 0, sizeof(*c));
  c->fd = fd;
  c->stop_fd = stop_fd;
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
  dr_limits_t lim = dr_ckpt_limits();
  dr_decoder_init(&c->dec, &lim);
  dr_buf_init(&c->out);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  snprintf(c->peer, sizeof(c->peer), "?");
  struct sockaddr_storage sa;
  socklen_t len = sizeof(sa);
  char host[64], port[16];
  if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0 &&
      getnameinfo((struct sockaddr *)&sa, len, host, sizeof(host), port,
                  sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    /* An IPv4 peer of a dual-stack socket reads as itself. */
    const char *h = strncmp(host, "::ffff:", 7) == 0 && strchr(host, '.')
                        ? host + 7
                        : host;
    int v6 = strchr(h, ':') != NULL;
    snprintf(c->peer, sizeof(c->peer), "%s%s%s:%s", v6 ? "[" : "", h,
             v6 ? "]" : "", port);
  }
}

/* Waits for events on fd, or the stop descriptor, up to timeout_ms. */
static int wait_for(int fd, short events, int stop_fd, int timeout_ms) {
  struct pollfd p[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
  for (;;) {
    int n = poll(p, stop_fd >= 0 ? 2 : 1, timeout_ms);
    if (n < 0 && errno == EINTR)
      continue; /* a signal: the wait starts over, bounded as before */
    if (n < 0)
      return -errno;
    if (n == 0)
      return -ETIMEDOUT;
    if (stop_fd >= 0 && (p[1].revents & POLLIN))
      return -ECANCELED;
    return 0;
  }
}

int dr_ckpt_pause(int stop_fd, uint64_t ns) {
  if (ns == 0)
    return 0;
  uint64_t ms = (ns + 999999) / 1000000;
  struct pollfd p = {stop_fd, POLLIN, 0};
  int n;
  do
    n = poll(&p, stop_fd >= 0 ? 1 : 0, ms > 60000 ? 60000 : (int)ms);
  while (n < 0 && errno == EINTR);
  return n > 0 ? -ECANCELED : 0;
}

static int connect_one(const struct addrinfo *ai, int stop_fd, int timeout_ms,
                       int *out) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                  0);
  if (fd < 0)
    return -errno;
  int rc = 0;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    rc = errno == EINPROGRESS ? 0 : -errno;
    if (rc == 0)
      rc = wait_for(fd, POLLOUT, stop_fd, timeout_ms);
    int e = 0;
    socklen_t len = sizeof(e);
    if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
      e = errno;
    if (rc == 0 && e != 0)
      rc = -e;
  }
  if (rc != 0) {
    close(fd);
    return rc;
  }
  *out = fd;
  return 0;
}

int dr_ckpt_connect(const char *host, uint16_t port, int stop_fd,
                    int timeout_ms, dr_ckpt_conn_t *c) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  char ps[16];
  snprintf(ps, sizeof(ps), "%u", port);
  int g = getaddrinfo(host, ps, &hints, &res);
  if (g != 0)
    return g == EAI_SYSTEM ? -errno : -ENOENT;
  int rc = -ENOENT, fd = -1;
  for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
    rc = connect_one(ai, stop_fd, timeout_ms, &fd);
    if (rc == 0 || rc == -ECANCELED)
      break;
  }
  freeaddrinfo(res);
  if (rc == 0)
    dr_ckpt_conn_init(c, fd, stop_fd, timeout_ms);
  return rc;
}

int dr_ckpt_send(dr_ckpt_conn_t *c) {
  size_t off = 0;
  int rc = 0;
  while (off < c->out.len) {
    ssize_t k = send(c->fd, c->out.data + off, c->out.len - off,
                     MSG_NOSIGNAL);
    if (k > 0) {
      off += (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if ((rc = wait_for(c->fd, POLLOUT, c->stop_fd, c->timeout_ms)) != 0)
        break;
      continue;
    }
    rc = errno == EPIPE || errno == ECONNRESET ? DR_ECLOSED : -errno;
    break;
  }
  dr_buf_reset(&c->out);
  return rc;
}

int dr_ckpt_recv(dr_ckpt_conn_t *c, dr_msg_t *m) {
  if (c->rskip > 0) {
    memmove(c->rbuf, c->rbuf + c->rskip, c->rlen - c->rskip);
    c->rlen -= c->rskip;
    c->rskip = 0;
  }
  for (;;) {
    size_t consumed, need;
    int err;
    dr_decode_status_t st =
        dr_decode(&c->dec, c->rbuf, c->rlen, m, &consumed, &need, &err);
    if (st == DR_DECODE_OK) {
      c->rskip = consumed;
      return 0;
    }
    if (st == DR_DECODE_ERROR)
      return err;
    /* need is capped by the decoder's limits before it is reported. */
    if (need > c->rcap) {
      uint8_t *b = dr_grow(c->rbuf, &c->rcap, need, 1, 4096);
      if (b == NULL)
        return -ENOMEM;
      c->rbuf = b;
    }
    ssize_t k = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
    if (k > 0) {
      c->rlen += (size_t)k;
      continue;
    }
    if (k == 0)
      return DR_ECLOSED;
    if (errno == EINTR)
      continue;
    if (errno == ECONNRESET)
      return DR_ECLOSED;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return -errno;
    int rc = wait_for(c->fd, POLLIN, c->stop_fd, c->timeout_ms);
    if (rc != 0)
      return rc;
  }
}

char *dr_ckpt_conn_sample(const dr_ckpt_conn_t *c, char *out, size_t n) {
  size_t have = c->rlen - c->rskip;
  return dr_log_sample(c->rbuf != NULL ? c->rbuf + c->rskip : NULL,
                       have < 32 ? have : 32, out, n);
}

void dr_ckpt_linger(dr_ckpt_conn_t *c, int ms) {
  shutdown(c->fd, SHUT_WR);
  uint64_t end = dr_mono_ms() + (uint64_t)ms;
  char sink[65536];
  for (uint64_t now = dr_mono_ms(); now < end; now = dr_mono_ms()) {
    if (wait_for(c->fd, POLLIN, c->stop_fd, (int)(end - now)) != 0)
      break;
    ssize_t k = recv(c->fd, sink, sizeof(sink), 0);
    if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
      break;
  }
}

void dr_ckpt_conn_close(dr_ckpt_conn_t *c) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  free(c->rbuf);
  c->rbuf = NULL;
  c->rlen = c->rcap = c->rskip = 0;
  dr_buf_free(&c->out);
}
