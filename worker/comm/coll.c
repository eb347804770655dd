/* The ring algorithms, as schedules of steps run by one engine.
 *
 * A step sends one region of the buffer to the right neighbour and
 * receives another from the left one (copying it in, or adding it to what
 * is there). The engine moves both at once, a chunk at a time, so neither
 * neighbour ever waits on the other's full buffer. A step's send may
 * depend on an earlier step's receive of the same region (all-reduce and
 * all-gather forward what they just received; broadcast forwards what it
 * is receiving): it sends only the bytes already received, which
 * pipelines the chunks across steps.
 *
 * Before its steps each collective sends its header (coll_hdr.c) to the
 * right and takes its left neighbour's, on every link, even where it
 * moves no data (a zero-byte collective, a broadcast's link into the
 * root): the engine receives no data before that header matched this
 * rank's own, so a neighbour in another collective fails both at once
 * instead of hanging until the timeout.
 *
 * All-reduce: reduce-scatter then all-gather over W - 1 steps each. The
 * buffer is cut into W segments by ring position; segment k is summed in
 * ring order starting at position k (((x[k] + x[k+1]) + ...) + x[k-1])
 * and completed at position k - 1, which divides it for AVG, then copies
 * go around. Every rank thus holds the same bits (host_weights.c sums in
 * this order too).
 */
#include "pg_internal.h"
#include "mono.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  size_t send_off, send_len;
  size_t recv_off, recv_len;
  dr_rop_t op;
  int dep; /* step whose received bytes this one sends; -1: none */
} step_t;

typedef struct {
  dr_pg_t *pg;
  uint8_t *buf;
  const step_t *steps;
  int n;
  float div;
  const dr_coll_hdr_t *hdr; /* this rank's collective */
  dr_pg_fail_t *f;          /* filled on a header that does not match */
  uint8_t hdr_out[DR_COLL_HDR_BYTES], hdr_in[DR_COLL_HDR_BYTES];
  size_t hs, hr;            /* header bytes sent, received */
  int hdr_sent, hdr_checked; /* ... and their padding too */
  int si;    /* send: current step */
  size_t sd; /* ... and its bytes sent */
  int ri;
  size_t rd;
} eng_t;

static size_t recv_done_of(const eng_t *e, int k) {
  if (k < e->ri)
    return e->steps[k].recv_len;
  return k == e->ri ? e->rd : 0;
}

/* The header, then its padding: 1 moved, 0 blocked (*on_link as
 * send_some's), -EPIPE. On TCP the first step's first piece goes in the
 * same system call when it is at hand. */
static int send_header(eng_t *e, size_t *on_link) {
  dr_link_t *l = &e->pg->send;
  const step_t *st = e->n > 0 ? &e->steps[0] : NULL;
  if (l->kind == DR_LINK_TCP && st != NULL && st->dep < 0 &&
      st->send_len > 0) {
    size_t nh = DR_COLL_HDR_BYTES - e->hs;
    size_t n = st->send_len - e->sd < l->chunk ? st->send_len - e->sd
                                               : l->chunk;
    long k = dr__link_send_head(l, e->hdr_out + e->hs, nh,
                                e->buf + st->send_off + e->sd, n);
    if (k < 0)
      return (int)k;
    if (k == 0) {
      *on_link = 1;
      return 0;
    }
    size_t kh = (size_t)k < nh ? (size_t)k : nh;
    e->hs += kh;
    e->sd += (size_t)k - kh;
    e->hdr_sent = e->hs == DR_COLL_HDR_BYTES;
    return 1;
  }
  if (e->hs < DR_COLL_HDR_BYTES) {
    long k = dr__link_send(l, e->hdr_out + e->hs, DR_COLL_HDR_BYTES - e->hs);
    if (k < 0)
      return (int)k;
    if (k == 0) {
      *on_link = DR_COLL_HDR_BYTES - e->hs;
      return 0;
    }
    e->hs += (size_t)k;
    if (e->hs < DR_COLL_HDR_BYTES)
      return 1;
  }
  size_t pad = dr__link_pad(l, DR_COLL_HDR_BYTES);
  if (!dr__link_send_pad(l, pad)) {
    *on_link = pad;
    return 0;
  }
  e->hdr_sent = 1;
  return 1;
}

