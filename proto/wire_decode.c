/* The frame decoder: validates a frame against its type's schema without
 * allocating. See wire.h for the layout. */
#include "errors.h"
#include "wire.h"
#include "wire_be.h"

#include <string.h>

void dr_decoder_init(dr_decoder_t *d, const dr_limits_t *lim) {
  d->lim = lim != NULL ? *lim : dr_limits_default();
  d->authed = 0;
}

static uint32_t field_cap(const dr_limits_t *lim, char cls) {
  switch (cls) {
  case 's':
    return lim->max_str;
  case 'k':
  case 'K':
    return lim->max_key;
  case 'v':
  case 'V':
    return lim->max_value;
  default: /* b, B */
    return lim->max_blob;
  }
}

/* Parses one field of schema class cls at body[*pos..end). */
static int parse_field(const dr_limits_t *lim, char cls, const uint8_t *body,
                       uint32_t end, uint32_t *pos, dr_field_t *f) {
  uint32_t p = *pos;
  uint8_t want;

  if (cls == 'u')
    want = DR_FIELD_U64;
  else if (cls == 'K' || cls == 'V' || cls == 'B')
    want = DR_FIELD_LIST;
  else
    want = DR_FIELD_BYTES;
  if (p >= end)
    return DR_ETRUNC;
  f->kind = body[p++];
  if (f->kind != want)
    return DR_EFIELD;

  if (want == DR_FIELD_U64) {
    if (end - p < 8)
      return DR_ETRUNC;
    f->u = dr__load_be64(body + p);
    *pos = p + 8;
    return 0;
  }

  if (end - p < 4)
    return DR_ETRUNC;
  uint32_t n = dr__load_be32(body + p);
  p += 4;
  uint32_t cap = field_cap(lim, cls);

  if (want == DR_FIELD_BYTES) {
    if (n > cap)
      return DR_ETOOBIG;
    if (n > end - p)
      return DR_ETRUNC;
    f->b.p = body + p;
    f->b.len = n;
    *pos = p + n;
    return 0;
  }

  /* A list: count, then count length-prefixed items. */
  if (n > lim->max_count)
    return DR_ETOOBIG;
  uint32_t start = p;
  for (uint32_t i = 0; i < n; i++) {
    if (end - p < 4)
      return DR_ETRUNC;
    uint32_t item = dr__load_be32(body + p);
    p += 4;
    if (item > cap)
      return DR_ETOOBIG;
    if (item > end - p)
      return DR_ETRUNC;
    p += item;
  }
  f->l.count = n;
  f->l.p = body + start;
  f->l.len = p - start;
  *pos = p;
  return 0;
}

dr_decode_status_t dr_decode(const dr_decoder_t *d, const uint8_t *buf,
                             size_t len, dr_msg_t *msg, size_t *consumed,
                             size_t *need, int *err) {
  *consumed = 0;
  *need = 0;
  *err = 0;

  /* Reject a stranger on its first byte rather than waiting for a header. */
  if (len >= 1 && buf[0] != (uint8_t)(DR_PROTO_MAGIC >> 8))
    goto bad_magic;
  if (len < DR_FRAME_HDR_LEN) {
    *need = DR_FRAME_HDR_LEN;
    return DR_DECODE_NEED_MORE;
  }
  if (((uint32_t)buf[0] << 8 | buf[1]) != DR_PROTO_MAGIC)
    goto bad_magic;

  memset(msg, 0, sizeof(*msg));
  msg->version = buf[2];
  msg->type = buf[3];
  msg->req_id = dr__load_be32(buf + 4);
  msg->body_len = dr__load_be32(buf + 8);

  if (msg->version != DR_PROTO_VERSION) {
    *err = DR_EVERSION;
    return DR_DECODE_ERROR;
  }
  const char *schema = dr_msg_schema(msg->type);
  if (schema == NULL) {
    *err = DR_ETYPE;
    return DR_DECODE_ERROR;
  }
  uint32_t cap = d->authed ? d->lim.max_frame : d->lim.max_frame_unauth;
  if (msg->body_len > cap) {
    *err = DR_ETOOBIG;
    return DR_DECODE_ERROR;
  }
  size_t total = (size_t)DR_FRAME_HDR_LEN + msg->body_len;
  if (len < total) {
    *need = total;
    return DR_DECODE_NEED_MORE;
  }

  const uint8_t *body = buf + DR_FRAME_HDR_LEN;
  uint32_t pos = 0;
  for (const char *s = schema; *s != '\0'; s++) {
    int rc = parse_field(&d->lim, *s, body, msg->body_len, &pos,
                         &msg->f[msg->n_fields]);
    if (rc != 0) {
      *err = rc;
      return DR_DECODE_ERROR;
    }
    msg->n_fields++;
  }
  if (pos != msg->body_len) {
    *err = DR_ETRAILING;
    return DR_DECODE_ERROR;
  }
  *consumed = total;
  return DR_DECODE_OK;

bad_magic:
  *err = DR_EMAGIC;
  return DR_DECODE_ERROR;
}

int dr_list_next(const dr_list_t *l, uint32_t *pos, dr_bytes_t *item) {
  if (*pos >= l->len)
    return 0;
  uint32_t n = dr__load_be32(l->p + *pos);
  item->p = l->p + *pos + 4;
  item->len = n;
  *pos += 4 + n;
  return 1;
}
