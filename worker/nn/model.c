/* The model's construction, parameters, initialisation and checksum. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "model_internal.h"
#include "nn_internal.h"

/* Bounds that keep every BLAS dimension and leading dimension in an int
 * and every size_t product far from overflow (DR_MODEL_MAX_DIM: model.h). */
#define MAX_DIM DR_MODEL_MAX_DIM
#define MAX_LAYERS 1024u
#define MAX_CONTEXT 4096u

static int check_config(const dr_model_config_t *c, char *err, size_t err_len) {
  const char *why = NULL;
  if (c->layers < 1 || c->layers > MAX_LAYERS)
    why = "layers must be between 1 and 1024";
  else if (c->width < 1 || c->width > MAX_DIM)
    why = "width must be between 1 and 2^20";
  else if (c->max_batch < 1 || c->max_batch > MAX_DIM)
    why = "max_batch must be between 1 and 2^20";
  else if (c->context == 0 && (c->input_dim < 1 || c->input_dim > MAX_DIM))
    why = "input_dim must be between 1 and 2^20";
  else if (c->context == 0 && (c->classes < 2 || c->classes > MAX_DIM))
    why = "classes must be between 2 and 2^20";
  else if (c->context > MAX_CONTEXT)
    why = "context must be at most 4096";
  else if (c->context > 0 && (c->embed_dim < 1 ||
                              (uint64_t)c->context * c->embed_dim > MAX_DIM))
    why = "text needs embed_dim >= 1 and context * embed_dim <= 2^20";
  else if (c->context > 0 && c->classes != 0 && c->classes != 256)
    why = "text predicts bytes: classes must be 256 (or 0)";
  if (!why) return 0;
  snprintf(err, err_len, "model: %s", why);
  return DR_EBADARG;
}

static void add_param(dr_model_t *m, const char *name, size_t rows,
                      size_t cols) {
  dr_param_t *p = &m->params[m->n_params++];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->n_elems = rows * cols;
  p->rows = rows;
  p->cols = cols;
  m->n_elems += p->n_elems;
}

/* PyTorch's defaults: nn.Embedding N(0, 1); nn.Linear weight and bias
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)). One stream, registration order. */
static void init_params(dr_model_t *m) {
  dr_rng_t r;
  dr_rng_seed(&r, m->cfg.seed);
  if (m->text) dr__rng_normal_fill(&r, m->params[0].w, m->params[0].n_elems);
  for (uint32_t k = 0; k < m->n_linear; k++) {
    const double bound = 1.0 / sqrt((double)m->lin[k].in);
    const size_t idx[2] = {m->lin[k].w, m->lin[k].b};
    for (int t = 0; t < 2; t++) {
      dr_param_t *p = &m->params[idx[t]];
      for (size_t i = 0; i < p->n_elems; i++)
        p->w[i] = (float)(bound * (2.0 * dr_rng_uniform(&r) - 1.0));
    }
  }
}

/* What alloc_activations asks for, for a message when it cannot have it. */
static double activation_bytes(const dr_model_t *m) {
  double rows = m->cfg.max_batch, floats = 0;
  for (uint32_t k = 0; k < m->n_linear; k++)
    floats += rows * m->lin[k].in;
  floats += rows * m->cfg.classes + 2 * rows * m->max_dim + m->max_dim;
  return 4 * floats + 4 * rows + (m->text ? rows * m->cfg.context : 0);
}

static int alloc_activations(dr_model_t *m) {
  const size_t rows = m->cfg.max_batch;
  m->act = calloc(m->n_linear, sizeof *m->act);
  if (!m->act) return -ENOMEM;
  for (uint32_t k = 0; k < m->n_linear; k++) {
    m->act[k] = malloc(rows * m->lin[k].in * sizeof(float));
    if (!m->act[k]) return -ENOMEM;
  }
  m->probs = malloc(rows * m->cfg.classes * sizeof(float));
  m->dbuf[0] = malloc(rows * m->max_dim * sizeof(float));
  m->dbuf[1] = malloc(rows * m->max_dim * sizeof(float));
  m->bias_sum = malloc(m->max_dim * sizeof(float));
  m->labels = calloc(rows, sizeof(int32_t));
  if (m->text) m->tokens = malloc(rows * m->cfg.context);
  if (!m->probs || !m->dbuf[0] || !m->dbuf[1] || !m->bias_sum || !m->labels ||
      (m->text && !m->tokens))
    return -ENOMEM;
  return 0;
}