/* The left neighbour's header, then its padding, then the check: 1
 * moved, 0 blocked, -EPIPE, or DR_PG_EMISMATCH with *e->f filled. */
static int recv_header(eng_t *e) {
  dr_pg_t *pg = e->pg;
  dr_link_t *l = &pg->recv;
  if (e->hr < DR_COLL_HDR_BYTES) {
    long k = dr__link_recv(l, e->hdr_in + e->hr, DR_COLL_HDR_BYTES - e->hr,
                           DR_ROP_COPY, 1.0f);
    if (k <= 0)
      return (int)k;
    e->hr += (size_t)k;
    if (e->hr < DR_COLL_HDR_BYTES)
      return 1;
    int rc = dr__coll_hdr_check(e->hdr_in, e->hdr, pg->rank, l->peer, e->f);
    if (rc != 0)
      return rc;
  }
  if (!dr__link_recv_pad(l, dr__link_pad(l, DR_COLL_HDR_BYTES)))
    return 0;
  e->hdr_checked = 1;
  return 1;
}

/* One piece of the send side. 1 moved, 0 blocked (*on_link: the bytes
 * of room the link lacks, else blocked by its own receive), -EPIPE. */
static int send_some(eng_t *e, size_t *on_link) {
  dr_pg_t *pg = e->pg;
  *on_link = 0;
  if (!e->hdr_sent)
    return send_header(e, on_link);
  while (e->si < e->n) {
    const step_t *st = &e->steps[e->si];
    if (e->sd == st->send_len) {
      size_t pad = dr__link_pad(&pg->send, st->send_len);
      if (!dr__link_send_pad(&pg->send, pad)) {
        *on_link = pad;
        return 0;
      }
      e->si++;
      e->sd = 0;
      continue;
    }
    size_t limit = st->dep < 0 ? st->send_len : recv_done_of(e, st->dep);
    if (limit <= e->sd)
      return 0;
    size_t n = limit - e->sd;
    if (n > pg->send.chunk)
      n = pg->send.chunk;
    long k = dr__link_send(&pg->send, e->buf + st->send_off + e->sd, n);
    if (k < 0)
      return (int)k;
    if (k == 0) {
      *on_link = 1;
      return 0;
    }
    e->sd += (size_t)k;
    return 1;
  }
  return 0;
}

/* As send_some, and DR_PG_EMISMATCH for a header that does not match. */
static int recv_some(eng_t *e, size_t *on_link) {
  dr_pg_t *pg = e->pg;
  *on_link = 0;
  if (!e->hdr_checked) {
    int rc = recv_header(e);
    *on_link = rc == 0;
    return rc;
  }
  while (e->ri < e->n) {
    const step_t *st = &e->steps[e->ri];
    if (e->rd == st->recv_len) {
      if (!dr__link_recv_pad(&pg->recv,
                             dr__link_pad(&pg->recv, st->recv_len))) {
        *on_link = 1;
        return 0;
      }
      e->ri++;
      e->rd = 0;
      continue;
    }
    size_t n = st->recv_len - e->rd;
    if (n > pg->recv.chunk)
      n = pg->recv.chunk;
    long k = dr__link_recv(&pg->recv, e->buf + st->recv_off + e->rd, n,
                           st->op, e->div);
    if (k < 0)
      return (int)k;
    if (k == 0) {
      *on_link = n; /* the rest of the step is sure to come */
      return 0;
    }
    e->rd += (size_t)k;
    return 1;
  }
  return 0;
}

static void timeout_failure(dr_pg_t *pg, int send_wait, size_t recv_wait,
                            uint64_t seq, dr_pg_fail_t *f) {
  uint32_t left = pg->recv.peer, right = pg->send.peer;
  double s = pg->timeout_ms / 1000.0;
  f->code = DR_PG_ETIMEOUT;
  f->origin = pg->rank;
  f->seq = seq;
  f->blamed = recv_wait ? left : right;
  if (recv_wait && send_wait)
    snprintf(f->text, sizeof(f->text),
             "no data from rank %u, and rank %u took none, within %g s",
             left, right, s);
  else if (recv_wait)
    snprintf(f->text, sizeof(f->text), "no data from rank %u within %g s",
             left, s);
  else
    snprintf(f->text, sizeof(f->text), "rank %u took no data within %g s",
             right, s);
}

