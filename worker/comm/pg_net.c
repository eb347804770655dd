/* The bootstrap's network half: the listening socket, connections to
 * the neighbours with their hello, and the negotiation of each link's
 * data path.
 *
 * Control connection, first bytes from the connecting side (48 bytes,
 * little-endian): "DRPGHEL1", from rank, kind (1 control, 2 data),
 * generation, group number, and the token the listening rank published
 * in the store; the listener drops any connection whose hello does not
 * match. Then the sender's offer (256 bytes: "DROF", shm or tcp, pid,
 * ring capacity, ring name) and the receiver's answer (16 bytes: "DRRP",
 * shm or tcp, pid). When the answer is tcp, a data connection with its
 * own hello follows.
 */
#include "pg_boot.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"
#include "mono.h"

#define HELLO_BYTES 48
#define OFFER_BYTES 256
#define REPLY_BYTES 16
#define KIND_CTRL 1u
#define KIND_DATA 2u
#define VIA_SHM 1u
#define VIA_TCP 2u
#define DATA_SOCKBUF (4 << 20)
/* Bound on reading one connection's hello, so a stray connection that
 * says nothing cannot hold the bootstrap for its whole timeout. */
#define HELLO_WAIT_MS 10000

static const char hello_magic[8] = {'D', 'R', 'P', 'G', 'H', 'E', 'L', '1'};
#define OFFER_MAGIC 0x464f5244u /* "DROF" */
#define REPLY_MAGIC 0x50525244u /* "DRRP" */

__attribute__((format(printf, 1, 2))) static void warn_line(const char *fmt,
                                                            ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n > sizeof(line) - 2)
    n = (int)sizeof(line) - 2;
  line[n++] = '\n';
  /* One write: the line stays whole among other ranks' output. */
  (void)!write(2, line, (size_t)n);
}

/* ---- sockets ----------------------------------------------------------- */

static void tune_data_socket(int fd) {
  int one = 1, sz = DATA_SOCKBUF;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}

/* Reads or writes exactly n bytes on a non-blocking fd by deadline_ns.
 * 0, -ETIMEDOUT, -ECONNRESET (EOF) or -errno. */
static int io_full(int fd, void *buf, size_t n, int writing,
                   uint64_t deadline_ns) {
  uint8_t *p = buf;
  size_t done = 0;
  while (done < n) {
    ssize_t r = writing ? send(fd, p + done, n - done, MSG_NOSIGNAL)
                        : recv(fd, p + done, n - done, 0);
    if (r > 0) {
      done += (size_t)r;
      continue;
    }
    if (r == 0)
      return -ECONNRESET;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return -errno;
    uint64_t now = dr_mono_ns();
    if (now >= deadline_ns)
      return -ETIMEDOUT;
    struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
    uint64_t ms = (deadline_ns - now + 999999u) / 1000000u;
    if (poll(&pfd, 1, ms > 60000 ? 60000 : (int)ms) < 0 && errno != EINTR)
      return -errno;
  }
  return 0;
}

static int to_sockaddr(const char *ip, uint16_t port,
                       struct sockaddr_storage *ss, socklen_t *len) {
  memset(ss, 0, sizeof(*ss));
  struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(port);
    *len = sizeof(*a4);
    return 0;
  }
  if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(port);
    *len = sizeof(*a6);
    return 0;
  }
  return -EINVAL;
}

int dr__boot_listen(dr_boot_t *b) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(dr_client_fd(b->client), (struct sockaddr *)&ss, &len) != 0)
    return dr__boot_fail(b, -errno,
                         "getsockname() on the store connection failed: %s",
                         strerror(errno));
  void *addr;
  if (ss.ss_family == AF_INET) {
    ((struct sockaddr_in *)&ss)->sin_port = 0;
    addr = &((struct sockaddr_in *)&ss)->sin_addr;
  } else if (ss.ss_family == AF_INET6) {
    ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    addr = &((struct sockaddr_in6 *)&ss)->sin6_addr;
  } else {
    return dr__boot_fail(b, -EAFNOSUPPORT,
                         "the store connection is not TCP/IP");
  }
  inet_ntop(ss.ss_family, addr, b->me.ip, sizeof(b->me.ip));
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return dr__boot_fail(b, -errno, "socket() failed: %s", strerror(errno));
  /* Accepted sockets inherit the buffer sizes, which must be set before
   * the handshake to take effect on the window. */
  tune_data_socket(fd);
  if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 64) != 0) {
    int e = errno;
    close(fd);
    return dr__boot_fail(b, -e, "bind()/listen() on %s port 0 failed: %s",
                         b->me.ip, strerror(e));
  }
  len = sizeof(ss);
  getsockname(fd, (struct sockaddr *)&ss, &len);
  b->me.port =
      ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                    : ((struct sockaddr_in6 *)&ss)->sin6_port);
  b->lfd = fd;
  return 0;
}

