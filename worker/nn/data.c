/* The two datasets of `train` and their batches. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "fs.h"
#include "nn_internal.h"

enum { KIND_SYNTHETIC, KIND_TEXT };

/* The teacher's hidden layer: header contract. */
#define TEACHER_HIDDEN 64
/* Logits are accumulated in chunks of this many classes, on the stack. */
#define CLASS_CHUNK 256
#define SYNTH_MAX_INPUT (1u << 20)
#define SYNTH_MAX_CLASSES 4096u
#define TEXT_MAX_CONTEXT 4096u
#define TEXT_MAX_BYTES ((uint64_t)1 << 32)

struct dr_dataset {
  int kind;
  uint64_t n[2];          /* samples per split */
  uint32_t input_dim;     /* synthetic */
  uint32_t classes;
  uint64_t seed;
  /* Teacher, laid out for axpy-form loops: h += x[k] * w1t[k][:]. */
  float *w1t;             /* [input_dim][TEACHER_HIDDEN] */
  float *b1;              /* [TEACHER_HIDDEN] */
  float *w2t;             /* [TEACHER_HIDDEN][classes] */
  float *b2;              /* [classes] */
  /* Text. */
  uint32_t context;
  uint8_t *text;
  uint64_t text_len;
  uint64_t eval_first;    /* position of eval sample 0 */
};

static uint64_t sample_key(uint64_t seed, int split, uint64_t i) {
  uint64_t k = dr__mix64(seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(split + 1));
  return dr__mix64(k ^ i);
}

static void teacher_hidden(const dr_dataset_t *d, const float *restrict x,
                           float *restrict h) {
  memcpy(h, d->b1, TEACHER_HIDDEN * sizeof(float));
  for (uint32_t k = 0; k < d->input_dim; k++) {
    const float xk = x[k];
    const float *restrict row = d->w1t + (size_t)k * TEACHER_HIDDEN;
    for (int j = 0; j < TEACHER_HIDDEN; j++) h[j] += xk * row[j];
  }
  for (int j = 0; j < TEACHER_HIDDEN; j++) h[j] = tanhf(h[j]);
}

/* out[c] = sum_j h[j] w2t[j][c0 + c] for c < nc. */
static void teacher_logits(const dr_dataset_t *d, const float *restrict h,
                           uint32_t c0, uint32_t nc, float *restrict out) {
  memset(out, 0, nc * sizeof(float));
  for (int j = 0; j < TEACHER_HIDDEN; j++) {
    const float hj = h[j];
    const float *restrict row = d->w2t + (size_t)j * d->classes + c0;
    for (uint32_t c = 0; c < nc; c++) out[c] += hj * row[c];
  }
}

/* x: the sample's input; returns the teacher's argmax (the first on a
 * tie). Allocation-free so that dr_data_fill cannot fail. */
static int32_t teacher_label(const dr_dataset_t *d, const float *x) {
  float h[TEACHER_HIDDEN];
  teacher_hidden(d, x, h);
  int32_t best = 0;
  float best_v = -INFINITY;
  float acc[CLASS_CHUNK];
  for (uint32_t c0 = 0; c0 < d->classes; c0 += CLASS_CHUNK) {
    const uint32_t nc =
        d->classes - c0 < CLASS_CHUNK ? d->classes - c0 : CLASS_CHUNK;
    teacher_logits(d, h, c0, nc, acc);
    for (uint32_t c = 0; c < nc; c++) {
      const float v = acc[c] + d->b2[c0 + c];
      if (v > best_v) {
        best_v = v;
        best = (int32_t)(c0 + c);
      }
    }
  }
  return best;
}

/* A random teacher's argmax favours some classes many times over others.
 * Its output biases are tuned on calibration inputs (a stream apart from
 * both splits) so that each class takes about 1/classes of them: each
 * round lowers a class's bias by the log of its excess share. */
