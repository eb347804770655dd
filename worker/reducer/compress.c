/* Gradient compression as the reducer's launch hook. See compress.h. */
#include "compress_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "errors.h"
#include "half.h"
#include "powersgd.h"

int dr_cmp_parse(const char *v, dr_cmp_config_t *c, char *err, size_t n) {
  c->rank = DR_CMP_PSGD_RANK;
  if (strcmp(v, "none") == 0)
    c->kind = DR_CMP_NONE;
  else if (strcmp(v, "fp16") == 0)
    c->kind = DR_CMP_FP16;
  else if (strcmp(v, "bf16") == 0)
    c->kind = DR_CMP_BF16;
  else if (strncmp(v, "powersgd", 8) == 0 && (v[8] == '\0' || v[8] == ':')) {
    c->kind = DR_CMP_POWERSGD;
    if (v[8] == ':') {
      char *end;
      errno = 0;
      unsigned long r = strtoul(v + 9, &end, 10);
      if (errno != 0 || end == v + 9 || *end != '\0' || r < 1 || r > 1024) {
        snprintf(err, n, "--grad-compress '%s': the PowerSGD rank must be a "
                 "whole number from 1 to 1024", v);
        return DR_EBADARG;
      }
      c->rank = (uint32_t)r;
    }
  } else {
    snprintf(err, n, "--grad-compress '%s': expected none, fp16, bf16, "
             "powersgd or powersgd:RANK", v);
    return DR_EBADARG;
  }
  return 0;
}

const char *dr_cmp_name(dr_cmp_kind_t kind, uint32_t rank, char *buf,
                        size_t n) {
  switch (kind) {
  case DR_CMP_FP16:
    snprintf(buf, n, "fp16");
    break;
  case DR_CMP_BF16:
    snprintf(buf, n, "bf16");
    break;
  case DR_CMP_POWERSGD:
    snprintf(buf, n, "powersgd:%u", rank);
    break;
  default:
    snprintf(buf, n, "none");
    break;
  }
  return buf;
}

int dr_cmp_new(const dr_cmp_config_t *cfg, dr_model_t *m, dr_pg_t *pg,
               dr_cmp_t **out) {
  dr_cmp_t *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return -ENOMEM;
  c->cfg = *cfg;
  c->m = m;
  c->pg = pg;
  c->world = dr_pg_world(pg);
  c->scale = 1.0f;
  c->n_params = dr_model_n_params(m);
  size_t np = c->n_params > 0 ? c->n_params : 1;
  c->q_off = malloc(np * sizeof(size_t));
  c->ef_off = malloc(np * sizeof(size_t));
  c->launched = malloc(np * sizeof(size_t)); /* at most a bucket each */
  if (c->q_off == NULL || c->ef_off == NULL || c->launched == NULL)
    goto nomem;
  for (size_t i = 0; i < c->n_params; i++) {
    const dr_param_t *p = dr_model_param(m, i);
    c->q_off[i] = c->ef_off[i] = SIZE_MAX;
    if (cfg->kind != DR_CMP_POWERSGD ||
        !dr_psgd_worth(p->rows, p->cols, cfg->rank))
      continue;
    c->q_off[i] = c->q_elems;
    c->ef_off[i] = c->ef_elems;
    c->q_elems += p->cols * cfg->rank;
    c->ef_elems += p->n_elems;
    c->n_matrices++;
  }
  if (cfg->kind == DR_CMP_POWERSGD) {
    size_t nq = c->q_elems > 0 ? c->q_elems : 1;
    size_t ne = c->ef_elems > 0 ? c->ef_elems : 1;
    c->q = calloc(nq, sizeof(float));
    c->q_next = calloc(nq, sizeof(float));
    c->ef = calloc(ne, sizeof(float));
    c->ef_next = calloc(ne, sizeof(float));
    if (c->q == NULL || c->q_next == NULL || c->ef == NULL ||
        c->ef_next == NULL)
      goto nomem;
    /* The same generator on every rank: Q starts the same everywhere. */
    dr_rng_t rng;
    dr_rng_seed(&rng, cfg->seed ^ 0x5053474451ull);
    for (size_t i = 0; i < c->q_elems; i++)
      c->q[i] = dr_rng_normal(&rng);
  }
  *out = c;
  return 0;
nomem:
  dr_cmp_free(&c);
  return -ENOMEM;
}

