/* The blocking client: the handshake and one function per request. See
 * client.h for the contract; client_conn.c holds the connection core and
 * client_io.c the socket work. */
#include "client.h"

#include "auth.h"
#include "client_conn.h"
#include "client_io.h"
#include "errors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOST_NAME_LEN 256

static dr_bytes_t bytes(const void *p, size_t n_bytes) {
  dr_bytes_t b = {p, (uint32_t)n_bytes};
  return b;
}

/* dr_bytes_t is 32-bit: longer values are refused before truncation. */
static int check_len(size_t n_bytes) {
  return n_bytes > UINT32_MAX ? DR_ETOOBIG : 0;
}

/* An owned, NUL-terminated copy (the NUL is not counted). */
static uint8_t *dup_bytes(dr_bytes_t b) {
  uint8_t *p = malloc((size_t)b.len + 1);
  if (p == NULL)
    return NULL;
  if (b.len > 0)
    memcpy(p, b.p, b.len);
  p[b.len] = '\0';
  return p;
}

static void put_err(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put_err(char *buf, size_t len, const char *fmt, ...) {
  if (buf == NULL || len == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
}

/* The session decides; this only carries its frames. An ERROR reply
 * comes back from dr__client_request as the server's code. */
static int handshake(dr_client_t *c, const char *host) {
  dr_msg_t m;
  dr_sess_event_t ev;
  uint32_t id;
  dr__client_begin(c, &id);
  int rc = dr_sess_hello(&c->sess, id, host, &c->wbuf);
  if (rc == 0)
    rc = dr__client_request(c, id, 0, DR_MSG_WELCOME, &m);
  while (rc == 0) {
    dr__client_begin(c, &id);
    rc = dr_sess_on_frame(&c->sess, &m, id, &c->wbuf, &ev);
    if (rc != 0) {
      dr__client_set_errmsg(c, c->sess.errmsg, strlen(c->sess.errmsg));
      return rc;
    }
    if (ev.type == DR_SESS_READY) {
      c->dec.authed = 1;
      return 0;
    }
    if (c->wbuf.len == 0)
      return DR_EUNEXPECTED;
    rc = dr__client_request(c, id, 0, DR_MSG_OK, &m); /* the AUTH's answer */
  }
  return rc;
}

int dr_client_open(const dr_client_opts_t *o, dr_client_t **out, char *errbuf,
                   size_t errbuf_len) {
  char host[HOST_NAME_LEN];
  int last_err = 0;
  int rc = 0;

  if (errbuf != NULL && errbuf_len > 0)
    errbuf[0] = '\0';
  if (out == NULL)
    return DR_EBADARG;
  *out = NULL;
  if (o == NULL || o->host == NULL || o->run_id == NULL)
    return DR_EBADARG;
  dr_client_t *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return -ENOMEM;
  c->fd = -1;
  c->io_timeout_ms = o->io_timeout_ms > 0 ? o->io_timeout_ms : 30000;
  dr_decoder_init(&c->dec, o->limits);
  dr_buf_init(&c->wbuf);

  int connect_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
  rc = dr__io_connect(o->host, o->port, dr__io_deadline(connect_ms, 0),
                      &c->fd, &last_err);
  if (rc == -ETIMEDOUT && last_err != 0)
    put_err(errbuf, errbuf_len,
            "connect() to %s:%u failed for %d ms (last attempt: %s)", o->host,
            (unsigned)o->port, connect_ms, dr_strerror(last_err));
  else if (rc == -ENOENT)
    put_err(errbuf, errbuf_len, "getaddrinfo() cannot resolve %s: %s",
            o->host, dr_strerror(rc));
  else if (rc != 0)
    put_err(errbuf, errbuf_len, "connect() to %s:%u failed: %s", o->host,
            (unsigned)o->port, dr_strerror(rc));
  if (rc != 0)
    goto fail;

  if (o->client_host != NULL) {
    snprintf(host, sizeof(host), "%s", o->client_host);
  } else if (gethostname(host, sizeof(host)) != 0) {
    rc = -errno;
    put_err(errbuf, errbuf_len, "gethostname() failed: %s", dr_strerror(rc));
    goto fail;
  }
  host[sizeof(host) - 1] = '\0';

  rc = dr_sess_init(&c->sess, o->run_id, o->secret, o->secret_len);
  if (rc == 0)
    rc = handshake(c, host);
  if (rc != 0) {
    put_err(errbuf, errbuf_len, "%s",
            c->errmsg[0] != '\0' ? c->errmsg : dr_strerror(rc));
    goto fail;
  }
  *out = c;
  return 0;

fail:
  dr_client_close(&c);
  return rc;
}

void dr_client_close(dr_client_t **cp) {
  if (cp == NULL || *cp == NULL)
    return;
  dr_client_t *c = *cp;
  if (c->fd >= 0)
    close(c->fd); /* nothing to recover on a socket's close error */
  dr__client_release(c);
  free(c);
  *cp = NULL;
}

int dr_client_fd(const dr_client_t *c) { return c != NULL ? c->fd : -1; }

const char *dr_client_errmsg(const dr_client_t *c) {
  return c != NULL ? c->errmsg : "";
}

/* ---- store ------------------------------------------------------------- */

int dr_client_set(dr_client_t *c, uint64_t gen, const char *key,
                  const void *value, size_t n_bytes) {
  dr_msg_t m;
  uint32_t id;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = key == NULL || (value == NULL && n_bytes > 0) ? DR_EBADARG
                                                       : check_len(n_bytes);
  if (rc == 0)
    rc = dr_enc_set(&c->wbuf, id, gen, dr_str(key), bytes(value, n_bytes));
  return rc != 0 ? rc : dr__client_request(c, id, 0, DR_MSG_OK, &m);
}

int dr_client_get(dr_client_t *c, uint64_t gen, const char *key,
                  uint64_t wait_ms, uint8_t **value, size_t *n_bytes) {
  dr_msg_t m;
  uint32_t id;
  if (value == NULL || n_bytes == NULL || key == NULL)
    return DR_EBADARG;
  *value = NULL;
  *n_bytes = 0;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_enc_get(&c->wbuf, id, gen, dr_str(key), wait_ms);
  if (rc == 0)
    rc = dr__client_request(c, id, wait_ms, DR_MSG_VALUE, &m);
  dr_bytes_t v;
  if (rc == 0)
    rc = dr_msg_value(&m, &v);
  if (rc != 0)
    return rc;
  if ((*value = dup_bytes(v)) == NULL)
    return -ENOMEM;
  *n_bytes = v.len;
  return 0;
}

/* Sends a request answered by INT and stores its value. */
static int int_request(dr_client_t *c, uint32_t id, uint64_t wait_ms,
                       int64_t *out) {
  dr_msg_t m;
  int rc = dr__client_request(c, id, wait_ms, DR_MSG_INT, &m);
  return rc != 0 ? rc : dr_msg_int(&m, out);
}

int dr_client_add(dr_client_t *c, uint64_t gen, const char *key,
                  int64_t delta, int64_t *result) {
  uint32_t id;
  if (key == NULL || result == NULL)
    return DR_EBADARG;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_enc_add(&c->wbuf, id, gen, dr_str(key), delta);
  return rc != 0 ? rc : int_request(c, id, 0, result);
}

int dr_client_cas(dr_client_t *c, uint64_t gen, const char *key,
                  const void *expected, size_t expected_len,
                  const void *desired, size_t desired_len, uint8_t **current,
                  size_t *current_len) {
  dr_msg_t m;
  uint32_t id;
  if (key == NULL || current == NULL || current_len == NULL ||
      (expected == NULL && expected_len > 0) ||
      (desired == NULL && desired_len > 0))
    return DR_EBADARG;
  *current = NULL;
  *current_len = 0;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = check_len(expected_len) != 0 ? DR_ETOOBIG : check_len(desired_len);
  if (rc == 0)
    rc = dr_enc_cas(&c->wbuf, id, gen, dr_str(key),
                    bytes(expected, expected_len), bytes(desired, desired_len));
  if (rc == 0)
    rc = dr__client_request(c, id, 0, DR_MSG_VALUE, &m);
  dr_bytes_t v;
  if (rc == 0)
    rc = dr_msg_value(&m, &v);
  if (rc != 0)
    return rc;
  if ((*current = dup_bytes(v)) == NULL)
    return -ENOMEM;
  *current_len = v.len;
  return 0;
}

int dr_client_delete(dr_client_t *c, uint64_t gen, const char *key,
                     int *deleted) {
  uint32_t id;
  int64_t v = 0;
  if (key == NULL || deleted == NULL)
    return DR_EBADARG;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_enc_delete(&c->wbuf, id, gen, dr_str(key));
  if (rc == 0)
    rc = int_request(c, id, 0, &v);
  *deleted = rc == 0 && v != 0;
  return rc;
}

/* Borrowed dr_bytes_t views of NUL-terminated keys; caller frees. */
static int key_views(const char *const *keys, size_t n_keys, dr_bytes_t **out) {
  if (keys == NULL && n_keys > 0)
    return DR_EBADARG;
  if (n_keys > UINT32_MAX)
    return DR_ETOOBIG;
  *out = malloc((n_keys > 0 ? n_keys : 1) * sizeof(dr_bytes_t));
  if (*out == NULL)
    return -ENOMEM;
  for (size_t i = 0; i < n_keys; i++) {
    if (keys[i] == NULL) {
      free(*out);
      *out = NULL;
      return DR_EBADARG;
    }
    (*out)[i] = dr_str(keys[i]);
  }
  return 0;
}

/* One block: n dr_bytes_t, then each value and a NUL (not counted). */
static int copy_values(const dr_list_t *l, dr_bytes_t **out) {
  size_t head = (size_t)l->count * sizeof(dr_bytes_t);
  dr_bytes_t *v = malloc(head + l->len + l->count + 1);
  if (v == NULL)
    return -ENOMEM;
  uint8_t *data = (uint8_t *)v + head;
  uint32_t pos = 0;
  dr_bytes_t item;
  for (uint32_t i = 0; dr_list_next(l, &pos, &item); i++) {
    if (item.len > 0)
      memcpy(data, item.p, item.len);
    data[item.len] = '\0';
    v[i] = bytes(data, item.len);
    data += (size_t)item.len + 1;
  }
  *out = v;
  return 0;
}

int dr_client_multi_get(dr_client_t *c, uint64_t gen, const char *const *keys,
                        size_t n_keys, uint64_t wait_ms, dr_bytes_t **values) {
  dr_msg_t m;
  dr_bytes_t *k = NULL;
  uint32_t id;
  if (values == NULL)
    return DR_EBADARG;
  *values = NULL;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = key_views(keys, n_keys, &k);
  if (rc == 0)
    rc = dr_enc_multi_get(&c->wbuf, id, gen, k, n_keys, wait_ms);
  free(k);
  if (rc == 0)
    rc = dr__client_request(c, id, wait_ms, DR_MSG_VALUES, &m);
  dr_list_t l;
  if (rc == 0)
    rc = dr_msg_values(&m, &l);
  if (rc == 0 && l.count != n_keys)
    rc = DR_EFIELD;
  return rc != 0 ? rc : copy_values(&l, values);
}

int dr_client_check(dr_client_t *c, uint64_t gen, const char *const *keys,
                    size_t n_keys, int *all_exist) {
  dr_bytes_t *k = NULL;
  uint32_t id;
  int64_t v = 0;
  if (all_exist == NULL)
    return DR_EBADARG;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = key_views(keys, n_keys, &k);
  if (rc == 0)
    rc = dr_enc_check(&c->wbuf, id, gen, k, n_keys);
  free(k);
  if (rc == 0)
    rc = int_request(c, id, 0, &v);
  *all_exist = rc == 0 && v != 0;
  return rc;
}

int dr_client_barrier(dr_client_t *c, uint64_t gen, const char *name,
                      uint64_t n, uint64_t wait_ms) {
  dr_msg_t m;
  uint32_t id;
  if (name == NULL)
    return DR_EBADARG;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_enc_barrier(&c->wbuf, id, gen, dr_str(name), n, wait_ms);
  return rc != 0 ? rc : dr__client_request(c, id, wait_ms, DR_MSG_OK, &m);
}

/* ---- rendezvous -------------------------------------------------------- */

void dr_assignment_free(dr_assignment_t *a) {
  if (a == NULL)
    return;
  free(a->master_addr);
  free(a->bootstrap);
  free(a->peers);
  free(a->successors);
  memset(a, 0, sizeof(*a));
}

int dr_client_join(dr_client_t *c, const dr_join_t *j, int wait_ms,
                   dr_assignment_t *out) {
  dr_msg_t m;
  dr_sess_event_t ev;
  uint32_t id;
  if (j == NULL || out == NULL)
    return DR_EBADARG;
  memset(out, 0, sizeof(*out));
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_sess_join(&c->sess, id, j, &c->wbuf);
  /* The server holds a JOIN until the round completes: wait_ms is the
   * whole deadline, not an addition to the I/O timeout. */
  if (rc == 0)
    rc = dr__client_request_until(
        c, id, dr__io_deadline(wait_ms > 0 ? wait_ms : c->io_timeout_ms, 0),
        DR_MSG_ASSIGN, &m);
  if (rc == 0)
    rc = dr_sess_on_frame(&c->sess, &m, 0, NULL, &ev);
  if (rc != 0)
    return rc;
  *out = ev.asg;
  return 0;
}

int dr_client_resume(dr_client_t *c, const dr_resume_t *q) {
  dr_msg_t m;
  dr_sess_event_t ev;
  uint32_t id;
  if (q == NULL)
    return DR_EBADARG;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_sess_resume(&c->sess, id, q, &c->wbuf);
  if (rc == 0)
    rc = dr__client_request(c, id, 0, DR_MSG_OK, &m);
  if (rc == 0)
    rc = dr_sess_on_frame(&c->sess, &m, 0, NULL, &ev);
  return rc != 0 ? rc : ev.type == DR_SESS_RESUMED ? 0 : DR_EUNEXPECTED;
}

/* Sends the frame in wbuf; the server does not answer it. */
static int send_only(dr_client_t *c) {
  return dr__client_send(c, dr__io_deadline(c->io_timeout_ms, 0));
}

int dr_client_heartbeat(dr_client_t *c, uint64_t gen) {
  uint32_t id;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_sess_heartbeat(&c->sess, id, gen, &c->wbuf);
  return rc != 0 ? rc : send_only(c);
}

int dr_client_report_failure(dr_client_t *c, const dr_failure_t *f) {
  uint32_t id;
  if (f == NULL)
    return DR_EBADARG;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_enc_failure(&c->wbuf, id, f);
  return rc != 0 ? rc : send_only(c);
}

int dr_client_report_success(dr_client_t *c, uint64_t gen) {
  uint32_t id;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_enc_success(&c->wbuf, id, gen);
  return rc != 0 ? rc : send_only(c);
}

int dr_client_report_ranks(dr_client_t *c, uint64_t gen,
                           const dr_rank_rec_t *ranks, size_t n_ranks) {
  uint32_t id;
  if (ranks == NULL && n_ranks > 0)
    return DR_EBADARG;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_enc_ranks(&c->wbuf, 0, gen, ranks, n_ranks);
  return rc != 0 ? rc : send_only(c);
}

int dr_client_report_stacks(dr_client_t *c, uint64_t sid,
                            const dr_stack_rec_t *stacks, size_t n_stacks) {
  uint32_t id;
  if (stacks == NULL && n_stacks > 0)
    return DR_EBADARG;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_enc_stack_dump(&c->wbuf, 0, sid, stacks, n_stacks);
  return rc != 0 ? rc : send_only(c);
}

int dr_client_status(dr_client_t *c, uint32_t flags, uint64_t wait_ms,
                     dr_msg_t *reply) {
  uint32_t id;
  if (reply == NULL)
    return DR_EBADARG;
  int rc = dr__client_begin(c, &id);
  if (rc == 0)
    rc = dr_enc_status(&c->wbuf, id, flags, wait_ms);
  if (rc == 0)
    rc = dr__client_request(c, id, wait_ms, DR_MSG_JOB_STATUS, reply);
  if (rc == 0) {
    dr_job_status_t js;
    rc = dr_msg_job_status(reply, &js);
  }
  return rc;
}

int dr_client_recv(dr_client_t *c, int timeout_ms, dr_msg_t *msg) {
  if (c == NULL || msg == NULL)
    return DR_EBADARG;
  c->errmsg[0] = '\0';
  return dr__client_next_push(
      c, dr__io_deadline(timeout_ms > 0 ? timeout_ms : 0, 0), msg);
}
