/* The server side of the checkpoint peers: the listening socket on a
 * thread of its own, one thread per connection, the handshake, and the
 * two requests (ckpt_peer.h). */
#include "ckpt_peer.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "ckpt_io.h"
#include "ckpt_stream.h"
#include "clock_offset.h"
#include "errors.h"
#include "log.h"

typedef struct {
  pthread_t t;
  int used;
  atomic_int done;
  int fd;
  struct dr_ckpt_srv *srv;
} slot_t;

struct dr_ckpt_srv {
  dr_ckpt_ctx_t ctx;
  int lfd;
  uint16_t port;
  atomic_uint node_rank;
  pthread_t acceptor;
  slot_t slots[DR_CKPT_SRV_CONNS];
};

/* ---- one connection ----------------------------------------------------- */

/* Says why to the peer (ERROR), and returns code. */
static int refuse(dr_ckpt_conn_t *c, uint32_t req, int code, const char *why) {
  if (dr_enc_error(&c->out, req, code, dr_str(why)) == 0)
    dr_ckpt_send(c);
  return code;
}

/* A peer that broke the protocol: told, named in a warning, dropped. What
 * it sent is sampled when the frames themselves were garbage. */
static void drop(dr_ckpt_conn_t *c, int code, const char *what) {
  char sample[160];
  int garbage = code != DR_ECHECKSUM && code != DR_ESEQUENCE &&
                code != DR_EBADARG;
  if (garbage)
    DR_SAY(DR_LOG_WARN, "checkpoint peer %s dropped: %s (%s); first bytes: "
           "\"%s\"", c->peer, what, dr_strerror(code),
           dr_ckpt_conn_sample(c, sample, sizeof(sample)));
  else
    DR_SAY(DR_LOG_WARN, "checkpoint peer %s dropped: %s", c->peer, what);
  refuse(c, 0, code, what);
}

/* A peer that broke the protocol (garbage, a frame out of place, a copy
 * that is not what it declared), rather than a connection that failed. */
static int is_protocol_error(int rc) {
  return rc > DR__ERR_FIRST && rc < DR__ERR_LAST && rc != DR_ECLOSED;
}

static int same_run(const dr_ckpt_ctx_t *ctx, dr_bytes_t id) {
  return id.len == strlen(ctx->run_id) &&
         memcmp(id.p, ctx->run_id, id.len) == 0;
}

/* HELLO, WELCOME, and AUTH when the job has a secret: 0 once the peer may
 * send its request. */
static int handshake(struct dr_ckpt_srv *s, dr_ckpt_conn_t *c) {
  const dr_ckpt_ctx_t *ctx = &s->ctx;
  dr_msg_t m;
  int rc = dr_ckpt_recv(c, &m);
  dr_hello_t h;
  if (rc != 0 || m.type != DR_MSG_HELLO || dr_msg_hello(&m, &h) != 0) {
    if (rc != DR_ECLOSED && rc != -ECANCELED)
      drop(c, rc != 0 ? rc : DR_ESEQUENCE, "first message is not HELLO");
    return rc != 0 ? rc : DR_ESEQUENCE;
  }
  uint32_t req = m.req_id;
  if (!same_run(ctx, h.run_id)) {
    DR_SAY(DR_LOG_WARN, "checkpoint peer %s refused: not of this job (run "
           "id)", c->peer);
    return refuse(c, req, DR_ERUNID, "run id does not match this job");
  }
  uint8_t nonce[DR_NONCE_LEN];
  dr_bytes_t nb = {nonce, 0};
  if (ctx->secret != NULL) {
    dr_auth_nonce(nonce);
    nb.len = DR_NONCE_LEN;
  }
  if ((rc = dr_enc_welcome(&c->out, req, ctx->secret != NULL, nb,
                           dr_clock_now_us())) != 0 ||
      (rc = dr_ckpt_send(c)) != 0)
    return rc;
  if (ctx->secret != NULL) {
    dr_auth_t au;
    if ((rc = dr_ckpt_recv(c, &m)) != 0)
      return rc;
    if (m.type != DR_MSG_AUTH || dr_msg_auth(&m, &au) != 0) {
      DR_SAY(DR_LOG_WARN, "checkpoint peer %s refused: no shared secret "
             "presented", c->peer);
      return refuse(c, m.req_id, DR_ENOAUTH, "this job requires a shared "
                    "secret");
    }
    if (dr_auth_verify(ctx->secret, ctx->secret_len, nonce,
                       dr_str(ctx->run_id), au.mac) != 0) {
      DR_SAY(DR_LOG_WARN, "checkpoint peer %s refused: wrong shared secret",
             c->peer);
      return refuse(c, m.req_id, DR_EAUTH, "authentication failed: wrong "
                    "shared secret");
    }
    if ((rc = dr_enc_ok(&c->out, m.req_id)) != 0 ||
        (rc = dr_ckpt_send(c)) != 0)
      return rc;
  }
  c->dec.authed = 1;
  return 0;
}