static void hello_encode(uint8_t h[HELLO_BYTES], uint32_t from, uint32_t kind,
                         uint64_t gen, uint64_t inst,
                         const uint8_t token[DR_BOOT_TOKEN_BYTES]) {
  memset(h, 0, HELLO_BYTES);
  memcpy(h, hello_magic, 8);
  dr__put32(h + 8, from);
  dr__put32(h + 12, kind);
  dr__put64(h + 16, gen);
  dr__put64(h + 24, inst);
  memcpy(h + 32, token, DR_BOOT_TOKEN_BYTES);
}

static int connect_peer(dr_boot_t *b, const dr_boot_entry_t *to,
                        uint32_t to_rank, uint32_t kind, int *out) {
  const char *what = kind == KIND_CTRL ? "control" : "data";
  struct sockaddr_storage ss;
  socklen_t len;
  if (to_sockaddr(to->ip, to->port, &ss, &len) != 0)
    return dr__boot_fail(b, DR_EBADARG, "rank %u published a bad address '%s'",
                         to_rank, to->ip);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return dr__boot_fail(b, -errno, "socket() failed: %s", strerror(errno));
  tune_data_socket(fd);
  int rc = 0;
  if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
    if (errno != EINPROGRESS) {
      rc = -errno;
    } else {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      int pr;
      do
        pr = poll(&p, 1, dr__boot_remaining_ms(b));
      while (pr < 0 && errno == EINTR);
      int soerr = 0;
      socklen_t sl = sizeof(soerr);
      if (pr == 0)
        rc = -ETIMEDOUT;
      else if (pr < 0)
        rc = -errno;
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        rc = -errno;
      else
        rc = -soerr;
    }
  }
  if (rc == 0) {
    uint8_t h[HELLO_BYTES];
    hello_encode(h, b->pg->rank, kind, b->cfg->gen, b->inst, to->token);
    rc = io_full(fd, h, sizeof(h), 1, b->deadline);
  }
  if (rc != 0) {
    close(fd);
    if (rc == -ETIMEDOUT)
      return dr__boot_fail(b, DR_PG_ETIMEOUT,
                           "%s connection to rank %u at %s:%u timed out", what,
                           to_rank, to->ip, (unsigned)to->port);
    return dr__boot_fail(
        b, DR_PG_EPEER, "connect() to rank %u at %s:%u (%s) failed: %s",
        to_rank, to->ip, (unsigned)to->port, what, strerror(-rc));
  }
  *out = fd;
  return 0;
}

/* Accepts connections until one carries a valid hello from rank `from`
 * of kind `kind`; others are closed. */
static int accept_peer(dr_boot_t *b, uint32_t from, uint32_t kind, int *out) {
  for (;;) {
    struct pollfd p = {.fd = b->lfd, .events = POLLIN};
    int ms = dr__boot_remaining_ms(b);
    int pr = ms > 0 ? poll(&p, 1, ms) : 0;
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      return dr__boot_fail(b, DR_PG_ETIMEOUT,
                           "rank %u did not open its %s connection within %g s",
                           from, kind == KIND_CTRL ? "control" : "data",
                           b->cfg->timeout_ms / 1000.0);
    int fd = accept4(b->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
          errno == ECONNABORTED)
        continue;
      return dr__boot_fail(b, -errno,
                           "accept() failed while waiting for rank %u: %s",
                           from, strerror(errno));
    }
    uint8_t h[HELLO_BYTES];
    uint64_t until = dr_mono_ns() + (uint64_t)HELLO_WAIT_MS * 1000000u;
    if (until > b->deadline)
      until = b->deadline;
    uint8_t diff = 0;
    if (io_full(fd, h, sizeof(h), 0, until) == 0) {
      for (int i = 0; i < DR_BOOT_TOKEN_BYTES; i++)
        diff |= (uint8_t)(h[32 + i] ^ b->me.token[i]);
      if (memcmp(h, hello_magic, 8) == 0 && dr__get32(h + 8) == from &&
          dr__get32(h + 12) == kind && dr__get64(h + 16) == b->cfg->gen &&
          dr__get64(h + 24) == b->inst && diff == 0) {
        *out = fd;
        return 0;
      }
    }
    close(fd);
  }
}

