/* dr_dg_read and dr_dg_read_buf (diag_trace.h): the file's bytes
 * (diag_read_load.c), the lexer, which source wrote it, and its reader. */
#include "diag_read_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small shared helpers --------------------------------------------- */

void dr__dg_note(dr_dg_rank_t *r, const char *fmt, ...) {
  char line[sizeof(r->note)];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  if (k < 0)
    return;
  size_t len = strlen(r->note);
  if (len >= 5 && strcmp(r->note + len - 5, "; ...") == 0)
    return; /* full already */
  /* Whole notes only; "; ..." says that some did not fit. */
  const char *sep = len > 0 ? "; " : "";
  if (len + strlen(sep) + (size_t)k + 6 <= sizeof(r->note))
    snprintf(r->note + len, sizeof(r->note) - len, "%s%s", sep, line);
  else if (len + 6 <= sizeof(r->note))
    snprintf(r->note + len, sizeof(r->note) - len, "; ...");
}

void dr__sort(void *base, size_t n, size_t size,
              int (*cmp)(const void *, const void *)) {
  if (n > 1)
    qsort(base, n, size, cmp);
}

int dr__json_num(const json_t *j, double *v) {
  if (json_is_integer(j))
    *v = (double)json_integer_value(j);
  else if (json_is_real(j))
    *v = json_real_value(j);
  else
    return -1;
  return isfinite(*v) ? 0 : -1;
}

int64_t dr__as_count(double v, int64_t max) {
  /* Doubles hold integers exactly up to 2^53; beyond, a "count" is noise. */
  const double exact = 9007199254740992.0;
  double m = (double)max < exact ? (double)max : exact;
  if (!(v >= 0) || !(v <= m) || v != floor(v))
    return -1;
  return (int64_t)v;
}

dr_dg_kind_t dr__kind_of(const char *name) {
  static const char *const prefixes[] = {"c10d::", "gloo:", "nccl:",
                                         "ncclDevKernel_", "ncclKernel_"};
  char s[96];
  size_t o = 0;
  const char *p = name;
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
    if (strncmp(p, prefixes[i], strlen(prefixes[i])) == 0) {
      p += strlen(prefixes[i]);
      break;
    }
  for (; *p != '\0' && o + 1 < sizeof(s); p++)
    if (isalnum((unsigned char)*p))
      s[o++] = (char)tolower((unsigned char)*p);
  s[o] = '\0';
  if (strncmp(s, "reducescatter", 13) == 0)
    return DR_DG_REDUCE_SCATTER;
  if (strncmp(s, "allgather", 9) == 0)
    return DR_DG_ALLGATHER;
  if (strncmp(s, "allreduce", 9) == 0)
    return DR_DG_ALLREDUCE;
  if (strncmp(s, "broadcast", 9) == 0)
    return DR_DG_BROADCAST;
  if (strncmp(s, "barrier", 7) == 0)
    return DR_DG_BARRIER;
  return DR_DG_OTHER;
}

unsigned dr__dtype_size(const char *dtype) {
  /* Both spellings: c10's type names in "Input type" ("float",
   * "c10::BFloat16", "long int") and ScalarType names in
   * record_param_comms' "dtype" ("Float", "BFloat16", "Long"). */
  static const struct {
    const char *name;
    unsigned size;
  } t[] = {
      {"float", 4},         {"float32", 4},      {"double", 8},
      {"float64", 8},       {"half", 2},         {"float16", 2},
      {"bfloat16", 2},      {"long", 8},         {"longint", 8},
      {"int64", 8},         {"int", 4},          {"int32", 4},
      {"short", 2},         {"shortint", 2},     {"int16", 2},
      {"char", 1},          {"signedchar", 1},   {"unsignedchar", 1},
      {"byte", 1},          {"int8", 1},         {"uint8", 1},
      {"bool", 1},          {"complexfloat", 8}, {"complexdouble", 16},
      {"complexhalf", 4},   {"complex<float>", 8},
      {"complex<double>", 16}, {"complex<c10::half>", 4},
      {"unsignedint", 4},   {"uint32", 4},       {"unsignedlong", 8},
      {"uint64", 8},        {"unsignedshort", 2}, {"uint16", 2},
  };
  char s[48];
  size_t o = 0;
  const char *p = strncmp(dtype, "c10::", 5) == 0 ? dtype + 5 : dtype;
  for (; *p != '\0' && o + 1 < sizeof(s); p++)
    if (*p != ' ')
      s[o++] = (char)tolower((unsigned char)*p);
  s[o] = '\0';
  if (strncmp(s, "float8", 6) == 0)
    return 1;
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    if (strcmp(s, t[i].name) == 0)
      return t[i].size;
  return 0;
}

