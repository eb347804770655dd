/* The merged trace (diag_merge.h): each input's events copied as the
 * lexer found them, with pid, ts and flow ids rewritten. */
#include "diag_merge.h"
#include "diag_read_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  int rank;    /* -1: unknown */
  int is_torch;
  int have_offset;
  double offset_us;
  int64_t base_ns;
} input_t;

typedef struct {
  FILE *f;
  int pid;
  size_t index;
  double offset_us;
  int first; /* nothing written into traceEvents yet */
} out_t;

static void sep(out_t *o) {
  if (!o->first)
    fputs(",\n", o->f);
  o->first = 0;
}

static int member_is(const dr__member_t *m, const char *key) {
  return dr__js_is(m->key, m->key_len, m->key_escaped, key);
}

static void put_key(FILE *f, const dr__member_t *m) {
  fputc('"', f);
  fwrite(m->key, 1, m->key_len, f);
  fputs("\":", f);
}

static void put_ts(FILE *f, const dr__member_t *m, double off) {
  double v;
  if (m->type != 'n' || dr__js_number_text(m->val, m->val_len, &v) != 0 ||
      isnan(v)) {
    fwrite(m->val, 1, m->val_len, f);
    return;
  }
  v += off;
  if (v == floor(v) && fabs(v) < 9.0e15)
    fprintf(f, "%.0f", v);
  else
    fprintf(f, "%.3f", v);
}

static void put_id(FILE *f, const dr__member_t *m, size_t index) {
  double v;
  if (m->type == 'n' && dr__js_number_text(m->val, m->val_len, &v) == 0 &&
      v >= 0 && v < 4294967296.0 && v == floor(v) &&
      index < ((size_t)1 << 20)) {
    fprintf(f, "%" PRIu64, ((uint64_t)index << 32) + (uint64_t)v);
    return;
  }
  fprintf(f, "\"%zu:", index);
  if (m->type == 's') { /* the string's bytes, still escaped */
    fwrite(m->val + 1, 1, m->val_len - 1, f);
    return;
  }
  /* Any other value's text, escaped into the string. */
  for (size_t i = 0; i < m->val_len; i++) {
    unsigned char c = (unsigned char)m->val[i];
    if (c == '"' || c == '\\')
      fputc('\\', f);
    if (c >= 0x20)
      fputc(c, f);
    else
      fprintf(f, "\\u%04x", c);
  }
  fputc('"', f);
}

static int replaced_meta(const dr__member_t *m, size_t n) {
  int is_meta = 0, ours = 0;
  for (size_t i = 0; i < n; i++) {
    if (member_is(&m[i], "ph"))
      is_meta = m[i].val_len == 3 && memcmp(m[i].val, "\"M\"", 3) == 0;
    else if (member_is(&m[i], "name"))
      ours = (m[i].val_len == 14 &&
              memcmp(m[i].val, "\"process_name\"", 14) == 0) ||
             (m[i].val_len == 16 &&
              memcmp(m[i].val, "\"process_labels\"", 16) == 0) ||
             (m[i].val_len == 20 &&
              memcmp(m[i].val, "\"process_sort_index\"", 20) == 0);
  }
  return is_meta && ours;
}

static int on_event(void *arg, const char *ev, size_t ev_len,
                    const dr__member_t *m, size_t n) {
  out_t *o = arg;
  (void)ev;
  (void)ev_len;
  if (m == NULL || replaced_meta(m, n))
    return 0;
  FILE *f = o->f;
  sep(o);
  fputc('{', f);
  int has_pid = 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0)
      fputc(',', f);
    put_key(f, &m[i]);
    if (member_is(&m[i], "pid")) {
      fprintf(f, "%d", o->pid);
      has_pid = 1;
    } else if (member_is(&m[i], "ts")) {
      put_ts(f, &m[i], o->offset_us);
    } else if (member_is(&m[i], "id") || member_is(&m[i], "bind_id")) {
      put_id(f, &m[i], o->index);
    } else {
      fwrite(m[i].val, 1, m[i].val_len, f);
    }
  }
  if (!has_pid)
    fprintf(f, "%s\"pid\":%d", n > 0 ? "," : "", o->pid);
  fputc('}', f);
  return ferror(f) ? -EIO : 0;
}

int dr__merge_events(FILE *f, const char *buf, size_t n, int pid,
                     size_t index, double offset_us, int *first, char *why,
                     size_t whylen) {
  out_t o = {f, pid, index, offset_us, *first};
  int rc = dr__trace_walk(buf, n, on_event, &o, why, whylen);
  *first = o.first;
  return rc;
}

