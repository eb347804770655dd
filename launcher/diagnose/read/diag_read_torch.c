/* PyTorch profiler traces (Kineto's Chrome JSON, from
 * tensorboard_trace_handler or export_chrome_trace): what the reader
 * takes from them, as PyTorch 2.11 writes them.
 *
 *   top level  "distributedInfo": {"backend", "rank", "world_size"};
 *              "baseTimeNanoseconds": ts + base/1000 is the system clock
 *              in us (base is floored to a 3-month boundary, so the ranks
 *              of one job share it).
 *   "ProfilerStep#N"  X (user_annotation), the step N.
 *   "enumerate(DataLoader)#..."  X, a batch loaded.
 *   "...DataParallel.forward"  X (DistributedDataParallel, FSDP), the
 *              forward pass. Without it the forward stays unknown.
 *   "autograd::engine::evaluate_function: ..."  X (cpu_op), the backward
 *              pass runs through these (on the main thread on a CPU, on
 *              autograd's device threads on a GPU); by the name after the
 *              colon ("AddmmBackward0"), the backward pass's ops.
 *   "torch::autograd::AccumulateGrad"  X (cpu_op), one per parameter per
 *              backward: its end is when the parameter's gradient is
 *              written, just before DDP's hook marks it ready. The Xxx-
 *              Backward0 ops are not used: one can produce several
 *              gradients or none (SumBackward0), and the wrapping
 *              "evaluate_function: torch::autograd::AccumulateGrad" also
 *              holds DDP's hook and, for a bucket's last gradient, the
 *              bucket's launch.
 *   "Optimizer.step#..."  X, the optimizer step ("Optimizer.zero_grad#"
 *              is not).
 *   "c10d::allreduce_", "c10d::broadcast_", "c10d::allgather_",
 *              "c10d::_reduce_scatter_base_", "c10d::barrier", ... X
 *              (cpu_op): a collective handed to the process group; its
 *              start is the collective's ready time and its name its kind.
 *   "gloo:all_reduce", "gloo:broadcast", ... X on one of gloo's worker
 *              threads: the communication itself. "Input Dims" [[N]] and
 *              "Input type" ["float"] give its size (with record_shapes
 *              only: a trace with collectives, none sized, and no
 *              "Input Dims" on them is marked no_shapes); "finished":
 *              false marks one the profile stopped in
 *              (its end is then unknown). Gloo runs a process group's
 *              work first in, first out on two threads, so the k-th gloo
 *              event to start is the k-th launch's: they are paired in
 *              that order, where the event starts after the launch and
 *              its input has the size of one of the launch's first two
 *              arguments (when both sizes are known). An event that
 *              cannot be the next launch's (the tail of a step before the
 *              profile began, another group's) is left out, looking up to
 *              8 events on.
 *   NCCL: the GPU kernels "ncclDevKernel_..." (cat kernel) are the
 *              communication; Kineto copies record_param_comms' args onto
 *              them: "Collective name", "In msg nelems", "dtype". Each is
 *              paired with its launch through the CPU runtime call
 *              ("cudaLaunchKernel...", cat cuda_runtime) that has the same
 *              "correlation": the c10d:: launch on that thread around the
 *              call; without runtime events, in order, as for gloo.
 *   "record_param_comms"  X (cpu_op): the same args on the CPU; inside a
 *              c10d:: launch it gives that launch its size, alone it is
 *              the launch.
 * A collective's n_bytes is the input each rank gives it (In msg nelems,
 * or the gloo event's input), times its element size.
 */
#include "diag_read_internal.h"
#include "grow.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  double t0, t1;
  int64_t tid;
  int kind;
  uint64_t n_bytes;
  int64_t corr;       /* comms: the kernel's correlation, -1 */
  int finished;       /* 0 when the profile stopped inside (a launch:
                         inside one of its kernels) */
  double c0, c1;      /* launches: the communication, -1 */
  int64_t elems[2];   /* comms: [0] its input's elements; launches: its
                         first two arguments'; -1 unknown */
} op_t;

typedef struct {
  op_t *v;
  size_t n, cap;
} ops_t;

