/* libFuzzer target over dr_decode().
 *
 * Input: one selector byte, then a byte stream decoded frame after frame
 * the way a server reads a connection. The selector picks the decoder:
 *   bit 0      authed (selects max_frame over max_frame_unauth)
 *   bits 1-2   limits: 0 defaults, 1 small, 2 all zero, 3 scaled by bits 3-7
 * Every promise of wire.h is checked on every answer; a broken one aborts.
 * Decoded lists are walked with dr_list_next() and every byte a field
 * borrows is read, so the sanitizers see any view that points outside the
 * input. Nothing is re-encoded.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "fuzz_decode: broken promise: %s (line %d)\n", #cond,  \
              __LINE__);                                                     \
      abort();                                                               \
    }                                                                        \
  } while (0)

static dr_limits_t pick_limits(uint8_t sel) {
  dr_limits_t l = dr_limits_default();
  uint32_t k = sel >> 3; /* 0..31 */
  switch ((sel >> 1) & 3) {
  case 1:
    l.max_frame_unauth = 64;
    l.max_frame = 1024;
    l.max_str = 8;
    l.max_key = 16;
    l.max_value = 32;
    l.max_blob = 24;
    l.max_count = 3;
    break;
  case 2:
    memset(&l, 0, sizeof(l));
    break;
  case 3:
    l.max_frame_unauth = k * 8;
    l.max_frame = k * 64;
    l.max_str = k;
    l.max_key = k * 2;
    l.max_value = k * 4;
    l.max_blob = k * 3;
    l.max_count = k / 4;
    break;
  default:
    break;
  }
  return l;
}

static uint32_t cap_of(const dr_limits_t *l, char cls) {
  switch (cls) {
  case 's':
    return l->max_str;
  case 'k':
  case 'K':
    return l->max_key;
  case 'v':
  case 'V':
    return l->max_value;
  default:
    return l->max_blob;
  }
}

static volatile uint8_t sink;

/* b lies inside [lo, hi) and every byte of it can be read. */
static void check_inside(dr_bytes_t b, const uint8_t *lo, const uint8_t *hi) {
  CHECK(b.len == 0 || b.p != NULL);
  if (b.len == 0)
    return;
  CHECK((uintptr_t)b.p >= (uintptr_t)lo);
  CHECK((uintptr_t)b.p + b.len <= (uintptr_t)hi);
  uint8_t x = 0;
  for (uint32_t i = 0; i < b.len; i++)
    x ^= b.p[i];
  sink = x;
}

