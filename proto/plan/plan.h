/* The bucket planner: predicts the step time of a data-parallel step for a
 * bucket size, from when each gradient becomes ready and what an
 * all-reduce costs. Pure arithmetic, no I/O (train and `ddprun plan` share
 * it).
 *
 * The model. Buckets are all-reduced one at a time, in bucket order. A
 * bucket is ready when its last gradient is ready; its all-reduce starts at
 * the later of its ready time and the end of the previous all-reduce, and
 * takes alpha + bytes / B. The communication ends with the last
 * all-reduce; the step takes
 *
 *     fixed + max(backward end, end of the last all-reduce)
 *
 * where fixed is what the step spends outside the backward pass and its
 * communication (data, forward, optimizer). Exposed communication is the
 * part after the backward end, max(0, finish - backward end); the hidden
 * fraction is 1 - exposed / (sum of all-reduce times).
 *
 * Contention. Where the communication competes with the backward pass
 * for the same cores (a CPU backend on few cores), the backward pass
 * slows while an all-reduce runs: overlap_cost is the milliseconds it
 * loses per millisecond of all-reduce during it. The gradients' ready
 * times and the backward end are then the profile's (uncontended) times
 * stretched by 1 + overlap_cost wherever an all-reduce is in flight. 0:
 * no contention (a GPU, or spare cores).
 *
 * Units: bytes, milliseconds, bytes per millisecond. Times of gradients
 * are relative to the start of the backward pass.
 */
#ifndef DR_PLAN_H
#define DR_PLAN_H

#include <stddef.h>

/* One bucket as the model sees it. */
typedef struct {
  double bytes;
  double ready_ms;
} dr_plan_bucket_t;

/* The cost of communication and the parts of the step around it. */
typedef struct {
  double alpha_ms;          /* fixed cost per all-reduce */
  double bytes_per_ms;      /* B; > 0 */
  double backward_ms;       /* end of the backward pass */
  double fixed_ms;          /* data + forward + optimizer */
  double overlap_cost;      /* ms of backward lost per ms of overlap */
} dr_plan_cost_t;

/* The backward pass's clock under contention: maps the uncontended time
 * of the backward pass (work, ms) to the step's (wall, ms) while the
 * all-reduces scheduled so far (in flight until comm_end) slow it. */
typedef struct {
  double kappa, t, w, comm_end;
} dr_plan_clock_t;

void dr_plan_clock_init(dr_plan_clock_t *c, double overlap_cost);
/* The wall time at which the backward pass reaches work ms (ready times
 * in order; an earlier one than the last maps to the last's wall time).
 * With no contention: work itself. */
double dr_plan_clock_at(dr_plan_clock_t *c, double work);
/* An all-reduce now runs until end (after the previous ones). */
void dr_plan_clock_comm(dr_plan_clock_t *c, double end);

/* The prediction for one bucket size. */
typedef struct {
  double cap_bytes;         /* the candidate (0 when not from a cap) */
  size_t n_buckets;
  double allreduce_ms;      /* of the largest bucket: alpha + max / B */
  double comm_ms;           /* sum of all all-reduce times */
  double finish_ms;         /* end of the last all-reduce (0: none) */
  double exposed_ms;        /* max(0, finish - backward end) */
  double hidden_frac;       /* 1 - exposed / comm; 1 without comm */
  double step_ms;           /* fixed + max(backward end, finish) */
} dr_plan_result_t;

/* Runs the model over buckets b[0..n) in order. */
void dr_plan_eval(const dr_plan_bucket_t *b, size_t n,
                  const dr_plan_cost_t *cost, dr_plan_result_t *out);

/* Gradient bytes produced at a uniform rate over the backward pass, cut
 * into buckets of exactly cap_bytes (the last one smaller). Writes at most
 * max_b buckets and returns how many there are (ceil(total / cap)); with
 * more than max_b, nothing past max_b is written. total_bytes, cap_bytes
 * and backward_ms > 0 give a bucket k ending at byte e ready at
 * backward_ms * e / total_bytes. */
size_t dr_plan_uniform(double total_bytes, double cap_bytes, double backward_ms,
                       dr_plan_bucket_t *b, size_t max_b);