static int add(ops_t *o, const op_t *x) {
  op_t *p = dr_grow(o->v, &o->cap, o->n + 1, sizeof(*p), 64);
  if (p == NULL)
    return -ENOMEM;
  o->v = p;
  o->v[o->n++] = *x;
  return 0;
}

static int starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int ends(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* Elements in one "Input Dims" entry: [d0, d1, ...] a tensor (product),
 * [[...], [...]] a tensor list (sum); -1 when it says nothing. */
static int64_t elems(const json_t *dims) {
  if (!json_is_array(dims) || json_array_size(dims) == 0)
    return -1;
  const size_t n = json_array_size(dims);
  if (json_is_array(json_array_get(dims, 0))) {
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
      int64_t k = elems(json_array_get(dims, i));
      if (k < 0 || sum > INT64_MAX / 2 - k)
        return -1;
      sum += k;
    }
    return sum;
  }
  int64_t prod = 1;
  for (size_t i = 0; i < n; i++) {
    double v;
    int64_t d;
    if (dr__json_num(json_array_get(dims, i), &v) != 0 ||
        (d = dr__as_count(v, INT32_MAX)) < 0)
      return -1;
    if (d != 0 && prod > ((int64_t)1 << 53) / d)
      return -1;
    prod *= d;
  }
  return prod;
}

static uint64_t bytes_of(int64_t n_elems, unsigned esize) {
  if (n_elems <= 0 || esize == 0 || n_elems > ((int64_t)1 << 53) / esize)
    return 0;
  return (uint64_t)n_elems * esize;
}

/* A gloo event: its first input's elements and type. */
static void gloo_size(const json_t *a, op_t *o) {
  const json_t *dims = json_object_get(a, "Input Dims");
  const json_t *types = json_object_get(a, "Input type");
  const char *ty = json_string_value(json_array_get(types, 0));
  o->elems[0] = elems(json_array_get(dims, 0));
  if (ty != NULL)
    o->n_bytes = bytes_of(o->elems[0], dr__dtype_size(ty));
  if (json_is_false(json_object_get(a, "finished")))
    o->finished = 0;
}

/* record_param_comms' args, also on NCCL kernels. */
static void comms_args(const json_t *a, op_t *o) {
  const char *name = json_string_value(json_object_get(a, "Collective name"));
  const char *dtype = json_string_value(json_object_get(a, "dtype"));
  double v;
  if (name != NULL)
    o->kind = dr__kind_of(name);
  if (dr__json_num(json_object_get(a, "In msg nelems"), &v) == 0)
    o->elems[0] = dr__as_count(v, INT64_MAX);
  if (dtype != NULL)
    o->n_bytes = bytes_of(o->elems[0], dr__dtype_size(dtype));
  if (dr__json_num(json_object_get(a, "correlation"), &v) == 0)
    o->corr = dr__as_count(v, INT64_MAX);
}

static int by_tid_t0(const void *a, const void *b) {
  const op_t *x = a, *y = b;
  if (x->tid != y->tid)
    return x->tid < y->tid ? -1 : 1;
  if (x->t0 != y->t0)
    return x->t0 < y->t0 ? -1 : 1;
  return x->t1 > y->t1 ? -1 : x->t1 < y->t1; /* the outer one first */
}

static int by_t0(const void *a, const void *b) {
  const op_t *x = a, *y = b;
  return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

static int by_corr(const void *a, const void *b) {
  const op_t *x = a, *y = b;
  return x->corr < y->corr ? -1 : x->corr > y->corr;
}

/* The launch on tid around time x, in launches sorted by (tid, t0)
 * without nested ones (drop_nested); NULL if none. */
static op_t *around(ops_t *l, int64_t tid, double x) {
  size_t lo = 0, hi = l->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const op_t *m = &l->v[mid];
    if (m->tid < tid || (m->tid == tid && m->t0 <= x))
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0)
    return NULL;
  op_t *m = &l->v[lo - 1];
  return m->tid == tid && m->t1 >= x ? m : NULL;
}

/* Sorts by (tid, t0) and removes each launch that lies inside the one
 * before it on its thread: it is part of that one. */