static void check_msg(const dr_decoder_t *d, const dr_msg_t *m,
                      const uint8_t *frame, size_t n) {
  const char *schema = dr_msg_schema(m->type);
  CHECK(schema != NULL);
  CHECK(m->version == DR_PROTO_VERSION);
  CHECK(m->n_fields == strlen(schema));
  CHECK(m->body_len <= (d->authed ? d->lim.max_frame
                                  : d->lim.max_frame_unauth));
  const uint8_t *body = frame + DR_FRAME_HDR_LEN, *end = frame + n;
  for (uint32_t i = 0; i < m->n_fields; i++) {
    const dr_field_t *f = &m->f[i];
    char cls = schema[i];
    uint32_t cap = cap_of(&d->lim, cls);
    if (cls == 'u') {
      CHECK(f->kind == DR_FIELD_U64);
    } else if (cls == 'K' || cls == 'V' || cls == 'B') {
      CHECK(f->kind == DR_FIELD_LIST);
      CHECK(f->l.count <= d->lim.max_count);
      check_inside((dr_bytes_t){f->l.p, f->l.len}, body, end);
      uint32_t pos = 0, count = 0;
      dr_bytes_t item;
      while (dr_list_next(&f->l, &pos, &item)) {
        CHECK(item.len <= cap);
        check_inside(item, f->l.p, f->l.p + f->l.len);
        count++;
      }
      CHECK(count == f->l.count);
      CHECK(pos == f->l.len);
    } else {
      CHECK(f->kind == DR_FIELD_BYTES);
      CHECK(f->b.len <= cap);
      check_inside(f->b, body, end);
    }
  }

  dr_join_t j;
  dr_assign_t a;
  dr_failure_t x;
  int rj = dr_msg_join(m, &j), ra = dr_msg_assign(m, &a),
      rf = dr_msg_failure(m, &x);
  CHECK(m->type == DR_MSG_JOIN ? rj == 0 || rj == DR_EBADARG
                               : rj == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_ASSIGN ? ra == 0 || ra == DR_EBADARG
                                 : ra == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_FAILURE ? rf == 0 || rf == DR_EBADARG
                                  : rf == DR_EUNEXPECTED);
  /* The views that carry clock stamps: any u64 is a valid stamp. */
  dr_heartbeat_t h;
  dr_resume_t q;
  int rh = dr_msg_heartbeat(m, &h), rq = dr_msg_resume(m, &q);
  CHECK(m->type == DR_MSG_HEARTBEAT ? rh == 0 : rh == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_RESUME ? rq == 0 || rq == DR_EBADARG
                                 : rq == DR_EUNEXPECTED);
  /* The status views: a record they accept is read inside the frame. */
  dr_round_status_t rs;
  dr_ranks_t rk;
  dr_job_status_t js;
  dr_stack_dump_t sd;
  int rr = dr_msg_round_status(m, &rs), rn = dr_msg_ranks(m, &rk),
      rjs = dr_msg_job_status(m, &js), rsd = dr_msg_stack_dump(m, &sd);
  CHECK(m->type == DR_MSG_ROUND_STATUS ? rr == 0 || rr == DR_EBADARG
                                       : rr == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_RANKS ? rn == 0 || rn == DR_EBADARG
                                : rn == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_JOB_STATUS ? rjs == 0 || rjs == DR_EBADARG
                                     : rjs == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_STACK_DUMP ? rsd == 0 || rsd == DR_EBADARG
                                     : rsd == DR_EUNEXPECTED);
  uint32_t pos = 0;
  dr_node_rec_t nr;
  dr_rank_rec_t kr;
  dr_stack_rec_t sr;
  uint32_t u;
  while (rr == 0 && dr_node_rec_next(&rs.nodes, &pos, &nr))
    check_inside(nr.host, body, end);
  for (pos = 0; rr == 0 && dr_rank_u32_next(&rs.missing, &pos, &u);)
    sink = (uint8_t)u;
  for (pos = 0; rn == 0 && dr_rank_rec_next(&rk.ranks, &pos, &kr);)
    CHECK(kr.state < DR__RS_N);
  for (pos = 0; rjs == 0 && dr_node_rec_next(&js.nodes, &pos, &nr);)
    CHECK(nr.state < DR__NS_N && nr.host.len <= DR_HOST_MAX);
  for (pos = 0; rjs == 0 && dr_stack_rec_next(&js.stacks, &pos, &sr);)
    check_inside(sr.text, body, end);
  dr_env_rec_t er;
  CHECK(rjs != 0 || js.envs.count == 0 || js.envs.count == js.nodes.count);
  for (pos = 0; rjs == 0 && dr_env_rec_next(&js.envs, &pos, &er);) {
    CHECK(er.text.len <= DR_ENV_SUMMARY_MAX);
    check_inside(er.text, body, end);
  }
  for (pos = 0; rsd == 0 && dr_stack_rec_next(&sd.stacks, &pos, &sr);)
    check_inside(sr.text, body, end);
  if (rj == 0) {
    check_inside(j.bootstrap_offer, body, end);
    check_inside(j.env, body, end);
    check_inside(j.socket_ifname, body, end);
    CHECK(j.env.len <= DR_ENV_SUMMARY_MAX &&
          j.socket_ifname.len <= DR_SOCKET_IFNAME_MAX);
  }
  if (ra == 0)
    check_inside(a.bootstrap, body, end);
  if (rf == 0)
    check_inside(x.message, body, end);
  /* The checkpoint peers' views: what they accept lies inside the frame
   * and within their bounds. */
  dr_ckpt_put_t cp;
  dr_ckpt_entry_t ce;
  dr_ckpt_get_t cg;
  dr_bytes_t cd, cs;
  int rcp = dr_msg_ckpt_put(m, &cp), rce = dr_msg_ckpt_entry(m, &ce),
      rcd = dr_msg_ckpt_data(m, &cd), rcs = dr_msg_ckpt_end(m, &cs),
      rcg = dr_msg_ckpt_get(m, &cg);
  CHECK(m->type == DR_MSG_CKPT_PUT ? rcp == 0 || rcp == DR_EBADARG
                                   : rcp == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_CKPT_ENTRY ? rce == 0 || rce == DR_EBADARG
                                     : rce == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_CKPT_DATA ? rcd == 0 || rcd == DR_EBADARG
                                    : rcd == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_CKPT_END ? rcs == 0 || rcs == DR_EBADARG
                                   : rcs == DR_EUNEXPECTED);
  CHECK(m->type == DR_MSG_CKPT_GET ? rcg == 0 : rcg == DR_EUNEXPECTED);
  if (rcp == 0) {
    CHECK(cp.kind == DR_CKPT_FILE || cp.kind == DR_CKPT_DIR);
    check_inside(cp.name, body, end);
  }
  if (rce == 0)
    check_inside(ce.path, body, end);
  if (rcd == 0) {
    CHECK(cd.len <= DR_CKPT_CHUNK);
    check_inside(cd, body, end);
  }
  if (rcs == 0)
    CHECK(cs.len == DR_CKPT_SUM_LEN);
  if (rcg == 0)
    check_inside(cg.name, body, end);
}

static int is_decode_error(int err) {
  return err == DR_EMAGIC || err == DR_EVERSION || err == DR_ETYPE ||
         err == DR_EFIELD || err == DR_ETOOBIG || err == DR_ETRUNC ||
         err == DR_ETRAILING;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  dr_limits_t lim = pick_limits(data[0]);
  dr_decoder_t d;
  dr_decoder_init(&d, &lim);
  d.authed = data[0] & 1;
  uint32_t frame_cap = d.authed ? lim.max_frame : lim.max_frame_unauth;
  data++;
  size--;

  size_t off = 0;
  for (;;) {
    const uint8_t *p = data + off;
    size_t n = size - off;
    dr_msg_t m;
    size_t consumed = 1, need = 1;
    int err = 1;
    dr_decode_status_t st = dr_decode(&d, p, n, &m, &consumed, &need, &err);
    if (st == DR_DECODE_NEED_MORE) {
      CHECK(consumed == 0 && err == 0);
      CHECK(need > n);
      CHECK(need == DR_FRAME_HDR_LEN ||
            need <= (size_t)DR_FRAME_HDR_LEN + frame_cap);
      return 0;
    }
    if (st == DR_DECODE_ERROR) {
      CHECK(consumed == 0 && need == 0);
      CHECK(is_decode_error(err));
      return 0;
    }
    CHECK(st == DR_DECODE_OK);
    CHECK(err == 0 && need == 0);
    CHECK(consumed == (size_t)DR_FRAME_HDR_LEN + m.body_len);
    CHECK(consumed <= n);
    check_msg(&d, &m, p, consumed);
    off += consumed;
  }
}
