/* Socket plumbing of the blocking client. See client_io.h. */
#define _GNU_SOURCE /* EAI_NODATA, EAI_ADDRFAMILY */
#include "client_io.h"

#include "errors.h"
#include "mono.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 1000

int64_t dr__io_deadline(int64_t a_ms, uint64_t b_ms) {
  /* About 290 million years: far enough to be "never", far from overflow. */
  const int64_t horizon = INT64_MAX / 1024;
  int64_t t = (int64_t)dr_mono_ms();
  if (a_ms > 0)
    t += a_ms < horizon ? a_ms : horizon;
  t += b_ms < (uint64_t)horizon ? (int64_t)b_ms : horizon;
  return t;
}

/* Waits until fd is ready for events or deadline_ms passes. An error or
 * hang-up condition counts as ready: the next call on fd reports it. */
static int wait_fd(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    int64_t left = deadline_ms - (int64_t)dr_mono_ms();
    if (left < 0)
      left = 0;
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
    if (n > 0)
      return 0;
    if (n == 0) {
      if ((int64_t)dr_mono_ms() >= deadline_ms)
        return -ETIMEDOUT;
      continue; /* woke before the millisecond ran out */
    }
    if (errno != EINTR)
      return -errno;
  }
}

static void sleep_until(int64_t t_ms) {
  struct timespec ts = {.tv_sec = t_ms / 1000,
                        .tv_nsec = (long)(t_ms % 1000) * 1000000};
  int rc;
  /* clock_nanosleep returns the error instead of setting errno; only
   * EINTR is possible with a valid absolute time. */
  do
    rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
  while (rc == EINTR);
}

static int retryable(int rc) {
  return rc == -ECONNREFUSED || rc == -ENETUNREACH || rc == -EHOSTUNREACH ||
         rc == -ETIMEDOUT || rc == -EAGAIN;
}

static int gai_code(int gai) {
  switch (gai) {
  case EAI_NONAME:
  case EAI_NODATA:
  case EAI_ADDRFAMILY:
    return -ENOENT;
  case EAI_AGAIN:
    return -EAGAIN;
  case EAI_MEMORY:
    return -ENOMEM;
  case EAI_SYSTEM:
    return errno != 0 ? -errno : -EIO;
  default:
    return -EADDRNOTAVAIL;
  }
}

/* A socket connected to itself: a retried connect to a free local port in
 * the ephemeral range can be given that very port as its source, and TCP
 * simultaneous open then "succeeds". */
static int self_connected(int fd) {
  struct sockaddr_storage a, b;
  socklen_t la = sizeof(a), lb = sizeof(b);
  if (getsockname(fd, (struct sockaddr *)&a, &la) != 0 ||
      getpeername(fd, (struct sockaddr *)&b, &lb) != 0)
    return 0;
  return la == lb && memcmp(&a, &b, la) == 0;
}

static int connect_one(const struct addrinfo *ai, int64_t deadline_ms,
                       int *fd_out) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                  ai->ai_protocol);
  if (fd < 0)
    return -errno;
  int rc = 0;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    rc = -errno;
    /* An interrupted connect goes on in the background, like one in
     * progress: wait for it either way. */
    if (rc == -EINPROGRESS || rc == -EINTR) {
      rc = wait_fd(fd, POLLOUT, deadline_ms);
      int so_err = 0;
      socklen_t len = sizeof(so_err);
      if (rc == 0)
        rc = getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &len) != 0 ? -errno
                                                                   : -so_err;
    }
  }
  if (rc == 0 && self_connected(fd))
    rc = -ECONNREFUSED;
  int one = 1;
  if (rc == 0 &&
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    rc = -errno;
  if (rc != 0) {
    close(fd);
    return rc;
  }
  *fd_out = fd;
  return 0;
}

int dr__io_connect(const char *host, uint16_t port, int64_t deadline_ms,
                   int *fd, int *last_err) {
  char port_s[8];
  snprintf(port_s, sizeof(port_s), "%u", (unsigned)port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = AI_NUMERICSERV;

  *fd = -1;
  *last_err = 0;
  int64_t backoff = BACKOFF_FIRST_MS;
  for (;;) {
    /* Resolved on every attempt: a restarted server may have a new address. */
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port_s, &hints, &res);
    int rc = gai != 0 ? gai_code(gai) : -EADDRNOTAVAIL;
    int any_retryable = retryable(rc);
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
      rc = connect_one(ai, deadline_ms, fd);
      if (rc == 0)
        break;
      any_retryable |= retryable(rc);
      *last_err = rc;
    }
    if (res != NULL)
      freeaddrinfo(res);
    if (rc == 0)
      return 0;
    if (gai != 0)
      *last_err = rc;
    /* Retry while some address may come up; otherwise no wait helps. */
    if (!any_retryable)
      return rc;
    int64_t now = (int64_t)dr_mono_ms();
    if (now >= deadline_ms)
      return -ETIMEDOUT;
    sleep_until(now + backoff < deadline_ms ? now + backoff : deadline_ms);
    backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
  }
}

int dr__io_send_all(int fd, const void *p, size_t n_bytes, int64_t deadline_ms,
                    size_t *sent) {
  const uint8_t *b = p;
  size_t off = 0;
  int rc = 0;
  while (off < n_bytes) {
    ssize_t w = send(fd, b + off, n_bytes - off, MSG_NOSIGNAL);
    if (w >= 0) {
      off += (size_t)w;
      continue;
    }
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      rc = wait_fd(fd, POLLOUT, deadline_ms);
      if (rc != 0)
        break;
      continue;
    }
    rc = errno == EPIPE || errno == ECONNRESET ? DR_ECLOSED : -errno;
    break;
  }
  *sent = off;
  return rc;
}

int dr__io_recv(int fd, void *p, size_t cap, int64_t deadline_ms, size_t *got) {
  *got = 0;
  for (;;) {
    ssize_t r = recv(fd, p, cap, 0);
    if (r > 0) {
      *got = (size_t)r;
      return 0;
    }
    if (r == 0)
      return DR_ECLOSED;
    if (errno == EINTR)
      continue;
    if (errno == ECONNRESET) /* closed with our data unread: still a close */
      return DR_ECLOSED;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return -errno;
    int rc = wait_fd(fd, POLLIN, deadline_ms);
    if (rc != 0)
      return rc;
  }
}
