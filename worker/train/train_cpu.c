/* train's step and evaluation on the CPU: the host model (OpenBLAS) and
 * optimizer, each call done when it returns. See train_device.h. */
#include "train_device.h"

static void cpu_fill(dr_run_t *r, const uint64_t *idx, uint32_t n) {
  dr_data_fill(r->data, DR_SPLIT_TRAIN, idx, n, &r->batch);
}

static int cpu_forward(dr_run_t *r, double *loss) {
  *loss = dr_model_forward(r->model, &r->batch);
  return 0;
}

static int cpu_backward(dr_run_t *r, float scale, int accumulate,
                        dr_grad_ready_fn ready, void *arg) {
  dr_model_backward(r->model, scale, accumulate, ready, arg);
  return 0;
}

static int cpu_optimize(dr_run_t *r, uint64_t step) {
  dr_optim_step(r->opt, r->model, step);
  return 0;
}

static int cpu_eval_batch(dr_run_t *r, double *correct, double *loss_sum) {
  *loss_sum += (double)dr_model_forward(r->model, &r->batch) * r->batch.n;
  *correct += dr_model_correct(r->model, &r->batch);
  return 0;
}

const dr_train_device_t dr_train_cpu_device = {
    .name = "cpu",
    .async = 0,
    .fill = cpu_fill,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .optimize = cpu_optimize,
    .eval_batch = cpu_eval_batch,
};
