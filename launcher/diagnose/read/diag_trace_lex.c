/* A Chrome trace's top level and its events, lexed once (diag_json.c):
 * the walk that both the readers and the merge writer use, and the
 * envelopes the readers keep. Just past 600 lines: one walk over one
 * grammar, with the bounds it holds every event to. */
#include "diag_read_internal.h"
#include "grow.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names longer than this are kept cut: the readers match prefixes. */
#define NAME_MAX_BYTES 512

/* ---- the walk --------------------------------------------------------- */

typedef int (*top_cb)(void *arg, const char *key, size_t key_len,
                      int escaped, dr__js_t *js);

typedef struct {
  dr__member_t *m;
  size_t cap;
} members_t;

/* The element at js->p: an object's members into mb, then cb. */
static int walk_event(dr__js_t *js, members_t *mb, dr__event_cb cb,
                      void *arg) {
  int c = dr__js_peek(js);
  const char *s = js->p;
  if (c != '{') {
    int rc = dr__js_skip(js);
    if (rc != 0)
      return rc;
    return cb(arg, s, (size_t)(js->p - s), NULL, 0);
  }
  int rc = dr__js_obj_open(js);
  if (rc != 0)
    return rc;
  /* Members are never NULL for an object, even an empty one. */
  if (mb->m == NULL && (mb->m = malloc(16 * sizeof(*mb->m))) == NULL)
    return -ENOMEM;
  if (mb->cap == 0)
    mb->cap = 16;
  size_t n = 0;
  for (int first = 1;; first = 0) {
    dr__member_t m;
    rc = dr__js_obj_next(js, first, &m.key, &m.key_len, &m.key_escaped);
    if (rc < 0)
      return rc;
    if (rc == 0)
      break;
    dr__js_ws(js);
    m.val = js->p;
    m.str_escaped = 0;
    /* Scalars lexed here once: the reader takes their bytes as they are. */
    int v = js->p < js->end ? (unsigned char)*js->p : -1;
    const char *raw;
    size_t len;
    if (v == '"') {
      m.type = 's';
      rc = dr__js_string(js, &raw, &len, &m.str_escaped);
    } else if (v == '-' || (v >= '0' && v <= '9')) {
      m.type = 'n';
      rc = dr__js_lex_number(js, &raw, &len);
    } else {
      m.type = 'o';
      rc = dr__js_skip(js);
    }
    if (rc != 0)
      return rc;
    m.val_len = (size_t)(js->p - m.val);
    dr__member_t *p = dr_grow(mb->m, &mb->cap, n + 1, sizeof(*p), 16);
    if (p == NULL)
      return -ENOMEM;
    mb->m = p;
    mb->m[n++] = m;
  }
  return cb(arg, s, (size_t)(js->p - s), mb->m, n);
}

static int walk_events(dr__js_t *js, dr__event_cb cb, void *arg) {
  members_t mb = {NULL, 0};
  int rc = dr__js_arr_open(js);
  for (int first = 1; rc == 0; first = 0) {
    rc = dr__js_arr_next(js, first);
    if (rc <= 0)
      break;
    rc = walk_event(js, &mb, cb, arg);
  }
  free(mb.m);
  return rc;
}

static const char *kind_name(int c) {
  switch (c) {
  case '"':
    return "a string";
  case '[':
    return "an array";
  case '{':
    return "an object";
  case 't':
  case 'f':
    return "a boolean";
  case 'n':
    return "null";
  default:
    return "a number";
  }
}

static int not_chrome(dr__js_t *js, const char *what, const char *kind) {
  snprintf(js->err, js->errlen, "not a Chrome trace: %s is %s, not %s",
           what, kind, strcmp(what, "traceEvents") == 0 ? "an array"
                                                       : "an object");
  return -EINVAL;
}

/* The whole file: top-level keys other than traceEvents go to top (which
 * consumes their value), the events of the first traceEvents to cb. */