/* CKPT_PUT: a replica for this node's directory. */
static void on_put(struct dr_ckpt_srv *s, dr_ckpt_conn_t *c,
                   const dr_msg_t *m) {
  dr_ckpt_put_t put;
  uint64_t step;
  char name[DR_CKPT_NAME_MAX + 1], why[512];
  if (dr_msg_ckpt_put(m, &put) != 0 || !same_run(&s->ctx, put.run_id) ||
      !dr_ckpt_wire_name(put.name.p, put.name.len, &step) ||
      step != put.step) {
    drop(c, DR_EBADARG, "a CKPT_PUT whose name is not a checkpoint's");
    return;
  }
  uint32_t req = m->req_id;
  memcpy(name, put.name.p, put.name.len);
  name[put.name.len] = '\0';
  put.name = dr_str(name);
  put.run_id = dr_str(s->ctx.run_id); /* the frame is overwritten next */
  int fd, is_dir;
  if (dr_ckpt_store_open_item(s->ctx.store, name, &fd, &is_dir) == 0) {
    close(fd);
    refuse(c, req, -EEXIST, "this node holds it already");
    return;
  }
  uint64_t room = 0;
  /* A margin for the file system's own blocks. */
  if (dr_ckpt_store_room(s->ctx.store, &room) == 0 &&
      (room < (1u << 20) || put.total_bytes > room - (1u << 20))) {
    snprintf(why, sizeof(why), "no room: %llu bytes do not fit in the %llu "
             "free in %s", (unsigned long long)put.total_bytes,
             (unsigned long long)room, dr_ckpt_store_dir(s->ctx.store));
    refuse(c, req, -ENOSPC, why);
    return;
  }
  if (dr_enc_ok(&c->out, req) != 0 || dr_ckpt_send(c) != 0)
    return;
  int rc = dr_ckpt_stream_in(c, s->ctx.store, &put, name, why, sizeof(why));
  if (is_protocol_error(rc)) {
    char what[1024];
    snprintf(what, sizeof(what), "its copy of %.255s: %.500s", name, why);
    drop(c, rc, what);
    return;
  }
  if (rc != 0) {
    if (rc != DR_ECLOSED && rc != -ECANCELED) {
      DR_SAY(DR_LOG_WARN, "cannot take checkpoint %s from %s: %s", name,
             c->peer, why);
      refuse(c, req, rc, why);
      dr_ckpt_linger(c, 2000);
    }
    return;
  }
  DR_SAY(DR_LOG_DEBUG, "received checkpoint %s (step %llu, from node %u, "
         "%llu bytes) from %s", name, (unsigned long long)step, put.origin,
         (unsigned long long)put.total_bytes, c->peer);
  if (dr_enc_ok(&c->out, req) == 0)
    dr_ckpt_send(c);
}

/* CKPT_GET: a checkpoint of this node's directory. */
static void on_get(struct dr_ckpt_srv *s, dr_ckpt_conn_t *c,
                   const dr_msg_t *m) {
  dr_ckpt_get_t get;
  char name[DR_CKPT_NAME_MAX + 1], why[512];
  uint64_t step = 0;
  uint32_t origin = DR_CKPT_LOCAL;
  if (dr_msg_ckpt_get(m, &get) != 0 || !same_run(&s->ctx, get.run_id) ||
      (get.name.len > 0 &&
       !dr_ckpt_wire_name(get.name.p, get.name.len, &step))) {
    drop(c, DR_EBADARG, "a CKPT_GET of something that is not a checkpoint");
    return;
  }
  uint32_t req = m->req_id;
  int rc = 0;
  if (get.name.len > 0) {
    memcpy(name, get.name.p, get.name.len);
    name[get.name.len] = '\0';
    origin = dr_ckpt_store_origin(s->ctx.store, name);
  } else {
    step = get.step;
    rc = dr_ckpt_store_find_step(s->ctx.store, step, name, sizeof(name),
                                 &origin);
  }
  dr_ckpt_src_t src;
  if (rc == 0)
    rc = dr_ckpt_src_open(s->ctx.store, name, &src, why, sizeof(why));
  if (rc != 0) {
    refuse(c, req, rc == DR_ENOTFOUND ? DR_ENOTFOUND : rc,
           rc == DR_ENOTFOUND ? "no such checkpoint here" : why);
    return;
  }
  if (origin == DR_CKPT_LOCAL)
    origin = atomic_load(&s->node_rank);
  dr_ckpt_put_t put = {dr_str(s->ctx.run_id), dr_str(name),
                       src.is_dir ? DR_CKPT_DIR : DR_CKPT_FILE, src.total,
                       step, origin};
  if ((rc = dr_enc_ckpt_put(&c->out, req, &put)) == 0 &&
      (rc = dr_ckpt_send(c)) == 0)
    rc = dr_ckpt_stream_out(c, &src, NULL, req, why, sizeof(why));
  if (rc != 0 && rc != DR_ECLOSED && rc != -ECANCELED)
    DR_SAY(DR_LOG_WARN, "cannot send checkpoint %s to %s: %s", name,
           c->peer, why);
  else if (rc == 0)
    DR_SAY(DR_LOG_DEBUG, "sent checkpoint %s (%llu bytes) to %s", name,
           (unsigned long long)src.total, c->peer);
  dr_ckpt_src_close(&src);
}

