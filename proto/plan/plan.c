/* The bucket planner's model. See plan.h. */
#include "plan.h"

#include <math.h>

void dr_plan_clock_init(dr_plan_clock_t *c, double overlap_cost) {
  c->kappa = overlap_cost > 0 ? overlap_cost : 0;
  c->t = c->w = c->comm_end = 0;
}

double dr_plan_clock_at(dr_plan_clock_t *c, double work) {
  if (c->kappa == 0)
    return work;
  if (work <= c->w)
    return c->t;
  /* The all-reduces in flight from t to comm_end (contiguous: each starts
   * at the later of its ready time and the previous one's end). */
  if (c->comm_end > c->t) {
    double span = (c->comm_end - c->t) / (1 + c->kappa);
    if (c->w + span >= work) {
      c->t += (work - c->w) * (1 + c->kappa);
      c->w = work;
      return c->t;
    }
    c->w += span;
    c->t = c->comm_end;
  }
  c->t += work - c->w;
  c->w = work;
  return c->t;
}

void dr_plan_clock_comm(dr_plan_clock_t *c, double end) {
  if (end > c->comm_end)
    c->comm_end = end;
}

void dr_plan_eval(const dr_plan_bucket_t *b, size_t n,
                  const dr_plan_cost_t *cost, dr_plan_result_t *out) {
  double end = 0, comm = 0, largest = 0;
  dr_plan_clock_t clk;
  dr_plan_clock_init(&clk, cost->overlap_cost);
  for (size_t i = 0; i < n; i++) {
    double dur = cost->alpha_ms + b[i].bytes / cost->bytes_per_ms;
    double ready = dr_plan_clock_at(&clk, b[i].ready_ms);
    double start = ready > end ? ready : end;
    end = start + dur;
    dr_plan_clock_comm(&clk, end);
    comm += dur;
    if (b[i].bytes > largest)
      largest = b[i].bytes;
  }
  double bwd = dr_plan_clock_at(&clk, cost->backward_ms);
  out->n_buckets = n;
  out->allreduce_ms = n > 0 ? cost->alpha_ms + largest / cost->bytes_per_ms : 0;
  out->comm_ms = comm;
  out->finish_ms = end;
  out->exposed_ms = end > bwd ? end - bwd : 0;
  out->hidden_frac = comm > 0 ? 1.0 - out->exposed_ms / comm : 1.0;
  out->step_ms = cost->fixed_ms + (end > bwd ? end : bwd);
}

size_t dr_plan_uniform(double total_bytes, double cap_bytes, double backward_ms,
                       dr_plan_bucket_t *b, size_t max_b) {
  if (!(total_bytes > 0) || !(cap_bytes > 0))
    return 0;
  double nb = ceil(total_bytes / cap_bytes);
  size_t n = (size_t)nb;
  for (size_t k = 0; k < n && k < max_b; k++) {
    double begin = (double)k * cap_bytes;
    double e = begin + cap_bytes < total_bytes ? begin + cap_bytes : total_bytes;
    b[k].bytes = e - begin;
    b[k].ready_ms = backward_ms * e / total_bytes;
  }
  return n;
}

size_t dr_plan_group(const double *bytes, const double *ready_ms, size_t n,
                     double cap_bytes, double first_cap_bytes,
                     dr_plan_bucket_t *b) {
  if (n == 0)
    return 0;
  size_t cur = 0, count = 0; /* the bucket being filled, its parameters */
  b[0].bytes = 0;
  b[0].ready_ms = 0;
  for (size_t k = 0; k < n; k++) {
    double cap = cur == 0 ? first_cap_bytes : cap_bytes;
    /* Close the bucket before a parameter that would overflow it. */
    if (count > 0 && b[cur].bytes + bytes[k] > cap) {
      cur++;
      count = 0;
      b[cur].bytes = 0;
      b[cur].ready_ms = 0;
    }
    b[cur].bytes += bytes[k];
    if (count == 0 || ready_ms[k] > b[cur].ready_ms)
      b[cur].ready_ms = ready_ms[k];
    count++;
  }
  return cur + 1;
}

size_t dr_plan_best(const dr_plan_result_t *r, size_t n) {
  double least = r[0].step_ms;
  for (size_t i = 1; i < n; i++)
    if (r[i].step_ms < least)
      least = r[i].step_ms;
  /* Steps this close are the model's noise, not a reason for more calls. */
  double tie = least + fabs(least) * DR_PLAN_TIE + 1e-9;
  size_t best = n;
  for (size_t i = 0; i < n; i++)
    if (r[i].step_ms <= tie &&
        (best == n || r[i].n_buckets < r[best].n_buckets))
      best = i;
  return best;
}

void dr_plan_fit(const double *bytes, const double *ms, size_t n,
                 double *alpha_ms, double *bytes_per_ms) {
  double mx = 0, mt = 0;
  for (size_t i = 0; i < n; i++) {
    mx += bytes[i];
    mt += ms[i];
  }
  mx /= (double)n;
  mt /= (double)n;
  double sxx = 0, sxt = 0;
  for (size_t i = 0; i < n; i++) {
    sxx += (bytes[i] - mx) * (bytes[i] - mx);
    sxt += (bytes[i] - mx) * (ms[i] - mt);
  }
  double slope = sxx > 0 ? sxt / sxx : 0; /* ms per byte */
  double alpha = mt - slope * mx;
  if (slope > 0 && alpha < 0) {
    double xx = 0, xt = 0;
    for (size_t i = 0; i < n; i++) {
      xx += bytes[i] * bytes[i];
      xt += bytes[i] * ms[i];
    }
    slope = xx > 0 ? xt / xx : 0;
    alpha = 0;
  }
  if (!(slope > 0)) {
    *alpha_ms = mt > 0 ? mt : 0;
    *bytes_per_ms = DR_PLAN_FAST_BPM;
    return;
  }
  *alpha_ms = alpha;
  *bytes_per_ms = 1.0 / slope;
}
