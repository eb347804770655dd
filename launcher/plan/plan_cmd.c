/* `ddprun plan`: predicts the step time for a list of bucket sizes, from
 * pen-and-paper numbers (gradients produced at a uniform rate) or from a
 * profile that `train --profile-out` measured. */
#include "plan_cmd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "plan.h"
#include "plan_profile.h"

#define MIB 1048576.0
#define MAX_CAPS 64
#define MAX_BUCKETS 10000000.0
#define PROFILE_MAX_BYTES (256u << 20)

static const char usage_text[] =
    "usage: ddprun plan --grad-mib G --backward-ms T --alpha-ms A\n"
    "                   --bandwidth-mib-per-ms B [--bucket-mib LIST]\n"
    "                   [--forward-ms F] [--optimizer-ms O] [--json]\n"
    "       ddprun plan --profile FILE [--bucket-mib LIST] [--alpha-ms A]\n"
    "                   [--bandwidth-mib-per-ms B] [--json]\n"
    "\n"
    "Predicts the step time of data-parallel training for each gradient\n"
    "bucket size and names the best one. Buckets are all-reduced one at a\n"
    "time, in order; a bucket's all-reduce starts when its last gradient is\n"
    "ready and the previous all-reduce has ended, and takes A + bytes / B.\n"
    "The step takes F + O + max(T, end of the last all-reduce).\n"
    "\n"
    "  --grad-mib G              gradient size, MiB, produced at a uniform\n"
    "                            rate over the backward pass and cut into\n"
    "                            buckets of exactly the bucket size (the\n"
    "                            last one smaller)\n"
    "  --backward-ms T           duration of the backward pass\n"
    "  --alpha-ms A              fixed cost of one all-reduce\n"
    "  --bandwidth-mib-per-ms B  all-reduce bandwidth (bytes of the bucket\n"
    "                            per ms; 1 Gbit/s is about 0.119)\n"
    "  --bucket-mib LIST         bucket sizes to compare, MiB, comma-separated\n"
    "                            (default: 1,2,5,10,25,50,100)\n"
    "  --forward-ms F            data and forward time added to each step\n"
    "                            (default: 0)\n"
    "  --optimizer-ms O          optimizer time added to each step (default: "
    "0)\n"
    "  --profile FILE            a profile written by train --profile-out:\n"
    "                            measured parameter sizes and ready times,\n"
    "                            forward, backward and optimizer times, A and\n"
    "                            B (which --alpha-ms and --bandwidth-mib-per-ms\n"
    "                            override); buckets are formed as train forms\n"
    "                            them, with the profile's first bucket size\n"
    "  --compress C              the gradient compression in force: none\n"
    "                            (default), fp16 or bf16 (half the bytes,\n"
    "                            the casts charged at --cast-mib-per-ms),\n"
    "                            powersgd[:R] (with --profile only: each\n"
    "                            matrix by its shape; two rounds per bucket,\n"
    "                            the products at --gemm-gflops). With a\n"
    "                            profile, its own setting by default\n"
    "  --gemm-gflops X           the host's rate for PowerSGD's products\n"
    "                            (default: the profile's, else not charged)\n"
    "  --cast-mib-per-ms Y       fp32 MiB per ms of an elementwise pass over\n"
    "                            the gradients (a cast; default: the\n"
    "                            profile's, else not charged)\n"
    "  --json                    print JSON instead of the table\n"
    "  -h, --help                this text\n"
    "\n"
    "Columns: bucket MiB, buckets, ms per all-reduce (of the largest\n"
    "bucket), finish ms (end of the last all-reduce, from the start of the\n"
    "backward pass), exposed ms (communication after the backward pass),\n"
    "hidden (fraction of all-reduce time overlapped), step ms. The best is\n"
    "the shortest step; a tie goes to fewer buckets.\n"
    "\n"
    "Exit codes: 0 done; 2 bad input.\n";

