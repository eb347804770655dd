/* The training step loop: sampler, forward, backward with bucketed
 * all-reduce, optimizer; then the evaluation across ranks. */
#include "train.h"

#include "gpu_train.h"
#include "progress.h"
#include "train_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t dr_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void trace_buckets(dr_run_t *r) {
  if (r->trace == NULL)
    return;
  const dr_bucket_times_t *t = dr_reducer_bucket_times(r->red);
  for (size_t i = 0; i < dr_reducer_n_buckets(r->red); i++) {
    char name[64];
    snprintf(name, sizeof(name), "allreduce bucket %zu (%.2f MiB)", i,
             t[i].n_elems * 4.0 / 1048576.0);
    if (t[i].end_us > 0)
      dr_trace_span(r->trace, DR_TRACE_COMM, name, t[i].start_us, t[i].end_us);
  }
}

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

static int one_step(dr_run_t *r, uint64_t step, double *loss_out,
                    dr_step_time_t *st) {
  const dr_train_config_t *c = &r->c;
  uint64_t pos = step % r->steps_per_epoch;
  uint64_t t_start = dr_now_us(), data_us = 0, t_bwd0 = 0;
  double loss_sum = 0;
  char err[256] = "";
  for (uint32_t micro = 0; micro < c->grad_accum; micro++) {
    const uint64_t *idx =
        r->shard + (pos * c->grad_accum + micro) * (uint64_t)c->batch;
    uint64_t d0 = dr_now_us();
    dr_data_fill(r->data, DR_SPLIT_TRAIN, idx, c->batch, &r->batch);
    data_us += dr_now_us() - d0;
    int sync = micro + 1 == c->grad_accum;
    int rc = dr_reducer_begin(r->red, sync, err, sizeof(err));
    if (rc != 0)
      return dr_train_comm_failed(r, "bucket rebuild", rc, err);
    loss_sum += dr_model_forward(r->model, &r->batch);
    t_bwd0 = dr_now_us();
    dr_model_backward(r->model, 1.0f / (float)c->grad_accum, micro > 0,
                      dr_reducer_mark_ready, r->red);
  }
  dr_reducer_end_backward(r->red);
  uint64_t t_bwd = dr_now_us();
  int rc = dr_reducer_wait(r->red, err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "gradient all-reduce", rc, err);
  uint64_t t_comm = dr_now_us();
  double loss = loss_sum / c->grad_accum;
  if (!isfinite(loss)) {
    fprintf(stderr, "train: rank %u: the loss is %f at step %llu; stopping "
            "(exit %d: non-finite loss, not restarted). Lower --lr?\n",
            r->rank, loss, (unsigned long long)step + 1, DR_TRAIN_ENONFINITE);
    return DR_TRAIN_ENONFINITE;
  }
  dr_optim_step(r->opt, r->model, step);
  uint64_t t_end = dr_now_us();
  if (r->trace != NULL) {
    dr_trace_span(r->trace, DR_TRACE_COMPUTE, "optimizer", t_comm, t_end);
    trace_buckets(r);
  }
  dr_reducer_stats_t rs;
  dr_reducer_stats(r->red, &rs);
  st->data_ms = data_us / 1e3;
  st->compute_ms = (t_bwd - t_start - data_us) / 1e3;
  st->comm_ms = rs.comm_us / 1e3;
  st->exposed_ms = rs.exposed_us / 1e3;
  st->step_ms = (t_end - t_start) / 1e3;
  *loss_out = loss;
  dr_step_marks_t marks = {t_start, t_bwd0, t_bwd, t_comm, t_end};
  return dr_train_plan_step(r, step, &marks);
}

int dr_train_loop(dr_run_t *r, uint64_t start) {
  r->start_step = start;
  const dr_train_config_t *c = &r->c;
  double window_loss = 0;
  uint64_t window_n = 0, straggler_from = start;
  r->t0_us = dr_now_us();
  for (uint64_t step = start; step < r->total_steps; step++) {
    double loss = 0;
    /* This rank's share of the epoch, at its start or, in a run resumed
     * mid-epoch, at the first step: the same sample order either way. */
    if (step % r->steps_per_epoch == 0 || step == start)
      dr_sampler_shard(c->seed, step / r->steps_per_epoch,
                       dr_data_len(r->data, DR_SPLIT_TRAIN), r->rank,
                       r->world, r->shard);
    /* On a GPU the step is enqueued; its loss stays on the device until
     * it is logged, and its times are read then. */
    int rc = r->gpu != NULL ? dr_gpu_train_step(r, step, &r->times[step])
                            : one_step(r, step, &loss, &r->times[step]);
    if (rc != 0)
      return rc;
    dr_progress_report(r->progress, step + 1);
    window_loss += loss;
    window_n++;
    int last = step + 1 == r->total_steps;
    if ((step + 1) % c->log_every == 0 || last) {
      double mean;
      if (r->gpu != NULL && (rc = dr_gpu_train_loss(r, &window_loss)) != 0)
        return rc;
      rc = global_mean(r, window_loss, (double)window_n, &mean);
      if (rc != 0)
        return rc;
      r->last_loss = mean;
      dr_report_progress(r, step, mean, dr_optim_lr(r->opt, step));
      window_loss = 0;
      window_n = 0;
    }
    if ((step + 1) % 100 == 0 || last) {
      if (r->gpu != NULL && (rc = dr_gpu_train_harvest(r)) != 0)
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
  return 0;
}

/* This rank's share of the held-out split on the CPU: correct
 * predictions, loss sum and samples. Rank r takes r, r + world, ...: every
 * sample once, no padding. */
static int evaluate_cpu(dr_run_t *r, double *correct, double *loss_sum,
                        double *count) {
  uint64_t n = dr_data_len(r->data, DR_SPLIT_EVAL);
  uint64_t cap = r->batch.cap;
  uint64_t *idx = malloc(cap * sizeof(uint64_t));
  if (idx == NULL)
    return dr_train_nomem(r, "the evaluation's sample indices");
  uint64_t i = r->rank;
  while (i < n) {
    uint32_t k = 0;
    for (; k < cap && i < n; k++, i += r->world)
      idx[k] = i;
    dr_data_fill(r->data, DR_SPLIT_EVAL, idx, k, &r->batch);
    *loss_sum += (double)dr_model_forward(r->model, &r->batch) * k;
    *correct += dr_model_correct(r->model, &r->batch);
    *count += k;
  }
  free(idx);
  return 0;
}

int dr_train_evaluate(dr_run_t *r, double *accuracy, double *loss) {
  double correct = 0, loss_sum = 0, count = 0;
  int code = r->gpu != NULL
                 ? dr_gpu_train_evaluate(r, &correct, &loss_sum, &count)
                 : evaluate_cpu(r, &correct, &loss_sum, &count);
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
