/* What train prints: the per-rank environment summary, rank 0's progress
 * lines, straggler reports and, at the end, the ranks' peak memory and the
 * final line. */
#include "train.h"

#include "gpu_train.h"
#include "peak_mem.h"
#include "stats.h"
#include "train_device.h"
#include "train_threads.h"
#include "mono.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dr_report_summary(dr_run_t *r) {
  const dr_train_config_t *c = &r->c;
  char buckets[512];
  snprintf(buckets, sizeof(buckets), "%s", dr_reducer_describe(r->red));
  if (r->cmp != NULL) {
    char ls[64];
    size_t o = strlen(buckets);
    snprintf(buckets + o, sizeof(buckets) - o, ", compression %s, loss "
             "scale %s", dr_cmp_describe(r->cmp),
             dr_loss_scale_describe(&r->ls, ls, sizeof(ls)));
  }
  fprintf(stderr,
          "train: rank %u: local rank %u, world %u, host %s, device %s, "
          "backend %s (%s), BLAS %s (%d threads), model %zu parameters, "
          "%s, data %s, batch %u x %u ranks x %u accum = %llu, %llu steps\n",
          r->rank, r->local_rank, r->world, r->host,
          r->dev->name, r->gpu != NULL ? "nccl for gradients, cpu" : "cpu",
          dr_pg_describe(r->pg),
          openblas_get_config(), openblas_get_num_threads(),
          dr_model_n_elems(r->model), buckets, c->data, c->batch, r->world,
          c->grad_accum, (unsigned long long)r->global_batch,
          (unsigned long long)r->total_steps);
  if (dr_pg_inline(r->pg) && r->local_rank == 0)
    fprintf(stderr, "train: rank %u: %s; the gradients' all-reduce runs "
            "after the backward pass (--comm-schedule thread to overlap "
            "anyway)\n", r->rank, dr_pg_schedule_note(r->pg));
  else if (dr_pg_schedule_note(r->pg)[0] != '\0' && r->local_rank == 0)
    fprintf(stderr, "train: rank %u: %s\n", r->rank,
            dr_pg_schedule_note(r->pg));
}

double dr_report_median_step_ms(const dr_run_t *r, uint64_t from,
                                uint64_t to) {
  if (to <= from)
    return 0;
  double *v = malloc((to - from) * sizeof(double));
  if (v == NULL)
    return 0;
  for (uint64_t i = from; i < to; i++)
    v[i - from] = r->times[i].step_ms;
  double m = dr_median(v, to - from);
  free(v);
  return m;
}

const char *dr_report_scale(const dr_run_t *r, const char *sep, char *buf,
                            size_t n) {
  char who[32] = "none";
  if (r->ls.last_rank >= 0)
    snprintf(who, sizeof(who), "%lld", (long long)r->ls.last_rank);
  else if (r->ls.last_rank == -1)
    snprintf(who, sizeof(who), "sum");
  snprintf(buf, n, "%sloss_scale=%g%sskipped=%llu%soverflow_rank=%s", sep,
           r->ls.scale, sep, (unsigned long long)r->ls.skipped, sep, who);
  return buf;
}

void dr_report_progress(dr_run_t *r, uint64_t step, double loss, float lr) {
  if (r->rank != 0)
    return;
  uint64_t from = step + 1 >= r->c.log_every ? step + 1 - r->c.log_every : 0;
  if (from < r->start_step)
    from = r->start_step; /* steps before a resume did not run here */
  dr_step_time_t avg = {0, 0, 0, 0, 0};
  for (uint64_t i = from; i <= step; i++) {
    avg.compute_ms += r->times[i].compute_ms;
    avg.comm_ms += r->times[i].comm_ms;
    avg.exposed_ms += r->times[i].exposed_ms;
    avg.step_ms += r->times[i].step_ms;
  }
  double n = (double)(step + 1 - from);
  double elapsed_s = (dr_mono_us() - r->t0_us) / 1e6;
  double per_step = elapsed_s / (double)(step + 1 - r->start_step);
  double eta = per_step * (double)(r->total_steps - step - 1);
  char scale[128] = "";
  if (r->ls.mode != DR_LS_NONE)
    dr_report_scale(r, " ", scale, sizeof(scale));
  fprintf(stdout,
          "step %llu/%llu loss %.4f lr %.3g samples/s %.0f step %.2f ms "
          "(compute %.2f, comm %.2f, exposed comm %.2f)%s eta %.0fs\n",
          (unsigned long long)step + 1, (unsigned long long)r->total_steps,
          loss, lr, r->global_batch / (avg.step_ms / n / 1e3), avg.step_ms / n,
          avg.compute_ms / n, avg.comm_ms / n, avg.exposed_ms / n, scale, eta);
}

/* Gathers every rank's mean data and compute time over [from, to) and
 * names a rank more than 20% slower than the median. */
