/* The trace readers on real traces (numbers checked against
 * fixtures/expect_torch.py and a Python reading of the train fixtures) and
 * on broken ones: every broken input is one line of error, or a partial
 * result whose note says what is missing; never a crash (also run under
 * address+undefined sanitizers).
 *
 * One file, past the few hundred lines of the rule: the project keeps one
 * cmocka executable per module, and these are the tests of one module,
 * launcher/diagnose/read/ (the trace readers and the merged-trace writer),
 * on one fixture. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "diag_merge.h"
#include "diag_read.h"
#include "diag_read_internal.h"
#include "errors.h"

#define FIX DG_FIXTURES
#define TORCH0_A FIX "/torch_gloo/vm_23034.1796118824426572618.pt.trace.json.gz"
#define TORCH1_B FIX "/torch_gloo/vm_23035.1796118824578317010.pt.trace.json.gz"

typedef struct {
  char dir[64];
  char path[256];
  char err[1024];
  dr_dg_rank_t r;
  dr_dg_set_t set;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  snprintf(f->dir, sizeof(f->dir), "/tmp/dg_read_XXXXXX");
  if (mkdtemp(f->dir) == NULL)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  dr_dg_rank_free(&f->r);
  dr_dg_set_free(&f->set);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
  if (system(cmd) != 0)
    return -1;
  free(f);
  return 0;
}

/* Writes bytes to f->dir/name; the path is in f->path. */
static const char *put(fx_t *f, const char *name, const void *p, size_t n) {
  int k = snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
  assert_true(k > 0 && (size_t)k < sizeof(f->path));
  FILE *o = fopen(f->path, "wb");
  assert_non_null(o);
  assert_int_equal(fwrite(p, 1, n, o), n);
  assert_int_equal(fclose(o), 0);
  return f->path;
}

static const char *puts_(fx_t *f, const char *name, const char *s) {
  return put(f, name, s, strlen(s));
}

/* The read fails with one line that holds want. */
static void fails(fx_t *f, const char *json, size_t n, const char *want) {
  dr_dg_rank_free(&f->r);
  int rc = dr_dg_read_buf(json, n, "t.json", &f->r, f->err, sizeof(f->err));
  if (rc == 0 || strstr(f->err, want) == NULL)
    fail_msg("want an error with \"%s\", got rc %d \"%s\"", want, rc, f->err);
  assert_null(strchr(f->err, '\n'));
  assert_true(strncmp(f->err, "t.json: ", 8) == 0);
}

static void fails_s(fx_t *f, const char *json, const char *want) {
  fails(f, json, strlen(json), want);
}

static void reads(fx_t *f, const char *json) {
  dr_dg_rank_free(&f->r);
  int rc = dr_dg_read_buf(json, strlen(json), "t.json", &f->r, f->err,
                          sizeof(f->err));
  if (rc != 0)
    fail_msg("read failed: %s", f->err);
}

static void near(double got, double want) {
  /* The reader and Python both parse with correctly rounded strtod. */
  if (got != want)
    fail_msg("got %.6f, want %.6f", got, want);
}

/* A sum of the trace's numbers: the reader and Python may add them in
 * other orders. */
static void near_sum(double got, double want) {
  if (got < want - 1e-6 || got > want + 1e-6)
    fail_msg("got %.9f, want %.9f", got, want);
}

/* Step s's backward op called name: its self time (us) and runs. */
static void has_op(const dr_dg_step_t *s, const char *name, double self_us,
                   uint32_t runs) {
  for (size_t i = 0; i < s->n_bwd_ops; i++)
    if (strcmp(s->bwd_ops[i].name, name) == 0) {
      near_sum(s->bwd_ops[i].self_us, self_us);
      assert_int_equal(s->bwd_ops[i].n_runs, runs);
      return;
    }
  fail_msg("step %llu has no backward op %s", (unsigned long long)s->step,
           name);
}

/* ---- PyTorch, real ---------------------------------------------------- */

static void torch_rank0_step3(void **state) {
  fx_t *f = *state;
  assert_int_equal(dr_dg_read(TORCH0_A, &f->r, f->err, sizeof(f->err)), 0);
  dr_dg_rank_t *r = &f->r;
  assert_int_equal(r->rank, 0);
  assert_int_equal(r->world, 2);
  assert_string_equal(r->source, "torch");
  assert_string_equal(r->backend, "gloo");
  assert_int_equal(r->have_clock_offset, 0);
  assert_int_equal(r->n_steps, 3);
  assert_int_equal(r->steps[0].step, 2);
  assert_int_equal(r->steps[2].step, 4);
  const dr_dg_step_t *s = &r->steps[1];
  assert_int_equal(s->step, 3);
  near(s->t0_us, 5261798323200.956);
  near(s->t1_us, 5261798369269.567);
  near(s->data_us, 459.652);
  near(s->fwd_t0_us, 5261798323763.150);
  near(s->fwd_t1_us, 5261798332185.120);
  near(s->bwd_t0_us, 5261798336487.177);
  near(s->bwd_t1_us, 5261798361663.352);
  near(s->opt_t0_us, 5261798368606.985);
  near(s->opt_t1_us, 5261798369254.946);
  assert_int_equal(s->n_grad, 12);
  near(s->grad_ready_us[0], 5261798337463.664);
  near(s->grad_ready_us[11], 5261798361335.135);
  for (size_t i = 1; i < s->n_grad; i++)
    assert_true(s->grad_ready_us[i - 1] <= s->grad_ready_us[i]);
  static const double want[6][3] = {
      {5261798337571.524, 5261798337676.364, 5261798341190.6045},
      {5261798339165.327, 5261798341204.274, 5261798345081.612},
      {5261798340268.883, 5261798344072.661, 5261798345163.048},
      {5261798348176.825, 5261798348328.064, 5261798352543.644},
      {5261798356938.568, 5261798357005.172, 5261798357820.291},
      {5261798361407.943, 5261798361471.538, 5261798363205.488}};
  assert_int_equal(s->n_colls, 6);
  for (int i = 0; i < 6; i++) {
    const dr_dg_coll_t *c = &s->colls[i];
    assert_int_equal(c->kind, DR_DG_ALLREDUCE);
    assert_int_equal(c->n_bytes, 262656u * 4u);
    assert_int_equal(c->bucket, i);
    near(c->ready_us, want[i][0]);
    near(c->start_us, want[i][1]);
    near(c->end_us, want[i][2]);
  }
  /* Step 2's last bucket ends inside step 3: it stays step 2's. */
  const dr_dg_coll_t *last = &r->steps[0].colls[5];
  assert_true(last->end_us > s->t0_us && last->ready_us < s->t0_us);
  assert_string_equal(r->note, "");
  assert_int_equal(r->no_shapes, 0);
  /* The backward ops (fixtures/expect_backward.py's per_step). */
  assert_int_equal(s->n_bwd_ops, 4);
  has_op(s, "SumBackward0", 17.726, 1);
  has_op(s, "AddmmBackward0", 19494.773, 6);
  has_op(s, "torch::autograd::AccumulateGrad", 5430.881, 12);
  has_op(s, "TBackward0", 42.612, 6);
}

