/* Links: moving bytes to the right neighbour and from the left one over
 * shared memory or TCP, waiting on both at once, and the abort records
 * that carry a failure around the ring (a timeout, a lost peer, or
 * collectives out of step, which coll.c finds in their headers).
 *
 * Every link also has a TCP control connection. Nothing travels on it
 * after the bootstrap except abort records, so it serves as the peer's
 * liveness too: the kernel closes it when the peer process dies, however
 * it dies.
 */
#include "pg_internal.h"

#include "half.h"
#include "mono.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

void dr__link_init(dr_link_t *l) {
  memset(l, 0, sizeof(*l));
  l->ctrl_fd = -1;
  l->data_fd = -1;
}

void dr__link_close(dr_link_t *l) {
  if (l->ctrl_fd >= 0)
    close(l->ctrl_fd);
  if (l->data_fd >= 0)
    close(l->data_fd);
  dr_shm_ring_close(&l->ring);
  free(l->stage);
  dr__link_init(l);
}

size_t dr__link_pad(const dr_link_t *l, size_t n_bytes) {
  if (l->kind != DR_LINK_SHM)
    return 0;
  return (DR_PG_SHM_ALIGN - n_bytes % DR_PG_SHM_ALIGN) % DR_PG_SHM_ALIGN;
}

static void set_gone(dr_link_t *l, const char *why) {
  if (!l->gone) {
    l->gone = 1;
    snprintf(l->gone_why, sizeof(l->gone_why), "%s", why);
  }
}

static void set_gone_errno(dr_link_t *l, int e) {
  char why[96];
  if (e == ECONNRESET || e == EPIPE)
    snprintf(why, sizeof(why), "connection reset");
  else
    snprintf(why, sizeof(why), "connection failed (%s)", strerror(e));
  set_gone(l, why);
}

/* ---- data -------------------------------------------------------------- */

/* The reductions. restrict lets the compiler vectorise: the received
 * bytes never alias the destination. */
static void add_f32(float *restrict d, const float *restrict s, size_t n) {
  for (size_t i = 0; i < n; i++)
    d[i] += s[i];
}

static void add_div_f32(float *restrict d, const float *restrict s, size_t n,
                        float div) {
  for (size_t i = 0; i < n; i++)
    d[i] = (d[i] + s[i]) / div;
}

#if defined(__SSE2__)
#include <emmintrin.h>
/* memcpy with non-temporal stores for the 16-byte aligned middle. */
static void copy_stream(uint8_t *dst, const uint8_t *src, size_t n) {
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  if (n < head + 64) {
    memcpy(dst, src, n);
    return;
  }
  memcpy(dst, src, head);
  size_t i = head, end = head + (n - head) / 64 * 64;
  for (; i < end; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 48));
    _mm_stream_si128((__m128i *)(void *)(dst + i), a);
    _mm_stream_si128((__m128i *)(void *)(dst + i + 16), b);
    _mm_stream_si128((__m128i *)(void *)(dst + i + 32), c);
    _mm_stream_si128((__m128i *)(void *)(dst + i + 48), d);
  }
  memcpy(dst + i, src + i, n - i);
  /* Streaming stores are weakly ordered: make them visible before the
   * completion of the work is. */
  _mm_sfence();
}
#else
static void copy_stream(uint8_t *dst, const uint8_t *src, size_t n) {
  memcpy(dst, src, n);
}
#endif

static void max_f32(float *restrict d, const float *restrict s, size_t n) {
  for (size_t i = 0; i < n; i++)
    d[i] = s[i] > d[i] ? s[i] : d[i];
}

size_t dr__rop_elem_bytes(dr_rop_t op) {
  switch (op) {
  case DR_ROP_SUM:
  case DR_ROP_SUM_DIV:
  case DR_ROP_MAX:
    return 4;
  case DR_ROP_SUM_F16:
  case DR_ROP_SUM_BF16:
    return 2;
  default:
    return 1;
  }
}

static void apply(dr_rop_t op, uint8_t *dst, const uint8_t *src, size_t n,
                  float div) {
  switch (op) {
  case DR_ROP_COPY:
    memcpy(dst, src, n);
    break;
  case DR_ROP_COPY_STREAM:
    copy_stream(dst, src, n);
    break;
  case DR_ROP_SUM:
    add_f32((float *)(void *)dst, (const float *)(const void *)src, n / 4);
    break;
  case DR_ROP_SUM_DIV:
    add_div_f32((float *)(void *)dst, (const float *)(const void *)src,
                n / 4, div);
    break;
  case DR_ROP_MAX:
    max_f32((float *)(void *)dst, (const float *)(const void *)src, n / 4);
    break;
  case DR_ROP_SUM_F16:
    dr_f16_add((uint16_t *)(void *)dst, (const uint16_t *)(const void *)src,
               n / 2);
    break;
  case DR_ROP_SUM_BF16:
    dr_bf16_add((uint16_t *)(void *)dst, (const uint16_t *)(const void *)src,
                n / 2);
    break;
  }
}

