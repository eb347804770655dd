/* The header every collective starts with on every link, and its check.
 *
 * Collectives pair up by position in each rank's stream of bytes: the
 * k-th collective of one rank reads what the k-th of its left neighbour
 * sent. When the two are not the same collective (one rank issued an
 * extra one, skipped one, or took another size or root), the bytes no
 * longer mean what the receiver takes them for: the ring hangs until the
 * timeout, or, worse, completes with garbage. So each side sends
 * {seq, kind, op, root, n_bytes} first and checks its neighbour's before
 * it takes any data: a difference fails the collective at once, naming
 * both ranks' collectives.
 *
 * As long as every earlier header matched, both ends agree on how many
 * bytes every earlier collective moved on the link, so the header is
 * always read where the neighbour wrote one. Bytes that are no header
 * (a bad magic) are a stream out of step all the same.
 */
#include "pg_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* 32 bytes, little-endian:
 *   0  magic "DRCH"     4  kind (u16), op (u16)
 *   8  seq (u64)       16  n_bytes (u64)
 *  24  root (u32)      28  zero (u32) */
#define HDR_MAGIC 0x48435244u

const char *dr__work_kind_name(uint32_t kind) {
  switch (kind) {
  case DR_WORK_ALLREDUCE:
    return "allreduce";
  case DR_WORK_BROADCAST:
    return "broadcast";
  case DR_WORK_ALLGATHER:
    return "allgather";
  case DR_WORK_BARRIER:
    return "barrier";
  }
  return "collective";
}

void dr__coll_hdr_of(const dr_work_t *w, dr_coll_hdr_t *h) {
  memset(h, 0, sizeof(*h));
  h->seq = w->seq;
  h->kind = (uint32_t)w->kind;
  /* What the header compares is what must agree: the op of an
   * all-reduce, the root of a broadcast, the byte count of all but a
   * barrier. */
  h->op = w->kind == DR_WORK_ALLREDUCE
              ? (uint32_t)w->op | (uint32_t)w->dtype << 8
              : 0;
  h->root = w->kind == DR_WORK_BROADCAST ? w->root : 0;
  h->n_bytes = w->kind == DR_WORK_BARRIER ? 0 : w->n_bytes;
}

void dr__coll_hdr_encode(uint8_t out[DR_COLL_HDR_BYTES],
                         const dr_coll_hdr_t *h) {
  memset(out, 0, DR_COLL_HDR_BYTES);
  dr__put32(out, HDR_MAGIC);
  dr__put32(out + 4, (h->kind & 0xffffu) | (h->op & 0xffffu) << 16);
  dr__put64(out + 8, h->seq);
  dr__put64(out + 16, h->n_bytes);
  dr__put32(out + 24, h->root);
}

int dr__coll_hdr_decode(const uint8_t in[DR_COLL_HDR_BYTES],
                        dr_coll_hdr_t *h) {
  memset(h, 0, sizeof(*h));
  if (dr__get32(in) != HDR_MAGIC || dr__get32(in + 28) != 0)
    return -1;
  uint32_t ko = dr__get32(in + 4);
  h->kind = ko & 0xffffu;
  h->op = ko >> 16;
  h->seq = dr__get64(in + 8);
  h->n_bytes = dr__get64(in + 16);
  h->root = dr__get32(in + 24);
  return 0;
}

unsigned dr__coll_hdr_diff(const dr_coll_hdr_t *mine,
                           const dr_coll_hdr_t *peer) {
  unsigned d = 0;
  if (mine->seq != peer->seq)
    d |= DR_HDR_SEQ;
  if (mine->kind != peer->kind)
    d |= DR_HDR_KIND;
  if (mine->op != peer->op)
    d |= DR_HDR_OP;
  if (mine->root != peer->root)
    d |= DR_HDR_ROOT;
  if (mine->n_bytes != peer->n_bytes)
    d |= DR_HDR_SIZE;
  return d;
}

void dr__coll_hdr_describe(const dr_coll_hdr_t *h, int with_op, char *out,
                           size_t out_len) {
  const char *name = dr__work_kind_name(h->kind);
  const char *op = !with_op || h->kind != DR_WORK_ALLREDUCE ? ""
                   : h->op == DR_PG_SUM                     ? " (sum)"
                   : h->op == DR_PG_AVG                     ? " (average)"
                   : h->op == DR_PG_MAX                     ? " (max)"
                   : h->op == (DR_PG_SUM | DR_PG_F16 << 8)  ? " (fp16 sum)"
                   : h->op == (DR_PG_SUM | DR_PG_BF16 << 8) ? " (bf16 sum)"
                                                            : " (unknown op)";
  if (h->kind == DR_WORK_BARRIER) {
    snprintf(out, out_len, "barrier #%" PRIu64, h->seq);
    return;
  }
  char size[32];
  dr__fmt_bytes(size, sizeof(size), h->n_bytes);
  if (h->kind == DR_WORK_BROADCAST)
    snprintf(out, out_len, "broadcast #%" PRIu64 " of %s from rank %" PRIu32,
             h->seq, size, h->root);
  else if (h->kind > DR_WORK_BARRIER)
    snprintf(out, out_len, "collective of kind %" PRIu32 " #%" PRIu64
             " of %s", h->kind, h->seq, size);
  else
    snprintf(out, out_len, "%s%s #%" PRIu64 " of %s", name, op, h->seq, size);
}

/* snprintf for a message that may be cut short (it fits in practice). */
__attribute__((format(printf, 3, 4))) static void msgf(char *out, size_t len,
                                                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, len, fmt, ap);
  va_end(ap);
}

int dr__coll_hdr_check(const uint8_t peer_bytes[DR_COLL_HDR_BYTES],
                       const dr_coll_hdr_t *mine, uint32_t my_rank,
                       uint32_t peer_rank, dr_pg_fail_t *f) {
  dr_coll_hdr_t peer;
  int bad = dr__coll_hdr_decode(peer_bytes, &peer) != 0;
  unsigned diff = bad ? 0 : dr__coll_hdr_diff(mine, &peer);
  if (!bad && diff == 0)
    return 0;
  /* The op only where two all-reduces differ in it. */
  int with_op = !bad && (diff & DR_HDR_OP) != 0 &&
                mine->kind == DR_WORK_ALLREDUCE &&
                peer.kind == DR_WORK_ALLREDUCE;
  char a[80], b[80];
  dr__coll_hdr_describe(mine, with_op, a, sizeof(a));
  memset(f, 0, sizeof(*f));
  f->code = DR_PG_EMISMATCH;
  f->blamed = peer_rank;
  f->origin = my_rank;
  f->seq = mine->seq;
  if (bad) {
    msgf(f->text, sizeof(f->text),
         "out of step: rank %" PRIu32 " is in %s, rank %" PRIu32
         " sent bytes that are no collective header (%02x %02x %02x %02x "
         "...)",
         my_rank, a, peer_rank, peer_bytes[0], peer_bytes[1], peer_bytes[2],
         peer_bytes[3]);
    return DR_PG_EMISMATCH;
  }
  dr__coll_hdr_describe(&peer, with_op, b, sizeof(b));
  msgf(f->text, sizeof(f->text),
       "out of step: rank %" PRIu32 " is in %s, rank %" PRIu32 " in %s",
       my_rank, a, peer_rank, b);
  return DR_PG_EMISMATCH;
}