typedef struct {
  double grad_mib, backward_ms, alpha_ms, bw_mib_ms, forward_ms, optim_ms;
  int have_grad, have_backward, have_alpha, have_bw, have_forward, have_optim;
  double caps[MAX_CAPS];
  size_t n_caps;
  const char *profile;
  int json;
  const char *compress;     /* NULL: none, or the profile's */
  dr_plan_compress_t cmp;
  double gflops, cast_mib_ms;
  int have_gflops, have_cast;
} args_t;

#define bad(...) dr_usage_error("ddprun plan", __VA_ARGS__)

/* A finite number >= min (> min when strict). */
static int number(const char *flag, const char *v, double min, int strict,
                  double *out) {
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !isfinite(d) || d < min ||
      (strict && d == min))
    return bad(strict ? "%s '%s': expected a number above 0"
                      : "%s '%s': expected a number, 0 or more",
               flag, v);
  *out = d;
  return 0;
}

static int parse_caps(const char *v, args_t *a) {
  a->n_caps = 0;
  const char *p = v;
  for (;;) {
    char item[64];
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof(item))
      return bad("--bucket-mib '%s': expected sizes in MiB separated by "
                 "commas", v);
    if (a->n_caps == MAX_CAPS)
      return bad("--bucket-mib '%s': at most %d sizes", v, MAX_CAPS);
    memcpy(item, p, len);
    item[len] = '\0';
    if (number("--bucket-mib", item, 0, 1, &a->caps[a->n_caps]) != 0)
      return 2;
    a->n_caps++;
    if (p[len] == '\0')
      return 0;
    p += len + 1;
  }
}

static int parse(int argc, char **argv, args_t *a) {
  static const double defaults[] = {1, 2, 5, 10, 25, 50, 100};
  memset(a, 0, sizeof(*a));
  a->n_caps = sizeof(defaults) / sizeof(defaults[0]);
  memcpy(a->caps, defaults, sizeof(defaults));
  struct {
    const char *flag;
    double *v;
    int *have;
    int strict;
  } nums[] = {
      {"--grad-mib", &a->grad_mib, &a->have_grad, 1},
      {"--backward-ms", &a->backward_ms, &a->have_backward, 0},
      {"--alpha-ms", &a->alpha_ms, &a->have_alpha, 0},
      {"--bandwidth-mib-per-ms", &a->bw_mib_ms, &a->have_bw, 1},
      {"--forward-ms", &a->forward_ms, &a->have_forward, 0},
      {"--optimizer-ms", &a->optim_ms, &a->have_optim, 0},
      {"--gemm-gflops", &a->gflops, &a->have_gflops, 0},
      {"--cast-mib-per-ms", &a->cast_mib_ms, &a->have_cast, 0},
  };
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) {
      fputs(usage_text, stdout);
      return 1;
    }
    if (strcmp(f, "--json") == 0) {
      a->json = 1;
      continue;
    }
    size_t k = 0;
    while (k < sizeof(nums) / sizeof(nums[0]) && strcmp(nums[k].flag, f) != 0)
      k++;
    int known = k < sizeof(nums) / sizeof(nums[0]) ||
                strcmp(f, "--bucket-mib") == 0 || strcmp(f, "--profile") == 0 ||
                strcmp(f, "--compress") == 0;
    if (!known)
      return bad("unknown option '%s'", f);
    if (i + 1 >= argc)
      return bad("%s needs a value", f);
    const char *v = argv[++i];
    int rc;
    if (strcmp(f, "--bucket-mib") == 0) {
      rc = parse_caps(v, a);
    } else if (strcmp(f, "--profile") == 0) {
      a->profile = v;
      rc = 0;
    } else if (strcmp(f, "--compress") == 0) {
      a->compress = v;
      rc = dr_plan_compress_parse(v, &a->cmp) != 0
               ? bad("--compress '%s': expected none, fp16, bf16, powersgd "
                     "or powersgd:R (R from 1 to 1024)", v)
               : 0;
    } else {
      rc = number(f, v, 0, nums[k].strict, nums[k].v);
      *nums[k].have = 1;
    }
    if (rc != 0)
      return rc;
  }
  if (a->profile != NULL) {
    if (a->have_grad || a->have_backward || a->have_forward || a->have_optim)
      return bad("--profile %s: the profile gives the gradients and times; "
                 "drop --grad-mib, --backward-ms, --forward-ms and "
                 "--optimizer-ms", a->profile);
    return 0;
  }
  const char *missing = !a->have_grad       ? "--grad-mib"
                        : !a->have_backward ? "--backward-ms"
                        : !a->have_alpha    ? "--alpha-ms"
                        : !a->have_bw       ? "--bandwidth-mib-per-ms"
                                            : NULL;
  if (missing != NULL)
    return bad("%s is missing (or give --profile FILE)", missing);
  if (a->compress != NULL && a->cmp.kind == DR_PLAN_POWERSGD)
    return bad("--compress %s needs --profile FILE: PowerSGD compresses each "
               "gradient matrix by its shape, which a profile records",
               a->compress);
  for (size_t k = 0; k < a->n_caps; k++)
    if (a->grad_mib / a->caps[k] > MAX_BUCKETS)
      return bad("--bucket-mib %g: %g MiB of gradients make over %.0f "
                 "buckets of that size", a->caps[k], a->grad_mib, MAX_BUCKETS);
  return 0;
}