long dr__link_send(dr_link_t *l, const uint8_t *src, size_t n) {
  if (l->kind == DR_LINK_SHM) {
    void *p;
    size_t span = dr_shm_ring_write_span(l->ring, &p);
    size_t k = span < n ? span : n;
    if (k == 0)
      return 0;
    memcpy(p, src, k);
    dr_shm_ring_commit(l->ring, k);
    return (long)k;
  }
  for (;;) {
    ssize_t r = send(l->data_fd, src, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r >= 0)
      return (long)r;
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    set_gone_errno(l, errno);
    return -EPIPE;
  }
}

long dr__link_send_head(dr_link_t *l, const uint8_t *head, size_t nh,
                        const uint8_t *src, size_t n) {
  struct iovec iov[2] = {{(void *)head, nh}, {(void *)src, n}};
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
  for (;;) {
    ssize_t r = sendmsg(l->data_fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r >= 0)
      return (long)r;
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    set_gone_errno(l, errno);
    return -EPIPE;
  }
}

int dr__link_send_pad(dr_link_t *l, size_t n) {
  if (n == 0)
    return 1;
  if (dr_shm_ring_free(l->ring) < n)
    return 0;
  dr_shm_ring_commit(l->ring, n);
  return 1;
}

long dr__link_recv(dr_link_t *l, uint8_t *dst, size_t n, dr_rop_t op,
                   float div) {
  if (l->kind == DR_LINK_SHM) {
    const void *p;
    size_t span = dr_shm_ring_read_span(l->ring, &p);
    size_t k = span < n ? span : n;
    if (k == 0)
      return 0;
    /* Steps start cache-line aligned in the ring and a step's pieces
     * are whole elements, so k is whole elements here. */
    apply(op, dst, p, k, div);
    dr_shm_ring_release(l->ring, k);
    return (long)k;
  }
  uint8_t *into = dst;
  size_t room = n;
  size_t es = dr__rop_elem_bytes(op);
  int reduce = es > 1;
  if (reduce) {
    /* Reductions land in the stage first: recv() may end inside an
     * element. The carried bytes belong to the n asked for. */
    size_t lim = n < l->stage_cap ? n : l->stage_cap;
    into = l->stage + l->stage_have;
    room = lim - l->stage_have;
  }
  ssize_t r;
  for (;;) {
    r = recv(l->data_fd, into, room, MSG_DONTWAIT);
    if (r > 0)
      break;
    if (r == 0) {
      set_gone(l, "connection closed");
      return -EPIPE;
    }
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    set_gone_errno(l, errno);
    return -EPIPE;
  }
  if (!reduce)
    return (long)r;
  size_t have = l->stage_have + (size_t)r;
  size_t whole = have - have % es;
  apply(op, dst, l->stage, whole, div);
  memmove(l->stage, l->stage + whole, have - whole);
  l->stage_have = have - whole;
  return (long)whole;
}

int dr__link_recv_pad(dr_link_t *l, size_t n) {
  if (n == 0)
    return 1;
  if (dr_shm_ring_used(l->ring) < n)
    return 0;
  dr_shm_ring_release(l->ring, n);
  return 1;
}

/* ---- abort records ------------------------------------------------------ */

/* 256 bytes, little-endian: "DRAB", code, blamed, origin, seq, text. */
#define REC_MAGIC 0x42415244u

static void rec_encode(uint8_t rec[DR_PG_CTRL_RECORD], const dr_pg_fail_t *f) {
  memset(rec, 0, DR_PG_CTRL_RECORD);
  dr__put32(rec, REC_MAGIC);
  dr__put32(rec + 4, (uint32_t)f->code);
  dr__put32(rec + 8, f->blamed);
  dr__put32(rec + 12, f->origin);
  dr__put64(rec + 16, f->seq);
  size_t n = strnlen(f->text, sizeof(f->text) - 1);
  if (n > DR_PG_CTRL_RECORD - 25)
    n = DR_PG_CTRL_RECORD - 25;
  memcpy(rec + 24, f->text, n);
}