static void bkt_clear(bkt_t *b) {
  if (b->w2 != NULL)
    dr_work_free(&b->w2);
  free(b->items);
  free(b->half);
  free(b->buf1);
  free(b->buf2);
  memset(b, 0, sizeof(*b));
}

void dr_cmp_free(dr_cmp_t **cp) {
  dr_cmp_t *c = *cp;
  if (c == NULL)
    return;
  for (size_t i = 0; i < c->nb; i++)
    bkt_clear(&c->b[i]);
  free(c->b);
  free(c->launched);
  free(c->q_off);
  free(c->ef_off);
  free(c->q);
  free(c->q_next);
  free(c->ef);
  free(c->ef_next);
  free(c);
  *cp = NULL;
}

void dr_cmp_begin_step(dr_cmp_t *c, uint64_t step, float scale) {
  c->step = step;
  c->scale = scale;
  c->n_launched = 0;
  c->local_bad = 0;
  c->extra_us = 0;
  c->sent_bytes = 0;
}

void dr_cmp_poison(dr_cmp_t *c, float value) {
  c->poison = 1;
  c->poison_value = value;
}

int dr_cmp_layout(const dr_cmp_t *c, float *data, size_t n,
                  dr_cmp_item_t **items, size_t *n_items, size_t *n1,
                  size_t *n2) {
  dr_cmp_item_t *it = calloc(c->n_params > 0 ? c->n_params : 1, sizeof(*it));
  *items = it;
  *n_items = *n1 = *n2 = 0;
  if (it == NULL)
    return -ENOMEM;
  size_t m = 0;
  for (size_t i = 0; i < c->n_params; i++) {
    dr_param_t *p = dr_model_param(c->m, i);
    if (p->g < data || p->g >= data + n)
      continue;
    size_t k = m++;
    /* Insertion by address: the bucket's own order, the same on every
     * rank. */
    while (k > 0 && it[k - 1].g > p->g) {
      it[k] = it[k - 1];
      k--;
    }
    it[k] = (dr_cmp_item_t){.param = i, .g = p->g, .rows = p->rows,
                            .cols = p->cols, .psgd = c->q_off[i] != SIZE_MAX};
  }
  size_t R = c->cfg.rank;
  for (size_t k = 0; k < m; k++)
    if (!it[k].psgd) {
      it[k].off1 = *n1;
      *n1 += it[k].rows * it[k].cols;
    }
  for (size_t k = 0; k < m; k++)
    if (it[k].psgd) {
      it[k].off1 = *n1;
      *n1 += it[k].rows * R;
      it[k].off2 = *n2;
      *n2 += it[k].cols * R;
    }
  *n_items = m;
  return 0;
}

int dr_cmp_layout_holds(const dr_cmp_t *c, const float *data, size_t n,
                        const float *was_data, size_t was_n,
                        const dr_cmp_item_t *items, size_t n_items) {
  if (was_data != data || was_n != n || (n > 0 && items == NULL))
    return 0;
  for (size_t k = 0; k < n_items; k++)
    if (dr_model_param(c->m, items[k].param)->g != items[k].g)
      return 0;
  return 1;
}

/* The bucket's layout (dr_cmp_layout) and buffers, kept while it holds
 * (dr_cmp_layout_holds). */
static int bkt_prepare(dr_cmp_t *c, bkt_t *b, float *data, size_t n) {
  if (dr_cmp_layout_holds(c, data, n, b->data, b->n_elems, b->items,
                          b->n_items))
    return 0;
  bkt_clear(b);
  if (dr_cmp_layout(c, data, n, &b->items, &b->n_items, &b->n1, &b->n2) != 0)
    return -ENOMEM;
  if (c->cfg.kind == DR_CMP_FP16 || c->cfg.kind == DR_CMP_BF16) {
    b->half = malloc((n > 0 ? n : 1) * sizeof(uint16_t));
    if (b->half == NULL)
      return -ENOMEM;
  }
  if (c->cfg.kind == DR_CMP_POWERSGD) {
    b->buf1 = malloc((b->n1 > 0 ? b->n1 : 1) * sizeof(float));
    b->buf2 = malloc((b->n2 > 0 ? b->n2 : 1) * sizeof(float));
    if (b->buf1 == NULL || b->buf2 == NULL)
      return -ENOMEM;
  }
  b->data = data;
  b->n_elems = n;
  return 0;
}