int dr_model_new(const dr_model_config_t *cfg, dr_model_t **out, char *err,
                 size_t err_len) {
  *out = NULL;
  int rc = check_config(cfg, err, err_len);
  if (rc < 0) return rc;
  dr_model_t *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, err_len, "model: out of memory allocating the model");
    return -ENOMEM;
  }
  m->cfg = *cfg;
  m->text = cfg->context > 0;
  if (m->text) {
    m->cfg.classes = 256;
    m->cfg.input_dim = 0;
    m->in_dim = cfg->context * cfg->embed_dim;
  } else {
    m->cfg.embed_dim = 0;
    m->in_dim = cfg->input_dim;
  }
  m->max_dim = m->in_dim;
  if (m->cfg.width > m->max_dim) m->max_dim = m->cfg.width;
  if (m->cfg.classes > m->max_dim) m->max_dim = m->cfg.classes;

  m->n_linear = cfg->layers + 1;
  const size_t cap = 2 * (size_t)m->n_linear + 1;
  m->params = calloc(cap, sizeof *m->params);
  m->lin = calloc(m->n_linear, sizeof *m->lin);
  char what[128] = "the parameter table";
  double bytes = (double)cap * sizeof *m->params + m->n_linear * sizeof *m->lin;
  if (!m->params || !m->lin) goto nomem;

  if (m->text) add_param(m, "embed.weight", 256, cfg->embed_dim);
  for (uint32_t k = 0; k < m->n_linear; k++) {
    dr__linear_t *l = &m->lin[k];
    const int head = k + 1 == m->n_linear;
    char base[16], name[32];
    if (head)
      snprintf(base, sizeof base, "head");
    else
      snprintf(base, sizeof base, "fc%u", (unsigned)k);
    l->in = k == 0 ? m->in_dim : cfg->width;
    l->out = head ? m->cfg.classes : cfg->width;
    snprintf(l->fwd, sizeof l->fwd, "%s.fwd", base);
    snprintf(l->bwd, sizeof l->bwd, "%s.bwd", base);
    l->w = m->n_params;
    snprintf(name, sizeof name, "%s.weight", base);
    add_param(m, name, l->out, l->in);
    l->b = m->n_params;
    snprintf(name, sizeof name, "%s.bias", base);
    add_param(m, name, l->out, 1);
  }

  m->w_all = malloc(m->n_elems * sizeof(float));
  m->g_own = calloc(m->n_elems, sizeof(float));
  snprintf(what, sizeof what, "the weights and gradients of %zu parameters",
           m->n_elems);
  bytes = 8.0 * (double)m->n_elems;
  if (!m->w_all || !m->g_own) goto nomem;
  size_t off = 0;
  for (size_t i = 0; i < m->n_params; i++) {
    m->params[i].w = m->w_all + off;
    m->params[i].g = m->g_own + off;
    off += m->params[i].n_elems;
  }
  snprintf(what, sizeof what, "the activations of a batch of %u rows",
           (unsigned)m->cfg.max_batch);
  bytes = activation_bytes(m);
  if (alloc_activations(m) < 0) goto nomem;
  init_params(m);
  *out = m;
  return 0;
nomem:
  snprintf(err, err_len, "model: out of memory allocating %s (%.1f MiB)",
           what, bytes / 1048576.0);
  dr_model_free(&m);
  return -ENOMEM;
}

void dr_model_free(dr_model_t **mp) {
  dr_model_t *m = *mp;
  if (!m) return;
  if (m->act)
    for (uint32_t k = 0; k < m->n_linear; k++) free(m->act[k]);
  free(m->act);
  free(m->probs);
  free(m->dbuf[0]);
  free(m->dbuf[1]);
  free(m->bias_sum);
  free(m->labels);
  free(m->tokens);
  free(m->w_all);
  free(m->g_own);
  free(m->params);
  free(m->lin);
  free(m);
  *mp = NULL;
}

void dr_model_rebind_weights(dr_model_t *m, float *mem) {
  free(m->w_all);
  m->w_all = NULL;
  size_t off = 0;
  for (size_t i = 0; i < m->n_params; i++) {
    m->params[i].w = mem + off;
    off += m->params[i].n_elems;
  }
}

size_t dr_model_n_params(const dr_model_t *m) { return m->n_params; }

dr_param_t *dr_model_param(dr_model_t *m, size_t i) {
  return i < m->n_params ? &m->params[i] : NULL;
}

size_t dr_model_n_elems(const dr_model_t *m) { return m->n_elems; }

const dr_model_config_t *dr_model_config(const dr_model_t *m) { return &m->cfg; }

void dr_model_set_span_hook(dr_model_t *m, dr_span_fn fn, void *arg) {
  m->span = fn;
  m->span_arg = arg;
}

uint32_t dr_model_crc32(const dr_model_t *m) {
  uint32_t crc = 0;
  for (size_t i = 0; i < m->n_params; i++)
    crc = dr__crc32(crc, m->params[i].w, m->params[i].n_elems * sizeof(float));
  return crc;
}

void dr_model_blas_info(char *buf, size_t len) {
  /* openblas_get_config() starts with "OpenBLAS <version>" and lists the
   * build options; the core is the kernel set chosen at run time. */
  snprintf(buf, len, "%s, core %s, %d thread%s", openblas_get_config(),
           openblas_get_corename(), openblas_get_num_threads(),
           openblas_get_num_threads() == 1 ? "" : "s");
}
