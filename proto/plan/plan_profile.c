/* Profiles for the bucket planner: JSON out, JSON in, predictions. The
 * reader takes any well-formed JSON (nesting bounded) and keeps the keys
 * it knows. See plan_profile.h. */
#include "plan_profile.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

#define MIB 1048576.0
#define MAX_DEPTH 16

int dr_plan_profile_alloc(dr_plan_profile_t *p, size_t n) {
  size_t m = n > 0 ? n : 1;
  p->index = calloc(m, sizeof(size_t));
  p->bytes = calloc(m, sizeof(double));
  p->ready_ms = calloc(m, sizeof(double));
  p->rows = calloc(m, sizeof(double));
  p->cols = calloc(m, sizeof(double));
  if (p->index == NULL || p->bytes == NULL || p->ready_ms == NULL ||
      p->rows == NULL || p->cols == NULL) {
    dr_plan_profile_free(p);
    return -ENOMEM;
  }
  p->n_params = n;
  return 0;
}

void dr_plan_profile_free(dr_plan_profile_t *p) {
  free(p->index);
  free(p->bytes);
  free(p->ready_ms);
  free(p->rows);
  free(p->cols);
  p->index = NULL;
  p->bytes = NULL;
  p->ready_ms = NULL;
  p->rows = NULL;
  p->cols = NULL;
  p->n_params = 0;
}

/* "fp16", "powersgd:4": what dr_plan_compress_parse reads back. */
static const char *compress_name(const dr_plan_compress_t *c) {
  static _Thread_local char buf[32];
  switch (c->kind) {
  case DR_PLAN_FP16:
    return "fp16";
  case DR_PLAN_BF16:
    return "bf16";
  case DR_PLAN_POWERSGD:
    snprintf(buf, sizeof(buf), "powersgd:%u", c->rank);
    return buf;
  default:
    return "none";
  }
}

int dr_plan_profile_write(FILE *f, const dr_plan_profile_t *p) {
  fprintf(f,
          "{\"version\": 1, \"world\": %u,\n"
          " \"bucket_cap_mib\": %.9g, \"first_bucket_mib\": %.9g,\n"
          " \"alpha_ms\": %.9g, \"bandwidth_mib_per_ms\": %.9g,\n"
          " \"forward_ms\": %.9g, \"backward_ms\": %.9g, "
          "\"optimizer_ms\": %.9g,\n"
          " \"measured_step_ms\": %.9g,\n"
          " \"compress\": \"%s\", \"gemm_gflops\": %.9g, "
          "\"cast_mib_per_ms\": %.9g, \"overlap_cost\": %.9g, "
          "\"overlaps\": %d,\n"
          " \"params\": [",
          p->world, p->cap_bytes / MIB, p->first_cap_bytes / MIB, p->alpha_ms,
          p->bytes_per_ms / MIB, p->forward_ms, p->backward_ms,
          p->optimizer_ms, p->measured_step_ms, compress_name(&p->measured),
          p->measured.gemm_flops_per_ms / 1e6,
          p->measured.cast_bytes_per_ms / MIB, p->overlap_cost,
          !p->no_overlap);
  for (size_t k = 0; k < p->n_params; k++) {
    fprintf(f, "%s\n  {\"index\": %zu, \"bytes\": %.17g, \"ready_ms\": "
            "%.9g", k == 0 ? "" : ",", p->index[k], p->bytes[k],
            p->ready_ms[k]);
    /* A shape only where one is known. */
    if (p->rows[k] >= 1 && p->cols[k] >= 1)
      fprintf(f, ", \"rows\": %.17g, \"cols\": %.17g", p->rows[k],
              p->cols[k]);
    fprintf(f, "}");
  }
  fprintf(f, "]}\n");
  return ferror(f) ? -EIO : 0;
}

/* ---- reader ------------------------------------------------------------ */

typedef struct {
  const char *s, *end, *start;
  char *err;
  size_t err_len;
  int failed;
} rd_t;