static void torch_rank1_second_cycle(void **state) {
  fx_t *f = *state;
  assert_int_equal(dr_dg_read(TORCH1_B, &f->r, f->err, sizeof(f->err)), 0);
  dr_dg_rank_t *r = &f->r;
  assert_int_equal(r->rank, 1);
  /* ProfilerStep#8 is the stub the profiler stopped in. */
  assert_int_equal(r->n_steps, 1);
  assert_non_null(strstr(r->note, "left out (step 8)"));
  const dr_dg_step_t *s = &r->steps[0];
  assert_int_equal(s->step, 7);
  near(s->t0_us, 5261798543836.154);
  near(s->t1_us, 5261798570605.551);
  near(s->data_us, 508.714);
  near(s->bwd_t0_us, 5261798547842.633);
  near(s->bwd_t1_us, 5261798565763.913);
  assert_int_equal(s->n_grad, 12);
  near(s->grad_ready_us[0], 5261798553071.679);
  assert_int_equal(s->n_colls, 6);
  near(s->colls[1].ready_us, 5261798555434.942);
  near(s->colls[1].start_us, 5261798555502.322);
  near(s->colls[1].end_us, 5261798566512.413);
  near(s->colls[5].end_us, 5261798569784.964);
}

static void torch_dir_combines_cycles(void **state) {
  fx_t *f = *state;
  assert_int_equal(dr_dg_read_dir(FIX "/torch_gloo", &f->set, f->err,
                                  sizeof(f->err)),
                   0);
  assert_int_equal(f->set.n_ranks, 2);
  for (int k = 0; k < 2; k++) {
    const dr_dg_rank_t *r = &f->set.ranks[k];
    assert_int_equal(r->rank, k);
    assert_int_equal(r->n_steps, 4);
    static const uint64_t num[4] = {2, 3, 4, 7};
    for (int i = 0; i < 4; i++)
      assert_int_equal(r->steps[i].step, num[i]);
    assert_true(r->steps[2].t1_us < r->steps[3].t0_us);
  }
  assert_non_null(strstr(f->set.note, "rank 0: "));
  assert_non_null(strstr(f->set.note, "combined"));
}

static void torch_other_collectives(void **state) {
  fx_t *f = *state;
  assert_int_equal(dr_dg_read(FIX "/torch_colls/rank1.json.gz", &f->r, f->err,
                              sizeof(f->err)),
                   0);
  static const dr_dg_kind_t kinds[6] = {
      DR_DG_ALLREDUCE, DR_DG_ALLREDUCE, DR_DG_BROADCAST,
      DR_DG_ALLGATHER, DR_DG_BARRIER,   DR_DG_REDUCE_SCATTER};
  static const uint64_t bytes[6] = {8320 * 4, 8320 * 4, 400, 400, 0, 400};
  assert_int_equal(f->r.rank, 1);
  assert_int_equal(f->r.n_steps, 2);
  for (size_t k = 0; k < 2; k++) {
    const dr_dg_step_t *s = &f->r.steps[k];
    assert_int_equal(s->n_colls, 6);
    for (int i = 0; i < 6; i++) {
      assert_int_equal(s->colls[i].kind, kinds[i]);
      assert_int_equal(s->colls[i].n_bytes, bytes[i]);
      assert_int_equal(s->colls[i].bucket, i < 2 ? i : -1);
      assert_true(s->colls[i].ready_us <= s->colls[i].start_us);
    }
    assert_int_equal(s->n_grad, 8);
  }
}

static void torch_without_shapes(void **state) {
  fx_t *f = *state;
  assert_int_equal(dr_dg_read(FIX "/torch_noshape/rank0.json.gz", &f->r,
                              f->err, sizeof(f->err)),
                   0);
  assert_non_null(strstr(f->r.note, "sizes unknown"));
  assert_int_equal(f->r.no_shapes, 1);
  assert_int_equal(f->r.n_steps, 2);
  const dr_dg_step_t *s = &f->r.steps[1];
  assert_int_equal(s->n_colls, 2);
  for (size_t i = 0; i < 2; i++)
    assert_int_equal(s->colls[i].n_bytes, 0);
  /* The profile stopped inside the last all-reduce ("finished": false). */
  near(s->colls[1].end_us, -1);
  assert_true(s->colls[1].start_us > 0);
}

static void torch_accumulation(void **state) {
  fx_t *f = *state;
  /* Two micro-batches a step (the first under no_sync), a 2-worker
   * DataLoader, then an evaluation pass under no_grad after the
   * optimizer (fixtures/gen_torch.py ... 1). */
  assert_int_equal(dr_dg_read(FIX "/torch_accum/vm_23162.1796121347831650425"
                                  ".pt.trace.json.gz",
                              &f->r, f->err, sizeof(f->err)),
                   0);
  assert_non_null(strstr(f->r.note, "2 steps accumulate gradients: the "
                                    "backward is the last pass"));
  assert_int_equal(f->r.n_steps, 2);
  const dr_dg_step_t *s = &f->r.steps[0];
  assert_int_equal(s->step, 2);
  /* Both training forwards, not the evaluation's. */
  near(s->fwd_t0_us, 5264321782784.238);
  near(s->fwd_t1_us, 5264321785691.207);
  /* The second backward, whose gradients DDP all-reduces. */
  near(s->bwd_t0_us, 5264321785815.201);
  near(s->bwd_t1_us, 5264321792384.369);
  assert_int_equal(s->n_grad, 8);
  near(s->grad_ready_us[0], 5264321785917.272);
  near(s->opt_t0_us, 5264321799202.897);
  assert_true(s->data_us > 5514.214 && s->data_us < 5514.216);
  assert_int_equal(s->n_colls, 2);
  assert_int_equal(s->colls[0].bucket, 0);
  assert_int_equal(s->colls[1].bucket, 1);
  /* The last pass's ops only: one run per layer, not two. */
  assert_int_equal(s->n_bwd_ops, 6);
  has_op(s, "MeanBackward0", 19.689, 1);
  has_op(s, "PowBackward0", 17.977, 1);
  has_op(s, "SubBackward0", 1.302, 1);
  has_op(s, "AddmmBackward0", 144.464, 4);
  has_op(s, "torch::autograd::AccumulateGrad", 6296.385, 8);
  has_op(s, "TBackward0", 17.124, 4);
  assert_int_equal(f->r.no_shapes, 1);
}

/* Backward ops nested on one thread (a reentrant backward, as activation
 * checkpointing runs) count once, as the innermost; on another thread
 * they are apart; an earlier pass of an accumulating step counts for
 * nothing; a long name is cut before a character that does not fit, and
 * a control byte in one becomes '?'. The ops come in the order the trace
 * first names them. */
#define EV(name, ts, dur, tid)                                                \
  "{\"name\":\"" name "\",\"ph\":\"X\",\"cat\":\"cpu_op\",\"ts\":" #ts        \
  ",\"dur\":" #dur ",\"tid\":" #tid "}"
#define BW "autograd::engine::evaluate_function: "
#define LONG "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"

static void backward_ops_nested(void **state) {
  fx_t *f = *state;
  reads(f, "{\"traceEvents\":["
           EV("ProfilerStep#1", 0, 1000, 1) ","
           EV("DistributedDataParallel.forward", 10, 40, 1) ","
           EV(BW "AddmmBackward0", 60, 20, 1) ","
           EV("DistributedDataParallel.forward", 100, 40, 1) ","
           EV(BW "CheckpointFunctionBackward", 200, 100, 2) ","
           EV(BW "AddmmBackward0", 210, 30, 2) ","
           EV(BW "ReluBackward0", 250, 20, 2) ","
           EV(BW "AddmmBackward0", 320, 10, 2) ","
           EV(BW "AddmmBackward0", 220, 50, 3) ","
           EV(BW "torch::autograd::AccumulateGrad", 340, 5, 2) ","
           EV(BW LONG "\xc3\xa9", 350, 1, 2) "," /* e-acute: bytes 63, 64 */
           EV(BW "Two\\nLines", 352, 1, 2) ","
           EV("Optimizer.step#SGD.step", 400, 50, 1) "]}");
  assert_int_equal(f->r.n_steps, 1);
  const dr_dg_step_t *s = &f->r.steps[0];
  near(s->bwd_t0_us, 200);
  near(s->bwd_t1_us, 353);
  assert_int_equal(s->n_bwd_ops, 6);
  static const char *const order[6] = {
      "AddmmBackward0", "CheckpointFunctionBackward", "ReluBackward0",
      "torch::autograd::AccumulateGrad", LONG, "Two?Lines"};
  for (size_t i = 0; i < 6; i++)
    assert_string_equal(s->bwd_ops[i].name, order[i]);
  has_op(s, "AddmmBackward0", 30 + 10 + 50, 3);
  has_op(s, "CheckpointFunctionBackward", 100 - 30 - 20, 1);
  has_op(s, "ReluBackward0", 20, 1);
  has_op(s, "torch::autograd::AccumulateGrad", 5, 1);
  has_op(s, LONG, 1, 1);
  assert_int_equal(f->r.no_shapes, 0); /* no collectives: nothing to say */
}

