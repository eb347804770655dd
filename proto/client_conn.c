/* The client's connection core. See client_conn.h. */
#include "client_conn.h"

#include "client_io.h"
#include "errors.h"

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

/* Reads until one whole frame is buffered; *m borrows from rbuf. */
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
      return c->broken = err; /* the stream cannot be resynchronised */
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

/* Queues a copy of the frame read_frame() just returned. Only the latest
 * HEARTBEAT and ROUND_STATUS matter, so a new one replaces a queued one of
 * its type: the queue stays bounded however long the caller leaves it
 * (the server asks for stacks only when someone asks it to). */
static int queue_push(dr_client_t *c, uint8_t type) {
  dr__push_t *p = malloc(sizeof(*p) + c->rskip);
  if (p == NULL)
    return -ENOMEM;
  p->next = NULL;
  p->type = type;
  p->len = c->rskip;
  memcpy(p->data, c->rbuf, c->rskip);
  if (type == DR_MSG_HEARTBEAT || type == DR_MSG_ROUND_STATUS) {
    for (dr__push_t **pp = &c->q_head; *pp != NULL; pp = &(*pp)->next) {
      if ((*pp)->type != type)
        continue;
      dr__push_t *old = *pp;
      *pp = old->next;
      c->q_tail = NULL;
      for (dr__push_t *q = c->q_head; q != NULL; q = q->next)
        c->q_tail = q;
      free(old);
      break;
    }
  }
  if (c->q_tail != NULL)
    c->q_tail->next = p;
  else
    c->q_head = p;
  c->q_tail = p;
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
  }
}

int dr__client_next_push(dr_client_t *c, int64_t deadline_ms, dr_msg_t *m) {
  free(c->popped);
  c->popped = NULL;
  if (c->q_head != NULL) {
    dr__push_t *p = c->q_head;
    c->q_head = p->next;
    if (c->q_head == NULL)
      c->q_tail = NULL;
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
    /* else a late reply to a request that timed out: dropped */
  }
}

void dr__client_release(dr_client_t *c) {
  for (dr__push_t *p = c->q_head, *next; p != NULL; p = next) {
    next = p->next;
    free(p);
  }
  c->q_head = c->q_tail = NULL;
  free(c->popped);
  c->popped = NULL;
  free(c->rbuf);
  c->rbuf = NULL;
  c->rlen = c->rcap = c->rskip = 0;
  dr_buf_free(&c->wbuf);
  dr_sess_free(&c->sess);
}