static void put_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* The inputs' ranks and clocks: every file read once. */
static int survey(const char *const *paths, size_t n, size_t max_bytes,
                  input_t *in, char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    char *buf;
    size_t len;
    int rc = dr__dg_load(paths[i], max_bytes, &buf, &len, err, errlen);
    if (rc != 0)
      return rc;
    dr_dg_rank_t r;
    dr__dg_meta_t meta;
    rc = dr__dg_read_json(buf, len, paths[i], &r, &meta, err, errlen);
    in[i].base_ns = meta.base_ns;
    free(buf);
    if (rc != 0)
      return rc;
    in[i].rank = r.rank;
    in[i].is_torch = strcmp(r.source, "torch") == 0;
    in[i].have_offset = r.have_clock_offset;
    in[i].offset_us = r.clock_offset_us;
    dr_dg_rank_free(&r);
  }
  return 0;
}

static void offsets(input_t *in, size_t n, const double *given) {
  int all = 1, any_train = 0;
  int64_t base0 = 0;
  for (size_t i = 0; i < n; i++) {
    if (!in[i].is_torch) {
      any_train = 1;
      all &= in[i].have_offset;
    } else if (base0 == 0) {
      base0 = in[i].base_ns;
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (given != NULL)
      in[i].offset_us = given[i];
    else if (in[i].is_torch)
      in[i].offset_us = in[i].base_ns != 0 && base0 != 0
                            ? (double)(in[i].base_ns - base0) / 1000.0
                            : 0;
    else if (!(any_train && all))
      in[i].offset_us = 0;
  }
}

int dr_dg_merge(const char *out_path, const char *const *paths, size_t n,
                const double *offset_us, size_t max_bytes, char *err,
                size_t errlen) {
  if (n == 0) {
    snprintf(err, errlen, "no traces to merge");
    return -EINVAL;
  }
  input_t *in = calloc(n, sizeof(*in));
  if (in == NULL) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  int rc = survey(paths, n, max_bytes, in, err, errlen);
  if (rc != 0) {
    free(in);
    return rc;
  }
  offsets(in, n, offset_us);
  size_t tlen = strlen(out_path) + 5;
  char *tmp = malloc(tlen);
  FILE *f = tmp != NULL ? (snprintf(tmp, tlen, "%s.tmp", out_path),
                           fopen(tmp, "w"))
                        : NULL;
  if (f == NULL) {
    int e = tmp != NULL ? errno : ENOMEM;
    snprintf(err, errlen, "%s: cannot create (%s)", tmp ? tmp : out_path,
             strerror(e));
    free(tmp);
    free(in);
    return -e;
  }
  char *obuf = malloc(1 << 20);
  if (obuf != NULL)
    setvbuf(f, obuf, _IOFBF, 1 << 20);
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"ddprun\":{"
             "\"source\":\"merge\",\"inputs\":%zu}},\"traceEvents\":[\n",
          n);
  out_t o = {f, 0, 0, 0, 1};
  for (size_t i = 0; i < n && rc == 0; i++) {
    o.pid = in[i].rank >= 0 ? in[i].rank : 1000000 + (int)i;
    o.index = i;
    o.offset_us = in[i].offset_us;
    const char *base = strrchr(paths[i], '/');
    base = base != NULL ? base + 1 : paths[i];
    char label[600];
    if (in[i].rank >= 0)
      snprintf(label, sizeof(label), "rank %d (%s)", in[i].rank, base);
    else
      snprintf(label, sizeof(label), "rank ? (%s)", base);
    sep(&o);
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
               "\"tid\":0,\"args\":{\"name\":",
            o.pid);
    put_json_string(f, label);
    fprintf(f, "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\","
               "\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
            o.pid, o.pid);
    char *buf;
    size_t len;
    rc = dr__dg_load(paths[i], max_bytes, &buf, &len, err, errlen);
    if (rc != 0)
      break;
    char why[400] = "";
    rc = dr__merge_events(f, buf, len, o.pid, i, o.offset_us, &o.first, why,
                          sizeof(why));
    free(buf);
    if (rc != 0)
      snprintf(err, errlen, "%s: %s", paths[i],
               rc == -EIO ? "write failed" : why);
  }
  fputs("\n]}\n", f);
  if (rc == 0 && (ferror(f) || fflush(f) != 0)) {
    snprintf(err, errlen, "%s: write failed (%s)", tmp, strerror(errno));
    rc = -EIO;
  }
  if (fclose(f) != 0 && rc == 0) {
    snprintf(err, errlen, "%s: write failed (%s)", tmp, strerror(errno));
    rc = -EIO;
  }
  if (rc == 0 && rename(tmp, out_path) != 0) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot rename to %s (%s)", tmp, out_path,
             strerror(e));
    rc = -e;
  }
  if (rc != 0)
    unlink(tmp);
  free(obuf);
  free(tmp);
  free(in);
  return rc;
}
