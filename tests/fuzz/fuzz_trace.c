/* libFuzzer target over dr_dg_read_buf() (launcher/diag_trace.h) and the
 * event walk the merge writer uses.
 *
 * Input: the bytes of a trace file, JSON or gzip'd JSON, as the reader
 * gets them. Every promise of the reader is checked on every answer; a
 * broken one aborts:
 *   - an error is one line that starts with the file's name;
 *   - a success has its steps in time order, each step's gradients
 *     ascending and its collectives in start order, every time either
 *     finite or -1, every array readable to its end, and a one-line note.
 * Then the walk: every member it reports lies inside the input; and what
 * the merge writer makes of the input's events is JSON again, each an
 * object with the pid it was given.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream */
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_read_internal.h"
#include "diag_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "fuzz_trace: broken promise: %s (line %d)\n", #cond,   \
              __LINE__);                                                     \
      abort();                                                               \
    }                                                                        \
  } while (0)

static volatile double sink;

static void check_time(double t) {
  CHECK(t == -1 || isfinite(t));
  sink = t;
}

static double key(const dr_dg_coll_t *c) {
  return c->start_us >= 0 ? c->start_us : c->ready_us;
}

static void check_rank(const dr_dg_rank_t *r) {
  CHECK(memchr(r->note, '\0', sizeof(r->note)) != NULL);
  CHECK(strchr(r->note, '\n') == NULL);
  CHECK(memchr(r->source, '\0', sizeof(r->source)) != NULL);
  CHECK(strcmp(r->source, "train") == 0 || strcmp(r->source, "torch") == 0);
  CHECK(memchr(r->backend, '\0', sizeof(r->backend)) != NULL);
  CHECK(r->rank >= -1 && r->world >= 0);
  CHECK(r->n_steps == 0 || r->steps != NULL);
  for (size_t i = 0; i < r->n_steps; i++) {
    const dr_dg_step_t *s = &r->steps[i];
    if (i > 0)
      CHECK(r->steps[i - 1].t0_us <= s->t0_us);
    CHECK(isfinite(s->t0_us) && isfinite(s->t1_us) && s->t0_us <= s->t1_us);
    CHECK(s->data_us >= 0 && isfinite(s->data_us));
    check_time(s->fwd_t0_us);
    check_time(s->fwd_t1_us);
    check_time(s->bwd_t0_us);
    check_time(s->bwd_t1_us);
    check_time(s->opt_t0_us);
    check_time(s->opt_t1_us);
    CHECK(s->n_grad == 0 || s->grad_ready_us != NULL);
    for (size_t k = 0; k < s->n_grad; k++) {
      check_time(s->grad_ready_us[k]);
      if (k > 0)
        CHECK(s->grad_ready_us[k - 1] <= s->grad_ready_us[k]);
    }
    CHECK(s->n_colls == 0 || s->colls != NULL);
    for (size_t k = 0; k < s->n_colls; k++) {
      const dr_dg_coll_t *c = &s->colls[k];
      CHECK(c->kind >= DR_DG_ALLREDUCE && c->kind <= DR_DG_OTHER);
      CHECK(c->bucket >= -1);
      check_time(c->ready_us);
      check_time(c->start_us);
      check_time(c->end_us);
      CHECK(c->ready_us >= 0 || c->start_us >= 0);
      if (k > 0)
        CHECK(key(&s->colls[k - 1]) <= key(c));
    }
  }
}

typedef struct {
  const char *lo, *hi;
} span_t;

static void inside(const span_t *in, const char *p, size_t n) {
  CHECK(n == 0 || p != NULL);
  CHECK(p >= in->lo && p + n <= in->hi);
  unsigned x = 0;
  for (size_t i = 0; i < n; i++)
    x += (unsigned char)p[i];
  sink = x;
}

static int on_event(void *arg, const char *ev, size_t len,
                    const dr__member_t *m, size_t n) {
  const span_t *in = arg;
  inside(in, ev, len);
  CHECK(m != NULL || n == 0);
  for (size_t i = 0; i < n; i++) {
    inside(in, m[i].key, m[i].key_len);
    inside(in, m[i].val, m[i].val_len);
    CHECK(m[i].val >= ev && m[i].val + m[i].val_len <= ev + len);
  }
  return 0;
}

/* Every event the merge writes is an object with the pid it was given. */
static int on_merged(void *arg, const char *ev, size_t len,
                     const dr__member_t *m, size_t n) {
  (void)arg;
  (void)ev;
  (void)len;
  CHECK(m != NULL);
  int pid = 0;
  for (size_t i = 0; i < n; i++)
    if (dr__js_is(m[i].key, m[i].key_len, m[i].key_escaped, "pid"))
      pid = m[i].val_len == 1 && m[i].val[0] == '3';
  CHECK(pid);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dr_dg_rank_t r;
  char err[512];
  int rc = dr_dg_read_buf(data, size, "f.json", &r, err, sizeof(err));
  if (rc != 0) {
    CHECK(rc < 0);
    CHECK(strncmp(err, "f.json: ", 8) == 0 && err[8] != '\0');
    CHECK(strchr(err, '\n') == NULL);
    CHECK(r.steps == NULL && r.n_steps == 0);
  } else {
    check_rank(&r);
    dr_dg_rank_free(&r);
  }
  /* The walk over the bytes as they are (a gzip'd input fails at once). */
  span_t in = {(const char *)data, (const char *)data + size};
  int walked = dr__trace_walk((const char *)data, size, on_event, &in, err,
                              sizeof(err));
  /* What the merge writes of it is JSON, and holds as many events. */
  char *out = NULL;
  size_t out_n = 0;
  FILE *f = open_memstream(&out, &out_n);
  CHECK(f != NULL);
  fputs("{\"traceEvents\":[", f);
  int first = 1;
  int rc2 = dr__merge_events(f, (const char *)data, size, 3, 7, 1000.5,
                             &first, err, sizeof(err));
  fputs("]}", f);
  CHECK(fclose(f) == 0);
  CHECK((rc2 == 0) == (walked == 0));
  if (rc2 == 0) {
    int again = dr__trace_walk(out, out_n, on_merged, NULL, err, sizeof(err));
    if (again != 0) {
      fprintf(stderr, "fuzz_trace: the merged events are not JSON: %s\n%.*s\n",
              err, (int)(out_n < 2000 ? out_n : 2000), out);
      abort();
    }
  }
  free(out);
  return 0;
}