static bkt_t *bkt_at(dr_cmp_t *c, size_t i) {
  if (i >= c->nb) {
    bkt_t *nb = realloc(c->b, (i + 1) * sizeof(*nb));
    if (nb == NULL)
      return NULL;
    memset(nb + c->nb, 0, (i + 1 - c->nb) * sizeof(*nb));
    c->b = nb;
    c->nb = i + 1;
  }
  return &c->b[i];
}

int dr_cmp_launch(void *arg, size_t bucket, float *data, size_t n,
                  dr_work_t **w) {
  dr_cmp_t *c = arg;
  *w = NULL;
  bkt_t *b = bkt_at(c, bucket);
  if (b == NULL || bkt_prepare(c, b, data, n) != 0)
    return -ENOMEM;
  if (c->poison && n > 0) {
    data[0] = c->poison_value;
    c->poison = 0;
  }
  c->launched[c->n_launched++] = bucket;
  if (c->cfg.kind == DR_CMP_FP16 || c->cfg.kind == DR_CMP_BF16) {
    int f16 = c->cfg.kind == DR_CMP_FP16;
    float pre = 1.0f / (float)c->world;
    int bad = f16 ? dr_f32_to_f16_scaled(data, pre, b->half, n)
                  : dr_f32_to_bf16_scaled(data, pre, b->half, n);
    c->local_bad |= c->cfg.check && bad;
    b->sent = SENT_HALF;
    b->bytes1 = 2 * n;
    c->sent_bytes += 2 * n;
    return dr_pg_allreduce_typed(c->pg, b->half, n,
                                 f16 ? DR_PG_F16 : DR_PG_BF16, DR_PG_SUM, w);
  }
  if (c->cfg.kind == DR_CMP_POWERSGD && c->step >= c->cfg.start_step) {
    dr__cmp_psgd_round1(c, b);
    b->sent = SENT_PSGD;
    b->bytes1 = 4 * b->n1;
    c->sent_bytes += 4 * b->n1;
    return dr_pg_allreduce(c->pg, b->buf1, b->n1, DR_PG_SUM, w);
  }
  c->local_bad |= c->cfg.check && dr__cmp_nonfinite(data, n);
  b->sent = SENT_F32;
  b->bytes1 = 4 * n;
  c->sent_bytes += 4 * n;
  return dr_pg_allreduce(c->pg, data, n, DR_PG_AVG, w);
}

int dr_cmp_finish(dr_cmp_t *c, int *local_bad, int *sum_bad, char *err,
                  size_t err_len) {
  float inv = 1.0f / c->scale;
  int bad = 0, rc = 0;
  for (size_t k = 0; k < c->n_launched; k++) {
    bkt_t *b = &c->b[c->launched[k]];
    if (b->sent == SENT_HALF) {
      bad |= c->cfg.kind == DR_CMP_FP16
                 ? dr_f16_to_f32_scaled(b->half, inv, b->data, b->n_elems)
                 : dr_bf16_to_f32_scaled(b->half, inv, b->data, b->n_elems);
    } else if (b->sent == SENT_F32) {
      if (inv != 1.0f)
        for (size_t i = 0; i < b->n_elems; i++)
          b->data[i] *= inv;
      bad |= c->cfg.check && dr__cmp_nonfinite(b->data, b->n_elems);
    } else if (rc == 0) {
      /* Every rank launches the same second rounds in the same order,
       * whatever fails: a failed one breaks the group for all. */
      rc = dr__cmp_psgd_round2(c, b);
      if (rc != 0)
        snprintf(err, err_len, "cannot launch PowerSGD's second all-reduce "
                 "of bucket %zu (%s)", c->launched[k], dr_strerror(rc));
    }
  }
  for (size_t k = 0; k < c->n_launched; k++) {
    bkt_t *b = &c->b[c->launched[k]];
    if (b->w2 == NULL)
      continue;
    char msg[256];
    int w = dr_work_wait_keep(b->w2, msg, sizeof(msg));
    uint64_t t0 = dr_work_start_us(b->w2), t1 = dr_work_end_us(b->w2);
    b->dur2_us = t1 > t0 ? t1 - t0 : 0;
    c->extra_us += b->dur2_us;
    dr_work_free(&b->w2);
    if (w != 0 && rc == 0) {
      rc = w;
      snprintf(err, err_len, "%s", msg);
    }
    if (rc == 0) {
      dr__cmp_psgd_decompress(c, b);
      bad |= c->cfg.check && dr__cmp_nonfinite(b->data, b->n_elems);
    }
  }
  *local_bad = c->cfg.check && c->local_bad;
  *sum_bad = c->cfg.check && bad;
  return rc;
}

