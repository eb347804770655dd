/* The client's connection core. See client_conn.h. */
#include "client_conn.h"

#include "client_io.h"
#include "errors.h"
#include "mono.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define RBUF_MIN 4096u
/* Above this, a receive buffer that has drained goes back to RBUF_MIN. */
#define RBUF_KEEP (1u << 20)

int dr__client_begin(dr_client_t *c, uint32_t *id) {
  if (c == NULL)
    return DR_EBADARG;
  c->errmsg[0] = '\0';
  dr_buf_reset(&c->wbuf);
  if (++c->last_req == 0) /* 0 marks server pushes */
    c->last_req = 1;
  *id = c->last_req;
  return 0;
}

void dr__client_set_errmsg(dr_client_t *c, const void *p, size_t n_bytes) {
  if (n_bytes >= sizeof(c->errmsg))
    n_bytes = sizeof(c->errmsg) - 1;
  if (n_bytes > 0)
    memcpy(c->errmsg, p, n_bytes);
  c->errmsg[n_bytes] = '\0';
}

/* An ERROR frame: its code travels as a positive value (an errno, or the
 * absolute value of a dr_errno_t), so the local code is its negative. */
static int take_error(dr_client_t *c, const dr_msg_t *m) {
  dr_error_t e;
  dr_msg_error(m, &e);
  dr__client_set_errmsg(c, e.message.p, e.message.len);
  return e.code;
}

static int past(int64_t deadline_ms) { return (int64_t)dr_mono_ms() >= deadline_ms; }

/* Reads until one whole frame is buffered; *m borrows from rbuf. The
 * deadline is checked before every read but the first, not only when
 * recv() would block: a server that always has bytes ready would otherwise
 * hold the caller past it. The first read is taken even past the deadline,
 * so that a deadline of "now" still takes what is readable. */
static int read_frame(dr_client_t *c, int64_t deadline_ms, dr_msg_t *m) {
  if (c->broken != 0)
    return c->broken;
  if (c->rskip > 0) {
    memmove(c->rbuf, c->rbuf + c->rskip, c->rlen - c->rskip);
    c->rlen -= c->rskip;
    c->rskip = 0;
    if (c->rcap > RBUF_KEEP && c->rlen <= RBUF_MIN) {
      uint8_t *p = realloc(c->rbuf, RBUF_MIN);
      if (p != NULL) {
        c->rbuf = p;
        c->rcap = RBUF_MIN;
      }
    }
  }
  for (int pass = 0;; pass++) {
    size_t consumed, need;
    int err;
    dr_decode_status_t st =
        dr_decode(&c->dec, c->rbuf, c->rlen, m, &consumed, &need, &err);
    if (st == DR_DECODE_OK) {
      c->rskip = consumed;
      return 0;
    }
    if (st == DR_DECODE_ERROR)
      return c->broken = err; /* the stream cannot be resynchronised */
    if (pass > 0 && past(deadline_ms))
      return -ETIMEDOUT; /* the partial frame stays buffered */
    if (need > c->rcap) {
      size_t cap = need > RBUF_MIN ? need : RBUF_MIN;
      uint8_t *p = realloc(c->rbuf, cap);
      if (p == NULL)
        return -ENOMEM;
      c->rbuf = p;
      c->rcap = cap;
    }
    size_t got;
    int rc = dr__io_recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen,
                         deadline_ms, &got);
    if (rc == -ETIMEDOUT)
      return rc; /* a partial frame stays buffered for the next call */
    if (rc != 0)
      return c->broken = rc;
    c->rlen += got;
  }
}

static int is_push_type(uint8_t type) {
  return type == DR_MSG_RESTART || type == DR_MSG_STOP ||
         type == DR_MSG_HEARTBEAT || type == DR_MSG_ROUND_STATUS ||
         type == DR_MSG_STACKS;
}

_Static_assert(DR_CLIENT_MAX_PUSHES > 4,
               "the queue must hold the newest of each of the four types "
               "that keep one, and a STACKS");

static void queue_remove(dr_client_t *c, size_t i) {
  free(c->q[i]);
  memmove(&c->q[i], &c->q[i + 1], (c->n_q - i - 1) * sizeof(c->q[0]));
  c->n_q--;
}

/* Queues a copy of the frame read_frame() just returned, within the bound
 * client.h states: a push of a type other than STACKS replaces the queued
 * one of its type; a full queue drops its oldest STACKS. At most four
 * entries are not STACKS, so a full queue always has one to drop. */
