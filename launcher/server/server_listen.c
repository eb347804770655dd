/* The rendezvous port: the listening socket and its accept loop.
 *
 * Done here rather than by uv_listen() for one reason: at the
 * file-descriptor limit libuv (1.44) closes the connections waiting in the
 * backlog itself (its "EMFILE trick") and never tells the connection
 * callback, so clients were reset and the log said nothing. The same
 * trick is played here, where it can be counted and logged: a descriptor
 * is kept in reserve; at EMFILE or ENFILE it is given up for long enough to
 * accept and close what waits (a client learns at once, instead of
 * waiting on a connection nobody will serve), then taken again. */
#include "server_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"
#include "log.h"

/* Accepted per wake-up at most, so that a burst of connections cannot
 * hold the loop; the level-triggered poll calls again for the rest. */
#define DR_ACCEPT_BATCH 128
/* Closed unread per shedding at most, for the same reason. */
#define DR_SHED_BATCH 1024

static int reserve_open(void) {
  return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Stops polling the listener until the next sweep: the poll is
 * level-triggered, and an accept() that fails for want of a resource would
 * fail again at once, spinning the loop. */
static void pause_accepting(dr_server_t *s) {
  if (s->accept_paused)
    return;
  s->accept_paused = 1;
  uv_poll_stop(&s->listener);
}

static void on_listen(uv_poll_t *p, int status, int events);

void dr__listen_resume(dr_server_t *s) {
  if (!s->accept_paused || s->closing)
    return;
  if (s->reserve_fd < 0)
    s->reserve_fd = reserve_open();
  s->accept_paused = 0;
  uv_poll_start(&s->listener, UV_READABLE, on_listen);
}

static unsigned long long nofile_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return 0;
  return (unsigned long long)rl.rlim_cur;
}

/* No descriptor left for a new connection (err: EMFILE or ENFILE). */
static void shed(dr_server_t *s, int err) {
  uint64_t n = 0;
  if (s->reserve_fd >= 0) {
    close(s->reserve_fd);
    s->reserve_fd = -1;
    while (n < DR_SHED_BATCH) {
      int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0) {
        close(fd);
        n++;
      } else if (errno != EINTR && errno != ECONNABORTED) {
        break;
      }
    }
    s->reserve_fd = reserve_open();
    /* accept() takes a descriptor before it looks for a connection: the
     * table filled with the last one accepted, and none waits. The next
     * one to arrive comes back here. */
    if (n == 0 && s->reserve_fd >= 0)
      return;
  }
  s->stats.dropped[DR_DROP_FD_LIMIT] += n;
  dr_rl_warn(&s->fd_rl, dr__now_ms(s), 0, n > 0 ? n : 1,
             "out of file descriptors (%s; RLIMIT_NOFILE %llu, %zu client "
             "connections open): %" PRIu64 " new connection%s on port %u "
             "closed unserved; so are new ones until descriptors free up",
             err == ENFILE ? "the system's table is full"
                           : "this process's limit reached",
             nofile_limit(), s->n_conns, n, n == 1 ? "" : "s", s->port);
  /* Without the reserve, what waits cannot even be closed. */
  if (s->reserve_fd < 0)
    pause_accepting(s);
}

static void on_listen(uv_poll_t *p, int status, int events) {
  (void)events;
  dr_server_t *s = p->data;
  if (status < 0) {
    dr_rl_warn(&s->fd_rl, dr__now_ms(s), 1, 1,
               "polling the listening socket on port %u failed (%s)",
               s->port, uv_strerror(status));
    pause_accepting(s);
    return;
  }
  for (int i = 0; i < DR_ACCEPT_BATCH && !s->closing; i++) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      dr__conn_accept(s, fd);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return;
    if (errno == EMFILE || errno == ENFILE) {
      shed(s, errno);
      return;
    }
    /* ENOBUFS, ENOMEM, EPERM (a firewall): try again at the next sweep. */
    dr_rl_warn(&s->fd_rl, dr__now_ms(s), 1, 1,
               "accept() on port %u failed (%d: %s)", s->port, errno,
               strerror(errno));
    pause_accepting(s);
    return;
  }
}

static const char *const fd_kinds[] = {"at the descriptor limit",
                                       "failed to accept"};

int dr__listen_start(dr_server_t *s, const char *host, uint16_t port,
                     char *err, size_t errlen) {
  struct sockaddr_storage addr;
  memset(&addr, 0, sizeof(addr));
  socklen_t alen = sizeof(struct sockaddr_in);
  int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
  if (rc != 0) {
    rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    alen = sizeof(struct sockaddr_in6);
  }
  if (rc != 0) {
    snprintf(err, errlen, "'%s' is not an IPv4 or IPv6 address to bind",
             host);
    return DR_EBADARG;
  }
  dr_rl_init(&s->fd_rl, "connections refused", fd_kinds, 2, 1, 10000);
  int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  0);
  if (fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "socket() for %s:%u failed (%d: %s)", host, port,
             -rc, uv_strerror(rc));
    return rc;
  }
  /* As uv_tcp_bind() does: a restarted server can bind again at once. */
  int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (bind(fd, (struct sockaddr *)&addr, alen) != 0 || listen(fd, 4096) != 0) {
    rc = -errno;
    snprintf(err, errlen, "bind() to %s:%u failed (%d: %s)", host, port, -rc,
             uv_strerror(rc));
    close(fd);
    return rc;
  }
  alen = sizeof(addr);
  getsockname(fd, (struct sockaddr *)&addr, &alen);
  s->port = ntohs(addr.ss_family == AF_INET
                      ? ((struct sockaddr_in *)&addr)->sin_port
                      : ((struct sockaddr_in6 *)&addr)->sin6_port);
  rc = uv_poll_init_socket(s->loop, &s->listener, fd);
  if (rc != 0) {
    snprintf(err, errlen, "cannot watch the socket of %s:%u (%s)", host, port,
             uv_strerror(rc));
    close(fd);
    return rc;
  }
  s->listen_fd = fd;
  s->listener.data = s;
  s->n_handles_open++;
  s->reserve_fd = reserve_open();
  uv_poll_start(&s->listener, UV_READABLE, on_listen);
  int loopback =
      addr.ss_family == AF_INET
          ? (ntohl(((struct sockaddr_in *)&addr)->sin_addr.s_addr) >> 24) == 127
          : IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&addr)->sin6_addr);
  /* Said once per job: by its server, not by every node's standby. */
  if (!loopback && s->cfg.max_nodes > 1 && s->cfg.secret_len == 0 &&
      !s->cfg.standby)
    DR_WARN("job '%s' accepts nodes on %s:%u without a shared secret: anyone "
            "who can reach the port can join it or force its restarts; set "
            "DDPRUN_SECRET or --secret-file on every node", s->run_id, host,
            s->port);
  return 0;
}

static void on_listener_closed(uv_handle_t *h) {
  dr_server_t *s = h->data;
  /* The poll handle is stopped by uv_close(); the socket is ours. */
  close(s->listen_fd);
  s->listen_fd = -1;
  if (s->reserve_fd >= 0)
    close(s->reserve_fd);
  s->reserve_fd = -1;
  dr__server_handle_closed(s);
}

void dr__listen_close(dr_server_t *s) {
  dr_rl_flush(&s->fd_rl, dr__now_ms(s));
  uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}