/* ---- train, real and in the newer format ------------------------------ */

static void train_v1(void **state) {
  fx_t *f = *state;
  assert_int_equal(dr_dg_read(FIX "/train_v1/tr.rank0.json", &f->r, f->err,
                              sizeof(f->err)),
                   0);
  dr_dg_rank_t *r = &f->r;
  assert_string_equal(r->source, "train");
  assert_int_equal(r->rank, 0);
  assert_int_equal(r->world, 0);
  assert_string_equal(r->backend, "");
  assert_int_equal(r->n_steps, 6);
  assert_non_null(strstr(r->note, "an older train's trace: bucket sizes from "
                                  "their names"));
  /* The evaluation's 192 forward spans after the last step count in none. */
  near(r->steps[5].t1_us, 5692214143);
  const dr_dg_step_t *s = &r->steps[2];
  assert_int_equal(s->step, 2);
  near(s->t0_us, 5692196427);
  near(s->t1_us, 5692200065);
  near(s->data_us, 0);
  near(s->fwd_t0_us, 5692196899);
  near(s->fwd_t1_us, 5692197602);
  near(s->bwd_t0_us, 5692197603);
  near(s->bwd_t1_us, 5692198753);
  assert_int_equal(s->n_grad, 3);
  near(s->grad_ready_us[1], 5692198539);
  assert_int_equal(s->n_colls, 2);
  assert_int_equal(s->colls[0].bucket, 0);
  assert_int_equal(s->colls[1].bucket, 1);
  assert_int_equal(s->colls[1].n_bytes, 1572864); /* "1.50 MiB" */
  near(s->colls[1].ready_us, -1);
  near(s->colls[1].start_us, 5692199003);
  near(s->colls[1].end_us, 5692199573);
}

static void train_v2(void **state) {
  fx_t *f = *state;
  assert_int_equal(dr_dg_read(FIX "/train_v2/tr.rank0.json.gz", &f->r,
                              f->err, sizeof(f->err)),
                   0);
  dr_dg_rank_t *r = &f->r;
  assert_int_equal(r->rank, 0);
  assert_int_equal(r->world, 2);
  assert_string_equal(r->backend, "cpu");
  assert_int_equal(r->have_clock_offset, 1);
  near(r->clock_offset_us, -1234567);
  assert_string_equal(r->note, "");
  assert_int_equal(r->n_steps, 6);
  const dr_dg_step_t *s = &r->steps[2];
  assert_int_equal(s->step, 2);
  near(s->t0_us, 1796118800016427);
  near(s->t1_us, 1796118800020065);
  near(s->data_us, 462);
  assert_int_equal(s->n_colls, 2);
  assert_int_equal(s->colls[0].n_bytes, 33024);
  near(s->colls[0].ready_us, 1796118800017657);
  near(s->colls[1].ready_us, 1796118800018753);
  near(s->colls[1].start_us, 1796118800019003);
  /* Its layers' backward spans, in the order the trace names them. */
  assert_int_equal(s->n_bwd_ops, 3);
  assert_string_equal(s->bwd_ops[0].name, "head.bwd");
  has_op(s, "head.bwd", 54, 1);
  has_op(s, "fc1.bwd", 881, 1);
  has_op(s, "fc0.bwd", 212, 1);
  assert_int_equal(r->no_shapes, 0);
}

/* ---- broken input ----------------------------------------------------- */

static const char TINY[] =
    "{\"traceEvents\":[{\"name\":\"ProfilerStep#1\",\"ph\":\"X\",\"ts\":10,"
    "\"dur\":100,\"tid\":1},{\"name\":\"Optimizer.step#SGD.step\",\"ph\":"
    "\"X\",\"ts\":80,\"dur\":10,\"tid\":1}]}";

static void every_prefix_is_an_error(void **state) {
  fx_t *f = *state;
  reads(f, TINY);
  assert_int_equal(f->r.n_steps, 1);
  for (size_t n = 1; n < sizeof(TINY) - 1; n++)
    fails(f, TINY, n, n < 16 ? "truncated JSON at line 1" : "truncated JSON");
  fails(f, TINY, 0, "empty file");
}

static void truncated_real_file(void **state) {
  fx_t *f = *state;
  char *buf;
  size_t n;
  assert_int_equal(
      dr__dg_load(TORCH0_A, 0, &buf, &n, f->err, sizeof(f->err)), 0);
  fails(f, buf, n / 2, "truncated JSON at line");
  free(buf);
}

static void invalid_json(void **state) {
  fx_t *f = *state;
  fails_s(f, "{\"traceEvents\":[{\"ph\":'X'}]}", "invalid JSON at line 1");
  fails_s(f, "{\"traceEvents\":[1,]}", "invalid JSON");
  fails_s(f, "{\"traceEvents\":[]}\n\n}", "invalid JSON at line 3: data "
                                          "after the top-level value");
  fails_s(f, "{\"traceEvents\":[\"a\x01\"]}", "control character");
  fails_s(f, "{\"traceEvents\":[\"\xc3\x28\"]}", "invalid UTF-8");
  fails_s(f, "{\"traceEvents\":[\"\\ud800\"]}", "unpaired surrogate");
  fails_s(f, "{\"traceEvents\":[NaN]}", "invalid JSON");
  fails_s(f, "{\"traceEvents\":[01]}", "invalid JSON");
  fails_s(f, "{\"traceEvents\":[1.]}", "expected a digit");
  fails_s(f, "{\"traceEvents\":[tru]}", "invalid JSON");
  fails(f, "{\"traceEvents\":[\"\0\"]}", 21, "control character");
}

static void not_an_object(void **state) {
  fx_t *f = *state;
  fails_s(f, "42", "not a Chrome trace: the top level is a number");
  fails_s(f, " \"x\" ", "the top level is a string");
  fails_s(f, "null", "the top level is null");
  fails_s(f, "{\"traceEvents\":{}}", "traceEvents is an object, not an array");
  fails_s(f, "{\"traceEvents\":\"no\",\"x\":1}", "traceEvents is a string");
  fails_s(f, "{\"displayTimeUnit\":\"ms\"}", "no traceEvents array");
  fails_s(f, "{\"traceEvents\":[{\"name\":\"x\",\"ph\":\"X\",\"ts\":1,"
             "\"dur\":1}]}",
          "not a trace ddprun diagnose reads (neither train's --trace nor "
          "PyTorch's profiler)");
  fails_s(f, "[]", "not a trace ddprun diagnose reads");
  fails_s(f, "{\"otherData\":{\"ddprun\":{\"source\":\"merge\"}},"
             "\"traceEvents\":[]}",
          "not a trace ddprun diagnose reads");
  fails_s(f, "   \n ", "empty file");
}