#define CALIB_SPLIT 2
#define CALIB_ROUNDS 60
/* About 64 calibration inputs per class (fewer past 4 Mi stored logits). */
static int teacher_balance(dr_dataset_t *d) {
  const uint32_t C = d->classes;
  uint64_t m = 64 * (uint64_t)C;
  if (m < 4096) m = 4096;
  if (m * C > ((uint64_t)1 << 22)) m = ((uint64_t)1 << 22) / C;
  float *logits = malloc((size_t)m * C * sizeof(float));
  float *x = malloc((size_t)d->input_dim * sizeof(float));
  uint32_t *count = malloc((size_t)C * sizeof(uint32_t));
  int rc = -ENOMEM;
  if (!logits || !x || !count) goto out;

  double sum = 0.0, sum2 = 0.0;
  for (uint64_t i = 0; i < m; i++) {
    dr_rng_t r;
    float h[TEACHER_HIDDEN];
    dr_rng_seed(&r, sample_key(d->seed, CALIB_SPLIT, i));
    dr__rng_normal_fill(&r, x, d->input_dim);
    teacher_hidden(d, x, h);
    float *row = logits + (size_t)i * C;
    teacher_logits(d, h, 0, C, row);
    for (uint32_t c = 0; c < C; c++) {
      sum += row[c];
      sum2 += (double)row[c] * row[c];
    }
  }
  const double n_all = (double)m * C;
  const double var = sum2 / n_all - (sum / n_all) * (sum / n_all);
  const float step = (float)(0.25 * sqrt(var > 0 ? var : 1.0));
  const double fair = (double)m / C;
  for (int round = 0; round < CALIB_ROUNDS; round++) {
    memset(count, 0, (size_t)C * sizeof(uint32_t));
    for (uint64_t i = 0; i < m; i++) {
      const float *row = logits + (size_t)i * C;
      uint32_t best = 0;
      float best_v = -INFINITY;
      for (uint32_t c = 0; c < C; c++) {
        const float v = row[c] + d->b2[c];
        if (v > best_v) {
          best_v = v;
          best = c;
        }
      }
      count[best]++;
    }
    for (uint32_t c = 0; c < C; c++)
      d->b2[c] -= step * (float)log((count[c] + 1.0) / (fair + 1.0));
  }
  rc = 0;
out:
  free(logits);
  free(x);
  free(count);
  return rc;
}

static void synthetic_sample(const dr_dataset_t *d, int split, uint64_t i,
                             float *x, int32_t *y) {
  dr_rng_t r;
  dr_rng_seed(&r, sample_key(d->seed, split, i));
  dr__rng_normal_fill(&r, x, d->input_dim);
  *y = teacher_label(d, x);
}

int dr_data_synthetic(uint64_t seed, uint64_t n_train, uint64_t n_eval,
                      uint32_t input_dim, uint32_t classes,
                      dr_dataset_t **out) {
  *out = NULL;
  if (input_dim == 0 || input_dim > SYNTH_MAX_INPUT || classes < 2 ||
      classes > SYNTH_MAX_CLASSES || n_train == 0)
    return DR_EBADARG;
  dr_dataset_t *d = calloc(1, sizeof *d);
  if (!d) return -ENOMEM;
  d->kind = KIND_SYNTHETIC;
  d->n[DR_SPLIT_TRAIN] = n_train;
  d->n[DR_SPLIT_EVAL] = n_eval;
  d->input_dim = input_dim;
  d->classes = classes;
  d->seed = seed;
  d->w1t = malloc((size_t)input_dim * TEACHER_HIDDEN * sizeof(float));
  d->b1 = malloc(TEACHER_HIDDEN * sizeof(float));
  d->w2t = malloc((size_t)TEACHER_HIDDEN * classes * sizeof(float));
  d->b2 = calloc(classes, sizeof(float));
  if (!d->w1t || !d->b1 || !d->w2t || !d->b2) {
    dr_data_free(&d);
    return -ENOMEM;
  }
  dr_rng_t r;
  dr_rng_seed(&r, dr__mix64(seed ^ 0x7eac4e77eac4e77eULL));
  const float s1 = 1.0f / sqrtf((float)input_dim);
  dr__rng_normal_fill(&r, d->w1t, (size_t)input_dim * TEACHER_HIDDEN);
  for (size_t i = 0; i < (size_t)input_dim * TEACHER_HIDDEN; i++) d->w1t[i] *= s1;
  dr__rng_normal_fill(&r, d->b1, TEACHER_HIDDEN);
  for (int j = 0; j < TEACHER_HIDDEN; j++) d->b1[j] *= 0.1f;
  dr__rng_normal_fill(&r, d->w2t, (size_t)TEACHER_HIDDEN * classes);
  int rc = teacher_balance(d);
  if (rc < 0) {
    dr_data_free(&d);
    return rc;
  }
  *out = d;
  return 0;
}

static int read_file(const char *path, uint8_t **buf, uint64_t *len) {
  /* A FIFO is refused, not waited on (an open() for reading would block
   * until a writer came). */
  int fd = dr_open_regular(path);
  if (fd < 0) return fd;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  if ((uint64_t)st.st_size > TEXT_MAX_BYTES) {
    close(fd);
    return -EFBIG;
  }
  uint64_t cap = (uint64_t)st.st_size;
  uint8_t *p = malloc(cap ? cap : 1);
  if (!p) {
    close(fd);
    return -ENOMEM;
  }
  uint64_t got = 0;
  while (got < cap) {
    ssize_t k = read(fd, p + got, cap - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      int e = -errno;
      free(p);
      close(fd);
      return e;
    }
    if (k == 0) break; /* the file shrank: use what is there */
    got += (uint64_t)k;
  }
  close(fd);
  *buf = p;
  *len = got;
  return 0;
}