static int queue_push(dr_client_t *c, uint8_t type) {
  dr__push_t *p = malloc(sizeof(*p) + c->rskip);
  if (p == NULL)
    return -ENOMEM;
  p->type = type;
  p->len = c->rskip;
  memcpy(p->data, c->rbuf, c->rskip);
  size_t old = c->n_q; /* none */
  for (size_t i = 0; i < c->n_q && old == c->n_q; i++)
    if (type != DR_MSG_STACKS && c->q[i]->type == type)
      old = i;
  for (size_t i = 0; i < c->n_q && old == c->n_q &&
                     c->n_q == DR_CLIENT_MAX_PUSHES; i++)
    if (c->q[i]->type == DR_MSG_STACKS)
      old = i;
  if (old < c->n_q)
    queue_remove(c, old);
  c->q[c->n_q++] = p;
  return 0;
}

/* 1 when id was sent before `next` (the id a new request would get, or the
 * one awaited): its reply comes after the request timed out. */
static int is_stale(uint32_t id, uint32_t next) {
  return (int32_t)(next - id) > 0;
}

int dr__client_send(dr_client_t *c, int64_t deadline_ms) {
  dr_msg_t m;
  size_t consumed, need, sent;
  int err;
  if (c->broken != 0)
    return c->broken;
  if (dr_decode(&c->dec, c->wbuf.data, c->wbuf.len, &m, &consumed, &need,
                &err) != DR_DECODE_OK)
    return err != 0 ? err : DR_ETOOBIG;
  int rc = dr__io_send_all(c->fd, c->wbuf.data, c->wbuf.len, deadline_ms,
                           &sent);
  if (rc != 0 && (sent > 0 || rc != -ETIMEDOUT))
    c->broken = rc; /* a partial frame went out, or the socket failed */
  return rc;
}

int dr__client_request(dr_client_t *c, uint32_t id, uint64_t wait_ms,
                       uint8_t want, dr_msg_t *m) {
  return dr__client_request_until(
      c, id, dr__io_deadline(c->io_timeout_ms, wait_ms), want, m);
}

int dr__client_request_until(dr_client_t *c, uint32_t id, int64_t deadline,
                             uint8_t want, dr_msg_t *m) {
  int rc = dr__client_send(c, deadline);
  if (rc != 0)
    return rc;
  for (;;) {
    rc = read_frame(c, deadline, m);
    if (rc != 0)
      return rc;
    if (m->req_id == id || m->req_id == 0) {
      /* An ERROR with id 0 answers whatever was in flight. */
      if (m->type == DR_MSG_ERROR)
        return take_error(c, m);
      if (m->req_id == id)
        return m->type == want ? 0 : DR_EUNEXPECTED;
      if (!is_push_type(m->type))
        return DR_EUNEXPECTED;
      rc = queue_push(c, m->type);
      if (rc != 0)
        return rc;
    } else if (!is_stale(m->req_id, id)) {
      return DR_EUNEXPECTED; /* a reply to a request never sent */
    }
    /* Pushes and stale replies may come without pause: only the reply
     * ends the wait before the deadline. */
    if (past(deadline))
      return -ETIMEDOUT;
  }
}

int dr__client_next_push(dr_client_t *c, int64_t deadline_ms, dr_msg_t *m) {
  free(c->popped);
  c->popped = NULL;
  if (c->n_q > 0) {
    dr__push_t *p = c->q[0];
    memmove(&c->q[0], &c->q[1], (c->n_q - 1) * sizeof(c->q[0]));
    c->n_q--;
    c->popped = p;
    size_t consumed, need;
    int err;
    /* It decoded once already, under limits that can only have widened. */
    if (dr_decode(&c->dec, p->data, p->len, m, &consumed, &need, &err) !=
        DR_DECODE_OK)
      return DR_EUNEXPECTED;
    return 0;
  }
  for (;;) {
    int rc = read_frame(c, deadline_ms, m);
    if (rc != 0)
      return rc;
    if (m->req_id == 0) {
      if (m->type == DR_MSG_ERROR)
        return take_error(c, m);
      return is_push_type(m->type) ? 0 : DR_EUNEXPECTED;
    }
    if (!is_stale(m->req_id, c->last_req + 1))
      return DR_EUNEXPECTED;
    /* else a late reply to a request that timed out: dropped, and a
     * stream of them cannot hold the caller past its deadline */
    if (past(deadline_ms))
      return -ETIMEDOUT;
  }
}

void dr__client_release(dr_client_t *c) {
  while (c->n_q > 0)
    free(c->q[--c->n_q]);
  free(c->popped);
  c->popped = NULL;
  free(c->rbuf);
  c->rbuf = NULL;
  c->rlen = c->rcap = c->rskip = 0;
  dr_buf_free(&c->wbuf);
  dr_sess_free(&c->sess);
}