void dr_cmp_commit(dr_cmp_t *c, int applied) {
  if (!applied || c->cfg.kind != DR_CMP_POWERSGD ||
      c->step < c->cfg.start_step)
    return;
  float *t = c->q;
  c->q = c->q_next;
  c->q_next = t;
  t = c->ef;
  c->ef = c->ef_next;
  c->ef_next = t;
}

uint64_t dr_cmp_extra_comm_us(const dr_cmp_t *c) { return c->extra_us; }

uint64_t dr_cmp_bucket_bytes(const dr_cmp_t *c, size_t bucket) {
  return bucket < c->nb ? c->b[bucket].bytes1 : 0;
}

size_t dr_cmp_n_round2(const dr_cmp_t *c) {
  size_t n = 0;
  for (size_t k = 0; k < c->n_launched; k++)
    n += c->b[c->launched[k]].sent == SENT_PSGD;
  return n;
}

void dr_cmp_round2(const dr_cmp_t *c, size_t k, uint64_t *n_bytes,
                   uint64_t *dur_us) {
  *n_bytes = *dur_us = 0;
  for (size_t i = 0; i < c->n_launched; i++) {
    const bkt_t *b = &c->b[c->launched[i]];
    if (b->sent == SENT_PSGD && k-- == 0) {
      *n_bytes = b->bytes2;
      *dur_us = b->dur2_us;
      return;
    }
  }
}
uint64_t dr_cmp_sent_bytes(const dr_cmp_t *c) { return c->sent_bytes; }
size_t dr_cmp_q_elems(const dr_cmp_t *c) { return c->q_elems; }
size_t dr_cmp_ef_elems(const dr_cmp_t *c) { return c->ef_elems; }
float *dr_cmp_q(dr_cmp_t *c) { return c->q; }
float *dr_cmp_ef(dr_cmp_t *c) { return c->ef; }
size_t dr_cmp_q_off(const dr_cmp_t *c, size_t param) {
  return param < c->n_params ? c->q_off[param] : SIZE_MAX;
}
size_t dr_cmp_ef_off(const dr_cmp_t *c, size_t param) {
  return param < c->n_params ? c->ef_off[param] : SIZE_MAX;
}
const dr_cmp_config_t *dr_cmp_config(const dr_cmp_t *c) { return &c->cfg; }

const char *dr_cmp_describe(dr_cmp_t *c) {
  char name[32];
  dr_cmp_name(c->cfg.kind, c->cfg.rank, name, sizeof(name));
  if (c->cfg.kind != DR_CMP_POWERSGD) {
    snprintf(c->desc, sizeof(c->desc), "%s", name);
    return c->desc;
  }
  size_t total = dr_model_n_elems(c->m), sent = total - c->ef_elems;
  for (size_t i = 0; i < c->n_params; i++)
    if (c->q_off[i] != SIZE_MAX) {
      const dr_param_t *p = dr_model_param(c->m, i);
      sent += (p->rows + p->cols) * c->cfg.rank;
    }
  snprintf(c->desc, sizeof(c->desc), "%s: %zu of %zu tensors compressed "
           "(%.1fx fewer bytes) from step %llu%s", name, c->n_matrices,
           c->n_params, sent > 0 ? (double)total / (double)sent : 0.0,
           (unsigned long long)c->cfg.start_step + 1,
           c->cfg.error_feedback ? "" : ", no error feedback");
  return c->desc;
}