static void drop_nested(ops_t *l) {
  dr__sort(l->v, l->n, sizeof(op_t), by_tid_t0);
  size_t o = 0;
  for (size_t i = 0; i < l->n; i++) {
    const op_t *x = &l->v[i];
    if (o > 0 && l->v[o - 1].tid == x->tid && x->t0 <= l->v[o - 1].t1)
      continue;
    l->v[o++] = *x;
  }
  l->n = o;
}

typedef struct {
  ops_t launch, comm, rpc, runtime;
  int saw_dims; /* a launch or gloo event with "Input Dims" */
} torch_t;

static void torch_free(torch_t *k) {
  free(k->launch.v);
  free(k->comm.v);
  free(k->rpc.v);
  free(k->runtime.v);
}

/* Pairs kernels with launches through the runtime calls' correlation;
 * returns how many kernels found none. */
static size_t pair_by_correlation(torch_t *k) {
  dr__sort(k->runtime.v, k->runtime.n, sizeof(op_t), by_corr);
  size_t lost = 0;
  for (size_t i = 0; i < k->comm.n; i++) {
    const op_t *c = &k->comm.v[i];
    op_t key = {.corr = c->corr};
    const op_t *rt = c->corr < 0 ? NULL
                                 : bsearch(&key, k->runtime.v, k->runtime.n,
                                           sizeof(op_t), by_corr);
    op_t *l = rt != NULL ? around(&k->launch, rt->tid, rt->t0) : NULL;
    if (l == NULL) {
      lost++;
      continue;
    }
    /* One launch, several kernels (coalesced): first start, last end. */
    if (l->c0 < 0 || c->t0 < l->c0)
      l->c0 = c->t0;
    if (c->t1 > l->c1)
      l->c1 = c->t1;
    if (!c->finished)
      l->finished = 0;
    if (l->n_bytes == 0)
      l->n_bytes = c->n_bytes;
  }
  return lost;
}

static int emit(dr__build_t *b, const op_t *l, const op_t *c) {
  dr_dg_coll_t x = {DR_DG_OTHER, 0, -1, -1, -1, -1};
  if (l != NULL) {
    x.kind = (dr_dg_kind_t)l->kind;
    x.ready_us = l->t0;
    x.start_us = l->c0;
    x.end_us = l->c1;
    x.n_bytes = l->n_bytes;
  }
  if (c != NULL) {
    if (l == NULL)
      x.kind = (dr_dg_kind_t)c->kind;
    x.start_us = c->t0;
    x.end_us = c->finished ? c->t1 : -1;
    if (c->n_bytes > 0)
      x.n_bytes = c->n_bytes;
  }
  return dr__build_coll(b, &x);
}

/* How far past an event that cannot be a launch's the pairing looks for
 * one that can. */
#define LOOKAHEAD 8

/* Whether communication c can be launch l's: not before it, and of one of
 * its arguments' sizes when both are known. */
static int pairs(const op_t *l, const op_t *c) {
  if (c->t0 < l->t0)
    return 0;
  if (c->elems[0] < 0 || (l->elems[0] < 0 && l->elems[1] < 0))
    return 1;
  return c->elems[0] == l->elems[0] || c->elems[0] == l->elems[1];
}

