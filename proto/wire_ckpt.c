/* The checkpoint peers' messages (wire.h, "Checkpoint peers"): CKPT_PUT,
 * CKPT_ENTRY, CKPT_DATA, CKPT_END and CKPT_GET, their encoders and typed
 * views. */
#include "wire.h"

#include "errors.h"
#include "wire_frame.h"

#define EXPECT(m, t)                                                         \
  do {                                                                       \
    if ((m)->type != DR_MSG_##t)                                             \
      return DR_EUNEXPECTED;                                                 \
  } while (0)

static int kind_ok(uint64_t kind) {
  return kind == DR_CKPT_FILE || kind == DR_CKPT_DIR;
}

int dr_enc_ckpt_put(dr_buf_t *b, uint32_t req, const dr_ckpt_put_t *p) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_CKPT_PUT, req);
  dr__put_bytes(&f, p->run_id);
  dr__put_bytes(&f, p->name);
  dr__put_u64(&f, p->kind);
  dr__put_u64(&f, p->total_bytes);
  dr__put_u64(&f, p->step);
  dr__put_u64(&f, p->origin);
  return dr__frame_end(&f);
}

int dr_enc_ckpt_entry(dr_buf_t *b, uint32_t req, const dr_ckpt_entry_t *e) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_CKPT_ENTRY, req);
  dr__put_bytes(&f, e->path);
  dr__put_u64(&f, e->kind);
  dr__put_u64(&f, e->n_bytes);
  return dr__frame_end(&f);
}

int dr_enc_ckpt_data(dr_buf_t *b, uint32_t req, dr_bytes_t bytes) {
  if (bytes.len > DR_CKPT_CHUNK)
    return DR_EBADARG;
  dr__frame_t f = dr__frame_begin(b, DR_MSG_CKPT_DATA, req);
  dr__put_bytes(&f, bytes);
  return dr__frame_end(&f);
}

int dr_enc_ckpt_end(dr_buf_t *b, uint32_t req, dr_bytes_t checksum) {
  if (checksum.len != DR_CKPT_SUM_LEN)
    return DR_EBADARG;
  dr__frame_t f = dr__frame_begin(b, DR_MSG_CKPT_END, req);
  dr__put_bytes(&f, checksum);
  return dr__frame_end(&f);
}

int dr_enc_ckpt_get(dr_buf_t *b, uint32_t req, const dr_ckpt_get_t *g) {
  dr__frame_t f = dr__frame_begin(b, DR_MSG_CKPT_GET, req);
  dr__put_bytes(&f, g->run_id);
  dr__put_bytes(&f, g->name);
  dr__put_u64(&f, g->step);
  return dr__frame_end(&f);
}

int dr_msg_ckpt_put(const dr_msg_t *m, dr_ckpt_put_t *out) {
  EXPECT(m, CKPT_PUT);
  out->run_id = m->f[0].b;
  out->name = m->f[1].b;
  if (!kind_ok(m->f[2].u) || m->f[5].u > UINT32_MAX)
    return DR_EBADARG;
  out->kind = (uint32_t)m->f[2].u;
  out->total_bytes = m->f[3].u;
  out->step = m->f[4].u;
  out->origin = (uint32_t)m->f[5].u;
  return 0;
}

int dr_msg_ckpt_entry(const dr_msg_t *m, dr_ckpt_entry_t *out) {
  EXPECT(m, CKPT_ENTRY);
  out->path = m->f[0].b;
  if (!kind_ok(m->f[1].u) || (m->f[1].u == DR_CKPT_DIR && m->f[2].u != 0))
    return DR_EBADARG;
  out->kind = (uint32_t)m->f[1].u;
  out->n_bytes = m->f[2].u;
  return 0;
}

int dr_msg_ckpt_data(const dr_msg_t *m, dr_bytes_t *bytes) {
  EXPECT(m, CKPT_DATA);
  if (m->f[0].b.len > DR_CKPT_CHUNK)
    return DR_EBADARG;
  *bytes = m->f[0].b;
  return 0;
}

int dr_msg_ckpt_end(const dr_msg_t *m, dr_bytes_t *checksum) {
  EXPECT(m, CKPT_END);
  if (m->f[0].b.len != DR_CKPT_SUM_LEN)
    return DR_EBADARG;
  *checksum = m->f[0].b;
  return 0;
}

int dr_msg_ckpt_get(const dr_msg_t *m, dr_ckpt_get_t *out) {
  EXPECT(m, CKPT_GET);
  out->run_id = m->f[0].b;
  out->name = m->f[1].b;
  out->step = m->f[2].u;
  return 0;
}