static int bad(rd_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int bad(rd_t *r, const char *fmt, ...) {
  if (r->failed)
    return DR_EBADARG;
  r->failed = 1;
  char what[192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  snprintf(r->err, r->err_len, "at byte %zu: %s", (size_t)(r->s - r->start),
           what);
  return DR_EBADARG;
}

static void ws(rd_t *r) {
  while (r->s < r->end &&
         (*r->s == ' ' || *r->s == '\n' || *r->s == '\r' || *r->s == '\t'))
    r->s++;
}

static int expect(rd_t *r, char c) {
  ws(r);
  if (r->s >= r->end || *r->s != c)
    return bad(r, "expected '%c'", c);
  r->s++;
  return 0;
}

/* A string into out (truncated to n - 1; escapes kept as they are, which is
 * enough to compare against plain keys). */
static int string(rd_t *r, char *out, size_t n) {
  if (expect(r, '"') != 0)
    return DR_EBADARG;
  size_t k = 0;
  while (r->s < r->end && *r->s != '"') {
    if (*r->s == '\\' && r->s + 1 < r->end)
      r->s++;
    if (k + 1 < n)
      out[k++] = *r->s;
    r->s++;
  }
  if (r->s >= r->end)
    return bad(r, "unterminated string");
  r->s++;
  out[k] = '\0';
  return 0;
}

/* A number; DR_EBADARG without a message, for the caller to say whose. */
static int number(rd_t *r, double *v) {
  ws(r);
  char buf[64];
  size_t k = 0;
  while (r->s + k < r->end && k < sizeof(buf) - 1 &&
         strchr("+-0123456789.eE", r->s[k]) != NULL) {
    buf[k] = r->s[k];
    k++;
  }
  buf[k] = '\0';
  char *e;
  errno = 0;
  *v = strtod(buf, &e);
  if (k == 0 || e != buf + k || errno != 0 || !isfinite(*v))
    return DR_EBADARG;
  r->s += k;
  return 0;
}

static int skip_value(rd_t *r, int depth);

static int skip_container(rd_t *r, int depth, char close, int keyed) {
  r->s++;
  ws(r);
  if (r->s < r->end && *r->s == close) {
    r->s++;
    return 0;
  }
  for (;;) {
    char key[8];
    if (keyed && (string(r, key, sizeof(key)) != 0 || expect(r, ':') != 0))
      return DR_EBADARG;
    if (skip_value(r, depth + 1) != 0)
      return DR_EBADARG;
    ws(r);
    if (r->s < r->end && *r->s == ',') {
      r->s++;
      continue;
    }
    return expect(r, close);
  }
}

static int skip_value(rd_t *r, int depth) {
  if (depth > MAX_DEPTH)
    return bad(r, "nested deeper than %d", MAX_DEPTH);
  ws(r);
  if (r->s >= r->end)
    return bad(r, "expected a value");
  char c = *r->s;
  if (c == '{')
    return skip_container(r, depth, '}', 1);
  if (c == '[')
    return skip_container(r, depth, ']', 0);
  if (c == '"') {
    char tmp[2];
    return string(r, tmp, sizeof(tmp));
  }
  static const char *const words[] = {"true", "false", "null"};
  for (size_t i = 0; i < 3; i++) {
    size_t n = strlen(words[i]);
    if ((size_t)(r->end - r->s) >= n && memcmp(r->s, words[i], n) == 0) {
      r->s += n;
      return 0;
    }
  }
  double v;
  if (number(r, &v) != 0)
    return bad(r, "expected a value");
  return 0;
}

/* One element of "params": an object with index, bytes and ready_ms. */
static int param(rd_t *r, dr_plan_profile_t *p, size_t k) {
  if (expect(r, '{') != 0)
    return DR_EBADARG;
  int have = 0;
  for (;;) {
    char key[32];
    if (string(r, key, sizeof(key)) != 0 || expect(r, ':') != 0)
      return DR_EBADARG;
    double v;
    int bit = strcmp(key, "index") == 0 ? 1 : strcmp(key, "bytes") == 0 ? 2
              : strcmp(key, "ready_ms") == 0 ? 4 : 0;
    int dim = strcmp(key, "rows") == 0 ? 1 : strcmp(key, "cols") == 0 ? 2 : 0;
    if (dim != 0) {
      if (number(r, &v) != 0 || !(v >= 1) || v != floor(v))
        return bad(r, "params[%zu].%s: expected a whole number, 1 or more",
                   k, key);
      (dim == 1 ? p->rows : p->cols)[k] = v;
      have |= dim << 3;
    } else if (bit != 0) {
      if (number(r, &v) != 0)
        return bad(r, "params[%zu].%s: expected a number", k, key);
      have |= bit;
      if (bit == 1) {
        if (v < 0 || v != floor(v) || v >= DR_PLAN_MAX_PARAMS)
          return bad(r, "params[%zu].index: expected a whole number under %u",
                     k, DR_PLAN_MAX_PARAMS);
        p->index[k] = (size_t)v;
      } else if (bit == 2) {
        if (!(v > 0))
          return bad(r, "params[%zu].bytes: expected a positive number", k);
        p->bytes[k] = v;
      } else {
        if (v < 0)
          return bad(r, "params[%zu].ready_ms: expected 0 or more", k);
        p->ready_ms[k] = v;
      }
    } else if (skip_value(r, 2) != 0) {
      return DR_EBADARG;
    }
    ws(r);
    if (r->s < r->end && *r->s == ',') {
      r->s++;
      continue;
    }
    if (expect(r, '}') != 0)
      return DR_EBADARG;
    break;
  }
  if ((have & 6) != 6)
    return bad(r, "params[%zu]: needs \"bytes\" and \"ready_ms\"", k);
  if (!(have & 1))
    p->index[k] = k;
  if ((have & 24) != 24) { /* no shape: a vector of its floats */
    p->rows[k] = p->bytes[k] / 4;
    p->cols[k] = 1;
  }
  return 0;
}

/* Counts the elements of the array at r->s without consuming it. */
static int count_elems(rd_t *r, size_t *n) {
  rd_t probe = *r;
  *n = 0;
  if (expect(&probe, '[') != 0)
    return bad(r, "\"params\": expected an array");
  ws(&probe);
  if (probe.s < probe.end && *probe.s == ']')
    return 0;
  for (;;) {
    if (skip_value(&probe, 2) != 0) {
      r->failed = 1; /* the message is in err already */
      return DR_EBADARG;
    }
    (*n)++;
    ws(&probe);
    if (probe.s < probe.end && *probe.s == ',') {
      probe.s++;
      continue;
    }
    if (expect(&probe, ']') != 0) {
      r->failed = 1;
      return DR_EBADARG;
    }
    return 0;
  }
}

static int params(rd_t *r, dr_plan_profile_t *p) {
  size_t n;
  if (count_elems(r, &n) != 0)
    return DR_EBADARG;
  if (n > DR_PLAN_MAX_PARAMS)
    return bad(r, "\"params\" has %zu entries (at most %u)", n,
               DR_PLAN_MAX_PARAMS);
  dr_plan_profile_free(p);
  if (dr_plan_profile_alloc(p, n) != 0)
    return bad(r, "out of memory for %zu parameters", n);
  expect(r, '[');
  for (size_t k = 0; k < n; k++) {
    if (k > 0 && expect(r, ',') != 0)
      return DR_EBADARG;
    if (param(r, p, k) != 0)
      return DR_EBADARG;
  }
  return expect(r, ']');
}

int dr_plan_profile_parse(const char *text, size_t len, dr_plan_profile_t *p,
                          char *err, size_t err_len) {
  memset(p, 0, sizeof(*p));
  rd_t r = {text, text + len, text, err, err_len, 0};
  struct {
    const char *key;
    double *v;
    double scale;
    int seen;
  } nums[] = {
      {"bucket_cap_mib", &p->cap_bytes, MIB, 0},
      {"first_bucket_mib", &p->first_cap_bytes, MIB, 0},
      {"alpha_ms", &p->alpha_ms, 1, 0},
      {"bandwidth_mib_per_ms", &p->bytes_per_ms, MIB, 0},
      {"forward_ms", &p->forward_ms, 1, 0},
      {"backward_ms", &p->backward_ms, 1, 0},
      {"optimizer_ms", &p->optimizer_ms, 1, 0},
      {"measured_step_ms", &p->measured_step_ms, 1, 0},
  };
  const size_t n_nums = sizeof(nums) / sizeof(nums[0]);
  int have_params = 0;
  if (expect(&r, '{') != 0)
    return DR_EBADARG;
  ws(&r);
  if (r.s < r.end && *r.s == '}')
    return bad(&r, "an empty object; expected a profile");
  for (;;) {
    char key[64];
    if (string(&r, key, sizeof(key)) != 0 || expect(&r, ':') != 0)
      return DR_EBADARG;
    size_t i = 0;
    while (i < n_nums && strcmp(nums[i].key, key) != 0)
      i++;
    double v;
    if (i < n_nums) {
      if (number(&r, &v) != 0)
        return bad(&r, "\"%s\": expected a number", key);
      if (v < 0)
        return bad(&r, "\"%s\": expected 0 or more", key);
      *nums[i].v = v * nums[i].scale;
      nums[i].seen = 1;
    } else if (strcmp(key, "world") == 0) {
      if (number(&r, &v) != 0)
        return bad(&r, "\"world\": expected a number");
      p->world = v >= 0 && v < 4294967296.0 ? (uint32_t)v : 0;
    } else if (strcmp(key, "compress") == 0) {
      char name[32];
      if (string(&r, name, sizeof(name)) != 0 ||
          dr_plan_compress_parse(name, &p->measured) != 0)
        return bad(&r, "\"compress\": expected none, fp16, bf16 or "
                   "powersgd:R");
    } else if (strcmp(key, "gemm_gflops") == 0 ||
               strcmp(key, "cast_mib_per_ms") == 0) {
      if (number(&r, &v) != 0 || v < 0)
        return bad(&r, "\"%s\": expected a number, 0 or more", key);
      if (key[0] == 'g')
        p->measured.gemm_flops_per_ms = v * 1e6;
      else
        p->measured.cast_bytes_per_ms = v * MIB;
    } else if (strcmp(key, "overlaps") == 0) {
      if (number(&r, &v) != 0 || (v != 0 && v != 1))
        return bad(&r, "\"overlaps\": expected 0 or 1");
      p->no_overlap = v == 0;
    } else if (strcmp(key, "overlap_cost") == 0) {
      if (number(&r, &v) != 0 || v < 0)
        return bad(&r, "\"overlap_cost\": expected a number, 0 or more");
      p->overlap_cost = v;
    } else if (strcmp(key, "params") == 0) {
      if (params(&r, p) != 0)
        return DR_EBADARG;
      have_params = 1;
    } else if (skip_value(&r, 1) != 0) {
      return DR_EBADARG;
    }
    ws(&r);
    if (r.s < r.end && *r.s == ',') {
      r.s++;
      continue;
    }
    if (expect(&r, '}') != 0)
      return DR_EBADARG;
    break;
  }
  ws(&r);
  if (r.s != r.end)
    return bad(&r, "text after the profile's object");
  /* What the model cannot do without. */
  for (size_t i = 2; i < 6; i++)
    if (!nums[i].seen)
      return bad(&r, "missing \"%s\"", nums[i].key);
  if (!have_params || p->n_params == 0)
    return bad(&r, "missing \"params\" (at least one parameter)");
  if (!(p->bytes_per_ms > 0))
    return bad(&r, "\"bandwidth_mib_per_ms\" must be above 0");
  if (!nums[1].seen || !(p->first_cap_bytes > 0))
    p->first_cap_bytes = 1 * MIB;
  return 0;
}

/* The model's cost terms of a profile. */
static void profile_cost(const dr_plan_profile_t *p, dr_plan_cost_t *c) {
  c->alpha_ms = p->alpha_ms;
  c->bytes_per_ms = p->bytes_per_ms;
  c->backward_ms = p->backward_ms;
  c->fixed_ms = p->forward_ms + p->optimizer_ms;
  c->overlap_cost = p->overlap_cost;
}

int dr_plan_profile_predict(const dr_plan_profile_t *p, const double *caps,
                            size_t n, const dr_plan_compress_t *c,
                            dr_plan_result_t *out) {
  dr_plan_param_t *q =
      malloc((p->n_params > 0 ? p->n_params : 1) * sizeof(*q));
  if (q == NULL)
    return -ENOMEM;
  for (size_t k = 0; k < p->n_params; k++)
    q[k] = (dr_plan_param_t){p->bytes[k],
                             p->no_overlap ? p->backward_ms : p->ready_ms[k],
                             p->rows[k], p->cols[k]};
  dr_plan_cost_t cost;
  profile_cost(p, &cost);
  for (size_t i = 0; i < n; i++)
    dr_plan_eval_params(q, p->n_params, caps[i], p->first_cap_bytes, &cost,
                        c != NULL ? c : &p->measured, &p->measured, &out[i]);
  free(q);
  return 0;
}