/* Parameters in the order they fill buckets (bytes[k], ready_ms[k] for the
 * k-th of them), grouped as the reducer groups them (dr_bucket_plan): the
 * first bucket up to first_cap_bytes, the others up to cap_bytes, a bucket
 * closed before a parameter that would overflow it, so a parameter larger
 * than the cap sits alone. A bucket is ready at the latest ready time of
 * its parameters. b holds n entries; returns the number of buckets. */
size_t dr_plan_group(const double *bytes, const double *ready_ms, size_t n,
                     double cap_bytes, double first_cap_bytes,
                     dr_plan_bucket_t *b);

/* Index of the best result of r[0..n): the shortest step; of the steps
 * within DR_PLAN_TIE of the shortest (a tie: closer than the model can
 * tell), the one with the fewest buckets, then the earlier one. n >= 1. */
#define DR_PLAN_TIE 0.001
size_t dr_plan_best(const dr_plan_result_t *r, size_t n);

/* Fits t = alpha + bytes / B to n measured all-reduces (bytes[i] took
 * ms[i]) by least squares. A negative intercept becomes alpha = 0 with the
 * slope refitted through the origin; a slope that is not positive (times
 * that do not grow with size) gives B = DR_PLAN_FAST_BPM and alpha the
 * mean time. n >= 1. */
#define DR_PLAN_FAST_BPM 1e15
void dr_plan_fit(const double *bytes, const double *ms, size_t n,
                 double *alpha_ms, double *bytes_per_ms);

/* ---- gradient compression (plan_compress.c) ---------------------------
 *
 * The reducer forms its buckets by fp32 bytes whatever the compression;
 * what changes is what each bucket sends and the work around it:
 *
 *   fp16, bf16  one all-reduce of half the bytes; the cast at launch
 *               (on the compute thread, which delays the rest of the
 *               backward pass) and the cast back after the last one.
 *   powersgd    per bucket a first all-reduce of its uncompressed
 *               tensors and each matrix's P (rows x R floats), launched
 *               at ready time after P = M Q; after the last first round,
 *               bucket by bucket, Q = M^T P and a second all-reduce of
 *               the Q's (cols x R floats); after each, M = P Q^T and the
 *               error feedback. A matrix is compressed when
 *               dr_plan_psgd_worth says so.
 *
 * Compute is charged at gemm_flops_per_ms (2 rows cols R per product)
 * and cast_bytes_per_ms (fp32 bytes converted, copied or added once);
 * a rate of 0 charges nothing. */
typedef enum {
  DR_PLAN_F32 = 0,
  DR_PLAN_FP16 = 1,
  DR_PLAN_BF16 = 2,
  DR_PLAN_POWERSGD = 3
} dr_plan_kind_t;

typedef struct {
  dr_plan_kind_t kind;
  unsigned rank;             /* PowerSGD's R */
  double gemm_flops_per_ms;  /* PowerSGD's products */
  double cast_bytes_per_ms;  /* elementwise passes over fp32 bytes */
} dr_plan_compress_t;

/* One parameter in fill order: bytes (fp32), ready time, and its shape
 * (rows x cols; cols 1 for a vector). */
typedef struct {
  double bytes, ready_ms, rows, cols;
} dr_plan_param_t;

/* 1 when PowerSGD sends a rows x cols gradient compressed at rank:
 * rank (rows + cols) below half of rows x cols (train's rule too). */
int dr_plan_psgd_worth(double rows, double cols, unsigned rank);

/* "none", "fp16", "bf16", "powersgd", "powersgd:R" into kind and rank
 * (rates untouched); 0, or -1 for anything else. */
int dr_plan_compress_parse(const char *v, dr_plan_compress_t *c);

/* The launch-time compute (at ready time, on the compute thread) of the
 * parameters p[0..n) of one bucket under c, in ms. */
double dr_plan_launch_ms(const dr_plan_param_t *p, size_t n,
                         const dr_plan_compress_t *c);

/* Groups p[0..n) as dr_plan_group does and runs the model with c. The
 * launch compute of c is added to the backward pass and to the buckets'
 * ready times, less that of `measured` (the compression the ready times
 * and the backward pass were measured with; NULL: none), so a profile
 * measured with the same setting is not charged twice. */
void dr_plan_eval_params(const dr_plan_param_t *p, size_t n, double cap_bytes,
                         double first_cap_bytes, const dr_plan_cost_t *cost,
                         const dr_plan_compress_t *c,
                         const dr_plan_compress_t *measured,
                         dr_plan_result_t *out);

#endif /* DR_PLAN_H */
