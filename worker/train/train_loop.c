/* The training step loop: sampler, forward, backward with bucketed
 * all-reduce, optimizer; then the evaluation across ranks. One loop for
 * every device (train_device.h). */
#include "train.h"

#include "fault_inject.h"
#include "progress.h"
#include "train_device.h"
#include "host_weights.h"
#include "train_hostw.h"
#include "train_plan.h"
#include "train_threads.h"
#include "mono.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Averages (loss sum, count) over all ranks. */
static int global_mean(dr_run_t *r, double sum, double count, double *mean) {
  float buf[2] = {(float)sum, (float)count};
  char err[256] = "";
  int rc = dr_pg_allreduce_sync(r->pg, buf, 2, DR_PG_SUM, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "loss all-reduce", rc, err);
  *mean = buf[1] > 0 ? buf[0] / buf[1] : 0.0;
  return 0;
}

/* A loss that is NaN or infinite stops the run (when = "at" a step whose
 * loss the host has, "by" one whose device loss was read back). */
static int nonfinite(dr_run_t *r, double loss, const char *when,
                     uint64_t step) {
  fprintf(stderr, "train: rank %u: the loss is %f %s step %llu; stopping "
          "(exit %d: non-finite loss, not restarted). Lower --lr?\n",
          r->rank, loss, when, (unsigned long long)step + 1,
          DR_TRAIN_ENONFINITE);
  return DR_TRAIN_ENONFINITE;
}

/* The step's times from the host clock and the reducer, and its trace, for
 * a device whose work is done when its calls return: the step's span
 * around everything it did on the compute thread (its data, forward and
 * backward passes, the optimizer), each bucket's all-reduce with the time
 * its last gradient became ready. */
static void host_times(dr_run_t *r, uint64_t step, const dr_step_marks_t *m,
                       uint64_t data_us, dr_step_time_t *st) {
  if (r->trace != NULL) {
    char name[48];
    snprintf(name, sizeof(name), "step %llu", (unsigned long long)step);
    dr_trace_span(r->trace, DR_TRACE_COMPUTE, name, m->start_us, m->end_us);
    dr_trace_span(r->trace, DR_TRACE_COMPUTE, "optimizer", m->comm_end_us,
                  m->end_us);
    const dr_bucket_times_t *t = dr_reducer_bucket_times(r->red);
    /* The bytes each all-reduce moved: the compressed ones' own. With
     * shared weights, each bucket's wait, sum and update of this rank's
     * shard (host_weights.h), as a collective on the waiting thread. */
    for (size_t i = 0; i < dr_reducer_n_buckets(r->red); i++) {
      uint64_t start = t[i].start_us, end = t[i].end_us;
      if (r->hostw != NULL && dr_hostw_bucket_us(r->hostw, i, &start, &end))
        end = 0;
      if (end > 0)
        dr_trace_allreduce(r->trace, i,
                           r->cmp != NULL ? dr_cmp_bucket_bytes(r->cmp, i)
                                          : t[i].n_elems * sizeof(float),
                           t[i].ready_us, start, end);
    }
  }
  dr_reducer_stats_t rs;
  dr_reducer_stats(r->red, &rs);
  st->compute_ms = (m->backward_end_us - m->start_us - data_us) / 1e3;
  st->comm_ms = rs.comm_us / 1e3;
  st->exposed_ms = rs.exposed_us / 1e3;
  st->step_ms = (m->end_us - m->start_us) / 1e3;
}

/* DDPRUN_COLL_TEST_EXTRA: an all-reduce that the other ranks do not
 * issue, before the step's gradients'. The ranks are out of step from
 * here: this one, or the gradients' after it, fails. */
static int test_extra_allreduce(dr_run_t *r) {
  if (r->dev->test_allreduce != NULL)
    return r->dev->test_allreduce(r);
  float one = 1.0f;
  char err[256] = "";
  int rc = dr_pg_allreduce_sync(r->pg, &one, 1, DR_PG_AVG, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "extra all-reduce (test hook)", rc, err);
  return 0;
}