/* ---- links ------------------------------------------------------------- */

void dr__boot_unlink_shm(dr_boot_t *b) {
  if (b->shm_named) {
    dr_shm_ring_unlink(b->shm_name);
    b->shm_named = 0;
  }
}

/* The send side: offers shared memory (a ring created here) or TCP. */
static int offer_send_link(dr_boot_t *b) {
  dr_pg_t *pg = b->pg;
  dr_link_t *l = &pg->send;
  uint32_t via = VIA_TCP;
  if (!b->cfg->force_tcp && strcmp(b->me.host, b->right.host) == 0) {
    /* A name nobody can guess (another local user who created it first
     * would turn the link into TCP), with the agent's prefix (what a kill
     * before the unlink leaves, the agent removes). */
    char tag[48];
    snprintf(tag, sizeof(tag), "ring%uto%u", pg->rank, l->peer);
    const char *what = "shm_open";
    int taken = 0;
    int rc = dr_shm_ring_create_named(b->shm_name, sizeof(b->shm_name), tag,
                                      DR_PG_SHM_RING_BYTES, &l->ring, &taken,
                                      &what);
    if (rc == 0) {
      via = VIA_SHM;
      b->shm_named = 1;
      if (taken > 0)
        warn_line("ddprun pg: rank %u: %d shared-memory name%s for the link "
                  "to rank %u %s already taken in /dev/shm (by another "
                  "user?); created %s instead", pg->rank, taken,
                  taken == 1 ? "" : "s", l->peer, taken == 1 ? "was" : "were",
                  b->shm_name);
    } else {
      warn_line("ddprun pg: rank %u: shared memory to rank %u unavailable "
                "(%s %s: %s%s); using TCP",
                pg->rank, l->peer, what, b->shm_name, strerror(-rc),
                rc == -EEXIST ? ", every name tried was taken" : "");
    }
  }
  uint8_t o[OFFER_BYTES] = {0};
  dr__put32(o, OFFER_MAGIC);
  dr__put32(o + 4, via);
  dr__put32(o + 8, (uint32_t)getpid());
  dr__put64(o + 16, DR_PG_SHM_RING_BYTES);
  if (via == VIA_SHM)
    memcpy(o + 24, b->shm_name, strlen(b->shm_name) + 1);
  int rc = io_full(l->ctrl_fd, o, sizeof(o), 1, b->deadline);
  if (rc != 0)
    return dr__boot_fail(b, rc == -ETIMEDOUT ? DR_PG_ETIMEOUT : DR_PG_EPEER,
                         "sending the link offer to rank %u failed: %s",
                         l->peer, strerror(-rc));
  return 0;
}

