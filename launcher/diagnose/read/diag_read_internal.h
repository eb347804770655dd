/* Inside the trace readers (diag_read*.c, diag_merge.c): the JSON lexer,
 * the events it keeps, and the step builder both sources share. Not a
 * public face: diag_trace.h and diag_read.h are.
 *
 * Why a lexer of our own beside jansson: jansson builds a tree at about
 * 50 MB/s here, so 8 ranks of 25 MB would take 4-5 s to parse, the whole
 * budget of `ddprun diagnose`. The lexer walks the file once, checks it is
 * JSON (RFC 8259: grammar, escapes, UTF-8, nesting up to DR__JS_MAX_DEPTH),
 * and keeps of each event only its envelope (name, ph, cat, ts, dur, pid,
 * tid) and where its "args" lie; jansson then parses the few args objects
 * and top-level values a reader needs.
 */
#ifndef DR_DIAG_READ_INTERNAL_H
#define DR_DIAG_READ_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "diag_read.h"
#include "diag_trace.h"

#define DR__JS_MAX_DEPTH 512

/* The readers' one bound on a time, in microseconds (the unit of every
 * Chrome trace): 2^53 us, about 285 years, the largest a double holds to
 * the microsecond; it takes in any system clock's timestamp (now about
 * 1.8e15 us since 1970) and nothing of the 1e308 kind. An event whose ts
 * is beyond +-DR__DG_MAX_US, or whose dur is negative or beyond it, or
 * either a number too large for a double, refuses its file (the lexer, on
 * every X event); a time inside args (train's ready_us) out of [0, it] is
 * taken as unknown, as a clock offset beyond it is. */
#define DR__DG_MAX_US 9007199254740992.0

/* Whether us is a time (or a duration, when also >= 0) within the bound. */
static inline int dr__dg_time_ok(double us) {
  return us >= -DR__DG_MAX_US && us <= DR__DG_MAX_US;
}

/* ---- the lexer (diag_json.c) ------------------------------------------ */

typedef struct {
  const char *p, *start, *end;
  uint32_t line; /* 1-based line of p */
  int depth;
  char *err; /* one line, set on the first failure */
  size_t errlen;
} dr__js_t;

/* 0, or -EINVAL with err set ("truncated JSON at line L", "invalid JSON at
 * line L: ..."). */
void dr__js_init(dr__js_t *js, const char *buf, size_t n, char *err,
                 size_t errlen);
int dr__js_fail(dr__js_t *js, const char *what);
void dr__js_ws(dr__js_t *js);
/* The next byte after white space, or -1 at the end. */
int dr__js_peek(dr__js_t *js);
/* Checks and steps over one value of any kind. */
int dr__js_skip(dr__js_t *js);
/* A string: *raw and *raw_len its bytes between the quotes, escaped;
 * *escaped whether it holds a backslash. */
int dr__js_string(dr__js_t *js, const char **raw, size_t *raw_len,
                  int *escaped);
/* A number, converted as strtod does; *v is NAN when it overflows a
 * double. */
int dr__js_number(dr__js_t *js, double *v);
/* A number checked and stepped over, its bytes in *s and *n; and the
 * conversion of such bytes (0, or -ENOMEM). */
int dr__js_lex_number(dr__js_t *js, const char **s, size_t *n);
int dr__js_number_text(const char *s, size_t n, double *v);
/* Decodes a checked string's bytes into out (NUL-terminated, cut at cap-1
 * bytes on a character boundary). Returns the length written. */
size_t dr__js_unescape(const char *raw, size_t raw_len, char *out,
                       size_t cap);
/* Containers: _open steps over '{' or '['; _next returns 1 when another
 * member follows (an object's key is then in *key, its ':' consumed), 0 at
 * the closing bracket (consumed), or a negative code. */
int dr__js_obj_open(dr__js_t *js);
int dr__js_obj_next(dr__js_t *js, int first, const char **key,
                    size_t *key_len, int *escaped);
int dr__js_arr_open(dr__js_t *js);
int dr__js_arr_next(dr__js_t *js, int first);
/* Whether a checked string's raw bytes equal s (no escapes in raw). */
int dr__js_is(const char *raw, size_t raw_len, int escaped, const char *s);

/* ---- one trace, lexed (diag_trace_lex.c) ------------------------------ */

typedef enum {
  DR__CAT_NONE,
  DR__CAT_CPU_OP,
  DR__CAT_USER_ANNOTATION,
  DR__CAT_KERNEL,
  DR__CAT_RUNTIME, /* cuda_runtime, cuda_driver */
  DR__CAT_OTHER
} dr__cat_t;