/* After the gradients' all-reduce, with the compressor: the rest of its
 * communication, then, with a loss scale, the ranks' agreement on an
 * overflow (each rank's own gradients before compression, and the
 * reduced result) in one MAX all-reduce, and the scaler's update, the
 * same on every rank. *skip: the optimizer must not take this step.
 * Returns an exit code. */
static int finish_compressed(dr_run_t *r, uint64_t step, int *skip) {
  int local_bad = 0, sum_bad = 0;
  char err[256] = "";
  *skip = 0;
  int rc = dr_cmp_finish(r->cmp, &local_bad, &sum_bad, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "gradient all-reduce", rc, err);
  if (r->ls.mode == DR_LS_NONE) {
    dr_cmp_commit(r->cmp, 1);
    return 0;
  }
  /* world - rank, so that the MAX names the lowest rank that overflowed. */
  float v[2] = {local_bad ? (float)(r->world - r->rank) : 0.0f,
                sum_bad ? 1.0f : 0.0f};
  rc = dr_pg_allreduce_sync(r->pg, v, 2, DR_PG_MAX, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "overflow all-reduce", rc, err);
  int overflow = v[0] > 0 || v[1] > 0;
  int64_t who = v[0] > 0 ? (int64_t)r->world - (int64_t)v[0] : -1;
  dr_cmp_commit(r->cmp, !overflow);
  double before = r->ls.scale;
  int u = dr_loss_scale_update(&r->ls, overflow, who, step);
  if (u == DR_LS_SKIP)
    *skip = 1;
  return u != 0 ? dr_train_overflow_said(r, step, before, u) : 0;
}

int dr_train_overflow_said(dr_run_t *r, uint64_t step, double before,
                           int verdict) {
  char where[64];
  if (r->ls.last_rank >= 0)
    snprintf(where, sizeof(where), "rank %lld's gradient",
             (long long)r->ls.last_rank);
  else
    snprintf(where, sizeof(where), "the reduced sum");
  if (verdict == DR_LS_EFLOOR) {
    fprintf(stderr, "train: rank %u: the gradients overflowed at step %llu "
            "(%s) with the loss scale at its floor of %g: they are not "
            "finite at any scale; stopping (exit %d: non-finite, not "
            "restarted). Lower --lr?\n", r->rank,
            (unsigned long long)step + 1, where, before, DR_TRAIN_ENONFINITE);
    return DR_TRAIN_ENONFINITE;
  }
  if (r->rank == 0)
    fprintf(stdout, "overflow at step %llu in %s: step skipped, loss "
            "scale %g -> %g (%llu skipped)\n",
            (unsigned long long)step + 1, where, before, r->ls.scale,
            (unsigned long long)r->ls.skipped);
  return 0;
}

/* One optimizer step: every micro-batch's forward and backward, the
 * gradients' all-reduce overlapping the backward passes, the optimizer. */
