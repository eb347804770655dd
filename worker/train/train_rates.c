/* The compute rates the bucket planner charges gradient compression with
 * (plan.h): PowerSGD's products and the elementwise passes over the
 * gradients, measured on this host at the model's own sizes. */
#include "train_plan.h"

#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "powersgd.h"
#include "mono.h"

#define REPS 3

/* Rank 0's measurement, so that the plan is rank 0's like the rest of
 * the profile. The fastest of REPS runs, after a warm-up. */
void dr_train_rates(const dr_run_t *r, dr_plan_compress_t *c) {
  memset(c, 0, sizeof(*c));
  c->kind = (dr_plan_kind_t)r->cmpc.kind;
  c->rank = r->cmpc.rank;
  if (r->cmpc.kind == DR_CMP_NONE)
    return;
  /* The largest gradient: the passes stream it as the run does. */
  size_t rows = 1, cols = 1;
  for (size_t i = 0; i < dr_model_n_params(r->model); i++) {
    const dr_param_t *p = dr_model_param(r->model, i);
    if (p->n_elems > rows * cols) {
      rows = p->rows;
      cols = p->cols;
    }
  }
  size_t n = rows * cols, R = r->cmpc.rank;
  float *m = calloc(n, sizeof(float)), *e = calloc(n, sizeof(float));
  uint16_t *h = calloc(n, sizeof(uint16_t));
  float *q = calloc(cols * R, sizeof(float)), *pp = calloc(rows * R, 4);
  if (m == NULL || e == NULL || h == NULL || q == NULL || pp == NULL)
    goto out;
  for (size_t i = 0; i < n; i++)
    m[i] = (float)(i % 97) * 0.01f;
  for (size_t i = 0; i < cols * R; i++)
    q[i] = (float)(i % 13) * 0.1f;
  double best_pass = 0, best_gemm = 0;
  for (int k = 0; k <= REPS; k++) {
    uint64_t t0 = dr_mono_us();
    if (r->cmpc.kind == DR_CMP_FP16)
      dr_f32_to_f16_scaled(m, 0.5f, h, n);
    else if (r->cmpc.kind == DR_CMP_BF16)
      dr_f32_to_bf16_scaled(m, 0.5f, h, n);
    else
      for (size_t i = 0; i < n; i++)
        e[i] = m[i] * 0.5f + e[i];
    uint64_t t1 = dr_mono_us();
    double pass = (double)(t1 - t0) / 1e3;
    if (k > 0 && (best_pass == 0 || pass < best_pass))
      best_pass = pass;
    if (r->cmpc.kind != DR_CMP_POWERSGD || !dr_psgd_worth(rows, cols, R))
      continue;
    dr_psgd_mq(m, rows, cols, q, R, pp);
    double gemm = (double)(dr_mono_us() - t1) / 1e3;
    if (k > 0 && (best_gemm == 0 || gemm < best_gemm))
      best_gemm = gemm;
  }
  /* A pass too short for the clock is as good as free. */
  c->cast_bytes_per_ms = best_pass > 0 ? 4.0 * (double)n / best_pass : 0;
  c->gemm_flops_per_ms =
      best_gemm > 0 ? 2.0 * (double)n * (double)R / best_gemm : 0;
out:
  free(m);
  free(e);
  free(h);
  free(q);
  free(pp);
}