static int collectives(torch_t *k, dr__build_t *b, dr_dg_rank_t *r) {
  int rc = 0;
  ops_t *l = &k->launch;
  drop_nested(l);
  /* record_param_comms: sizes for their launches, or launches. */
  size_t n_launch = l->n;
  for (size_t i = 0; i < k->rpc.n && rc == 0; i++) {
    op_t *p = &k->rpc.v[i];
    op_t *host = n_launch > 0 ? around(l, p->tid, p->t0) : NULL;
    if (host != NULL) {
      if (host->n_bytes == 0)
        host->n_bytes = p->n_bytes;
      if (host->elems[0] < 0 && host->elems[1] < 0)
        host->elems[0] = p->elems[0];
    } else {
      rc = add(l, p);
    }
  }
  if (rc != 0)
    return rc;
  if (l->n > n_launch)
    drop_nested(l);
  int kernels = k->comm.n > 0 && k->comm.v[0].corr != -2;
  if (kernels && k->runtime.n > 0) {
    size_t lost = pair_by_correlation(k);
    if (lost > 0)
      dr__dg_note(r, "%zu NCCL kernels without their launch left out", lost);
    for (size_t i = 0; i < l->n && rc == 0; i++) {
      if (!l->v[i].finished)
        l->v[i].c1 = -1;
      rc = emit(b, &l->v[i], NULL);
    }
    return rc;
  }
  /* In order: the k-th communication to start is the k-th launch's,
   * where their sizes agree. */
  dr__sort(l->v, l->n, sizeof(op_t), by_t0);
  dr__sort(k->comm.v, k->comm.n, sizeof(op_t), by_t0);
  size_t ci = 0, nl = 0, skipped = 0, no_comm = 0;
  for (size_t li = 0; li < l->n && rc == 0; li++) {
    const op_t *x = &l->v[li];
    nl++;
    /* One that starts before this launch can be no later one's either. */
    while (ci < k->comm.n && k->comm.v[ci].t0 < x->t0) {
      ci++;
      skipped++;
    }
    size_t j = ci;
    while (j < k->comm.n && j < ci + LOOKAHEAD && !pairs(x, &k->comm.v[j]))
      j++;
    if (j < k->comm.n && j < ci + LOOKAHEAD) {
      skipped += j - ci;
      ci = j + 1;
      rc = emit(b, x, &k->comm.v[j]);
    } else {
      no_comm++;
      rc = emit(b, x, NULL);
    }
  }
  size_t left = k->comm.n - ci;
  if (nl == 0) {
    /* No launches recorded: the communication alone, ready unknown. */
    for (size_t i = 0; i < k->comm.n && rc == 0; i++)
      rc = emit(b, NULL, &k->comm.v[i]);
    left = skipped = no_comm = 0;
  }
  if (no_comm > 0 && k->comm.n > 0)
    dr__dg_note(r, "%zu collectives without their communication event",
                no_comm);
  if (skipped + left > 0)
    dr__dg_note(r, "%zu communication events without a launch left out",
                skipped + left);
  return rc;
}

static void meta(const dr__trace_t *t, dr_dg_rank_t *r) {
  const json_t *d = t->distributed_info;
  double v;
  int64_t k;
  if (d == NULL) {
    dr__dg_note(r, "rank unknown (no distributedInfo)");
    return;
  }
  if (dr__json_num(json_object_get(d, "rank"), &v) == 0 &&
      (k = dr__as_count(v, INT_MAX)) >= 0)
    r->rank = (int)k;
  if (dr__json_num(json_object_get(d, "world_size"), &v) == 0 &&
      (k = dr__as_count(v, INT_MAX)) >= 0)
    r->world = (int)k;
  const char *b = json_string_value(json_object_get(d, "backend"));
  if (b != NULL)
    snprintf(r->backend, sizeof(r->backend), "%s", b);
  if (r->rank < 0)
    dr__dg_note(r, "rank unknown");
}

#define EVAL_FN "autograd::engine::evaluate_function: "

