/* The bucket planner's model of gradient compression. See plan.h. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

int dr_plan_psgd_worth(double rows, double cols, unsigned rank) {
  if (rows < 2 || cols < 2 || rank == 0)
    return 0;
  return 2.0 * rank * (rows + cols) < rows * cols;
}

int dr_plan_compress_parse(const char *v, dr_plan_compress_t *c) {
  c->rank = 4;
  if (strcmp(v, "none") == 0) {
    c->kind = DR_PLAN_F32;
  } else if (strcmp(v, "fp16") == 0) {
    c->kind = DR_PLAN_FP16;
  } else if (strcmp(v, "bf16") == 0) {
    c->kind = DR_PLAN_BF16;
  } else if (strncmp(v, "powersgd", 8) == 0 && (v[8] == '\0' || v[8] == ':')) {
    c->kind = DR_PLAN_POWERSGD;
    if (v[8] == ':') {
      char *end;
      unsigned long r = strtoul(v + 9, &end, 10);
      if (end == v + 9 || *end != '\0' || r < 1 || r > 1024)
        return -1;
      c->rank = (unsigned)r;
    }
  } else {
    return -1;
  }
  return 0;
}

static double per(double amount, double rate) {
  return rate > 0 ? amount / rate : 0;
}

static int compressed(const dr_plan_param_t *p, const dr_plan_compress_t *c) {
  return c->kind == DR_PLAN_POWERSGD &&
         dr_plan_psgd_worth(p->rows, p->cols, c->rank);
}

/* 2 rows cols R: one of PowerSGD's three products. */
static double product_ms(const dr_plan_param_t *p, const dr_plan_compress_t *c) {
  return per(2.0 * p->rows * p->cols * c->rank, c->gemm_flops_per_ms);
}

double dr_plan_launch_ms(const dr_plan_param_t *p, size_t n,
                         const dr_plan_compress_t *c) {
  double t = 0;
  if (c == NULL || c->kind == DR_PLAN_F32)
    return 0;
  for (size_t k = 0; k < n; k++) {
    /* The cast; PowerSGD's M = g / scale + error, or the copy of an
     * uncompressed tensor; and P = M Q. */
    t += per(p[k].bytes, c->cast_bytes_per_ms);
    if (compressed(&p[k], c))
      t += product_ms(&p[k], c);
  }
  return t;
}

/* What bucket p[0..n) sends in each round and computes after them. */
static void bucket_work(const dr_plan_param_t *p, size_t n,
                        const dr_plan_compress_t *c, double *bytes1,
                        double *bytes2, double *between_ms, double *after_ms) {
  *bytes1 = *bytes2 = *between_ms = *after_ms = 0;
  for (size_t k = 0; k < n; k++) {
    if (c->kind == DR_PLAN_FP16 || c->kind == DR_PLAN_BF16) {
      *bytes1 += p[k].bytes / 2;
      *after_ms += per(p[k].bytes, c->cast_bytes_per_ms);
    } else if (compressed(&p[k], c)) {
      *bytes1 += 4.0 * p[k].rows * c->rank;
      *bytes2 += 4.0 * p[k].cols * c->rank;
      *between_ms += product_ms(&p[k], c);       /* Q = M^T P */
      *after_ms += product_ms(&p[k], c) +        /* P Q^T */
                   per(2 * p[k].bytes, c->cast_bytes_per_ms); /* error, copy */
    } else {
      *bytes1 += p[k].bytes;
      if (c->kind == DR_PLAN_POWERSGD)
        *after_ms += per(p[k].bytes, c->cast_bytes_per_ms);
    }
  }
}

void dr_plan_eval_params(const dr_plan_param_t *p, size_t n, double cap_bytes,
                         double first_cap_bytes, const dr_plan_cost_t *cost,
                         const dr_plan_compress_t *c,
                         const dr_plan_compress_t *measured,
                         dr_plan_result_t *out) {
  memset(out, 0, sizeof(*out));
  out->cap_bytes = cap_bytes;
  dr_plan_compress_t none = {DR_PLAN_F32, 0, 0, 0};
  if (c == NULL)
    c = &none;
  /* Bucket boundaries as dr_plan_group draws them. */
  double shift = 0, end1 = 0, comm = 0, largest = 0;
  double alpha = cost->alpha_ms, B = cost->bytes_per_ms;
  size_t first = 0, nb = 0;
  double bucket_bytes = 0, ready = 0;
  dr_plan_clock_t clk;
  dr_plan_clock_init(&clk, cost->overlap_cost);
  /* Second-round work per bucket, done after the last first round. */
  double *b2 = malloc((n > 0 ? n : 1) * 3 * sizeof(double));
  if (b2 == NULL)
    return;
  for (size_t k = 0; k <= n; k++) {
    double cap = nb == 0 ? first_cap_bytes : cap_bytes;
    int close = k == n ? k > first
                       : k > first && bucket_bytes + p[k].bytes > cap;
    if (close) {
      size_t m = k - first;
      double lc = dr_plan_launch_ms(p + first, m, c) -
                  dr_plan_launch_ms(p + first, m, measured);
      shift += lc;
      double bytes1, bytes2, between, after;
      bucket_work(p + first, m, c, &bytes1, &bytes2, &between, &after);
      double at = dr_plan_clock_at(&clk, ready + shift);
      double start = at > end1 ? at : end1;
      double dur = alpha + bytes1 / B;
      end1 = start + dur;
      dr_plan_clock_comm(&clk, end1);
      comm += dur;
      if (bytes1 > largest)
        largest = bytes1;
      b2[3 * nb] = bytes2;
      b2[3 * nb + 1] = between;
      b2[3 * nb + 2] = after;
      nb++;
      first = k;
      bucket_bytes = 0;
      ready = 0;
    }
    if (k == n)
      break;
    bucket_bytes += p[k].bytes;
    if (p[k].ready_ms > ready)
      ready = p[k].ready_ms;
  }
  double bwd = dr_plan_clock_at(&clk, cost->backward_ms + shift);
  /* The tail runs on the compute thread after the backward pass and the
   * first rounds: second rounds launched one by one, then each bucket's
   * work after its second round. */
  double t = end1 > bwd ? end1 : bwd, end2 = 0;
  int second = c->kind == DR_PLAN_POWERSGD;
  for (size_t i = 0; i < nb && second; i++) {
    t += b2[3 * i + 1];
    double start = t > end2 ? t : end2;
    double dur = alpha + b2[3 * i] / B;
    end2 = start + dur;
    comm += dur;
    b2[3 * i] = end2; /* when bucket i's second round ends */
  }
  double fin = t, tail = 0;
  for (size_t i = 0; i < nb; i++) {
    if (second && b2[3 * i] > fin)
      fin = b2[3 * i];
    fin += b2[3 * i + 2];
    tail += b2[3 * i + 2];
  }
  /* Nothing after the all-reduces: they end the communication. */
  if (!second && tail == 0)
    fin = end1;
  free(b2);
  out->n_buckets = nb;
  out->allreduce_ms = nb > 0 ? alpha + largest / B : 0;
  out->comm_ms = comm;
  out->finish_ms = fin;
  out->exposed_ms = fin > bwd ? fin - bwd : 0;
  out->hidden_frac = comm > 0 ? 1.0 - (out->exposed_ms < comm
                                            ? out->exposed_ms : comm) / comm
                              : 1.0;
  out->step_ms = cost->fixed_ms + (fin > bwd ? fin : bwd);
}