static int walk(const char *buf, size_t n, top_cb top, dr__event_cb cb,
                void *arg, int *is_array, char *err, size_t errlen) {
  dr__js_t js;
  dr__js_init(&js, buf, n, err, errlen);
  int c = dr__js_peek(&js), rc;
  if (c < 0) {
    snprintf(err, errlen, "empty file");
    return -EINVAL;
  }
  *is_array = c == '[';
  if (c == '[') {
    rc = walk_events(&js, cb, arg);
  } else if (c != '{') {
    /* Tell invalid JSON from a JSON that is not an object. */
    if ((rc = dr__js_skip(&js)) != 0)
      return rc;
    if (dr__js_peek(&js) >= 0)
      return dr__js_fail(&js, "data after the top-level value");
    return not_chrome(&js, "the top level", kind_name(c));
  } else {
    int seen = 0;
    rc = dr__js_obj_open(&js);
    for (int first = 1; rc == 0; first = 0) {
      const char *key;
      size_t len;
      int esc;
      rc = dr__js_obj_next(&js, first, &key, &len, &esc);
      if (rc <= 0)
        break;
      rc = 0;
      if (dr__js_is(key, len, esc, "traceEvents") && !seen) {
        int v = dr__js_peek(&js);
        if (v != '[') {
          if ((rc = dr__js_skip(&js)) != 0)
            break;
          /* The rest must still be JSON. */
          while ((rc = dr__js_obj_next(&js, 0, &key, &len, &esc)) == 1)
            if ((rc = dr__js_skip(&js)) != 0)
              break;
          if (rc == 0 && dr__js_peek(&js) >= 0)
            rc = dr__js_fail(&js, "data after the top-level value");
          if (rc == 0)
            rc = not_chrome(&js, "traceEvents", kind_name(v));
          return rc;
        }
        seen = 1;
        rc = walk_events(&js, cb, arg);
      } else if (top != NULL) {
        rc = top(arg, key, len, esc, &js);
      } else {
        rc = dr__js_skip(&js);
      }
    }
    if (rc == 0 && !seen) {
      if (dr__js_peek(&js) >= 0)
        return dr__js_fail(&js, "data after the top-level value");
      snprintf(err, errlen, "not a Chrome trace: no traceEvents array");
      return -EINVAL;
    }
  }
  if (rc != 0)
    return rc;
  if (dr__js_peek(&js) >= 0)
    return dr__js_fail(&js, "data after the top-level value");
  return 0;
}

int dr__trace_walk(const char *buf, size_t n, dr__event_cb cb, void *arg,
                   char *err, size_t errlen) {
  int is_array;
  return walk(buf, n, NULL, cb, arg, &is_array, err, errlen);
}

/* ---- names, interned -------------------------------------------------- */

struct dr__intern {
  char **slot; /* open addressing; NULL: empty */
  size_t cap, used;
  char *chunk; /* the newest block of the arena */
  size_t chunk_left;
  char **blocks;
  size_t n_blocks, cap_blocks;
};

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h;
}

static char *arena_copy(dr__intern_t *in, const char *s, size_t n) {
  if (n + 1 > in->chunk_left) {
    size_t sz = n + 1 > 65536 ? n + 1 : 65536;
    char **b = dr_grow(in->blocks, &in->cap_blocks, in->n_blocks + 1,
                       sizeof(*b), 16);
    if (b == NULL)
      return NULL;
    in->blocks = b;
    char *c = malloc(sz);
    if (c == NULL)
      return NULL;
    in->blocks[in->n_blocks++] = c;
    in->chunk = c;
    in->chunk_left = sz;
  }
  char *p = in->chunk;
  memcpy(p, s, n);
  p[n] = '\0';
  in->chunk += n + 1;
  in->chunk_left -= n + 1;
  return p;
}

static int grow_table(dr__intern_t *in) {
  size_t cap = in->cap > 0 ? in->cap * 2 : 1024;
  char **slot = calloc(cap, sizeof(*slot));
  if (slot == NULL)
    return -ENOMEM;
  for (size_t i = 0; i < in->cap; i++) {
    char *s = in->slot[i];
    if (s == NULL)
      continue;
    size_t j = fnv1a(s, strlen(s)) & (cap - 1);
    while (slot[j] != NULL)
      j = (j + 1) & (cap - 1);
    slot[j] = s;
  }
  free(in->slot);
  in->slot = slot;
  in->cap = cap;
  return 0;
}

static const char *intern(dr__intern_t *in, const char *s, size_t n) {
  if ((in->used + 1) * 2 > in->cap && grow_table(in) != 0)
    return NULL;
  size_t j = fnv1a(s, n) & (in->cap - 1);
  while (in->slot[j] != NULL) {
    const char *t = in->slot[j];
    if (strncmp(t, s, n) == 0 && t[n] == '\0')
      return t;
    j = (j + 1) & (in->cap - 1);
  }
  char *p = arena_copy(in, s, n);
  if (p == NULL)
    return NULL;
  in->slot[j] = p;
  in->used++;
  return p;
}

