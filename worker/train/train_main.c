/* train: data-parallel training of an MLP on the CPU. Reads its identity
 * from the environment ddprun sets (or runs as a single process), builds
 * the process group, model, data, optimizer and reducer, runs the loop,
 * evaluates, and prints the final line. Only main turns codes into exit
 * statuses. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "fault_inject.h"
#include "gpu_train.h"
#include "progress.h"
#include "train.h"
#include "train_device.h"
#include "train_elastic.h"
#include "host_weights.h"
#include "train_hostw.h"
#include "train_plan.h"
#include "train_threads.h"
#include "train_smoke.h"

static void span_hook(void *arg, const char *name, uint64_t t0, uint64_t t1) {
  dr_trace_span(arg, DR_TRACE_COMPUTE, name, t0, t1);
}

/* DDPRUN_CLOCK_OFFSET_US, the agent's measure of this host's clock against
 * the rendezvous server's (server = host + offset), for the trace. A value
 * that is not an integer is left out, with one line. */
static void trace_clock_offset(const dr_run_t *r, dr_trace_meta_t *meta) {
  const char *v = getenv("DDPRUN_CLOCK_OFFSET_US");
  if (v == NULL)
    return;
  if (dr_trace_parse_offset(v, &meta->clock_offset_us) == 0) {
    meta->has_clock_offset = 1;
    return;
  }
  char shown[40];
  size_t k = 0;
  for (; v[k] != '\0' && k + 1 < sizeof(shown); k++)
    shown[k] = (unsigned char)v[k] >= 0x20 && v[k] != 0x7f ? v[k] : '?';
  shown[k] = '\0';
  fprintf(stderr, "train: rank %u: ignoring DDPRUN_CLOCK_OFFSET_US='%s%s': "
          "not an integer number of microseconds; the trace has no clock "
          "offset\n", r->rank, shown, v[k] != '\0' ? "..." : "");
}

static int setup_data(dr_run_t *r, char *err, size_t n) {
  const dr_train_config_t *c = &r->c;
  int rc;
  if (strncmp(c->data, "text:", 5) == 0)
    rc = dr_data_text(c->data + 5, c->context, c->eval_frac, &r->data, err, n);
  else
    rc = dr_data_synthetic(c->seed, c->samples, c->eval_samples, c->input_dim,
                           c->classes, &r->data);
  if (rc != 0 && err[0] == '\0')
    snprintf(err, n, "cannot load --data %s (%s)", c->data, dr_strerror(rc));
  return rc;
}

/* --grad-compress and --loss-scale: the compressor becomes the reducer's
 * launch hook when either is on. */
static int setup_compress(dr_run_t *r, dr_reducer_config_t *rcfg) {
  const dr_train_config_t *c = &r->c;
  char err[256];
  /* Both parsed once already by dr_train_config_parse. */
  dr_cmp_parse(c->grad_compress, &r->cmpc, err, sizeof(err));
  dr_loss_scale_parse(c->loss_scale, &r->ls, err, sizeof(err));
  r->cmpc.start_step = c->powersgd_start_step;
  r->cmpc.error_feedback = !c->powersgd_no_ef;
  r->cmpc.seed = c->seed;
  r->cmpc.check = r->ls.mode != DR_LS_NONE;
  if (r->cmpc.kind == DR_CMP_NONE && r->ls.mode == DR_LS_NONE)
    return 0;
  /* On the GPU the compressor holds PowerSGD's layout and the host copy
   * of its state; the GPU's own launch hook does the rounds (gpu_psgd.h),
   * the fp16 and bf16 sums and the loss scaler (gpu_step.c, gpu_scale.c). */
  if (r->use_gpu && r->cmpc.kind != DR_CMP_POWERSGD)
    return 0;
  if (dr_cmp_new(&r->cmpc, r->model, r->pg, &r->cmp) != 0)
    return dr_train_nomem(r, "the gradient compression state");
  if (r->use_gpu)
    return 0;
  rcfg->launch = dr_cmp_launch;
  rcfg->launch_arg = r->cmp;
  return 0;
}