typedef struct {
  double ts, dur;   /* within DR__DG_MAX_US; NAN: absent, or not a number */
  const char *name; /* interned, NUL-terminated; "" when absent */
  int64_t tid;      /* a string tid is hashed */
  uint32_t args_off, args_len; /* the args value's bytes; len 0: none */
  char ph; /* 0 when absent */
  uint8_t cat;
} dr__ev_t;

typedef struct dr__intern dr__intern_t;

typedef struct {
  const char *buf; /* the JSON, borrowed */
  size_t n;
  dr__ev_t *ev;    /* the events a reader may use, in file order */
  size_t n_ev, cap_ev;
  size_t n_bad;    /* X events without a usable ts or dur, non-objects */
  dr__intern_t *names;
  /* Top-level values a reader looks at, parsed by jansson (NULL when
   * absent). */
  json_t *other_data, *distributed_info;
  int64_t base_ns; /* baseTimeNanoseconds, 0 when absent */
  int have_base;
  int64_t pid;     /* of the first event kept that has one, -1 */
  int top_is_array;     /* the file is a bare event array */
  /* What the format detection needs; seen anywhere in the file. */
  int saw_profiler_step, saw_torch_marker, saw_train_names;
} dr__trace_t;

/* Lexes buf (not gzip) into t. 0, or -EINVAL/-ERANGE/-ENOMEM with err
 * set; -ERANGE: an X event's ts or dur out of range (DR__DG_MAX_US), err
 * naming it ("traceEvents[N] \"NAME\": dur 1e+308 ..."). */
int dr__trace_lex(const char *buf, size_t n, dr__trace_t *t, char *err,
                  size_t errlen);
void dr__trace_free(dr__trace_t *t);
/* The event's args parsed by jansson (caller decrefs), or NULL. */
json_t *dr__ev_args(const dr__trace_t *t, const dr__ev_t *e);

/* Each event of the file's traceEvents in order, with the spans of its
 * members, for the merge writer: member i's key (raw, as in the file) and
 * value bytes. */
typedef struct {
  const char *key;
  size_t key_len;
  int key_escaped;
  const char *val; /* the value's bytes as in the file */
  size_t val_len;
  char type;       /* 's' string, 'n' number, 'o' anything else */
  int str_escaped; /* 's': the string (val + 1 .. val_len - 2) has a
                      backslash */
} dr__member_t;

typedef int (*dr__event_cb)(void *arg, const char *ev, size_t ev_len,
                            const dr__member_t *m, size_t n_members);
/* Calls cb for every element of traceEvents (members are NULL/0 for an
 * element that is not an object); a non-zero return stops the walk and is
 * returned. */
int dr__trace_walk(const char *buf, size_t n, dr__event_cb cb, void *arg,
                   char *err, size_t errlen);

/* One input's events into f as dr_dg_merge writes them (diag_merge.h):
 * each "pid" made pid, "ts" moved by offset_us, "id" and "bind_id" made
 * distinct by index, the input's process metadata left out, events
 * separated by ",\n" (*first: nothing written yet; updated). 0, -EIO (a
 * write failed), or the walk's code with why set. */
int dr__merge_events(FILE *f, const char *buf, size_t n, int pid,
                     size_t index, double offset_us, int *first, char *why,
                     size_t whylen);

/* ---- loading (diag_read_load.c) --------------------------------------- */

/* The limit in force for max_bytes (diag_read.h): 0 is
 * DR_DG_LIMIT_DEFAULT, and none is above DR_DG_LIMIT_MAX. */
size_t dr__dg_limit(size_t max_bytes);
/* The file's bytes (NUL-terminated), inflated when they start with the
 * gzip magic; the file and its text each smaller than the limit. Opened
 * with dr_open_regular: a FIFO, device or socket is refused at once
 * (DR_ENOTREG), never read. Caller frees *out. 0, or a negative code with
 * "PATH: ..." in err. */
int dr__dg_load(const char *path, size_t max_bytes, char **out, size_t *n,
                char *err, size_t errlen);
/* gzip members in buf inflated in one pass into *out (NUL-terminated;
 * caller frees), the text smaller than the limit: -EFBIG as soon as it
 * reaches it, with nothing kept. */
int dr__dg_inflate_buf(const void *buf, size_t n, const char *name,
                       size_t max_bytes, char **out, size_t *out_n,
                       char *err, size_t errlen);
/* Whether buf starts with the gzip magic. */
int dr__dg_is_gzip(const void *buf, size_t n);
/* What a reader saw beyond the model, for diag_read_dir.c and the merge
 * writer. */
typedef struct {
  int64_t base_ns; /* baseTimeNanoseconds, 0 when absent */
  int64_t pid;     /* the process of the first event kept, -1 unknown:
                      Kineto's is the OS pid, train's the rank */
} dr__dg_meta_t;