static int one_step(dr_run_t *r, uint64_t step, double *loss_out,
                    dr_step_time_t *st) {
  const dr_train_config_t *c = &r->c;
  const dr_train_device_t *dev = r->dev;
  uint64_t pos = step % r->steps_per_epoch, data_us = 0;
  double loss_sum = 0;
  char err[256] = "";
  int rc = dev->step_begin != NULL ? dev->step_begin(r, step) : 0;
  if (rc != 0)
    return rc;
  dr_train_lr_step(r, step);
  dr_step_marks_t m = {.start_us = dr_mono_us()};
  float scale = (float)r->ls.scale;
  /* A device that runs the step on its own clock compresses there too. */
  const int host_cmp = r->cmp != NULL && !dev->async;
  if (host_cmp) {
    dr_cmp_begin_step(r->cmp, step, scale);
    float poison = dr_fault_overflow_value(r->rank, r->world, step);
    if (poison != 0)
      dr_cmp_poison(r->cmp, poison);
  }
  dr_fault_spin(r->rank, step);
  if (dr_fault_coll_extra_due(r->rank, step) &&
      (rc = test_extra_allreduce(r)) != 0)
    return rc;
  for (uint32_t micro = 0; micro < c->grad_accum; micro++) {
    const uint64_t *idx =
        r->shard + (pos * c->grad_accum + micro) * (uint64_t)c->batch;
    uint64_t d0 = dr_mono_us();
    dev->fill(r, idx, c->batch);
    dr_fault_data_delay(r->rank);
    uint64_t d1 = dr_mono_us();
    data_us += d1 - d0;
    /* A device that runs the step on its own clock has its spans there;
     * the host's time on the batch goes on a track of its own. */
    dr_trace_span(r->trace, dev->async ? DR_TRACE_HOST : DR_TRACE_COMPUTE,
                  "data", d0, d1);
    int sync = micro + 1 == c->grad_accum;
    rc = dr_reducer_begin(r->red, sync, err, sizeof(err));
    if (rc != 0)
      return dr_train_comm_failed(r, "bucket rebuild", rc, err);
    double loss;
    if ((rc = dev->forward(r, &loss)) != 0)
      return rc;
    loss_sum += loss;
    m.backward_us = dr_mono_us();
    rc = dev->backward(r, scale / (float)c->grad_accum, micro > 0,
                       dr_reducer_mark_ready, r->red);
    if (rc != 0)
      return rc;
  }
  dr_reducer_end_backward(r->red);
  m.backward_end_us = dr_mono_us();
  rc = dr_reducer_wait(r->red, err, sizeof(err));
  if (rc != 0) {
    if (dev->abort != NULL)
      dev->abort(r);
    return dr_train_comm_failed(r, "gradient all-reduce", rc, err);
  }
  int skip = 0;
  if (host_cmp && (rc = finish_compressed(r, step, &skip)) != 0)
    return rc;
  /* Shared weights: the sums and the optimizer, one shard per rank. */
  dr_step_time_t shared = {0};
  if (r->hostw != NULL && (rc = dr_train_hostw_step(r, step, &shared)) != 0)
    return rc;
  m.comm_end_us = dr_mono_us();
  /* Before the weights change. 0 where the loss stays on the device: it
   * is checked when read back. */
  double loss = loss_sum / c->grad_accum;
  if (!isfinite(loss))
    return nonfinite(r, loss, "at", step);
  if (!skip && r->hostw == NULL && (rc = dev->optimize(r, step)) != 0)
    return rc;
  m.end_us = dr_mono_us();
  memset(st, 0, sizeof(*st));
  st->data_ms = data_us / 1e3;
  if (!dev->async)
    host_times(r, step, &m, data_us, st);
  st->comm_ms += shared.comm_ms;
  st->exposed_ms += shared.exposed_ms;
  if (host_cmp) {
    /* PowerSGD's second round starts after the backward pass: exposed. */
    double extra = dr_cmp_extra_comm_us(r->cmp) / 1e3;
    st->comm_ms += extra;
    st->exposed_ms += extra;
  }
  *loss_out = loss;
  return dr_train_plan_step(r, step, &m);
}

