/* PowerSGD's rounds over one bucket, for the compressor (compress.h):
 * the products through powersgd.h, M kept in the next error feedback. */
#include "compress_internal.h"

#include <string.h>

#include "powersgd.h"

/* Where a compressed matrix's M lives from the first round to the
 * decompression: in the next error feedback (which then becomes
 * M - P Q^T in place), or, without error feedback, in the gradient. */
static float *m_of(dr_cmp_t *c, const item_t *it) {
  return c->cfg.error_feedback ? c->ef_next + c->ef_off[it->param] : it->g;
}

void dr__cmp_psgd_round1(dr_cmp_t *c, bkt_t *b) {
  float inv = 1.0f / c->scale;
  size_t R = c->cfg.rank;
  for (size_t k = 0; k < b->n_items; k++) {
    item_t *it = &b->items[k];
    size_t n = it->rows * it->cols;
    c->local_bad |= c->cfg.check && dr__cmp_nonfinite(it->g, n);
    if (!it->psgd) {
      for (size_t i = 0; i < n; i++)
        b->buf1[it->off1 + i] = it->g[i] * inv;
      continue;
    }
    float *m = m_of(c, it);
    const float *restrict e = c->ef + c->ef_off[it->param];
    const float *restrict g = it->g;
    if (c->cfg.error_feedback)
      for (size_t i = 0; i < n; i++)
        m[i] = g[i] * inv + e[i];
    else
      for (size_t i = 0; i < n; i++)
        m[i] = g[i] * inv;
    dr_psgd_mq(m, it->rows, it->cols, c->q + c->q_off[it->param], R,
               b->buf1 + it->off1);
  }
}

int dr__cmp_psgd_round2(dr_cmp_t *c, bkt_t *b) {
  float inv_w = 1.0f / (float)c->world;
  size_t R = c->cfg.rank;
  for (size_t k = 0; k < b->n_items; k++) {
    item_t *it = &b->items[k];
    if (!it->psgd) {
      size_t n = it->rows * it->cols;
      for (size_t i = 0; i < n; i++)
        it->g[i] = b->buf1[it->off1 + i] * inv_w;
      continue;
    }
    float *p = b->buf1 + it->off1;
    dr_psgd_orthonormalise(p, it->rows, R);
    dr_psgd_mtp(m_of(c, it), it->rows, it->cols, p, R, b->buf2 + it->off2);
  }
  c->sent_bytes += 4 * b->n2;
  b->bytes2 = 4 * b->n2;
  return dr_pg_allreduce(c->pg, b->buf2, b->n2, DR_PG_AVG, &b->w2);
}

void dr__cmp_psgd_decompress(dr_cmp_t *c, bkt_t *b) {
  size_t R = c->cfg.rank;
  for (size_t k = 0; k < b->n_items; k++) {
    item_t *it = &b->items[k];
    if (!it->psgd)
      continue;
    const float *q = b->buf2 + it->off2, *p = b->buf1 + it->off1;
    dr_psgd_pqt(p, q, it->rows, it->cols, R, it->g);
    /* The residual M - P Q^T, in place of M. */
    if (c->cfg.error_feedback)
      dr_psgd_sub_pqt(p, q, it->rows, it->cols, R, m_of(c, it));
    memcpy(c->q_next + c->q_off[it->param], q, it->cols * R * sizeof(float));
  }
}