static int run_steps(dr_pg_t *pg, const dr_coll_hdr_t *hdr, uint8_t *buf,
                     const step_t *steps, int n, float div,
                     uint64_t deadline_ns, dr_pg_fail_t *f) {
  eng_t e = {.pg = pg, .buf = buf, .steps = steps, .n = n, .div = div,
             .hdr = hdr, .f = f};
  dr__coll_hdr_encode(e.hdr_out, hdr);
  uint64_t seq = hdr->seq, spin_until = 0;
  for (;;) {
    size_t s_link, r_link;
    int a = send_some(&e, &s_link);
    if (a < 0) {
      dr__pg_peer_failure(pg, &pg->send, seq, f);
      return f->code;
    }
    int b = recv_some(&e, &r_link);
    if (b == DR_PG_EMISMATCH)
      return b;
    if (b < 0) {
      dr__pg_peer_failure(pg, &pg->recv, seq, f);
      return f->code;
    }
    int send_left = !e.hdr_sent || e.si < n;
    int recv_left = !e.hdr_checked || e.ri < n;
    if (!send_left && !recv_left)
      return 0;
    if (a > 0 || b > 0) {
      spin_until = 0;
      continue;
    }
    size_t send_wait = send_left ? s_link : 0;
    size_t recv_wait = recv_left ? r_link : 0;
    if (!send_wait && !recv_wait)
      recv_wait = 1; /* cannot happen: a blocked send awaits the receive */
    int all_shm = (!send_wait || pg->send.kind == DR_LINK_SHM) &&
                  (!recv_wait || pg->recv.kind == DR_LINK_SHM);
    if (all_shm && pg->spin_ns > 0) {
      /* The peer is usually a few microseconds from its next commit;
       * a short spin saves the futex round trip. */
      uint64_t now = dr_mono_ns();
      if (spin_until == 0)
        spin_until = now + pg->spin_ns;
      if (now < spin_until) {
        dr_shm_relax();
        continue;
      }
    }
    spin_until = 0;
    int rc = dr__pg_wait(pg, send_wait, recv_wait, deadline_ns, seq, f);
    if (rc == -ETIMEDOUT) {
      if (dr__pg_poll_abort(pg, f))
        return f->code;
      timeout_failure(pg, send_wait > 0, recv_wait, seq, f);
      return f->code;
    }
    if (rc != 0)
      return rc;
  }
}

/* The copy of a step whose received bytes are not sent on. */
static dr_rop_t last_copy(size_t total_bytes) {
  return total_bytes >= DR_PG_STREAM_BYTES ? DR_ROP_COPY_STREAM : DR_ROP_COPY;
}

static uint32_t mod(int64_t x, uint32_t w) {
  int64_t m = x % (int64_t)w;
  return (uint32_t)(m < 0 ? m + w : m);
}

static int allreduce(dr_pg_t *pg, dr_work_t *w, const dr_coll_hdr_t *h,
                     uint64_t deadline_ns, dr_pg_fail_t *f) {
  uint32_t W = pg->world, p = pg->pos;
  dr_rop_t sum = w->dtype == DR_PG_F16    ? DR_ROP_SUM_F16
                 : w->dtype == DR_PG_BF16 ? DR_ROP_SUM_BF16
                 : w->op == DR_PG_MAX     ? DR_ROP_MAX
                                          : DR_ROP_SUM;
  size_t es = dr__rop_elem_bytes(sum);
  size_t n_elems = w->n_bytes / es, base = n_elems / W, rem = n_elems % W;
  int n = 2 * (int)(W - 1);
  step_t *st = calloc((size_t)n, sizeof(*st));
  if (st == NULL)
    return -ENOMEM;
#define SEG_OFF(k) (((k) * base + ((k) < rem ? (k) : rem)) * es)
#define SEG_LEN(k) ((base + ((k) < rem ? 1 : 0)) * es)
  for (uint32_t s = 0; s + 1 < W; s++) {
    uint32_t snd = mod((int64_t)p - s, W), rcv = mod((int64_t)p - s - 1, W);
    step_t *x = &st[s];
    x->send_off = SEG_OFF(snd);
    x->send_len = SEG_LEN(snd);
    x->recv_off = SEG_OFF(rcv);
    x->recv_len = SEG_LEN(rcv);
    x->op = s + 2 == W && w->op == DR_PG_AVG ? DR_ROP_SUM_DIV : sum;
    x->dep = (int)s - 1;
  }
  for (uint32_t s = 0; s + 1 < W; s++) {
    uint32_t snd = mod((int64_t)p + 1 - s, W), rcv = mod((int64_t)p - s, W);
    step_t *x = &st[W - 1 + s];
    x->send_off = SEG_OFF(snd);
    x->send_len = SEG_LEN(snd);
    x->recv_off = SEG_OFF(rcv);
    x->recv_len = SEG_LEN(rcv);
    x->op = s + 2 == W ? last_copy(w->n_bytes) : DR_ROP_COPY;
    x->dep = (int)(W - 1 + s) - 1;
  }
#undef SEG_OFF
#undef SEG_LEN
  int rc = run_steps(pg, h, w->buf, st, n, (float)W, deadline_ns, f);
  free(st);
  return rc;
}