static int load_profile(const char *path, dr_plan_profile_t *p) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "ddprun plan: --profile %s: cannot open the file (%s)\n",
            path, strerror(errno));
    return 2;
  }
  char *text = malloc(PROFILE_MAX_BYTES + 1);
  size_t len = text != NULL ? fread(text, 1, PROFILE_MAX_BYTES + 1, f) : 0;
  int rd_err = ferror(f);
  fclose(f);
  if (text == NULL || rd_err || len > PROFILE_MAX_BYTES) {
    fprintf(stderr, "ddprun plan: --profile %s: %s\n", path,
            text == NULL ? "out of memory"
            : rd_err     ? "cannot read the file"
                         : "larger than 256 MiB; not a profile");
    free(text);
    return 2;
  }
  char err[256] = "";
  int rc = dr_plan_profile_parse(text, len, p, err, sizeof(err));
  free(text);
  if (rc != 0) {
    fprintf(stderr, "ddprun plan: --profile %s: not a profile: %s (write one "
            "with train --profile-out)\n", path, err);
    return 2;
  }
  return 0;
}

static void print_table(const args_t *a, const dr_plan_result_t *r, size_t best) {
  printf("%10s %8s %14s %10s %11s %7s %9s\n", "bucket MiB", "buckets",
         "ms/all-reduce", "finish ms", "exposed ms", "hidden", "step ms");
  for (size_t k = 0; k < a->n_caps; k++)
    printf("%10g %8zu %14.3f %10.3f %11.3f %7.3f %9.3f\n", a->caps[k],
           r[k].n_buckets, r[k].allreduce_ms, r[k].finish_ms, r[k].exposed_ms,
           r[k].hidden_frac, r[k].step_ms);
  printf("best: %g MiB: %zu bucket%s, step %.3f ms, %.3f ms exposed\n",
         a->caps[best], r[best].n_buckets, r[best].n_buckets == 1 ? "" : "s",
         r[best].step_ms, r[best].exposed_ms);
}

static void print_json(const args_t *a, const dr_plan_result_t *r, size_t best) {
  printf("{\"candidates\": [");
  for (size_t k = 0; k < a->n_caps; k++)
    printf("%s\n  {\"bucket_mib\": %.9g, \"buckets\": %zu, "
           "\"allreduce_ms\": %.6f, \"comm_ms\": %.6f, \"finish_ms\": %.6f, "
           "\"exposed_ms\": %.6f, \"hidden_frac\": %.6f, \"step_ms\": %.6f}",
           k == 0 ? "" : ",", a->caps[k], r[k].n_buckets, r[k].allreduce_ms,
           r[k].comm_ms, r[k].finish_ms, r[k].exposed_ms, r[k].hidden_frac,
           r[k].step_ms);
  printf("],\n \"best_bucket_mib\": %.9g}\n", a->caps[best]);
}