int dr_report_stragglers(dr_run_t *r, uint64_t from, uint64_t to) {
  if (to <= from)
    return 0;
  float mine[2] = {0, 0};
  for (uint64_t i = from; i < to; i++) {
    mine[0] += (float)r->times[i].data_ms;
    mine[1] += (float)r->times[i].compute_ms;
  }
  mine[0] /= (float)(to - from);
  mine[1] /= (float)(to - from);
  float *all = calloc(2 * (size_t)r->world, sizeof(float));
  if (all == NULL)
    return dr_train_nomem(r, "the ranks' step times");
  char err[256] = "";
  int rc = dr_pg_allgather_sync(r->pg, mine, sizeof(mine), all, err, sizeof(err));
  if (rc != 0) {
    free(all);
    return dr_train_comm_failed(r, "straggler all-gather", rc, err);
  }
  if (r->rank == 0 && r->world > 1) {
    double *tot = malloc(r->world * sizeof(double));
    double *sorted = malloc(r->world * sizeof(double));
    if (tot != NULL && sorted != NULL) {
      for (uint32_t k = 0; k < r->world; k++)
        sorted[k] = tot[k] = all[2 * k] + all[2 * k + 1];
      double med = dr_median(sorted, r->world);
      fprintf(stdout, "ranks, steps %llu-%llu, mean ms data/compute:",
              (unsigned long long)from + 1, (unsigned long long)to);
      for (uint32_t k = 0; k < r->world; k++)
        fprintf(stdout, " %u:%.2f/%.2f", k, all[2 * k], all[2 * k + 1]);
      fprintf(stdout, "\n");
      for (uint32_t k = 0; k < r->world; k++)
        if (med > 0 && tot[k] > 1.2 * med)
          fprintf(stdout, "straggler: rank %u takes %.2f ms per step for "
                  "data and compute, %.0f%% over the median %.2f ms\n",
                  k, tot[k], (tot[k] / med - 1) * 100, med);
    }
    free(tot);
    free(sorted);
  }
  free(all);
  return 0;
}

/* What every rank gives the final report, in one all-gather: the weights'
 * checksum and its peak memory (bytes; GPU 0 on the CPU). */
typedef struct {
  uint32_t crc;
  uint32_t pad;
  uint64_t rss_bytes;
  uint64_t gpu_bytes;
} rank_end_t;

/* Rank 0's peak, and the ranks' maximum and median, in MiB. */
typedef struct {
  double mine, max, median;
} peak_t;

static int peak_of(const rank_end_t *all, uint32_t world, int gpu,
                   peak_t *p) {
  double *v = malloc(world * sizeof(double));
  if (v == NULL)
    return -1;
  p->max = 0;
  for (uint32_t k = 0; k < world; k++) {
    v[k] = (double)(gpu ? all[k].gpu_bytes : all[k].rss_bytes) / 1048576.0;
    if (v[k] > p->max)
      p->max = v[k];
  }
  p->mine = v[0];
  p->median = dr_median(v, world);
  free(v);
  return 0;
}

/* Rank 0 more than 10% above the median of the ranks: the job must be
 * sized by rank 0's peak, not the typical rank's. */
static void peak_note(const char *what, const peak_t *p) {
  if (p->median <= 0 || p->mine <= 1.1 * p->median)
    return;
  fprintf(stderr, "train: rank 0 %s at %.1f MiB, %.0f%% above the median "
          "%.1f MiB of the ranks: rank 0 holds extra state (checkpoint "
          "writing, evaluation, logging); size the job by rank 0's peak\n",
          what, p->mine, (p->mine / p->median - 1) * 100, p->median);
}