static void intern_free(dr__intern_t *in) {
  if (in == NULL)
    return;
  for (size_t i = 0; i < in->n_blocks; i++)
    free(in->blocks[i]);
  free(in->blocks);
  free(in->slot);
  free(in);
}

/* ---- the envelopes ---------------------------------------------------- */

static int starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int ends(const char *s, size_t n, const char *suffix) {
  size_t k = strlen(suffix);
  return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* Train's names: bit 0 a compute span, bit 1 the optimizer or a bucket. */
static int train_name(const char *s, size_t n) {
  if (ends(s, n, ".fwd") || ends(s, n, ".bwd") ||
      strcmp(s, "forward+backward") == 0)
    return 1;
  if (strcmp(s, "optimizer") == 0 || starts(s, "allreduce bucket "))
    return 2;
  if (strcmp(s, "loss") == 0 || strcmp(s, "data") == 0 || starts(s, "step "))
    return 4;
  return 0;
}

/* PyTorch's own names among those a reader uses. */
static int torch_name(const char *s, size_t n) {
  return starts(s, "ProfilerStep#") || starts(s, "enumerate(DataLoader)#") ||
         starts(s, "Optimizer.step#") ||
         starts(s, "autograd::engine::evaluate_function: ") ||
         starts(s, "c10d::") || starts(s, "gloo:") ||
         strcmp(s, "torch::autograd::AccumulateGrad") == 0 ||
         strcmp(s, "record_param_comms") == 0 ||
         ends(s, n, "DataParallel.forward");
}

/* The names a reader uses, of either source; the rest (aten:: operators,
 * most of a PyTorch trace) is not kept. */
static int wanted(const char *s, size_t n, int cat) {
  if (cat == DR__CAT_KERNEL)
    return starts(s, "nccl");
  if (cat == DR__CAT_RUNTIME)
    return strstr(s, "aunchKernel") != NULL;
  return train_name(s, n) != 0 || torch_name(s, n);
}

static int cat_of(const char *s) {
  if (strcmp(s, "cpu_op") == 0)
    return DR__CAT_CPU_OP;
  if (strcmp(s, "user_annotation") == 0)
    return DR__CAT_USER_ANNOTATION;
  if (strcmp(s, "kernel") == 0)
    return DR__CAT_KERNEL;
  if (strcmp(s, "cuda_runtime") == 0 || strcmp(s, "cuda_driver") == 0)
    return DR__CAT_RUNTIME;
  return DR__CAT_OTHER;
}

static int num_member(const dr__member_t *m, double *v) {
  if (m->type != 'n')
    return -1;
  return dr__js_number_text(m->val, m->val_len, v) == 0 ? 0 : -1;
}

/* A string member decoded into out; -1 when it is not a string. */
static int str_member(const dr__member_t *m, char *out, size_t cap,
                      size_t *len) {
  if (m->type != 's')
    return -1;
  const char *raw = m->val + 1;
  size_t n = m->val_len - 2;
  if (!m->str_escaped && n < cap) {
    memcpy(out, raw, n);
    out[n] = '\0';
    *len = n;
  } else {
    *len = dr__js_unescape(raw, n, out, cap);
  }
  return 0;
}

static int64_t tid_of(const dr__member_t *m) {
  double v;
  if (num_member(m, &v) == 0 && !isnan(v) && v == floor(v) &&
      fabs(v) < 9.0e15)
    return (int64_t)v;
  char s[256];
  size_t n;
  if (str_member(m, s, sizeof(s), &n) == 0)
    return (int64_t)(fnv1a(s, n) >> 2) | ((int64_t)1 << 62);
  return INT64_MIN;
}

typedef struct {
  dr__trace_t *t;
  char *err;
  size_t errlen;
  size_t index; /* of the element in traceEvents */
} lex_t;

/* A number member as a double (NAN when it overflows one): 1, 0 when it
 * is not a number, or -ENOMEM. */
static int time_member(const dr__member_t *m, double *v) {
  if (m->type != 'n')
    return 0;
  return dr__js_number_text(m->val, m->val_len, v) == 0 ? 1 : -ENOMEM;
}

/* Refuses the trace for an X event's time out of range: one line that
 * names the event and the value. */
static int out_of_range(lex_t *lx, size_t index, const char *name,
                        size_t name_len, const char *key, double v) {
  char shown[64];
  size_t k = 0;
  for (size_t i = 0; i < name_len && k + 4 < sizeof(shown); i++) {
    unsigned char c = (unsigned char)name[i];
    shown[k++] = c >= 0x20 && c != 0x7f ? (char)c : '?';
  }
  if (k < name_len)
    k += (size_t)snprintf(shown + k, sizeof(shown) - k, "...");
  shown[k] = '\0';
  char val[40];
  if (isnan(v))
    snprintf(val, sizeof(val), "beyond a double");
  else
    snprintf(val, sizeof(val), "%.6g us", v);
  snprintf(lx->err, lx->errlen,
           "traceEvents[%zu] \"%s\": %s %s is out of range (ts within "
           "+-2^53 us, 285 years; dur from 0 to that): a corrupt trace; "
           "refused", index, shown, key, val);
  return -ERANGE;
}

static int push(dr__trace_t *t, const dr__ev_t *e) {
  dr__ev_t *p = dr_grow(t->ev, &t->cap_ev, t->n_ev + 1, sizeof(*p), 1024);
  if (p == NULL)
    return -ENOMEM;
  t->ev = p;
  t->ev[t->n_ev++] = *e;
  return 0;
}

static int on_event(void *arg, const char *evp, size_t ev_len,
                    const dr__member_t *m, size_t n) {
  lex_t *lx = arg;
  dr__trace_t *t = lx->t;
  (void)evp;
  (void)ev_len;
  size_t index = lx->index++;
  if (m == NULL) {
    t->n_bad++;
    return 0;
  }
  dr__ev_t e = {NAN, NAN, "", INT64_MIN, 0, 0, 0, 0};
  int have_ts = 0, have_dur = 0, rc;
  char name[NAME_MAX_BYTES], s[64];
  size_t name_len = 0, k;
  int have_name = 0;
  int64_t pid = -1;
  for (size_t i = 0; i < n; i++) {
    const dr__member_t *x = &m[i];
    if (x->key_escaped || x->key_len < 2 || x->key_len > 4)
      continue;
    const char *key = x->key;
    size_t kl = x->key_len;
    if (kl == 4 && memcmp(key, "name", 4) == 0) {
      have_name = str_member(x, name, sizeof(name), &name_len) == 0;
    } else if (kl == 2 && memcmp(key, "ph", 2) == 0) {
      if (str_member(x, s, sizeof(s), &k) == 0 && k == 1)
        e.ph = s[0];
    } else if (kl == 2 && memcmp(key, "ts", 2) == 0) {
      if ((rc = time_member(x, &e.ts)) < 0)
        return rc;
      have_ts = rc;
      if (!have_ts)
        e.ts = NAN;
    } else if (kl == 3 && memcmp(key, "dur", 3) == 0) {
      if ((rc = time_member(x, &e.dur)) < 0)
        return rc;
      have_dur = rc;
      if (!have_dur)
        e.dur = NAN;
    } else if (kl == 3 && memcmp(key, "tid", 3) == 0) {
      e.tid = tid_of(x);
    } else if (kl == 3 && memcmp(key, "pid", 3) == 0) {
      double v;
      if (t->pid < 0 && num_member(x, &v) == 0)
        pid = dr__as_count(v, INT32_MAX);
    } else if (kl == 3 && memcmp(key, "cat", 3) == 0) {
      if (str_member(x, s, sizeof(s), &k) == 0)
        e.cat = (uint8_t)cat_of(s);
    } else if (kl == 4 && memcmp(key, "args", 4) == 0) {
      if (x->val_len > 0 && x->val[0] == '{') {
        e.args_off = (uint32_t)(x->val - t->buf);
        e.args_len = (uint32_t)x->val_len;
      }
    }
  }
  if (!have_name)
    name[0] = '\0';
  if (strncmp(name, "ProfilerStep#", 13) == 0)
    t->saw_profiler_step = 1;
  if (e.cat == DR__CAT_CPU_OP || e.cat == DR__CAT_USER_ANNOTATION ||
      (e.ph == 'X' && torch_name(name, name_len)) ||
      strncmp(name, "PyTorch Profiler", 16) == 0 ||
      strncmp(name, "Iteration Start: PyTorch Profiler", 33) == 0)
    t->saw_torch_marker = 1;
  if (e.ph == 'X')
    t->saw_train_names |= train_name(name, name_len);
  if (e.ph == 'X') {
    /* A number, but not a time: the trace is corrupt, and a time kept
     * from it would make every figure absurd. (No number at all: the
     * event is left out and counted, as a malformed one is.) */
    if (have_ts && !dr__dg_time_ok(e.ts))
      return out_of_range(lx, index, name, name_len, "ts", e.ts);
    if (have_dur && !(e.dur >= 0 && dr__dg_time_ok(e.dur)))
      return out_of_range(lx, index, name, name_len, "dur", e.dur);
    if (isnan(e.ts) || isnan(e.dur)) {
      t->n_bad++;
      return 0;
    }
    if (!wanted(name, name_len, e.cat))
      return 0;
  } else if (e.ph != 'M') {
    return 0;
  }
  e.name = intern(t->names, name, name_len);
  if (e.name == NULL)
    return -ENOMEM;
  if (t->pid < 0 && e.ph == 'X')
    t->pid = pid;
  return push(t, &e);
}

static int on_top(void *arg, const char *key, size_t len, int esc,
                  dr__js_t *js) {
  lex_t *lx = arg;
  dr__trace_t *t = lx->t;
  json_t **slot = NULL;
  if (dr__js_is(key, len, esc, "otherData"))
    slot = &t->other_data;
  else if (dr__js_is(key, len, esc, "distributedInfo"))
    slot = &t->distributed_info;
  if (dr__js_is(key, len, esc, "baseTimeNanoseconds") &&
      dr__js_peek(js) != '"') {
    /* Kineto's: the system clock, in ns, floored to a 3-month boundary. */
    const char *s = js->p;
    int rc = dr__js_skip(js);
    if (rc != 0)
      return rc;
    char num[32];
    size_t n = (size_t)(js->p - s);
    if (n < sizeof(num)) {
      memcpy(num, s, n);
      num[n] = '\0';
      char *endp;
      errno = 0;
      long long v = strtoll(num, &endp, 10);
      if (errno == 0 && *endp == '\0' && v >= 0) {
        t->base_ns = v;
        t->have_base = 1;
      }
    }
    return 0;
  }
  if (slot == NULL || *slot != NULL)
    return dr__js_skip(js);
  dr__js_ws(js);
  const char *s = js->p;
  int rc = dr__js_skip(js);
  if (rc != 0)
    return rc;
  json_error_t je;
  json_t *v = json_loadb(s, (size_t)(js->p - s), JSON_DECODE_ANY, &je);
  if (v != NULL && !json_is_object(v)) {
    json_decref(v);
    v = NULL;
  }
  *slot = v;
  return 0;
}

int dr__trace_lex(const char *buf, size_t n, dr__trace_t *t, char *err,
                  size_t errlen) {
  memset(t, 0, sizeof(*t));
  /* args_off and args_len are 32-bit. */
  if (n >= DR_DG_LIMIT_MAX) {
    snprintf(err, errlen, "%zu MiB or more; refused", DR_DG_LIMIT_MAX >> 20);
    return -EFBIG;
  }
  t->buf = buf;
  t->n = n;
  t->pid = -1;
  t->names = calloc(1, sizeof(*t->names));
  if (t->names == NULL)
    return -ENOMEM;
  lex_t lx = {t, err, errlen, 0};
  int rc = walk(buf, n, on_top, on_event, &lx, &t->top_is_array, err,
                errlen);
  if (rc == -ENOMEM)
    snprintf(err, errlen, "out of memory");
  if (rc != 0)
    dr__trace_free(t);
  return rc;
}

void dr__trace_free(dr__trace_t *t) {
  free(t->ev);
  intern_free(t->names);
  json_decref(t->other_data);
  json_decref(t->distributed_info);
  memset(t, 0, sizeof(*t));
}

json_t *dr__ev_args(const dr__trace_t *t, const dr__ev_t *e) {
  if (e->args_len == 0)
    return NULL;
  json_error_t je;
  json_t *v = json_loadb(t->buf + e->args_off, e->args_len, 0, &je);
  if (v != NULL && !json_is_object(v)) {
    json_decref(v);
    return NULL;
  }
  return v;
}