int dr_data_text(const char *path, uint32_t context, double eval_frac,
                 dr_dataset_t **out, char *err, size_t err_len) {
  *out = NULL;
  if (context == 0 || context > TEXT_MAX_CONTEXT || !(eval_frac >= 0.0) ||
      !(eval_frac < 1.0)) {
    snprintf(err, err_len,
             "text data needs 1 <= context <= %u and 0 <= eval_frac < 1 "
             "(got context %u, eval_frac %g)",
             TEXT_MAX_CONTEXT, context, eval_frac);
    return DR_EBADARG;
  }
  uint8_t *text = NULL;
  uint64_t len = 0;
  int rc = read_file(path, &text, &len);
  if (rc < 0) {
    snprintf(err, err_len, "cannot read %s (%s)", path, dr_strerror(rc));
    return rc;
  }
  /* Split by target byte: train targets are bytes [context, cut), eval
   * targets bytes [cut, len); an eval window's context may reach back into
   * the training bytes, its target never does. */
  uint64_t eval_bytes = (uint64_t)floor((double)len * eval_frac);
  uint64_t cut = len - eval_bytes;
  if (cut <= context || (eval_frac > 0.0 && eval_bytes == 0)) {
    snprintf(err, err_len,
             "%s is too short: %llu bytes leave no %s sample for context %u "
             "with eval fraction %g",
             path, (unsigned long long)len, cut <= context ? "training" : "eval",
             context, eval_frac);
    free(text);
    return DR_EBADARG;
  }
  dr_dataset_t *d = calloc(1, sizeof *d);
  if (!d) {
    free(text);
    return -ENOMEM;
  }
  d->kind = KIND_TEXT;
  d->classes = 256;
  d->context = context;
  d->text = text;
  d->text_len = len;
  d->n[DR_SPLIT_TRAIN] = cut - context;
  d->n[DR_SPLIT_EVAL] = eval_bytes;
  d->eval_first = cut - context;
  *out = d;
  return 0;
}

void dr_data_free(dr_dataset_t **dp) {
  dr_dataset_t *d = *dp;
  if (!d) return;
  free(d->w1t);
  free(d->b1);
  free(d->w2t);
  free(d->b2);
  free(d->text);
  free(d);
  *dp = NULL;
}

uint64_t dr_data_len(const dr_dataset_t *d, int split) {
  return split == DR_SPLIT_EVAL ? d->n[DR_SPLIT_EVAL] : d->n[DR_SPLIT_TRAIN];
}

uint32_t dr_data_input_dim(const dr_dataset_t *d) { return d->input_dim; }
uint32_t dr_data_context(const dr_dataset_t *d) { return d->context; }
uint32_t dr_data_classes(const dr_dataset_t *d) { return d->classes; }

int dr_batch_new(const dr_dataset_t *d, uint32_t cap, dr_batch_t *b) {
  memset(b, 0, sizeof *b);
  if (cap == 0) return DR_EBADARG;
  b->cap = cap;
  b->input_dim = d->input_dim;
  b->context = d->context;
  b->y = malloc((size_t)cap * sizeof(int32_t));
  if (d->kind == KIND_SYNTHETIC)
    b->x = malloc((size_t)cap * d->input_dim * sizeof(float));
  else
    b->tokens = malloc((size_t)cap * d->context);
  if (!b->y || (!b->x && !b->tokens)) {
    dr_batch_free(b);
    return -ENOMEM;
  }
  return 0;
}

void dr_batch_free(dr_batch_t *b) {
  free(b->x);
  free(b->tokens);
  free(b->y);
  memset(b, 0, sizeof *b);
}

void dr_data_fill(const dr_dataset_t *d, int split, const uint64_t *idx,
                  uint32_t n, dr_batch_t *b) {
  split = split == DR_SPLIT_EVAL ? DR_SPLIT_EVAL : DR_SPLIT_TRAIN;
  if (n > b->cap) n = b->cap;
  const uint64_t len = d->n[split];
  uint32_t out = 0;
  for (uint32_t r = 0; r < n; r++) {
    if (idx[r] >= len) continue; /* out of range: dropped, never read */
    if (d->kind == KIND_SYNTHETIC) {
      synthetic_sample(d, split, idx[r], b->x + (size_t)out * d->input_dim,
                       &b->y[out]);
    } else {
      uint64_t pos = idx[r] + (split == DR_SPLIT_EVAL ? d->eval_first : 0);
      memcpy(b->tokens + (size_t)out * d->context, d->text + pos, d->context);
      b->y[out] = d->text[pos + d->context];
    }
    out++;
  }
  b->n = out;
}