static int one(const dr__trace_t *t, const dr__ev_t *e, dr__build_t *b,
               torch_t *k) {
  const char *n = e->name;
  double t0 = e->ts, t1 = e->ts + e->dur;
  op_t o = {t0, t1, e->tid, DR_DG_OTHER, 0, -1, 1, -1, -1, {-1, -1}};
  if (starts(n, "ProfilerStep#")) {
    char *endp;
    errno = 0;
    unsigned long long s = strtoull(n + 13, &endp, 10);
    if (errno == 0 && *endp == '\0' && endp != n + 13 && n[13] != '-')
      return dr__build_span(b, DR__SP_STEP, t0, e->dur, s);
    return 0;
  }
  if (starts(n, "enumerate(DataLoader)#"))
    return dr__build_span(b, DR__SP_DATA, t0, e->dur, 0);
  if (ends(n, "DataParallel.forward"))
    return dr__build_span(b, DR__SP_FWD, t0, e->dur, 0);
  if (starts(n, EVAL_FN))
    return dr__build_bwd(b, t0, e->dur, e->tid, n + strlen(EVAL_FN));
  if (strcmp(n, "torch::autograd::AccumulateGrad") == 0)
    return dr__build_span(b, DR__SP_GRAD, t1, 0, 0);
  if (starts(n, "Optimizer.step#"))
    return dr__build_span(b, DR__SP_OPT, t0, e->dur, 0);
  if (e->cat == DR__CAT_RUNTIME) {
    json_t *a = dr__ev_args(t, e);
    double v;
    if (a != NULL && dr__json_num(json_object_get(a, "correlation"), &v) == 0)
      o.corr = dr__as_count(v, INT64_MAX);
    json_decref(a);
    return o.corr >= 0 ? add(&k->runtime, &o) : 0;
  }
  if (starts(n, "c10d::")) {
    o.kind = dr__kind_of(n);
    /* The sizes of its first two arguments: the input is one of them
     * (allreduce_ and broadcast_ [[[N]], ...], allgather_ [[], [[N]]],
     * _reduce_scatter_base_ [[N/w], [N]]). */
    json_t *a = dr__ev_args(t, e);
    const json_t *dims = a != NULL ? json_object_get(a, "Input Dims") : NULL;
    k->saw_dims |= dims != NULL;
    o.elems[0] = elems(json_array_get(dims, 0));
    o.elems[1] = elems(json_array_get(dims, 1));
    json_decref(a);
    return add(&k->launch, &o);
  }
  if (strcmp(n, "record_param_comms") == 0 || starts(n, "gloo:") ||
      (e->cat == DR__CAT_KERNEL && starts(n, "nccl"))) {
    json_t *a = dr__ev_args(t, e);
    o.kind = dr__kind_of(n);
    int rc;
    if (starts(n, "gloo:")) {
      if (a != NULL) {
        gloo_size(a, &o);
        k->saw_dims |= json_object_get(a, "Input Dims") != NULL;
      }
      o.corr = -2; /* not a kernel */
      rc = add(&k->comm, &o);
    } else {
      if (a != NULL)
        comms_args(a, &o);
      if (e->cat == DR__CAT_KERNEL) {
        rc = add(&k->comm, &o);
      } else {
        o.corr = -1;
        rc = add(&k->rpc, &o);
      }
    }
    json_decref(a);
    return rc;
  }
  return 0;
}

int dr__read_torch(const dr__trace_t *t, dr_dg_rank_t *r, char *err,
                   size_t errlen) {
  snprintf(r->source, sizeof(r->source), "torch");
  meta(t, r);
  dr__build_t b;
  memset(&b, 0, sizeof(b));
  b.number_buckets = 1;
  torch_t k;
  memset(&k, 0, sizeof(k));
  int rc = 0;
  for (size_t i = 0; i < t->n_ev && rc == 0; i++)
    if (t->ev[i].ph == 'X')
      rc = one(t, &t->ev[i], &b, &k);
  /* gloo and NCCL in one file: pair the kind that is there most. */
  if (rc == 0 && k.comm.n > 0) {
    size_t n_gloo = 0;
    for (size_t i = 0; i < k.comm.n; i++)
      n_gloo += k.comm.v[i].corr == -2;
    int keep_gloo = n_gloo * 2 >= k.comm.n;
    size_t o = 0;
    for (size_t i = 0; i < k.comm.n; i++)
      if ((k.comm.v[i].corr == -2) == keep_gloo)
        k.comm.v[o++] = k.comm.v[i];
    k.comm.n = o;
  }
  if (rc == 0)
    rc = collectives(&k, &b, r);
  if (rc == 0) {
    int sized = 0, any = b.n_coll > 0;
    for (size_t i = 0; i < b.n_coll; i++)
      sized |= b.coll[i].n_bytes > 0;
    if (any && !sized)
      dr__dg_note(r, "collective sizes unknown (profiled without "
                     "record_shapes)");
    r->no_shapes = any && !sized && !k.saw_dims;
  }
  torch_free(&k);
  if (rc == 0)
    rc = dr__build_steps(&b, r);
  else
    dr__build_free(&b);
  if (rc != 0)
    snprintf(err, errlen, "out of memory");
  return rc;
}