int dr_report_final(dr_run_t *r, double accuracy, double eval_loss) {
  if (r->ls.mode != DR_LS_NONE) {
    /* Each rank's own: the agreement on overflows keeps them equal. */
    char ls[128];
    fprintf(stderr, "train: rank %u: %s\n", r->rank,
            dr_report_scale(r, " ", ls, sizeof(ls)) + 1);
  }
  rank_end_t mine = {dr_model_crc32(r->model), 0, dr_peak_rss_bytes(),
                     dr_gpu_train_peak_bytes(r)};
  uint32_t crc = mine.crc;
  rank_end_t *all = calloc(r->world, sizeof(*all));
  if (all == NULL)
    return dr_train_nomem(r, "the ranks' weight checksums");
  char err[256] = "";
  int rc = dr_pg_allgather_sync(r->pg, &mine, sizeof(mine), all, err,
                                sizeof(err));
  if (rc != 0) {
    free(all);
    return dr_train_comm_failed(r, "checksum all-gather", rc, err);
  }
  int same = 1;
  for (uint32_t k = 0; k < r->world; k++)
    same &= all[k].crc == crc;
  if (!same) {
    free(all);
    fprintf(stderr, "train: rank %u: the final weights differ between ranks "
            "(this rank: 0x%08x)\n", r->rank, crc);
    return DR_TRAIN_EFAIL;
  }
  if (r->rank != 0) {
    free(all);
    return 0;
  }
  peak_t rss, gpu = {0, 0, 0};
  int on_gpu = r->gpu != NULL;
  if (peak_of(all, r->world, 0, &rss) != 0 ||
      (on_gpu && peak_of(all, r->world, 1, &gpu) != 0)) {
    free(all);
    return dr_train_nomem(r, "the ranks' peak memory");
  }
  if (r->world > 1) {
    fprintf(stdout, "ranks, peak MiB %s:", on_gpu ? "RSS/GPU" : "RSS");
    for (uint32_t k = 0; k < r->world; k++) {
      fprintf(stdout, " %u:%.1f", k, all[k].rss_bytes / 1048576.0);
      if (on_gpu)
        fprintf(stdout, "/%.1f", all[k].gpu_bytes / 1048576.0);
    }
    fprintf(stdout, "\n");
  }
  free(all);
  peak_note("peaks", &rss);
  if (on_gpu)
    peak_note("peaks in GPU memory", &gpu);
  if (r->c.dump_weights != NULL) {
    FILE *f = fopen(r->c.dump_weights, "wb");
    int ok = f != NULL;
    for (size_t i = 0; ok && i < dr_model_n_params(r->model); i++) {
      dr_param_t *p = dr_model_param(r->model, i);
      ok = fwrite(p->w, sizeof(float), p->n_elems, f) == p->n_elems;
    }
    if (f != NULL && fclose(f) != 0)
      ok = 0;
    if (!ok) {
      fprintf(stderr, "train: cannot write --dump-weights %s\n",
              r->c.dump_weights);
      return DR_TRAIN_ECONFIG;
    }
  }
  double total_s = (dr_mono_us() - r->t0_us) / 1e6;
  /* Figures over the steps this run executed (after a resume, fewer). */
  uint64_t ran = r->total_steps - r->start_step;
  double comm = 0, exposed = 0;
  for (uint64_t i = r->start_step; i < r->total_steps; i++) {
    comm += r->times[i].comm_ms;
    exposed += r->times[i].exposed_ms;
  }
  double med = dr_report_median_step_ms(r, r->start_step, r->total_steps);
  char gpu_done[160] = "", gpu_final[160] = "", extra[256] = "";
  char threads[512], ckpt[128];
  dr_train_threads_final(r, threads, sizeof(threads));
  dr_train_ckpt_fields(r, ckpt, sizeof(ckpt));
  if (r->cmp != NULL || r->cmpc.kind != DR_CMP_NONE) {
    char name[32];
    size_t o = (size_t)snprintf(extra, sizeof(extra), " grad_compress=%s",
                                dr_cmp_name(r->cmpc.kind, r->cmpc.rank, name,
                                            sizeof(name)));
    if (r->ls.mode != DR_LS_NONE)
      dr_report_scale(r, " ", extra + o, sizeof(extra) - o);
  }
  if (on_gpu) {
    snprintf(gpu_done, sizeof(gpu_done), ", peak GPU memory %.1f MiB "
             "(ranks: max %.1f, median %.1f)", gpu.mine, gpu.max, gpu.median);
    snprintf(gpu_final, sizeof(gpu_final), " peak_gpu_mib=%.1f "
             "peak_gpu_max_mib=%.1f peak_gpu_median_mib=%.1f", gpu.mine,
             gpu.max, gpu.median);
  }
  fprintf(stdout,
          "done: %llu steps in %.2f s, final loss %.4f, eval loss %.4f, eval "
          "accuracy %.4f, peak RSS %.1f MiB (ranks: max %.1f, median %.1f)"
          "%s\n",
          (unsigned long long)r->total_steps, total_s, r->last_loss, eval_loss,
          accuracy, rss.mine, rss.max, rss.median, gpu_done);
  /* New fields go at the end: scripts read these by name and position. */
  fprintf(stdout,
          "final loss=%.6f accuracy=%.6f eval_loss=%.6f steps=%llu "
          "median_step_ms=%.3f samples_per_s=%.1f comm_ms=%.3f "
          "exposed_comm_ms=%.3f hidden_frac=%.3f world=%u weights_crc32=0x%08x "
          "peak_rss_mib=%.1f peak_rss_max_mib=%.1f peak_rss_median_mib=%.1f"
          "%s%s%s%s\n",
          r->last_loss, accuracy, eval_loss, (unsigned long long)r->total_steps,
          med, med > 0 ? r->global_batch / (med / 1e3) : 0.0,
          comm / (double)(ran ? ran : 1), exposed / (double)(ran ? ran : 1),
          r->world > 1 && comm > 0 && exposed < comm ? 1.0 - exposed / comm
                                                      : 0.0,
          r->world, crc, rss.mine, rss.max, rss.median, gpu_final, extra,
          threads, ckpt);
  return 0;
}