static void bad_fields_are_left_out(void **state) {
  fx_t *f = *state;
  reads(f, "{\"distributedInfo\":{\"rank\":\"3\",\"world_size\":-2},"
           "\"traceEvents\":["
           "{\"name\":\"ProfilerStep#5\",\"ph\":\"X\",\"ts\":0,\"dur\":1000},"
           "{\"name\":\"ProfilerStep#6\",\"ph\":\"X\",\"ts\":\"1000\","
           "\"dur\":1000},"
           "{\"name\":\"Optimizer.step#A.step\",\"ph\":\"X\",\"ts\":900,"
           "\"dur\":\"-5\"},"
           "{\"name\":\"Optimizer.step#A.step\",\"ts\":900,\"dur\":5},"
           "{\"name\":\"Optimizer.step#A.step\",\"ph\":\"X\",\"ts\":950,"
           "\"dur\":10,\"args\":[1,2]},"
           "{\"name\":7,\"ph\":\"X\",\"ts\":1,\"dur\":1},"
           "{\"ph\":\"X\",\"ts\":1,\"dur\":1},"
           "{\"name\":\"c10d::allreduce_\",\"ph\":\"X\",\"ts\":100,"
           "\"dur\":null,\"tid\":{}},"
           "[], 3, \"s\", null]}");
  dr_dg_rank_t *r = &f->r;
  assert_int_equal(r->rank, -1);
  assert_int_equal(r->world, 0);
  assert_non_null(strstr(r->note, "rank unknown"));
  /* ts "1000", dur "-5", dur null, and four non-objects (a number that is
   * no time refuses the trace: absurd_times). */
  assert_non_null(strstr(r->note, "7 events left out (not an object, or no "
                                  "usable ts or dur)"));
  assert_int_equal(r->n_steps, 1);
  assert_int_equal(r->steps[0].step, 5);
  near(r->steps[0].opt_t0_us, 950);
  assert_int_equal(r->steps[0].n_colls, 0);
}

static void no_collectives_no_steps(void **state) {
  fx_t *f = *state;
  reads(f, "{\"traceEvents\":[{\"name\":\"ProfilerStep#0\",\"ph\":\"X\","
           "\"cat\":\"user_annotation\",\"ts\":0,\"dur\":50},"
           "{\"name\":\"DistributedDataParallel.forward\",\"ph\":\"X\","
           "\"ts\":5,\"dur\":10}]}");
  assert_int_equal(f->r.n_steps, 1);
  assert_int_equal(f->r.steps[0].n_colls, 0);
  near(f->r.steps[0].bwd_t0_us, -1);
  near(f->r.steps[0].opt_t1_us, -1);
  reads(f, "{\"traceEvents\":[{\"name\":\"aten::mm\",\"ph\":\"X\","
           "\"cat\":\"cpu_op\",\"ts\":0,\"dur\":50}]}");
  assert_int_equal(f->r.n_steps, 0);
  assert_non_null(strstr(f->r.note, "no steps"));
  /* Optimizer spans alone delimit the steps. */
  reads(f, "{\"traceEvents\":[{\"name\":\"Optimizer.step#SGD.step\",\"ph\":"
           "\"X\",\"ts\":100,\"dur\":10},{\"name\":\"Optimizer.step#SGD.step\","
           "\"ph\":\"X\",\"ts\":200,\"dur\":10},{\"name\":"
           "\"DistributedDataParallel.forward\",\"ph\":\"X\",\"ts\":20,"
           "\"dur\":10},{\"name\":\"DistributedDataParallel.forward\",\"ph\":"
           "\"X\",\"ts\":300,\"dur\":10}]}");
  assert_int_equal(f->r.n_steps, 2);
  near(f->r.steps[0].t0_us, 20);
  near(f->r.steps[1].t0_us, 110);
  near(f->r.steps[1].fwd_t0_us, -1); /* the one at 300 is after both */
  assert_non_null(strstr(f->r.note, "steps end at the optimizer"));
}

static void huge_numbers(void **state) {
  fx_t *f = *state;
  char big[1200];
  memset(big, '9', 1000);
  big[1000] = '\0';
  char json[2600];
  snprintf(json, sizeof(json),
           "{\"otherData\":{\"ddprun\":{\"source\":\"train\",\"rank\":1e20,"
           "\"world\":1e300,\"clock_offset_us\":-1e308}},\"traceEvents\":["
           "{\"name\":\"step 99999999999999999999999\",\"ph\":\"X\",\"ts\":0,"
           "\"dur\":100},"
           "{\"name\":\"step 1\",\"ph\":\"i\",\"ts\":%s,\"dur\":1},"
           "{\"name\":\"step 2\",\"ph\":\"X\",\"ts\":200,\"dur\":100},"
           "{\"name\":\"optimizer\",\"ph\":\"i\",\"ts\":250,\"dur\":1e400},"
           "{\"name\":\"allreduce bucket 3 (1.00 MiB)\",\"ph\":\"X\",\"ts\":210,"
           "\"dur\":5,\"args\":{\"bucket\":1e30,\"bytes\":1.5e300,"
           "\"ready_us\":-1e308}},"
           "{\"name\":\"allreduce bucket 99999999999 (9e99 MiB)\",\"ph\":\"X\","
           "\"ts\":220,\"dur\":5}]}",
           big);
  reads(f, json);
  dr_dg_rank_t *r = &f->r;
  assert_int_equal(r->rank, -1);
  assert_int_equal(r->world, 0);
  assert_int_equal(r->have_clock_offset, 0);
  /* Step 1's ts and the optimizer's dur overflow a double, in events that
   * are no spans (an X event's refuses the trace: absurd_times); the long
   * one is not a step number. */
  assert_int_equal(r->n_steps, 1);
  assert_null(strstr(r->note, "events left out"));
  const dr_dg_step_t *s = &r->steps[0];
  assert_int_equal(s->step, 2);
  near(s->opt_t0_us, -1);
  assert_int_equal(s->n_colls, 2);
  assert_int_equal(s->colls[0].bucket, -1);
  assert_int_equal(s->colls[0].n_bytes, 0);
  near(s->colls[0].ready_us, -1);
  assert_int_equal(s->colls[1].bucket, -1);
  assert_int_equal(s->colls[1].n_bytes, 0);
}

/* An X event whose ts or dur is a number but no time (beyond 2^53 us,
 * negative for a duration, too large for a double) refuses the trace in
 * one line that names the event; a time in args out of range is unknown. */
static void absurd_times(void **state) {
  fx_t *f = *state;
  static const struct {
    const char *ts, *dur, *want;
  } bad[] = {
      {"0", "1e308", "dur 1e+308 us is out of range"},
      {"0", "-5", "dur -5 us is out of range"},
      {"0", "9007199254740993e1", "dur 9.0072e+16 us is out of range"},
      {"0", "1e400", "dur beyond a double is out of range"},
      {"1e308", "1", "ts 1e+308 us is out of range"},
      {"-1e16", "1", "ts -1e+16 us is out of range"},
      {"1e999", "1", "ts beyond a double is out of range"},
  };
  char json[600], want[200];
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(json, sizeof(json),
             "{\"otherData\":{\"ddprun\":{\"source\":\"train\",\"rank\":0}},"
             "\"traceEvents\":[{\"name\":\"thread_name\",\"ph\":\"M\"},"
             "{\"name\":\"step 0\",\"ph\":\"X\",\"ts\":0,\"dur\":100},"
             "{\"name\":\"fc0.\\nbwd\",\"ph\":\"X\",\"ts\":%s,\"dur\":%s},"
             "{\"name\":\"optimizer\",\"ph\":\"X\",\"ts\":50,\"dur\":5}]}",
             bad[i].ts, bad[i].dur);
    /* The name's newline is shown as '?': one line. */
    snprintf(want, sizeof(want), "t.json: traceEvents[2] \"fc0.?bwd\": %s",
             bad[i].want);
    fails_s(f, json, want);
    assert_int_equal(dr_dg_read_buf(json, strlen(json), "t.json", &f->r,
                                    f->err, sizeof(f->err)),
                     -ERANGE);
  }
  /* The bound itself, and today's clock, are times. */
  reads(f, "{\"otherData\":{\"ddprun\":{\"source\":\"train\",\"rank\":0}},"
           "\"traceEvents\":[{\"name\":\"step 0\",\"ph\":\"X\","
           "\"ts\":1796118800000000,\"dur\":100},{\"name\":\"optimizer\","
           "\"ph\":\"X\",\"ts\":-9007199254740992,\"dur\":9007199254740992},"
           "{\"name\":\"allreduce bucket 0 (1.00 MiB)\",\"ph\":\"X\","
           "\"ts\":1796118800000010,\"dur\":5,\"args\":{\"bucket\":0,"
           "\"bytes\":1048576,\"ready_us\":1e300}}]}");
  assert_int_equal(f->r.n_steps, 1);
  assert_int_equal(f->r.steps[0].n_colls, 1);
  near(f->r.steps[0].colls[0].ready_us, -1);
}