/* The receive side: answers the left neighbour's offer. */
static int answer_recv_link(dr_boot_t *b) {
  dr_pg_t *pg = b->pg;
  dr_link_t *l = &pg->recv;
  uint8_t o[OFFER_BYTES];
  int rc = io_full(l->ctrl_fd, o, sizeof(o), 0, b->deadline);
  if (rc != 0)
    return dr__boot_fail(b, rc == -ETIMEDOUT ? DR_PG_ETIMEOUT : DR_PG_EPEER,
                         "no link offer from rank %u: %s", l->peer,
                         rc == -ETIMEDOUT ? "timed out" : strerror(-rc));
  if (dr__get32(o) != OFFER_MAGIC)
    return dr__boot_fail(b, DR_PG_EPEER, "rank %u sent a malformed link offer",
                         l->peer);
  uint32_t via = dr__get32(o + 4);
  l->peer_pid = (int)dr__get32(o + 8);
  l->kind = DR_LINK_TCP;
  if (via == VIA_SHM) {
    char name[DR_SHM_NAME_MAX + 1];
    memcpy(name, o + 24, sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    const char *what = NULL;
    rc = name[0] == '/' ? dr_shm_ring_open(name, &l->ring, &what) : -EINVAL;
    if (rc == 0) {
      l->kind = DR_LINK_SHM;
      /* Both ends have it mapped: the name goes at once, from whichever
       * side gets there first, so that a kill of either leaves nothing. */
      dr_shm_ring_unlink(name);
    } else {
      warn_line("ddprun pg: rank %u: shared memory from rank %u unavailable "
                "(%s %s: %s); using TCP",
                pg->rank, l->peer, what != NULL ? what : "name", name,
                strerror(-rc));
    }
  }
  uint8_t r[REPLY_BYTES] = {0};
  dr__put32(r, REPLY_MAGIC);
  dr__put32(r + 4, l->kind == DR_LINK_SHM ? VIA_SHM : VIA_TCP);
  dr__put32(r + 8, (uint32_t)getpid());
  rc = io_full(l->ctrl_fd, r, sizeof(r), 1, b->deadline);
  if (rc != 0)
    return dr__boot_fail(b, rc == -ETIMEDOUT ? DR_PG_ETIMEOUT : DR_PG_EPEER,
                         "answering rank %u's link offer failed: %s", l->peer,
                         strerror(-rc));
  return 0;
}

static int finish_send_link(dr_boot_t *b) {
  dr_pg_t *pg = b->pg;
  dr_link_t *l = &pg->send;
  uint8_t r[REPLY_BYTES];
  int rc = io_full(l->ctrl_fd, r, sizeof(r), 0, b->deadline);
  if (rc != 0)
    return dr__boot_fail(b, rc == -ETIMEDOUT ? DR_PG_ETIMEOUT : DR_PG_EPEER,
                         "no answer to the link offer from rank %u: %s",
                         l->peer,
                         rc == -ETIMEDOUT ? "timed out" : strerror(-rc));
  if (dr__get32(r) != REPLY_MAGIC)
    return dr__boot_fail(b, DR_PG_EPEER, "rank %u sent a malformed link answer",
                         l->peer);
  l->peer_pid = (int)dr__get32(r + 8);
  /* Both ends have it mapped (or never will): the name goes now. */
  dr__boot_unlink_shm(b);
  if (dr__get32(r + 4) == VIA_SHM && l->ring != NULL) {
    l->kind = DR_LINK_SHM;
    return 0;
  }
  dr_shm_ring_close(&l->ring);
  l->kind = DR_LINK_TCP;
  return connect_peer(b, &b->right, l->peer, KIND_DATA, &l->data_fd);
}

int dr__boot_link_up(dr_boot_t *b) {
  dr_pg_t *pg = b->pg;
  int rc =
      connect_peer(b, &b->right, pg->send.peer, KIND_CTRL, &pg->send.ctrl_fd);
  if (rc == 0)
    rc = offer_send_link(b);
  if (rc == 0)
    rc = accept_peer(b, pg->recv.peer, KIND_CTRL, &pg->recv.ctrl_fd);
  if (rc == 0)
    rc = answer_recv_link(b);
  if (rc == 0)
    rc = finish_send_link(b);
  if (rc == 0 && pg->recv.kind == DR_LINK_TCP)
    rc = accept_peer(b, pg->recv.peer, KIND_DATA, &pg->recv.data_fd);
  if (rc != 0)
    return rc;
  int one = 1;
  int fds[4] = {pg->send.ctrl_fd, pg->recv.ctrl_fd, pg->send.data_fd,
                pg->recv.data_fd};
  for (int i = 0; i < 4; i++)
    if (fds[i] >= 0)
      setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  dr_link_t *links[2] = {&pg->send, &pg->recv};
  for (int i = 0; i < 2; i++) {
    dr_link_t *l = links[i];
    size_t c = pg->chunk;
    if (c == 0)
      c = l->kind == DR_LINK_SHM ? DR_PG_SHM_CHUNK : DR_PG_TCP_CHUNK;
    /* Whole cache lines, so pieces of a float buffer stay whole floats;
     * at most half a ring, so both sides always have room to work. */
    c = (c + DR_PG_SHM_ALIGN - 1) / DR_PG_SHM_ALIGN * DR_PG_SHM_ALIGN;
    if (l->kind == DR_LINK_SHM && c > DR_PG_SHM_RING_BYTES / 2)
      c = DR_PG_SHM_RING_BYTES / 2;
    l->chunk = c;
  }
  if (pg->recv.kind == DR_LINK_TCP) {
    pg->recv.stage_cap = pg->recv.chunk;
    pg->recv.stage = malloc(pg->recv.stage_cap);
    if (pg->recv.stage == NULL)
      return dr__boot_fail(b, -ENOMEM, "out of memory");
  }
  return 0;
}