static int setup(dr_run_t *r) {
  const dr_train_config_t *c = &r->c;
  char err[512] = "", what[256];
  int rc = setup_data(r, err, sizeof(err));
  if (rc == -ENOMEM) {
    snprintf(what, sizeof(what), "the data set (--data %s)", c->data);
    return dr_train_nomem(r, what);
  }
  if (rc != 0) {
    fprintf(stderr, "train: %s\n", err);
    return DR_TRAIN_ECONFIG;
  }
  dr_model_config_t mc;
  memset(&mc, 0, sizeof(mc));
  int text = dr_data_context(r->data) > 0;
  mc.input_dim = text ? 0 : c->input_dim;
  mc.width = c->width;
  mc.layers = c->layers;
  mc.classes = dr_data_classes(r->data);
  mc.context = text ? c->context : 0;
  mc.embed_dim = text ? c->embed_dim : 0;
  mc.max_batch = c->batch;
  mc.seed = c->seed;
  rc = dr_model_new(&mc, &r->model, err, sizeof(err));
  if (rc == -ENOMEM) {
    /* err names the part and its size */
    fprintf(stderr, "train: rank %u: %s (exit %d: out of memory)\n", r->rank,
            err, DR_TRAIN_ENOMEM);
    return DR_TRAIN_ENOMEM;
  }
  if (rc != 0) {
    fprintf(stderr, "train: %s\n", err[0] ? err : "cannot build the model");
    return DR_TRAIN_ECONFIG;
  }
  uint64_t n = dr_data_len(r->data, DR_SPLIT_TRAIN);
  r->shard_len = dr_sampler_shard_len(n, r->world);
  r->steps_per_epoch = r->shard_len / ((uint64_t)c->batch * c->grad_accum);
  if (r->steps_per_epoch == 0) {
    fprintf(stderr, "train: %llu training samples over %u ranks are fewer "
            "than one step of --batch %u x --grad-accum %u; use more data "
            "or a smaller batch\n", (unsigned long long)n, r->world, c->batch,
            c->grad_accum);
    return DR_TRAIN_ECONFIG;
  }
  r->total_steps = c->steps > 0 ? c->steps : c->epochs * r->steps_per_epoch;
  r->sched_steps = r->total_steps;
  r->global_batch = (uint64_t)c->batch * r->world * c->grad_accum;
  r->shard = malloc(r->shard_len * sizeof(uint64_t));
  if (r->shard == NULL) {
    snprintf(what, sizeof(what), "the sampler's shard (%llu indices)",
             (unsigned long long)r->shard_len);
    return dr_train_nomem(r, what);
  }
  r->times = calloc(r->total_steps > 0 ? r->total_steps : 1, sizeof(*r->times));
  if (r->times == NULL) {
    snprintf(what, sizeof(what), "the step times (%llu steps)",
             (unsigned long long)r->total_steps);
    return dr_train_nomem(r, what);
  }
  if (dr_batch_new(r->data, c->batch, &r->batch) != 0) {
    snprintf(what, sizeof(what), "the input batch (--batch %u)", c->batch);
    return dr_train_nomem(r, what);
  }

  dr_optim_config_t oc;
  memset(&oc, 0, sizeof(oc));
  oc.kind = strcmp(c->optimizer, "adamw") == 0 ? DR_OPT_ADAMW : DR_OPT_SGD;
  oc.lr = (float)c->lr;
  oc.momentum = (float)c->momentum;
  oc.weight_decay = (float)c->weight_decay;
  oc.beta1 = (float)c->beta1;
  oc.beta2 = (float)c->beta2;
  oc.eps = (float)c->eps;
  oc.warmup_steps = c->warmup;
  oc.total_steps = r->total_steps;
  oc.min_lr_frac = (float)c->min_lr_frac;
  rc = dr_optim_new(&oc, r->model, &r->opt);
  if (rc == -ENOMEM) {
    snprintf(what, sizeof(what), "the optimizer state (%s, %zu parameters)",
             c->optimizer, dr_model_n_elems(r->model));
    return dr_train_nomem(r, what);
  }
  if (rc != 0) {
    fprintf(stderr, "train: the optimizer refuses its settings: --momentum, "
            "--beta1 and --beta2 must be below 1, --eps above 0\n");
    return DR_TRAIN_ECONFIG;
  }

  dr_reducer_config_t rcfg;
  memset(&rcfg, 0, sizeof(rcfg));
  rcfg.cap_bytes = (size_t)(c->bucket_cap_mb * 1048576.0);
  rcfg.first_cap_bytes = (size_t)(c->first_bucket_mb * 1048576.0);
  rcfg.overlap = !c->no_overlap;
  rcfg.rebuild = 1;
  if (rcfg.cap_bytes < 4 || rcfg.first_cap_bytes < 4) {
    fprintf(stderr, "train: bucket sizes must hold at least one float\n");
    return DR_TRAIN_ECONFIG;
  }
  r->dev = &dr_train_cpu_device;
  rc = setup_compress(r, &rcfg);
  if (rc != 0)
    return rc;
  if (r->use_gpu) {
    /* The model and optimizer state go to the device; the reducer's
     * buckets then live there and launch on NCCL's stream, and the step
     * runs there (r->dev). */
    int g = dr_gpu_train_open(r, &rcfg);
    if (g != 0)
      return g;
  }
  rc = dr_reducer_new(&rcfg, r->model, r->pg, &r->red);
  if (rc == -ENOMEM) {
    snprintf(what, sizeof(what), "the gradient buckets (%.1f MiB)",
             4.0 * (double)dr_model_n_elems(r->model) / 1048576.0);
    return dr_train_nomem(r, what);
  }
  if (rc != 0) {
    fprintf(stderr, "train: rank %u: cannot plan the gradient buckets (%s)\n",
            r->rank, dr_strerror(rc));
    return DR_TRAIN_ECONFIG;
  }

  if (c->trace != NULL) {
    char used[4096];
    dr_trace_meta_t meta = {"train", r->rank, r->world,
                            r->gpu != NULL ? "nccl" : "cpu", 0, 0};
    trace_clock_offset(r, &meta);
    int t = dr_trace_open(c->trace, &meta, &r->trace, used, sizeof(used));
    if (t != 0) {
      fprintf(stderr, "train: cannot write the trace %s (%s)\n", used,
              dr_strerror(t));
      return DR_TRAIN_ECONFIG;
    }
    dr_model_set_span_hook(r->model, span_hook, r->trace);
  }
  return 0;
}