static void deep_nesting(void **state) {
  fx_t *f = *state;
  size_t depth = 100000;
  char *j = malloc(2 * depth + 64);
  assert_non_null(j);
  size_t o = (size_t)sprintf(j, "{\"traceEvents\":[{\"args\":");
  for (size_t i = 0; i < depth; i++)
    j[o++] = '[';
  for (size_t i = 0; i < depth; i++)
    j[o++] = ']';
  o += (size_t)sprintf(j + o, "}]}");
  fails(f, j, o, "nested deeper than 512 levels");
  /* 500 levels are fine. */
  o = (size_t)sprintf(j, "{\"traceEvents\":[{\"name\":\"ProfilerStep#1\","
                         "\"ph\":\"X\",\"ts\":1,\"dur\":2,\"args\":");
  for (size_t i = 0; i < 500; i++)
    j[o++] = '[';
  for (size_t i = 0; i < 500; i++)
    j[o++] = ']';
  o += (size_t)sprintf(j + o, "}]}");
  j[o] = '\0';
  reads(f, j);
  free(j);
}

/* gzip of n bytes of s repeated (concatenated members of 1 MiB each). */
static unsigned char *gz(const char *s, size_t n, size_t *out_n) {
  size_t chunk = (size_t)1 << 20, cap = 4096, len = 0;
  unsigned char *out = malloc(cap);
  char *plain = malloc(chunk);
  size_t sl = strlen(s);
  for (size_t i = 0; i < chunk; i++)
    plain[i] = s[i % sl];
  unsigned char member[8192];
  size_t member_n = 0, member_of = 0;
  for (size_t done = 0; done < n;) {
    size_t k = n - done < chunk ? n - done : chunk;
    if (k != member_of) {
      z_stream z;
      memset(&z, 0, sizeof(z));
      assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9,
                                    Z_DEFAULT_STRATEGY),
                       Z_OK);
      z.next_in = (unsigned char *)plain;
      z.avail_in = (unsigned)k;
      z.next_out = member;
      z.avail_out = sizeof(member);
      assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
      member_n = sizeof(member) - z.avail_out;
      deflateEnd(&z);
      member_of = k;
    }
    while (len + member_n > cap)
      out = realloc(out, cap *= 2);
    memcpy(out + len, member, member_n);
    len += member_n;
    done += k;
  }
  free(plain);
  *out_n = len;
  return out;
}

static void gzip_cases(void **state) {
  fx_t *f = *state;
  size_t n;
  unsigned char *z = gz(TINY, sizeof(TINY) - 1, &n);
  dr_dg_rank_free(&f->r);
  assert_int_equal(dr_dg_read_buf(z, n, "t.json", &f->r, f->err,
                                  sizeof(f->err)),
                   0);
  assert_int_equal(f->r.n_steps, 1);
  for (size_t k = 2; k < n; k += 3)
    fails(f, (const char *)z, k, "gzip: truncated");
  free(z);
  /* Corrupt: the deflate data flipped. */
  z = gz(TINY, sizeof(TINY) - 1, &n);
  z[12] ^= 0xff;
  z[13] ^= 0xff;
  fails(f, (const char *)z, n, "gzip: ");
  free(z);
  /* A bomb: 64 MiB of spaces, over a limit of 16 MiB, refused once 16 MiB
   * are inflated, nothing kept. */
  z = gz(" ", (size_t)64 << 20, &n);
  char *out = NULL;
  size_t out_n = 0;
  assert_int_equal(dr__dg_inflate_buf(z, n, "bomb.json.gz", (size_t)16 << 20,
                                      &out, &out_n, f->err, sizeof(f->err)),
                   -EFBIG);
  assert_null(out);
  assert_string_equal(f->err, "bomb.json.gz: gzip: inflates to 16 MiB or "
                              "more, the limit; refused (raise the limit "
                              "with --max-trace-mib)");
  free(z);
  /* The limit is exclusive: 16 MiB inflated is refused, one byte less is
   * taken, whole. */
  size_t lim = (size_t)16 << 20;
  z = gz(" ", lim, &n);
  assert_int_equal(dr__dg_inflate_buf(z, n, "at.json.gz", lim, &out, &out_n,
                                      f->err, sizeof(f->err)),
                   -EFBIG);
  free(z);
  z = gz(" ", lim - 1, &n);
  assert_int_equal(dr__dg_inflate_buf(z, n, "under.json.gz", lim, &out,
                                      &out_n, f->err, sizeof(f->err)),
                   0);
  assert_int_equal(out_n, lim - 1);
  assert_int_equal(out[0], ' ');
  assert_int_equal(out[lim - 2], ' ');
  assert_int_equal(out[lim - 1], '\0');
  free(out);
  free(z);
}

/* The limit through the loader: the default (256 MiB) on a bomb of 257
 * MiB of spaces in 257 KB, and a lower one on files on disk too; each
 * refusal one line that names the file and says how to raise the limit. */
static void loader_limits(void **state) {
  fx_t *f = *state;
  assert_int_equal(dr__dg_limit(0), DR_DG_LIMIT_DEFAULT);
  assert_int_equal(DR_DG_LIMIT_DEFAULT, (size_t)256 << 20);
  assert_int_equal(dr__dg_limit((size_t)1 << 40), DR_DG_LIMIT_MAX);
  size_t n;
  unsigned char *z = gz(" ", DR_DG_LIMIT_DEFAULT + ((size_t)1 << 20), &n);
  assert_true(n < ((size_t)1 << 20));
  const char *p = put(f, "bomb.json.gz", z, n);
  free(z);
  char *buf = NULL;
  size_t len;
  assert_int_equal(dr__dg_load(p, 0, &buf, &len, f->err, sizeof(f->err)),
                   -EFBIG);
  assert_null(buf);
  assert_non_null(strstr(f->err, "bomb.json.gz: gzip: inflates to 256 MiB or "
                                 "more, the limit; refused (raise the limit "
                                 "with --max-trace-mib)"));
  assert_null(strchr(f->err, '\n'));
  dr_dg_rank_free(&f->r);
  assert_int_equal(dr_dg_read(p, &f->r, f->err, sizeof(f->err)), -EFBIG);
  /* 1 MiB on disk against a limit of 1 MiB: refused; a byte less read. */
  size_t mib = (size_t)1 << 20;
  char *plain = malloc(mib);
  assert_non_null(plain);
  memset(plain, ' ', mib);
  p = put(f, "big.json", plain, mib);
  assert_int_equal(dr__dg_load(p, mib, &buf, &len, f->err, sizeof(f->err)),
                   -EFBIG);
  assert_non_null(strstr(f->err, "big.json: 1 MiB or more, the limit; "
                                 "refused (raise the limit with "
                                 "--max-trace-mib)"));
  p = put(f, "small.json", plain, mib - 1);
  assert_int_equal(dr__dg_load(p, mib, &buf, &len, f->err, sizeof(f->err)),
                   0);
  assert_int_equal(len, mib - 1);
  free(buf);
  free(plain);
  /* The set and the merge writer take the limit. */
  const char *one[1] = {p};
  assert_int_equal(dr_dg_read_set(one, 1, mib - 1, &f->set, f->err,
                                  sizeof(f->err)),
                   -EFBIG);
  assert_non_null(strstr(f->err, "small.json: 1048575 bytes or more"));
  char out[160];
  snprintf(out, sizeof(out), "%s/merged.json", f->dir);
  assert_int_equal(dr_dg_merge(out, one, 1, NULL, mib - 1, f->err,
                               sizeof(f->err)),
                   -EFBIG);
}