static int broadcast(dr_pg_t *pg, dr_work_t *w, const dr_coll_hdr_t *h,
                     uint64_t deadline_ns, dr_pg_fail_t *f) {
  uint32_t W = pg->world;
  uint32_t root_pos = 0;
  for (uint32_t i = 0; i < W; i++)
    if (pg->order[i] == w->root)
      root_pos = i;
  uint32_t d = mod((int64_t)pg->pos - root_pos, W);
  step_t st = {0};
  st.send_len = d + 1 == W ? 0 : w->n_bytes;
  st.recv_len = d == 0 ? 0 : w->n_bytes;
  st.op = d + 1 == W ? last_copy(w->n_bytes) : DR_ROP_COPY;
  st.dep = d == 0 ? -1 : 0;
  return run_steps(pg, h, w->buf, &st, 1, 1.0f, deadline_ns, f);
}

static int allgather(dr_pg_t *pg, const dr_coll_hdr_t *h, uint8_t *out,
                     const void *in, size_t n_bytes, uint64_t deadline_ns,
                     dr_pg_fail_t *f) {
  uint32_t W = pg->world, p = pg->pos;
  uint8_t *mine = out + (size_t)pg->rank * n_bytes;
  if (in != mine)
    memmove(mine, in, n_bytes);
  int n = (int)W - 1;
  step_t *st = calloc((size_t)n, sizeof(*st));
  if (st == NULL)
    return -ENOMEM;
  for (uint32_t s = 0; s + 1 < W; s++) {
    st[s].send_off = (size_t)pg->order[mod((int64_t)p - s, W)] * n_bytes;
    st[s].send_len = n_bytes;
    st[s].recv_off = (size_t)pg->order[mod((int64_t)p - s - 1, W)] * n_bytes;
    st[s].recv_len = n_bytes;
    st[s].op = s + 2 == W ? last_copy(n_bytes * W) : DR_ROP_COPY;
    st[s].dep = (int)s - 1;
  }
  int rc = run_steps(pg, h, out, st, n, 1.0f, deadline_ns, f);
  free(st);
  return rc;
}

int dr__coll_run(dr_pg_t *pg, dr_work_t *w, uint64_t deadline_ns,
                 dr_pg_fail_t *f) {
  dr_coll_hdr_t h;
  dr__coll_hdr_of(w, &h);
  /* A collective without data still exchanges its header. */
  if (w->n_bytes == 0 && w->kind != DR_WORK_BARRIER)
    return run_steps(pg, &h, NULL, NULL, 0, 1.0f, deadline_ns, f);
  switch (w->kind) {
  case DR_WORK_ALLREDUCE:
    return allreduce(pg, w, &h, deadline_ns, f);
  case DR_WORK_BROADCAST:
    return broadcast(pg, w, &h, deadline_ns, f);
  case DR_WORK_ALLGATHER:
    return allgather(pg, &h, w->buf, w->in, w->n_bytes, deadline_ns, f);
  case DR_WORK_BARRIER: {
    /* Every rank's byte reaches every other rank only once all have
     * entered: an all-gather of one byte is a barrier in W - 1 hops. */
    uint8_t *scratch = calloc(pg->world, 1);
    if (scratch == NULL)
      return -ENOMEM;
    uint8_t one = 1;
    int rc = allgather(pg, &h, scratch, &one, 1, deadline_ns, f);
    free(scratch);
    return rc;
  }
  }
  return -EINVAL;
}