static void teardown(dr_run_t *r) {
  /* First: the write in flight reads no state, but its checkpoint is
   * the one a restart resumes from. */
  dr_train_ckpt_close(r);
  /* After it: the write was into --smoke's directory. */
  dr_train_smoke_close(r);
  dr_train_threads_free(r);
  dr_train_plan_free(r);
  dr_progress_close(&r->progress);
  /* On every exit path that returns: the file is valid JSON up to its
   * last complete write in any case (trace.h). */
  int t = dr_trace_close(&r->trace);
  if (t != 0)
    fprintf(stderr, "train: rank %u: the trace (--trace %s) is incomplete: a "
            "write failed (%s)\n", r->rank, r->c.trace, dr_strerror(t));
  dr_reducer_free(&r->red);
  dr_cmp_free(&r->cmp);
  dr_gpu_train_close(r);
  dr_optim_free(&r->opt);
  dr_model_free(&r->model);
  /* After the reducer (its buckets) and the model (its weights). */
  dr_hostw_close(&r->hostw);
  dr_batch_free(&r->batch);
  dr_data_free(&r->data);
  dr_pg_destroy(&r->pg);
  dr_pg_config_free(&r->pgc);
  dr_train_config_free(&r->c);
  free(r->shard);
  free(r->times);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  dr_fault_init();
  /* First: from now on SIGUSR1 asks for a checkpoint instead of killing. */
  if (dr_train_preempt_install() != 0)
    perror("train: sigaction(SIGUSR1)");
  dr_run_t run;
  memset(&run, 0, sizeof(run));
  dr_run_t *r = &run;
  char err[512] = "";
  int code = dr_train_config_parse(argc, argv, &r->c, err, sizeof(err));
  if (code == 1) {
    dr_train_config_free(&r->c);
    return 0;
  }
  if (code != 0) {
    fprintf(stderr, "train: %s\n", err);
    dr_train_config_free(&r->c);
    return DR_TRAIN_ECONFIG;
  }
  if (gethostname(r->host, sizeof(r->host)) != 0)
    snprintf(r->host, sizeof(r->host), "localhost");
  r->host[sizeof(r->host) - 1] = '\0';
  code = dr_gpu_train_resolve(r);
  if (code != 0) {
    teardown(r);
    return code;
  }

  if (dr_pg_config_from_env(&r->pgc, err, sizeof(err)) != 0) {
    fprintf(stderr, "train: %s\n", err);
    teardown(r);
    return DR_TRAIN_ECONFIG;
  }
  r->pgc.timeout_ms = (uint32_t)(r->c.comm_timeout * 1000.0);
  r->pgc.force_tcp |= r->c.force_tcp;
  /* auto keeps DR_PG_SCHEDULE's choice, if any (the tests' switch). */
  if (strcmp(r->c.comm_schedule, "inline") == 0)
    r->pgc.schedule = DR_PG_SCHED_INLINE;
  else if (strcmp(r->c.comm_schedule, "thread") == 0)
    r->pgc.schedule = DR_PG_SCHED_THREAD;
  r->rank = r->pgc.rank;
  r->world = r->pgc.world;
  r->local_rank = r->pgc.local_rank;
  if (dr_train_config_derive_batch(&r->c, r->world, err, sizeof(err)) != 0) {
    fprintf(stderr, "train: %s\n", err);
    teardown(r);
    return DR_TRAIN_ECONFIG;
  }
  int pg_rc = dr_pg_init(&r->pgc, &r->pg, err, sizeof(err));
  if (pg_rc != 0) {
    code = pg_rc == -ENOMEM ? DR_TRAIN_ENOMEM : DR_TRAIN_ECOMM;
    fprintf(stderr, "train: rank %u: cannot set up the process group: %s "
            "(exit %d)\n", r->rank, err, code);
    teardown(r);
    return code;
  }
  r->progress = dr_progress_attach_env();
  /* --smoke's own checkpoint directory, before anything reads it. */
  code = r->c.smoke ? dr_train_smoke_open(r) : 0;
  if (code == 0)
    code = dr_train_elastic(r);
  if (code == 0)
    code = setup(r);
  uint64_t start = 0;
  if (code == 0) {
    dr_report_summary(r);
    if (r->gpu != NULL)
      dr_gpu_train_summary(r);
    dr_fault_mem_touch(r->rank);
    /* --smoke starts afresh: its directory is new. */
    if (!r->c.smoke)
      code = dr_train_resume(r, &start);
  }
  if (code == 0)
    code = dr_train_lr_start(r, start);
  if (code == 0)
    code = dr_train_plan_start(r);
  if (code == 0)
    code = dr_train_hostw_open(r);
  if (code == 0 && r->c.smoke) {
    code = dr_train_smoke_run(r);
    teardown(r);
    return code;
  }
  if (code == 0)
    code = dr_train_loop(r, start);
  if (code == 0) {
    double acc = 0, eval_loss = 0;
    code = dr_train_evaluate(r, &acc, &eval_loss);
    /* The final checksum and --dump-weights read the host's copy. */
    if (code == 0 && r->gpu != NULL)
      code = dr_gpu_train_to_host(r, 0);
    if (code == 0)
      code = dr_report_final(r, acc, eval_loss);
  }
  teardown(r);
  return code;
}