/* ---- which source, and its reader ------------------------------------- */

const char *dr__detect(const dr__trace_t *t) {
  json_t *dd = t->other_data ? json_object_get(t->other_data, "ddprun") : NULL;
  const char *src = json_string_value(json_object_get(dd, "source"));
  if (src != NULL && strcmp(src, "train") == 0)
    return "train";
  if (src != NULL)
    return NULL; /* ddprun's, not one rank's: a merged trace */
  if (t->distributed_info != NULL || t->saw_profiler_step ||
      t->saw_torch_marker)
    return "torch";
  if ((t->saw_train_names & 1) && (t->saw_train_names & 2))
    return "train";
  return NULL;
}

int dr__dg_read_json(const char *json, size_t n, const char *name,
                     dr_dg_rank_t *out, dr__dg_meta_t *meta, char *err,
                     size_t errlen) {
  memset(out, 0, sizeof(*out));
  out->rank = -1;
  snprintf(out->path, sizeof(out->path), "%s", name);
  if (meta != NULL) {
    meta->base_ns = 0;
    meta->pid = -1;
  }
  char why[400] = "";
  dr__trace_t t;
  int rc = dr__trace_lex(json, n, &t, why, sizeof(why));
  if (rc != 0) {
    snprintf(err, errlen, "%s: %s", name, why);
    return rc;
  }
  const char *src = dr__detect(&t);
  if (src == NULL) {
    snprintf(err, errlen,
             "%s: not a trace ddprun diagnose reads (neither train's --trace "
             "nor PyTorch's profiler)",
             name);
    dr__trace_free(&t);
    return -EINVAL;
  }
  if (strcmp(src, "train") == 0)
    rc = dr__read_train(&t, out, why, sizeof(why));
  else
    rc = dr__read_torch(&t, out, why, sizeof(why));
  if (rc == 0 && t.n_bad > 0)
    dr__dg_note(out, "%zu events left out (not an object, or no usable ts "
                     "or dur)",
                t.n_bad);
  if (rc == 0 && meta != NULL) {
    meta->base_ns = t.have_base ? t.base_ns : 0;
    meta->pid = t.pid;
  }
  dr__trace_free(&t);
  if (rc != 0) {
    snprintf(err, errlen, "%s: %s", name, why);
    dr_dg_rank_free(out);
  }
  return rc;
}

int dr_dg_read_buf(const void *buf, size_t n_bytes, const char *name,
                   dr_dg_rank_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  out->rank = -1;
  if (n_bytes == 0) {
    snprintf(err, errlen, "%s: empty file", name);
    return -EINVAL;
  }
  if (dr__dg_is_gzip(buf, n_bytes)) {
    char *z;
    size_t zn;
    int rc = dr__dg_inflate_buf(buf, n_bytes, name, 0, &z, &zn, err,
                                errlen);
    if (rc != 0)
      return rc;
    rc = dr__dg_read_json(z, zn, name, out, NULL, err, errlen);
    free(z);
    return rc;
  }
  return dr__dg_read_json(buf, n_bytes, name, out, NULL, err, errlen);
}

int dr_dg_read(const char *path, dr_dg_rank_t *out, char *err,
               size_t errlen) {
  memset(out, 0, sizeof(*out));
  out->rank = -1;
  char *buf;
  size_t n;
  int rc = dr__dg_load(path, 0, &buf, &n, err, errlen);
  if (rc != 0)
    return rc;
  rc = dr__dg_read_json(buf, n, path, out, NULL, err, errlen);
  free(buf);
  return rc;
}

void dr_dg_rank_free(dr_dg_rank_t *r) {
  if (r == NULL)
    return;
  for (size_t i = 0; i < r->n_steps; i++) {
    free(r->steps[i].grad_ready_us);
    free(r->steps[i].colls);
    free(r->steps[i].bwd_ops);
  }
  free(r->steps);
  r->steps = NULL;
  r->n_steps = 0;
}