int dr_train_loop(dr_run_t *r, uint64_t start) {
  r->start_step = start;
  const dr_train_config_t *c = &r->c;
  double window_loss = 0;
  uint64_t window_n = 0, straggler_from = start;
  int logged = 0;
  int rc0 = dr_train_threads_open(r);
  if (rc0 != 0)
    return rc0;
  r->t0_us = dr_mono_us();
  for (uint64_t step = start; step < r->total_steps; step++) {
    double loss = 0;
    dr_train_threads_mark(r, dr_mono_us());
    /* This rank's share of the epoch, at its start or, in a run resumed
     * mid-epoch, at the first step: the same sample order either way. */
    if (step % r->steps_per_epoch == 0 || step == start)
      dr_sampler_shard(c->seed, step / r->steps_per_epoch,
                       dr_data_len(r->data, DR_SPLIT_TRAIN), r->rank,
                       r->world, r->shard);
    /* On a GPU the step is enqueued; its loss stays on the device until
     * it is logged, and its times are read then. */
    int rc = one_step(r, step, &loss, &r->times[step]);
    if (rc != 0)
      return rc;
    /* The step's events reach the file now: a rank killed later (its
     * peer failed, a test's kill) leaves a trace that parses. */
    dr_trace_flush(r->trace);
    dr_progress_report(r->progress, step + 1);
    window_loss += loss;
    window_n++;
    int last = step + 1 == r->total_steps;
    if ((step + 1) % c->log_every == 0 || last ||
        (r->log_first && step == start)) {
      /* Set: GCC 12 at -O3 cannot tell that global_mean() sets it
       * whenever it returns 0. */
      double mean = 0.0;
      if (r->dev->loss != NULL && (rc = r->dev->loss(r, &window_loss)) != 0)
        return rc;
      if (!isfinite(window_loss))
        return nonfinite(r, window_loss, "by", step);
      rc = global_mean(r, window_loss, (double)window_n, &mean);
      if (rc != 0)
        return rc;
      r->last_loss = mean;
      if (!logged)
        r->first_loss = mean;
      logged = 1;
      dr_report_progress(r, step, mean, dr_optim_lr(r->opt, step));
      window_loss = 0;
      window_n = 0;
    }
    if ((step + 1) % 100 == 0 || last) {
      if (r->dev->harvest != NULL && (rc = r->dev->harvest(r)) != 0)
        return rc;
      rc = dr_report_stragglers(r, straggler_from, step + 1);
      if (rc != 0)
        return rc;
      straggler_from = step + 1;
    }
    rc = dr_train_ckpt_after_step(r, step + 1);
    if (rc != 0)
      return rc;
    if ((rc = dr_train_preempt_after_step(r, step + 1)) != 0)
      return rc;
  }
  /* The last checkpoint is complete before the run reports its end. */
  int rc = dr_train_ckpt_finish(r, r->total_steps);
  dr_train_threads_mark(r, dr_mono_us());
  return rc;
}

/* Accuracy and loss over every held-out sample: rank r takes r,
 * r + world, ..., every sample once, no padding; then the sums across
 * ranks. */
int dr_train_evaluate(dr_run_t *r, double *accuracy, double *loss) {
  const dr_train_device_t *dev = r->dev;
  uint64_t n = dr_data_len(r->data, DR_SPLIT_EVAL);
  uint64_t cap = r->batch.cap;
  uint64_t *idx = malloc(cap * sizeof(uint64_t));
  if (idx == NULL)
    return dr_train_nomem(r, "the evaluation's sample indices");
  double correct = 0, loss_sum = 0, count = 0;
  int code = dev->eval_begin != NULL ? dev->eval_begin(r) : 0;
  for (uint64_t i = r->rank; code == 0 && i < n;) {
    uint32_t k = 0;
    for (; k < cap && i < n; k++, i += r->world)
      idx[k] = i;
    dr_data_fill(r->data, DR_SPLIT_EVAL, idx, k, &r->batch);
    code = dev->eval_batch(r, &correct, &loss_sum);
    count += k;
  }
  free(idx);
  if (code == 0 && dev->eval_end != NULL)
    code = dev->eval_end(r, &correct, &loss_sum);
  if (code != 0)
    return code;
  float buf[3] = {(float)correct, (float)loss_sum, (float)count};
  char err[256] = "";
  int rc = dr_pg_allreduce_sync(r->pg, buf, 3, DR_PG_SUM, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "evaluation all-reduce", rc, err);
  *accuracy = buf[2] > 0 ? buf[0] / buf[2] : 0;
  *loss = buf[2] > 0 ? buf[1] / buf[2] : 0;
  return 0;
}
