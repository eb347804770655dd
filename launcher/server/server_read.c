/* Reading server connections: buffers for unfinished frames, their global
 * cap, and decoding into requests for dr__conn_dispatch().
 *
 * What unfinished frames hold is counted in s->frame_bytes (the sum of the
 * connections' in_cap). A buffer grows with what its frame has sent, at
 * most doubling at a time, instead of to the size its header declares at
 * once: the count is then about what clients have really sent, and a
 * client cannot reserve 64 MiB with 12 bytes. Past cfg.max_frame_memory
 * the largest holders are dropped until the rest fits. */
#include "server_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "log.h"

/* Read in chunks of at least this much. */
#define DR_READ_CHUNK (64u * 1024u)

/* Gives c's frame buffer cap bytes (0: frees it), keeping the count. */
static int in_resize(dr_conn_t *c, size_t cap) {
  if (cap == c->in_cap)
    return 0;
  if (cap == 0) {
    free(c->in);
    c->in = NULL;
  } else {
    uint8_t *p = realloc(c->in, cap);
    if (p == NULL)
      return -ENOMEM;
    c->in = p;
  }
  c->srv->frame_bytes = c->srv->frame_bytes - c->in_cap + cap;
  c->in_cap = cap;
  return 0;
}

void dr__conn_in_free(dr_conn_t *c) {
  in_resize(c, 0);
  c->in_len = 0;
}

/* Drops the largest holders of unfinished frames until the others fit.
 * Called where no connection has a read buffer outstanding (at the end of
 * a read callback), so the victims' buffers can be freed at once. */
static void enforce_frame_memory(dr_server_t *s) {
  uint64_t cap = s->cfg.max_frame_memory;
  while (s->frame_bytes > cap) {
    dr_conn_t *big = NULL;
    uint64_t doomed = 0;
    for (dr_conn_t *x = s->conns; x != NULL; x = x->next) {
      if (x->doomed != NULL)
        doomed += x->in_cap; /* freed when closed, in a moment */
      else if (x->in_cap > 0 && (big == NULL || x->in_cap > big->in_cap))
        big = x;
    }
    if (big == NULL || s->frame_bytes - doomed <= cap)
      return;
    char sample[160];
    dr_log_sample(big->in, big->in_len < 24 ? big->in_len : 24, sample,
                  sizeof(sample));
    s->stats.dropped[DR_DROP_FRAME_MEMORY]++;
    dr__conn_warn(big, DR_BAD_KIND_DROP(DR_DROP_FRAME_MEMORY),
                  "dropping %s (%s): its unfinished frame holds %zu bytes, "
                  "and unfinished frames hold %" PRIu64 " bytes, over the "
                  "limit of %" PRIu64 "; first bytes: \"%s\"",
                  big->rp.addr, big->rp.host, big->in_cap, s->frame_bytes, cap,
                  sample);
    dr__conn_in_free(big);
    dr__conn_send_error(big, 0, -ENOBUFS,
                        "the server holds too much of unfinished frames "
                        "(limit %" PRIu64 " bytes); this one was dropped",
                        cap);
    dr__conn_doom(big, "frame memory over the limit");
  }
}

/* With nothing pending, a connection reads into the loop's shared buffer
 * (libuv calls alloc and read back to back for one stream), so an idle
 * connection holds no read memory; only a partial frame is copied out. */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  dr_conn_t *c = h->data;
  if (c->in_len == 0) {
    buf->base = (char *)c->srv->rbuf;
    buf->len = sizeof(c->srv->rbuf);
    return;
  }
  /* need was capped by the decoder before it was reported. */
  size_t want = c->in_len + DR_READ_CHUNK;
  if (c->need > want) {
    size_t twice = c->in_cap * 2;
    want = c->need < twice ? c->need : twice > want ? twice : want;
  }
  if (want > c->in_cap && in_resize(c, want) != 0) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = (char *)c->in + c->in_len;
  buf->len = c->in_cap - c->in_len;
}

/* Keeps the undecoded tail data[0..n) for the next read. shared: data is
 * in the loop's buffer; else in c->in. done: a frame ended in this read,
 * so a large buffer may shrink to its tail. */
static int keep_tail(dr_conn_t *c, const uint8_t *data, size_t n, int shared,
                     int done) {
  if (n == 0) {
    dr__conn_in_free(c);
    return 0;
  }
  if (!shared) {
    if (data != c->in)
      memmove(c->in, data, n);
    c->in_len = n;
    if (done && c->in_cap > n + 2 * DR_READ_CHUNK)
      in_resize(c, n + DR_READ_CHUNK); /* a failure keeps the larger one */
    return 0;
  }
  int rc = in_resize(c, n + DR_READ_CHUNK);
  if (rc != 0)
    return rc;
  memcpy(c->in, data, n);
  c->in_len = n;
  return 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  dr_conn_t *c = st->data;
  dr_server_t *s = c->srv;
  if (nread == UV_ENOBUFS) {
    dr__conn_close(c, "out of memory");
    return;
  }
  if (nread < 0) {
    dr__conn_close(c, nread == UV_EOF ? "connection closed by peer"
                                      : uv_strerror((int)nread));
    return;
  }
  if (nread == 0 || c->state == DR_CONN_CLOSING)
    return;
  int shared = buf->base == (char *)s->rbuf;
  const uint8_t *data;
  size_t len;
  if (shared) {
    data = s->rbuf;
    len = (size_t)nread;
  } else {
    c->in_len += (size_t)nread;
    data = c->in;
    len = c->in_len;
  }
  uint64_t now = dr__now_ms(s);
  c->rp.last_seen_ms = c->active_ms = now;
  c->rx_us = dr_clock_now_us(); /* before any frame of this read is handled */

  size_t off = 0;
  while (c->state != DR_CONN_CLOSING && c->doomed == NULL) {
    dr_msg_t m;
    size_t used, need;
    int err;
    dr_decode_status_t rc =
        dr_decode(&c->dec, data + off, len - off, &m, &used, &need, &err);
    if (rc == DR_DECODE_NEED_MORE) {
      c->need = need;
      break;
    }
    if (rc == DR_DECODE_ERROR) {
      if (err == DR_EVERSION) {
        dr__conn_warn(c, DR_REFUSE_VERSION,
                      "refused %s: protocol version %u (this server speaks "
                      "%u)",
                      c->rp.addr, m.version, DR_PROTO_VERSION);
        dr__conn_count_refused(c, DR_REFUSE_VERSION);
        dr__conn_send_error(c, m.req_id, DR_EVERSION,
                            "protocol version %u is not supported; this "
                            "server speaks version %u",
                            m.version, DR_PROTO_VERSION);
        dr__conn_close(c, "protocol version mismatch");
      } else {
        dr__conn_reject(c, err, "malformed frame", data + off, len - off);
      }
      return;
    }
    c->need = 0;
    dr__conn_dispatch(c, &m);
    off += used;
  }
  if (c->state == DR_CONN_CLOSING)
    return;
  size_t tail = len - off;
  /* A tail after a whole frame, or in the shared buffer (nothing was
   * pending), is a frame that began now. */
  if (tail > 0 && (shared || off > 0))
    c->frame_ms = now;
  if (keep_tail(c, data + off, tail, shared, off > 0) != 0) {
    dr__conn_close(c, "out of memory");
    return;
  }
  if (s->frame_bytes > s->cfg.max_frame_memory)
    enforce_frame_memory(s);
}

int dr__conn_read_start(dr_conn_t *c) {
  return uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}