static int rec_decode(const uint8_t rec[DR_PG_CTRL_RECORD], dr_pg_fail_t *f) {
  if (dr__get32(rec) != REC_MAGIC)
    return -1;
  int code = (int)dr__get32(rec + 4);
  f->code = code == DR_PG_ETIMEOUT || code == DR_PG_EMISMATCH ? code
                                                               : DR_PG_EPEER;
  f->blamed = dr__get32(rec + 8);
  f->origin = dr__get32(rec + 12);
  f->seq = dr__get64(rec + 16);
  size_t n = strnlen((const char *)rec + 24, DR_PG_CTRL_RECORD - 25);
  if (n >= sizeof(f->text))
    n = sizeof(f->text) - 1;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = rec[24 + i];
    f->text[i] = (char)(c >= 0x20 && c < 0x7f ? c : '?');
  }
  f->text[n] = '\0';
  return 0;
}

/* 1: a record (in *f), 0: nothing yet, -1: closed (ctrl_eof set). */
static int ctrl_read(dr_link_t *l, dr_pg_fail_t *f) {
  if (l->ctrl_fd < 0 || l->ctrl_eof)
    return -1;
  for (;;) {
    ssize_t r = recv(l->ctrl_fd, l->ctrl_buf + l->ctrl_have,
                     DR_PG_CTRL_RECORD - l->ctrl_have, MSG_DONTWAIT);
    if (r > 0) {
      l->ctrl_have += (size_t)r;
      if (l->ctrl_have < DR_PG_CTRL_RECORD)
        continue;
      l->ctrl_have = 0;
      if (rec_decode(l->ctrl_buf, f) == 0)
        return 1;
      /* Garbage on the control connection: the peer is not speaking
       * our protocol any more; treat it as gone. */
      l->ctrl_eof = 1;
      set_gone(l, "sent garbage on its control connection");
      return -1;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    l->ctrl_eof = 1;
    set_gone(l, r == 0 ? "connection closed" : "connection reset");
    return -1;
  }
}

int dr__pg_poll_abort(dr_pg_t *pg, dr_pg_fail_t *f) {
  if (ctrl_read(&pg->recv, f) == 1)
    return 1;
  if (ctrl_read(&pg->send, f) == 1)
    return 1;
  return 0;
}

void dr__pg_peer_failure(dr_pg_t *pg, dr_link_t *l, uint64_t seq,
                         dr_pg_fail_t *f) {
  /* A neighbour that aborted wrote its record before it stopped; give
   * the record a moment to arrive, it names the root cause. */
  uint64_t until = dr_mono_ns() + (uint64_t)DR_PG_ABORT_GRACE_MS * 1000000u;
  for (;;) {
    if (dr__pg_poll_abort(pg, f))
      return;
    if (l->ctrl_eof || l->ctrl_fd < 0)
      break;
    uint64_t now = dr_mono_ns();
    if (now >= until)
      break;
    struct pollfd p = {.fd = l->ctrl_fd, .events = POLLIN};
    int ms = (int)((until - now + 999999u) / 1000000u);
    if (poll(&p, 1, ms) == 0)
      break;
  }
  f->code = DR_PG_EPEER;
  f->blamed = l->peer;
  f->origin = pg->rank;
  f->seq = seq;
  if (!l->gone)
    set_gone(l, "aborted the collective");
  snprintf(f->text, sizeof(f->text), "lost rank %u (%s)", l->peer,
           l->gone_why);
}

void dr__pg_abort(dr_pg_t *pg, const dr_pg_fail_t *f) {
  uint8_t rec[DR_PG_CTRL_RECORD];
  rec_encode(rec, f);
  dr_link_t *links[2] = {&pg->send, &pg->recv};
  for (int i = 0; i < 2; i++) {
    dr_link_t *l = links[i];
    /* The control connection is idle, so its send buffer takes the
     * record at once; when it does not, the peer learns from EOF. */
    if (l->ctrl_fd >= 0 && !l->ctrl_eof)
      (void)send(l->ctrl_fd, rec, sizeof(rec), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (l->ring != NULL)
      dr_shm_ring_abort(l->ring);
  }
}

/* ---- waiting ----------------------------------------------------------- */

static int ms_until(uint64_t now, uint64_t until) {
  if (until <= now)
    return 0;
  uint64_t ms = (until - now + 999999u) / 1000000u;
  return ms > 60000 ? 60000 : (int)ms;
}

static void check_alive(dr_link_t *l) {
  if (l->kind == DR_LINK_SHM && !l->gone && !dr_shm_ring_peer_alive(l->ring)) {
    char why[96];
    snprintf(why, sizeof(why), "process %d exited",
             dr_shm_ring_peer_pid(l->ring));
    set_gone(l, why);
  }
}

/* SO_RCVLOWAT for a wait on want bytes: of what dr__link_recv would read
 * next, the part not in the stage yet, at most `most`. Set only when it
 * changes. */
static void tcp_lowat(dr_link_t *l, size_t want, size_t most) {
  size_t lim = l->stage_cap > 0 && want > l->stage_cap ? l->stage_cap : want;
  size_t need = lim > l->stage_have ? lim - l->stage_have : 1;
  if (need > most)
    need = most; /* most >= 1 */
  if ((l->lowat == 0 ? 1 : l->lowat) == need)
    return;
  int v = (int)need;
  if (setsockopt(l->data_fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0)
    l->lowat = need;
}

int dr__pg_wait(dr_pg_t *pg, size_t send_wait, size_t recv_wait,
                uint64_t deadline_ns, uint64_t seq, dr_pg_fail_t *f) {
  if (dr__pg_poll_abort(pg, f))
    return f->code;
  dr_link_t *waited[2];
  int n_waited = 0;
  if (send_wait)
    waited[n_waited++] = &pg->send;
  if (recv_wait)
    waited[n_waited++] = &pg->recv;
  for (int i = 0; i < n_waited; i++) {
    /* A TCP peer that went away shows as EOF or a reset on the data
     * connection, which the next send or receive reports. A shared-memory
     * peer may have committed its last bytes just before it exited: fail
     * only when there is still nothing to do. */
    dr_link_t *l = waited[i];
    if (l->kind != DR_LINK_SHM ||
        (!l->gone && !dr_shm_ring_aborted(l->ring)))
      continue;
    /* Everything the peer ever committed is visible now; one more look
     * by the caller, then it is a failure. */
    if (!l->gone_rechecked) {
      l->gone_rechecked = 1;
      return 0;
    }
    dr__pg_peer_failure(pg, l, seq, f);
    return f->code;
  }
  uint64_t now = dr_mono_ns();
  if (now >= deadline_ns)
    return -ETIMEDOUT;
  uint64_t slice = now + (uint64_t)DR_PG_LIVENESS_MS * 1000000u;
  if (slice > deadline_ns)
    slice = deadline_ns;

  dr_shm_waiter_t w[2];
  int n_armed = 0, tcp = 0, ready = 0;
  for (int i = 0; i < n_waited && !ready; i++) {
    dr_link_t *l = waited[i];
    if (l->kind != DR_LINK_SHM) {
      tcp = 1;
      continue;
    }
    int r = l->sending
                ? dr_shm_ring_prepare_write(l->ring, send_wait, &w[n_armed])
                : dr_shm_ring_prepare_read(l->ring, 1, &w[n_armed]);
    if (r == 1)
      ready = 1;
    else
      n_armed++;
  }
  int timed_out = 0;
  if (!ready && !tcp) {
    int rc = dr_shm_wait(w, n_armed, slice);
    timed_out = rc == -ETIMEDOUT;
  } else if (!ready) {
    struct pollfd p[4];
    int np = 0;
    if (send_wait && pg->send.kind == DR_LINK_TCP)
      p[np++] = (struct pollfd){.fd = pg->send.data_fd, .events = POLLOUT};
    if (recv_wait && pg->recv.kind == DR_LINK_TCP) {
      tcp_lowat(&pg->recv, recv_wait, pg->tcp_lowat);
      p[np++] = (struct pollfd){.fd = pg->recv.data_fd, .events = POLLIN};
    }
    if (pg->send.ctrl_fd >= 0 && !pg->send.ctrl_eof)
      p[np++] = (struct pollfd){.fd = pg->send.ctrl_fd, .events = POLLIN};
    if (pg->recv.ctrl_fd >= 0 && !pg->recv.ctrl_eof)
      p[np++] = (struct pollfd){.fd = pg->recv.ctrl_fd, .events = POLLIN};
    /* A shared-memory side cannot wake poll(): look at it every ms. */
    uint64_t until = n_armed > 0 && now + 1000000u < slice ? now + 1000000u
                                                           : slice;
    int rc = poll(p, (nfds_t)np, ms_until(now, until));
    timed_out = rc == 0 && until == slice;
  }
  for (int i = 0; i < n_armed; i++)
    dr_shm_wait_done(&w[i]);
  if (timed_out)
    for (int i = 0; i < n_waited; i++)
      check_alive(waited[i]);
  return 0;
}