static void *conn_main(void *arg) {
  slot_t *sl = arg;
  struct dr_ckpt_srv *s = sl->srv;
  dr_ckpt_conn_t c;
  dr_ckpt_conn_init(&c, sl->fd, s->ctx.stop_fd, s->ctx.timeout_ms);
  if (handshake(s, &c) == 0) {
    dr_msg_t m;
    int rc = dr_ckpt_recv(&c, &m);
    if (rc == 0 && m.type == DR_MSG_CKPT_PUT)
      on_put(s, &c, &m);
    else if (rc == 0 && m.type == DR_MSG_CKPT_GET)
      on_get(s, &c, &m);
    else if (rc == 0 || (rc != DR_ECLOSED && rc != -ECANCELED &&
                         rc != -ETIMEDOUT))
      drop(&c, rc != 0 ? rc : DR_ESEQUENCE, "not a checkpoint request");
  }
  dr_ckpt_conn_close(&c);
  atomic_store(&sl->done, 1);
  return NULL;
}

/* ---- accepting ----------------------------------------------------------- */

/* A free slot, joining the threads that have ended: NULL when all run. */
static slot_t *free_slot(struct dr_ckpt_srv *s) {
  slot_t *got = NULL;
  for (int i = 0; i < DR_CKPT_SRV_CONNS; i++) {
    slot_t *sl = &s->slots[i];
    if (sl->used && atomic_load(&sl->done)) {
      pthread_join(sl->t, NULL);
      sl->used = 0;
    }
    if (!sl->used && got == NULL)
      got = sl;
  }
  return got;
}

static void *accept_main(void *arg) {
  struct dr_ckpt_srv *s = arg;
  struct pollfd p[2] = {{s->lfd, POLLIN, 0}, {s->ctx.stop_fd, POLLIN, 0}};
  for (;;) {
    int n = poll(p, 2, -1); /* the stop descriptor ends it */
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 || (p[1].revents & POLLIN))
      break;
    int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
      continue; /* the peer gave up meanwhile, or out of descriptors */
    slot_t *sl = free_slot(s);
    if (sl == NULL) {
      close(fd); /* busy: its sender tries again with the next one */
      continue;
    }
    sl->fd = fd;
    sl->srv = s;
    atomic_store(&sl->done, 0);
    if (pthread_create(&sl->t, NULL, conn_main, sl) != 0) {
      close(fd);
      continue;
    }
    sl->used = 1;
  }
  return NULL;
}

/* A listening socket on every address: IPv6 with IPv4 mapped, else IPv4. */
static int listen_any(uint16_t port, uint16_t *bound) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int zero = 0, one = 1;
  struct sockaddr_storage ss;
  socklen_t len;
  memset(&ss, 0, sizeof(ss));
  if (fd >= 0 &&
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) == 0) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(port);
    len = sizeof(*a);
  } else {
    if (fd >= 0)
      close(fd);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return -errno;
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(port);
    len = sizeof(*a);
  }
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  *bound = ntohs(ss.ss_family == AF_INET6
                     ? ((struct sockaddr_in6 *)&ss)->sin6_port
                     : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

int dr_ckpt_srv_start(const dr_ckpt_ctx_t *ctx, uint16_t port,
                      dr_ckpt_srv_t **out) {
  *out = NULL;
  struct dr_ckpt_srv *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return -ENOMEM;
  s->ctx = *ctx;
  atomic_init(&s->node_rank, 0);
  s->lfd = listen_any(port, &s->port);
  if (s->lfd < 0) {
    int rc = s->lfd;
    free(s);
    return rc;
  }
  int rc = dr_auth_init();
  if (rc == 0)
    rc = -pthread_create(&s->acceptor, NULL, accept_main, s);
  if (rc != 0) {
    close(s->lfd);
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

uint16_t dr_ckpt_srv_port(const dr_ckpt_srv_t *s) { return s->port; }

void dr_ckpt_srv_set_node_rank(dr_ckpt_srv_t *s, uint32_t node_rank) {
  atomic_store(&s->node_rank, node_rank);
}

void dr_ckpt_srv_stop(dr_ckpt_srv_t **sp) {
  struct dr_ckpt_srv *s = *sp;
  if (s == NULL)
    return;
  pthread_join(s->acceptor, NULL);
  for (int i = 0; i < DR_CKPT_SRV_CONNS; i++)
    if (s->slots[i].used)
      pthread_join(s->slots[i].t, NULL);
  close(s->lfd);
  free(s);
  *sp = NULL;
}