static void files_and_dirs(void **state) {
  fx_t *f = *state;
  dr_dg_rank_free(&f->r);
  assert_int_equal(dr_dg_read(puts_(f, "empty.json", ""), &f->r, f->err,
                              sizeof(f->err)),
                   -EINVAL);
  assert_non_null(strstr(f->err, "empty.json: empty file"));
  assert_true(dr_dg_read("/nonexistent/x.json", &f->r, f->err,
                         sizeof(f->err)) == -ENOENT);
  assert_non_null(strstr(f->err, "/nonexistent/x.json: cannot open"));
  assert_true(dr_dg_read(f->dir, &f->r, f->err, sizeof(f->err)) == -EISDIR);
  /* A directory with no traces. */
  char sub[128];
  snprintf(sub, sizeof(sub), "%s/none", f->dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  assert_int_equal(dr_dg_read_dir(sub, &f->set, f->err, sizeof(f->err)),
                   -ENOENT);
  assert_non_null(strstr(f->err, "no trace files (*.json, *.json.gz) in it"));
  /* Only files that are not traces: each named, then the error. */
  snprintf(f->path, sizeof(f->path), "%s/config.json", sub);
  FILE *o = fopen(f->path, "w");
  assert_non_null(o);
  fputs("{\"lr\": 0.1}", o);
  fclose(o);
  assert_int_equal(dr_dg_read_dir(sub, &f->set, f->err, sizeof(f->err)),
                   -ENOENT);
  assert_non_null(strstr(f->err, "no trace ddprun diagnose reads"));
  assert_non_null(strstr(f->err, "config.json"));
  assert_null(strchr(f->err, '\n'));
}

/* A FIFO without a writer: refused at once, never waited on (a hang
 * here ends at the test's deadline); in a directory, left out and named
 * once in the set's note. */
static void fifos(void **state) {
  fx_t *f = *state;
  char dir[128], fifo[160], name[256];
  snprintf(dir, sizeof(dir), "%s/ranks", f->dir);
  assert_int_equal(mkdir(dir, 0700), 0);
  for (int r = 0; r < 2; r++) {
    char src[200], *buf;
    size_t n;
    snprintf(src, sizeof(src), FIX "/train_v2/tr.rank%d.json.gz", r);
    assert_int_equal(dr__dg_load(src, 0, &buf, &n, f->err, sizeof(f->err)),
                     0);
    snprintf(name, sizeof(name), "ranks/tr.rank%d.json", r);
    put(f, name, buf, n);
    free(buf);
  }
  snprintf(fifo, sizeof(fifo), "%s/pipe.json", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  dr_dg_rank_free(&f->r);
  assert_int_equal(dr_dg_read(fifo, &f->r, f->err, sizeof(f->err)),
                   DR_ENOTREG);
  assert_non_null(strstr(f->err, "pipe.json: not a regular file (a FIFO, "
                                 "device or socket); refused"));
  const char *one[1] = {fifo};
  assert_int_equal(dr_dg_read_set(one, 1, 0, &f->set, f->err,
                                  sizeof(f->err)),
                   DR_ENOTREG);
  assert_non_null(strstr(f->err, fifo));
  assert_null(strchr(f->err, '\n'));
  char out[200];
  snprintf(out, sizeof(out), "%s/merged.json", f->dir);
  assert_int_equal(dr_dg_merge(out, one, 1, NULL, 0, f->err, sizeof(f->err)),
                   DR_ENOTREG);
  /* In a directory: skipped, said once. */
  char **paths;
  size_t n, n_skipped;
  char skipped[64];
  assert_int_equal(dr_dg_list_dir(dir, &paths, &n, &n_skipped, skipped,
                                  sizeof(skipped), f->err, sizeof(f->err)),
                   0);
  assert_int_equal(n, 2);
  assert_int_equal(n_skipped, 1);
  assert_string_equal(skipped, "pipe.json");
  dr_dg_paths_free(paths, n);
  assert_int_equal(dr_dg_read_dir(dir, &f->set, f->err, sizeof(f->err)), 0);
  assert_int_equal(f->set.n_ranks, 2);
  snprintf(name, sizeof(name), "%s: 1 left out, not regular files: "
                               "pipe.json", dir);
  assert_non_null(strstr(f->set.note, name));
  dr_dg_set_free(&f->set);
  /* Only a FIFO: no traces, and it is named. */
  for (int r = 0; r < 2; r++) {
    snprintf(name, sizeof(name), "%s/tr.rank%d.json", dir, r);
    assert_int_equal(unlink(name), 0);
  }
  assert_int_equal(dr_dg_read_dir(dir, &f->set, f->err, sizeof(f->err)),
                   -ENOENT);
  assert_non_null(strstr(f->err, "no trace files (*.json, *.json.gz) in it "
                                 "(1 left out, not regular files: "
                                 "pipe.json)"));
}

static void same_rank_twice(void **state) {
  fx_t *f = *state;
  /* One trace given twice: its steps overlap themselves. */
  const char *two[2] = {TORCH0_A, TORCH0_A};
  assert_int_equal(dr_dg_read_set(two, 2, 0, &f->set, f->err, sizeof(f->err)),
                   -EINVAL);
  assert_non_null(strstr(f->err, "both claim rank 0, and their steps overlap"));
  assert_null(strchr(f->err, '\n'));
  /* Two runs' rank 0, apart in time: two processes, not two cycles. */
  const char *runs[2] = {TORCH0_A, FIX "/torch_colls/rank0.json.gz"};
  assert_int_equal(dr_dg_read_set(runs, 2, 0, &f->set, f->err, sizeof(f->err)),
                   -EINVAL);
  assert_non_null(strstr(f->err, "both claim rank 0, from two processes (pid "
                                 "23034 and 11123: two runs?)"));
  const char *trains[2] = {FIX "/train_v1/tr.rank0.json",
                           FIX "/train_v2/tr.rank0.json.gz"};
  assert_int_equal(dr_dg_read_set(trains, 2, 0, &f->set, f->err,
                                  sizeof(f->err)),
                   -EINVAL);
  assert_non_null(strstr(f->err, "both claim rank 0 (two runs?)"));
  /* Two jobs' rank 1. */
  const char *mixed[2] = {FIX "/torch_colls/rank1.json.gz",
                          FIX "/train_v2/tr.rank1.json.gz"};
  assert_int_equal(dr_dg_read_set(mixed, 2, 0, &f->set, f->err, sizeof(f->err)),
                   -EINVAL);
  assert_non_null(strstr(f->err, "both claim rank 1 (a torch trace and a "
                                 "train trace)"));
  const char *other[2] = {FIX "/torch_colls/rank0.json.gz",
                          FIX "/train_v2/tr.rank1.json.gz"};
  assert_int_equal(dr_dg_read_set(other, 2, 0, &f->set, f->err, sizeof(f->err)),
                   -EINVAL);
  assert_non_null(strstr(f->err, "one job's traces come from one source"));
}

static void clocks_aligned(void **state) {
  fx_t *f = *state;
  /* Rank 1 written with a base 3 months (7889238 s) later: moved back. */
  char *buf;
  size_t n;
  assert_int_equal(dr__dg_load(FIX "/torch_colls/rank1.json.gz", 0, &buf,
                               &n, f->err, sizeof(f->err)),
                   0);
  char *at = strstr(buf, "\"baseTimeNanoseconds\": 1790857026000000000");
  assert_non_null(at);
  memcpy(at + 23, "1798746264", 10);
  const char *later = put(f, "rank1.json", buf, n);
  free(buf);
  const char *p[2] = {FIX "/torch_colls/rank0.json.gz", later};
  assert_int_equal(dr_dg_read_set(p, 2, 0, &f->set, f->err, sizeof(f->err)), 0);
  dr_dg_rank_t r1;
  assert_int_equal(dr_dg_read(FIX "/torch_colls/rank1.json.gz", &r1, f->err,
                              sizeof(f->err)),
                   0);
  near(f->set.ranks[1].steps[0].t0_us, r1.steps[0].t0_us + 7889238e6);
  near(f->set.ranks[1].steps[1].colls[3].end_us,
       r1.steps[1].colls[3].end_us + 7889238e6);
  dr_dg_rank_free(&r1);
  assert_non_null(strstr(f->set.note, "times moved by 7889238 s"));
}

static void escapes_and_kinds(void **state) {
  fx_t *f = *state;
  reads(f, "{\"traceEvents\":[{\"name\":\"Profiler\\u0053tep#4\",\"ph\":"
           "\"X\",\"ts\":0,\"dur\":100},{\"name\":\"c10d::allreduce_\","
           "\"ph\":\"X\",\"ts\":10,\"dur\":1,\"tid\":\"main\"},"
           "{\"name\":\"gloo:all_reduce\",\"ph\":\"X\",\"ts\":12,\"dur\":3,"
           "\"tid\":7,\"args\":{\"Input Dims\":[[2,3]],\"Input type\":"
           "[\"c10::BFloat16\"]}},{\"name\":\"c10d::allgather_\",\"ph\":\"X\","
           "\"ts\":20,\"dur\":1},{\"name\":\"gloo:all_gather\",\"ph\":\"X\","
           "\"ts\":21,\"dur\":1,\"args\":{\"Input Dims\":[[4]],"
           "\"Input type\":[\"double\"],\"finished\":false}}]}");
  assert_int_equal(f->r.n_steps, 1);
  assert_int_equal(f->r.steps[0].step, 4);
  const dr_dg_coll_t *c = f->r.steps[0].colls;
  assert_int_equal(f->r.steps[0].n_colls, 2);
  assert_int_equal(c[0].n_bytes, 12);
  assert_int_equal(c[1].kind, DR_DG_ALLGATHER);
  assert_int_equal(c[1].n_bytes, 32);
  near(c[1].end_us, -1);
  assert_int_equal(dr__kind_of("ncclDevKernel_ReduceScatter_Sum_f32_RING"),
                   DR_DG_REDUCE_SCATTER);
  assert_int_equal(dr__kind_of("_allgather_base"), DR_DG_ALLGATHER);
  assert_int_equal(dr__kind_of("c10d::send"), DR_DG_OTHER);
  assert_int_equal(dr__dtype_size("Float"), 4);
  assert_int_equal(dr__dtype_size("long int"), 8);
  assert_int_equal(dr__dtype_size("c10::Half"), 2);
  assert_int_equal(dr__dtype_size("Float8_e4m3fn"), 1);
  assert_int_equal(dr__dtype_size("mystery"), 0);
  char out[8];
  assert_int_equal(dr__js_unescape("a\\u00e9\\ud83d\\ude00b", 20, out,
                                   sizeof(out)),
                   7);
  assert_string_equal(out, "a\xc3\xa9\xf0\x9f\x98\x80");
}

static void gloo_pairs_by_order_and_size(void **state) {
  fx_t *f = *state;
  /* One gloo event from before the first launch, one of another size
   * between: both left out, the launches keep their own. */
#define AR(ts, n)                                                            \
  "{\"name\":\"c10d::allreduce_\",\"ph\":\"X\",\"ts\":" #ts ",\"dur\":5,"     \
  "\"args\":{\"Input Dims\":[[[" #n "]],[],[]]}},"
#define GLOO(ts, n)                                                          \
  "{\"name\":\"gloo:all_reduce\",\"ph\":\"X\",\"ts\":" #ts ",\"dur\":20,"     \
  "\"tid\":5,\"args\":{\"Input Dims\":[[" #n "]],\"Input type\":[\"float\"]}},"
  reads(f, "{\"traceEvents\":[" AR(100, 100) AR(200, 200) GLOO(50, 100)
           GLOO(150, 50) GLOO(160, 100) GLOO(250, 200)
           "{\"name\":\"ProfilerStep#0\",\"ph\":\"X\",\"ts\":0,"
           "\"dur\":1000}]}");
#undef AR
#undef GLOO
  const dr_dg_step_t *s = &f->r.steps[0];
  assert_int_equal(s->n_colls, 2);
  near(s->colls[0].ready_us, 100);
  near(s->colls[0].start_us, 160);
  assert_int_equal(s->colls[0].n_bytes, 400);
  near(s->colls[1].ready_us, 200);
  near(s->colls[1].start_us, 250);
  assert_int_equal(s->colls[1].n_bytes, 800);
  assert_non_null(strstr(f->r.note, "2 communication events without a "
                                    "launch left out"));
}

static void nested_launches_count_once(void **state) {
  fx_t *f = *state;
  /* A c10d:: op inside another on its thread is part of it; on another
   * thread it is its own. */
  reads(f, "{\"traceEvents\":[{\"name\":\"ProfilerStep#0\",\"ph\":\"X\","
           "\"ts\":0,\"dur\":1000},"
           "{\"name\":\"c10d::barrier\",\"ph\":\"X\",\"ts\":10,\"dur\":50,"
           "\"tid\":1},"
           "{\"name\":\"c10d::allreduce_\",\"ph\":\"X\",\"ts\":20,\"dur\":5,"
           "\"tid\":1},"
           "{\"name\":\"c10d::allreduce_\",\"ph\":\"X\",\"ts\":30,\"dur\":5,"
           "\"tid\":2},"
           "{\"name\":\"gloo:barrier\",\"ph\":\"X\",\"ts\":12,\"dur\":5},"
           "{\"name\":\"gloo:all_reduce\",\"ph\":\"X\",\"ts\":40,\"dur\":5}]}");
  const dr_dg_step_t *s = &f->r.steps[0];
  assert_int_equal(s->n_colls, 2);
  assert_int_equal(s->colls[0].kind, DR_DG_BARRIER);
  near(s->colls[0].start_us, 12);
  assert_int_equal(s->colls[1].kind, DR_DG_ALLREDUCE);
  near(s->colls[1].ready_us, 30);
  near(s->colls[1].start_us, 40);
  assert_string_equal(f->r.note, "rank unknown (no distributedInfo); "
                                 "collective sizes unknown (profiled without "
                                 "record_shapes)");
}

static void nccl_kernels(void **state) {
  fx_t *f = *state;
  /* Two launches on two threads; kernels paired by correlation, not by
   * order (the second launch's kernel runs first). */
  reads(f, "{\"distributedInfo\":{\"backend\":\"nccl\",\"rank\":2,"
           "\"world_size\":8},\"traceEvents\":["
           "{\"name\":\"ProfilerStep#0\",\"ph\":\"X\",\"ts\":0,\"dur\":1000,"
           "\"tid\":1},"
           "{\"name\":\"autograd::engine::evaluate_function: MmBackward0\","
           "\"ph\":\"X\",\"ts\":5,\"dur\":300,\"tid\":9},"
           "{\"name\":\"c10d::allreduce_\",\"ph\":\"X\",\"cat\":\"cpu_op\","
           "\"ts\":100,\"dur\":20,\"tid\":9},"
           "{\"name\":\"record_param_comms\",\"ph\":\"X\",\"cat\":\"cpu_op\","
           "\"ts\":101,\"dur\":18,\"tid\":9,\"args\":{\"Collective name\":"
           "\"allreduce\",\"In msg nelems\":1000,\"Out msg nelems\":1000,"
           "\"dtype\":\"BFloat16\"}},"
           "{\"name\":\"cudaLaunchKernel\",\"ph\":\"X\",\"cat\":"
           "\"cuda_runtime\",\"ts\":110,\"dur\":2,\"tid\":9,\"args\":"
           "{\"correlation\":77}},"
           "{\"name\":\"c10d::allreduce_\",\"ph\":\"X\",\"cat\":\"cpu_op\","
           "\"ts\":200,\"dur\":20,\"tid\":10},"
           "{\"name\":\"cudaLaunchKernel\",\"ph\":\"X\",\"cat\":"
           "\"cuda_runtime\",\"ts\":210,\"dur\":2,\"tid\":10,\"args\":"
           "{\"correlation\":78}},"
           "{\"name\":\"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)\",\"ph\":"
           "\"X\",\"cat\":\"kernel\",\"ts\":230,\"dur\":50,\"tid\":7,"
           "\"args\":{\"correlation\":78,\"Collective name\":\"allreduce\","
           "\"In msg nelems\":64,\"dtype\":\"Float\"}},"
           "{\"name\":\"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)\",\"ph\":"
           "\"X\",\"cat\":\"kernel\",\"ts\":300,\"dur\":40,\"tid\":7,"
           "\"args\":{\"correlation\":77}}]}");
  dr_dg_rank_t *r = &f->r;
  assert_int_equal(r->rank, 2);
  assert_int_equal(r->world, 8);
  assert_string_equal(r->backend, "nccl");
  const dr_dg_step_t *s = &r->steps[0];
  assert_int_equal(s->n_colls, 2);
  /* In start order: the second launch's kernel starts first. */
  near(s->colls[0].ready_us, 200);
  near(s->colls[0].start_us, 230);
  near(s->colls[0].end_us, 280);
  assert_int_equal(s->colls[0].n_bytes, 256);
  assert_int_equal(s->colls[0].bucket, 1);
  near(s->colls[1].ready_us, 100);
  near(s->colls[1].start_us, 300);
  assert_int_equal(s->colls[1].n_bytes, 2000);
  assert_int_equal(s->colls[1].bucket, 0);
}

static int count(void *arg, const char *ev, size_t len,
                 const dr__member_t *m, size_t n) {
  (void)ev;
  (void)len;
  (void)m;
  (void)n;
  ++*(size_t *)arg;
  return 0;
}

static void merge(void **state) {
  fx_t *f = *state;
  char out[160];
  snprintf(out, sizeof(out), "%s/merged.json", f->dir);
  const char *in[3] = {FIX "/torch_gloo/vm_23035.1796118824578317010.pt."
                           "trace.json.gz",
                       TORCH0_A, FIX "/train_v1/tr.rank0.json"};
  double off[3] = {0, 1000.5, -5};
  assert_int_equal(dr_dg_merge(out, in, 3, off, 0, f->err, sizeof(f->err)), 0);
  char *buf;
  size_t n;
  assert_int_equal(dr__dg_load(out, 0, &buf, &n, f->err, sizeof(f->err)), 0);
  /* Valid JSON throughout, and never one rank's trace. */
  size_t n_ev = 0;
  assert_int_equal(dr__trace_walk(buf, n, count, &n_ev, f->err,
                                  sizeof(f->err)),
                   0);
  assert_true(n_ev > 1000);
  dr_dg_rank_free(&f->r);
  assert_int_not_equal(dr_dg_read_buf(buf, n, "m", &f->r, f->err,
                                      sizeof(f->err)),
                       0);
  assert_non_null(strstr(buf, "\"name\":\"rank 1 (vm_23035.1796118824578317010"
                              ".pt.trace.json.gz)\""));
  assert_non_null(strstr(buf, "\"args\":{\"name\":\"rank 0 (tr.rank0.json)\""));
  /* ProfilerStep#3 of rank 0, moved by 1000.5 us, pid 0. */
  assert_non_null(strstr(buf, "\"name\":\"ProfilerStep#3\",\"pid\":0,"
                              "\"tid\":23034,\"ts\":5261798324201.456,"));
  /* Flow ids of the second input made its own. */
  assert_non_null(strstr(buf, "\"id\":4294967309"));
  assert_null(strstr(buf, "\"process_labels\""));
  free(buf);
  /* A broken input: one line, and no output left behind. */
  const char *bad[2] = {TORCH0_A, puts_(f, "bad.json", "{\"traceEvents\":[")};
  assert_int_not_equal(dr_dg_merge(out, bad, 2, NULL, 0, f->err,
                                   sizeof(f->err)),
                       0);
  assert_non_null(strstr(f->err, "bad.json: truncated JSON at line 1"));
  char tmp[200];
  snprintf(tmp, sizeof(tmp), "%s.tmp", out);
  assert_int_not_equal(access(tmp, F_OK), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(torch_rank0_step3, setup, teardown),
      cmocka_unit_test_setup_teardown(torch_rank1_second_cycle, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(torch_dir_combines_cycles, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(torch_other_collectives, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(torch_without_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(torch_accumulation, setup, teardown),
      cmocka_unit_test_setup_teardown(backward_ops_nested, setup, teardown),
      cmocka_unit_test_setup_teardown(train_v1, setup, teardown),
      cmocka_unit_test_setup_teardown(train_v2, setup, teardown),
      cmocka_unit_test_setup_teardown(every_prefix_is_an_error, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(truncated_real_file, setup, teardown),
      cmocka_unit_test_setup_teardown(invalid_json, setup, teardown),
      cmocka_unit_test_setup_teardown(not_an_object, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_fields_are_left_out, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(no_collectives_no_steps, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(huge_numbers, setup, teardown),
      cmocka_unit_test_setup_teardown(absurd_times, setup, teardown),
      cmocka_unit_test_setup_teardown(deep_nesting, setup, teardown),
      cmocka_unit_test_setup_teardown(gzip_cases, setup, teardown),
      cmocka_unit_test_setup_teardown(loader_limits, setup, teardown),
      cmocka_unit_test_setup_teardown(files_and_dirs, setup, teardown),
      cmocka_unit_test_setup_teardown(fifos, setup, teardown),
      cmocka_unit_test_setup_teardown(same_rank_twice, setup, teardown),
      cmocka_unit_test_setup_teardown(clocks_aligned, setup, teardown),
      cmocka_unit_test_setup_teardown(escapes_and_kinds, setup, teardown),
      cmocka_unit_test_setup_teardown(gloo_pairs_by_order_and_size, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(nested_launches_count_once, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(nccl_kernels, setup, teardown),
      cmocka_unit_test_setup_teardown(merge, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