/* The uniform case: one candidate. */
static int predict_uniform(const args_t *a, double cap_mib,
                           dr_plan_result_t *out) {
  size_t n = (size_t)ceil(a->grad_mib / cap_mib);
  dr_plan_bucket_t *b = malloc((n > 0 ? n : 1) * sizeof(*b));
  if (b == NULL)
    return -ENOMEM;
  n = dr_plan_uniform(a->grad_mib * MIB, cap_mib * MIB, a->backward_ms, b, n);
  dr_plan_cost_t cost = {a->alpha_ms, a->bw_mib_ms * MIB, a->backward_ms,
                         a->forward_ms + a->optim_ms, 0};
  if (a->compress == NULL || a->cmp.kind == DR_PLAN_F32) {
    dr_plan_eval(b, n, &cost, out);
  } else {
    /* Each uniform bucket as one tensor that fills it exactly. */
    dr_plan_param_t *q = malloc((n > 0 ? n : 1) * sizeof(*q));
    if (q == NULL) {
      free(b);
      return -ENOMEM;
    }
    for (size_t k = 0; k < n; k++)
      q[k] = (dr_plan_param_t){b[k].bytes, b[k].ready_ms, b[k].bytes / 4, 1};
    dr_plan_compress_t c = a->cmp;
    c.gemm_flops_per_ms = a->gflops * 1e6;
    c.cast_bytes_per_ms = a->cast_mib_ms * MIB;
    dr_plan_eval_params(q, n, cap_mib * MIB, cap_mib * MIB, &cost, &c, NULL,
                        out);
    free(q);
  }
  out->cap_bytes = cap_mib * MIB;
  free(b);
  return 0;
}

int dr_plan_main(int argc, char **argv) {
  args_t a;
  int rc = parse(argc, argv, &a);
  if (rc != 0)
    return rc == 1 ? 0 : rc;
  dr_plan_result_t r[MAX_CAPS];
  if (a.profile != NULL) {
    dr_plan_profile_t p;
    memset(&p, 0, sizeof(p));
    rc = load_profile(a.profile, &p);
    if (rc != 0) {
      dr_plan_profile_free(&p);
      return rc;
    }
    if (a.have_alpha)
      p.alpha_ms = a.alpha_ms;
    if (a.have_bw)
      p.bytes_per_ms = a.bw_mib_ms * MIB;
    double caps[MAX_CAPS];
    for (size_t k = 0; k < a.n_caps; k++)
      caps[k] = a.caps[k] * MIB;
    /* The profile's own setting and rates unless told otherwise. */
    dr_plan_compress_t c = p.measured;
    if (a.compress != NULL) {
      c.kind = a.cmp.kind;
      c.rank = a.cmp.rank;
    }
    if (a.have_gflops)
      c.gemm_flops_per_ms = a.gflops * 1e6;
    if (a.have_cast)
      c.cast_bytes_per_ms = a.cast_mib_ms * MIB;
    rc = dr_plan_profile_predict(&p, caps, a.n_caps, &c, r);
    dr_plan_profile_free(&p);
  } else {
    for (size_t k = 0; k < a.n_caps && rc == 0; k++)
      rc = predict_uniform(&a, a.caps[k], &r[k]);
  }
  if (rc != 0) {
    fprintf(stderr, "ddprun plan: out of memory\n");
    return 2;
  }
  size_t best = dr_plan_best(r, a.n_caps);
  if (a.json)
    print_json(&a, r, best);
  else
    print_table(&a, r, best);
  return 0;
}