/* dr_dg_read_buf of JSON, with *meta (may be NULL) filled. */
int dr__dg_read_json(const char *json, size_t n, const char *name,
                     dr_dg_rank_t *out, dr__dg_meta_t *meta, char *err,
                     size_t errlen);
/* Appends "; what" (or "what") to r->note, cut to fit. */
void dr__dg_note(dr_dg_rank_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- the step builder (diag_read_steps.c) ----------------------------- */

typedef enum {
  DR__SP_STEP,   /* a step's span; aux: its number */
  DR__SP_DATA,
  DR__SP_FWD,
  DR__SP_BWD,
  DR__SP_FWDBWD, /* forward and backward in one span (train on a GPU) */
  DR__SP_GRAD,   /* t1: a gradient ready */
  DR__SP_OPT
} dr__sp_role_t;

typedef struct {
  double t0, t1, dur; /* dur as the trace says: t1 - t0 rounds */
  uint64_t aux;       /* DR__SP_STEP: its number; DR__SP_BWD: its name's
                         index in the builder's names, or UINT64_MAX */
  int64_t tid;        /* DR__SP_BWD: its thread; else 0 */
  int role;
} dr__span_t;

/* The backward ops' names (diag_read_ops.c): interned pointers (equal
 * names, equal pointers, as the lexer's), borrowed from the trace, each
 * with its index in v. */
typedef struct {
  const char **v;     /* [n], by index */
  size_t n, cap;
  size_t *slot;       /* open addressing on the pointer: index + 1, 0
                         empty; n_slot a power of two, at most half full */
  size_t n_slot;
} dr__opnames_t;

typedef struct {
  dr__span_t *sp;
  size_t n, cap;
  dr__opnames_t names;
  dr_dg_coll_t *coll; /* bucket: as known, or -1 (set from the order of
                         all-reduces launched in the backward pass when
                         number_buckets) */
  size_t n_coll, cap_coll;
  int number_buckets;
} dr__build_t;

/* A span t0 .. t0 + dur. */
int dr__build_span(dr__build_t *b, int role, double t0, double dur,
                   uint64_t aux);
/* A backward op's span (DR__SP_BWD) on thread tid; name interned, and
 * borrowed until dr__build_steps returns. 0 or -ENOMEM. */
int dr__build_bwd(dr__build_t *b, double t0, double dur, int64_t tid,
                  const char *name);
int dr__build_coll(dr__build_t *b, const dr_dg_coll_t *c);
/* Fills r->steps from b (see diag_read_steps.c for the rules) and frees
 * b's arrays. 0 or -ENOMEM. */
int dr__build_steps(dr__build_t *b, dr_dg_rank_t *r);
void dr__build_free(dr__build_t *b);

/* ---- the backward ops (diag_read_ops.c) ------------------------------- */

/* name's index in *t, added when new. 0 or -ENOMEM. */
int dr__opnames_index(dr__opnames_t *t, const char *name, uint64_t *index);
void dr__opnames_free(dr__opnames_t *t);
/* Fills each step's bwd_ops from b's backward spans: step_of[i] is span
 * i's step in steps[0..n_steps) or SIZE_MAX, and the steps' bwd_t0_us is
 * set (a span of an earlier pass, before it, does not count). 0 or
 * -ENOMEM (the steps' bwd_ops filled so far stay, for the caller to
 * free). */
int dr__build_ops(const dr__build_t *b, const size_t *step_of,
                  dr_dg_step_t *steps, size_t n_steps);

/* ---- the two sources -------------------------------------------------- */

int dr__read_train(const dr__trace_t *t, dr_dg_rank_t *r, char *err,
                   size_t errlen);
int dr__read_torch(const dr__trace_t *t, dr_dg_rank_t *r, char *err,
                   size_t errlen);
/* Which source t is: "train", "torch", or NULL (neither). */
const char *dr__detect(const dr__trace_t *t);

/* A collective's kind from an operation's name ("c10d::allreduce_",
 * "gloo:all_gather", "ncclDevKernel_ReduceScatter_...", "allgather"). */
dr_dg_kind_t dr__kind_of(const char *name);
/* Bytes per element of a PyTorch dtype name ("float", "Float",
 * "c10::BFloat16", "double", "long int", ...), 0 if unknown. */
unsigned dr__dtype_size(const char *dtype);
/* v as an exact non-negative integer no larger than max, or -1. */
int64_t dr__as_count(double v, int64_t max);
/* qsort, except that it leaves n < 2 (and so a NULL base) alone. */
void dr__sort(void *base, size_t n, size_t size,
              int (*cmp)(const void *, const void *));
/* json number (integer or real) into *v; 0, or -1 when j is not one. */
int dr__json_num(const json_t *j, double *v);

#endif /* DR_DIAG_READ_INTERNAL_H */
