/* train's settings: one table row per key, read from the INI file and then
 * the command line. */
#include "train_config.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddprun_version.h"
#include "errors.h"
#include "exit_codes.h"
#include "fault_inject.h"
#include "fs.h"
#include "gpu_train.h"
#include "loss_scale.h"
#include "model.h"
#include "compress.h"

typedef enum { K_U32, K_U64, K_F64, K_STR, K_FLAG } kind_t;

typedef struct {
  const char *name;
  kind_t kind;
  size_t off;
  const char *def;
  double min, max;
  const char *help;
} row_t;

#define OFF(f) offsetof(dr_train_config_t, f)

static const row_t rows[] = {
    {"config", K_STR, OFF(config), NULL, 0, 0, "INI file of settings"},
    {"smoke", K_FLAG, OFF(smoke), "0", 0, 1,
     "a self-check to run first, alone or under ddprun: a short run (20 "
     "steps unless --steps; the other settings as given, --ckpt-every "
     "aside) that writes the checkpoint of its last step and reads it back "
     "(in a new directory under --ckpt-dir, else under $TMPDIR or /tmp, "
     "removed afterwards), evaluates, and checks that the steps ran, that "
     "the weights read back are bit-identical to those written, that the "
     "evaluation gave a finite loss, and that the loss fell; rank 0 prints "
     "one `smoke:` line per check and a verdict; exit 0 when all held, 1 "
     "otherwise"},
    {"data", K_STR, OFF(data), "synthetic", 0, 0,
     "synthetic (a teacher MLP labels random inputs) or text:PATH (predict "
     "the next byte of a file)"},
    {"samples", K_U64, OFF(samples), "65536", 1, 1e12,
     "synthetic training samples"},
    {"eval-samples", K_U64, OFF(eval_samples), "4096", 0, 1e12,
     "synthetic held-out samples"},
    {"eval-frac", K_F64, OFF(eval_frac), "0.1", 0, 0.9,
     "text: held-out fraction at the end of the file"},
    {"layers", K_U32, OFF(layers), "2", 1, 1000, "hidden layers"},
    {"width", K_U32, OFF(width), "512", 1, DR_MODEL_MAX_DIM,
     "hidden units per layer"},
    {"input-dim", K_U32, OFF(input_dim), "256", 1, DR_MODEL_MAX_DIM,
     "synthetic input size"},
    {"classes", K_U32, OFF(classes), "16", 2, DR_MODEL_MAX_DIM,
     "synthetic classes (text: always 256)"},
    {"context", K_U32, OFF(context), "32", 1, 4096, "text: bytes of context"},
    {"embed-dim", K_U32, OFF(embed_dim), "16", 1, 4096,
     "text: embedding size per byte"},
    {"batch", K_U32, OFF(batch), "64", 1, DR_MODEL_MAX_DIM,
     "samples per rank per micro-batch"},
    {"global-batch", K_U64, OFF(global_batch), "0", 0, 1e12,
     "samples per optimizer step over all ranks: each rank's --batch is "
     "this / (world size x --grad-accum), so that a checkpoint resumes at "
     "another world size (ddprun --nnodes MIN:MAX); 0: from --batch"},
    {"steps", K_U64, OFF(steps), "200", 0, 1e12,
     "optimizer steps (0: run --epochs)"},
    {"epochs", K_U32, OFF(epochs), "1", 1, 1e6, "epochs when --steps is 0"},
    {"lr", K_F64, OFF(lr), "0.003", 0, 1e3,
     "learning rate of the global batch (batch x world x grad-accum); not "
     "rescaled with the world size unless --lr-scale linear"},
    {"lr-ref-batch", K_U64, OFF(lr_ref_batch), NULL, 1, 1e12,
     "the global batch --lr was tuned for (unset by default): where the "
     "run's global batch differs, rank 0 says so at start, with the rate "
     "--lr-scale linear would use"},
    {"lr-scale", K_STR, OFF(lr_scale), "none", 0, 0,
     "none: --lr as is; linear: --lr x global batch / reference, the "
     "reference being --lr-ref-batch, else a resumed checkpoint's global "
     "batch (always the run's own: a resume keeps it), else none (--lr as "
     "is, said at start); ramped from --lr over --lr-warmup steps, under "
     "the --warmup and cosine schedule"},
    {"lr-warmup", K_U64, OFF(lr_warmup), "0", 0, 1e12,
     "--lr-scale linear: steps over which the rate's scale rises linearly "
     "from 1 (step 1) to global batch / reference (step N + 1 and after)"},
    {"optimizer", K_STR, OFF(optimizer), "adamw", 0, 0, "sgd or adamw"},
    {"momentum", K_F64, OFF(momentum), "0.9", 0, 1, "SGD momentum"},
    {"weight-decay", K_F64, OFF(weight_decay), "0", 0, 10, "weight decay"},
    {"beta1", K_F64, OFF(beta1), "0.9", 0, 1, "AdamW beta1"},
    {"beta2", K_F64, OFF(beta2), "0.999", 0, 1, "AdamW beta2"},
    {"eps", K_F64, OFF(eps), "1e-8", 0, 1, "AdamW epsilon"},
    {"warmup", K_U64, OFF(warmup), "10", 0, 1e12,
     "steps of linear warmup before the cosine decay"},
    {"min-lr-frac", K_F64, OFF(min_lr_frac), "0.1", 0, 1,
     "final learning rate as a fraction of --lr"},
    {"seed", K_U64, OFF(seed), "1234", 0, 1.8e19,
     "seed of data, initial weights and sampler"},
    {"bucket-cap-mb", K_F64, OFF(bucket_cap_mb), "25", 0.0001, 65536,
     "gradient bucket size, MiB; auto: measure the all-reduce and the "
     "backward pass in the first steps and pick the best of 1, 2, 5, 10, "
     "25, 50 and 100 (starting at 25)"},
    {"profile-out", K_STR, OFF(profile_out), NULL, 0, 0,
     "rank 0 writes the bucket planner's profile there (JSON: measured "
     "all-reduce cost, forward/backward/optimizer times, each gradient's "
     "size and ready time) for ddprun plan --profile"},
    {"first-bucket-mb", K_F64, OFF(first_bucket_mb), "1", 0.0001, 65536,
     "size of the first bucket, MiB"},
    {"no-overlap", K_FLAG, OFF(no_overlap), "0", 0, 1,
     "launch all buckets after the backward pass (for comparison)"},
    {"grad-accum", K_U32, OFF(grad_accum), "1", 1, 1 << 20,
     "micro-batches per step; communication only on the last (no_sync)"},
    {"comm-timeout", K_F64, OFF(comm_timeout), "300", 0.01, 1e6,
     "seconds a collective may wait for a peer before exit code 4"},
    {"log-every", K_U32, OFF(log_every), "10", 1, 1 << 30,
     "steps between rank 0's progress lines"},
    {"trace", K_STR, OFF(trace), NULL, 0, 0,
     "write a Chrome trace-event JSON per rank ({rank} in the path is "
     "replaced; else .rankN is added when there are several): wall-clock "
     "microseconds, with DDPRUN_CLOCK_OFFSET_US (if set) in its otherData; "
     "also sets --thread-stats, whose figures go in as counters"},
    {"thread-stats", K_FLAG, OFF(thread_stats), "0", 0, 1,
     "measure each step's CPU time, run-queue wait and context switches of "
     "the compute and communication threads; their means per step end the "
     "final line (compute_cpu_ms ... comm_invol_cs, thread_sample_us)"},
    {"force-tcp", K_FLAG, OFF(force_tcp), "0", 0, 1,
     "use TCP even between ranks on one host"},
    {"comm-schedule", K_STR, OFF(comm_schedule), "auto", 0, 0,
     "who runs the CPU backend's collectives: thread (a communication "
     "thread per rank, overlapping the backward pass), inline (the compute "
     "thread, when it waits for them: no wake-ups, no competition for a "
     "core), or auto: inline when this rank's links are shared memory and "
     "the host's ranks, with their compute threads and a communication "
     "thread each, fill the CPUs allowed; the summary says which and why. "
     "The same bits either way"},
    {"host-weights", K_STR, OFF(host_weights), "auto", 0, 0,
     "CPU, every rank on one host: shared keeps one copy of the weights and "
     "optimizer state for all of them in /dev/shm, each rank summing its "
     "shard of every bucket straight from the others' gradients and "
     "updating that shard (no all-reduce of the gradients, one optimizer "
     "pass per host); private, a copy each; auto: shared where the "
     "collectives run inline (see --comm-schedule auto) and nothing rules "
     "it out (--grad-compress, --loss-scale, --bucket-cap-mb auto, "
     "--profile-out, TCP links). The same bits either way"},
    {"device", K_STR, OFF(device), "auto", 0, 0,
     "cpu, cuda (the GPU numbered LOCAL_RANK, or the only one visible; "
     "gradients all-reduced by NCCL), or auto: cuda when this train has GPU "
     "support and a GPU is visible, else cpu"},
    {"precision", K_STR, OFF(precision), "fp32", 0, 0,
     "fp32, bf16 or fp16 (cuda only: activations and GEMM inputs in the "
     "two-byte type, fp32 master weights, gradients, softmax and loss; "
     "fp16 wants --loss-scale dynamic, which keeps small gradients from "
     "flushing to zero)"},
    {"tf32", K_FLAG, OFF(tf32), "0", 0, 1,
     "cuda, fp32: run the GEMMs on TF32 tensor cores (10-bit mantissa "
     "inputs, fp32 accumulation); off by default, as in PyTorch"},
    {"dump-weights", K_STR, OFF(dump_weights), NULL, 0, 0,
     "rank 0 writes the final weights there: raw little-endian fp32, the "
     "parameters in registration order"},
    {"ckpt-dir", K_STR, OFF(ckpt_dir), NULL, 0, 0,
     "checkpoint directory (default: $DDPRUN_CKPT_DIR when it is set and "
     "not empty, as ddprun --ckpt-dir sets it for every worker): rank 0 "
     "resumes from the newest valid checkpoint there, and writes new ones "
     "when --ckpt-every is set"},
    {"ckpt-every", K_U64, OFF(ckpt_every), "0", 0, 1e12,
     "steps between checkpoints, each written by a thread of rank 0 while "
     "the steps go on (a checkpoint due while the previous one is still "
     "being written waits for it); 0: none"},
    {"ckpt-keep", K_U32, OFF(ckpt_keep), "3", 1, 1e6,
     "newest checkpoints kept; older ones are deleted"},
    {"allow-schedule-change", K_FLAG, OFF(allow_schedule_change), "0", 0, 1,
     "resume from a checkpoint whose --steps, --lr, --warmup, "
     "--min-lr-frac or optimizer hyper-parameters (--momentum, "
     "--weight-decay, --beta1, --beta2, --eps) differ from this run's, and "
     "go on with this run's values from the resumed step (a larger --steps "
     "as --extend-schedule stretch, unless --extend-schedule hold); without "
     "it such a resume is refused (exit 2)"},
    {"extend-schedule", K_STR, OFF(extend_schedule), "none", 0, 0,
     "a resume whose --steps is larger than the checkpoint's extends the "
     "run: stretch recomputes the warmup and cosine decay over the new "
     "--steps, as if the run had been that long from the start (the "
     "learning rate at the resumed step rises); hold keeps the "
     "checkpoint's schedule, whose decay ends where it ended, and the "
     "learning rate stays at its final value for the added steps; none "
     "refuses such a resume (exit 2) unless --allow-schedule-change, which "
     "stretches. Either way rank 0 says the effect in one line"},
    {"grad-compress", K_STR, OFF(grad_compress), "none", 0, 0,
     "gradient compression on the wire: none; fp16 or bf16 (each bucket "
     "cast, pre-divided by the world size, summed in the narrow type and "
     "cast back); powersgd[:RANK] (each matrix gradient sent as two "
     "rank-RANK factors, default 4, with error feedback; 1-D and small "
     "tensors uncompressed). A checkpoint records it: a resume with "
     "another setting is refused unless --allow-schedule-change. On "
     "--device cuda the casts and PowerSGD's products (cuBLAS) run on the "
     "GPU and the sums in NCCL"},
    {"powersgd-start-step", K_U64, OFF(powersgd_start_step), "10", 0, 1e12,
     "powersgd: the first steps all-reduced uncompressed"},
    {"powersgd-no-error-feedback", K_FLAG, OFF(powersgd_no_ef), "0", 0, 1,
     "powersgd, for tests: drop the residual instead of adding it to the "
     "next step's gradient (to measure what error feedback is worth)"},
    {"loss-scale", K_STR, OFF(loss_scale), "none", 0, 0,
     "none; dynamic (initial scale 2^16, x2 after 2000 steps without an "
     "overflow, x0.5 and the step skipped on one, floor 1; dynamic:INIT "
     "starts at INIT); or a fixed scale. The ranks agree on every overflow "
     "(of any rank's own gradients or of the reduced sum) and skip the same "
     "steps; an overflow at the floor stops the run (exit 5). Pairs with "
     "--grad-compress fp16 and, with --device cuda, --precision fp16 (on "
     "the GPU the scale and the verdicts stay on the device)"},
};
#define N_ROWS (sizeof(rows) / sizeof(rows[0]))

static int fail(char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return DR_EBADARG;
}

static const row_t *find(const char *name) {
  char norm[64];
  size_t i = 0;
  for (; name[i] != '\0' && i < sizeof(norm) - 1; i++)
    norm[i] = name[i] == '_' ? '-' : name[i];
  norm[i] = '\0';
  for (size_t k = 0; k < N_ROWS; k++)
    if (strcmp(rows[k].name, norm) == 0)
      return &rows[k];
  return NULL;
}

/* The rows whose largest value is the model's (DR_MODEL_MAX_DIM). */
static int model_bound(const row_t *r) {
  return r->off == OFF(batch) || r->off == OFF(width) ||
         r->off == OFF(input_dim) || r->off == OFF(classes);
}

static int set(dr_train_config_t *c, const row_t *r, const char *v, char *err,
               size_t n) {
  char *p = (char *)c + r->off;
  if (r->kind == K_STR) {
    char *copy = strdup(v);
    if (copy == NULL)
      return -ENOMEM;
    free(*(char **)p);
    *(char **)p = copy;
    return 0;
  }
  if (r->off == OFF(batch))
    c->batch_given = 1;
  if (r->off == OFF(steps))
    c->steps_given = 1;
  if (r->off == OFF(bucket_cap_mb)) {
    c->bucket_cap_auto = strcmp(v, "auto") == 0;
    if (c->bucket_cap_auto) {
      c->bucket_cap_mb = 25; /* until the plan */
      return 0;
    }
  }
  if (r->kind == K_FLAG) {
    int on = strcmp(v, "1") == 0 || strcmp(v, "true") == 0 ||
             strcmp(v, "yes") == 0;
    int off = strcmp(v, "0") == 0 || strcmp(v, "false") == 0 ||
              strcmp(v, "no") == 0;
    if (!on && !off)
      return fail(err, n, "--%s '%s': expected 1/0, true/false or yes/no",
                  r->name, v);
    *(int *)p = on;
    return 0;
  }
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !isfinite(d) || d < r->min ||
      d > r->max) {
    if (r->kind == K_F64)
      return fail(err, n, "--%s '%s': expected a number from %g to %g%s",
                  r->name, v, r->min, r->max,
                  r->off == OFF(bucket_cap_mb) ? ", or auto" : "");
    return fail(err, n, "--%s '%s': expected a whole number from %.0f to "
                "%.0f%s", r->name, v, r->min, r->max,
                model_bound(r) ? " (2^20, the model's limit)" : "");
  }
  if (r->kind != K_F64 && d != floor(d))
    return fail(err, n, "--%s '%s': expected a whole number", r->name, v);
  if (r->kind == K_U32)
    *(uint32_t *)p = (uint32_t)d;
  else if (r->kind == K_U64)
    *(uint64_t *)p = strtoull(v, NULL, 10);
  else
    *(double *)p = d;
  return 0;
}

typedef struct {
  dr_train_config_t *c;
  const char *path;
  char *err;
  size_t n;
  int rc;
} ini_ctx_t;

static int on_ini(void *user, const char *section, const char *name,
                  const char *value) {
  ini_ctx_t *x = user;
  if (x->rc != 0)
    return 0;
  if (section[0] != '\0' && strcmp(section, "train") != 0) {
    x->rc = fail(x->err, x->n, "%s: unknown section [%s] (use [train] or "
                 "none)", x->path, section);
    return 0;
  }
  const row_t *r = find(name);
  if (r == NULL || r->off == OFF(config)) {
    x->rc = fail(x->err, x->n, "%s: unknown key '%s'; see train --help",
                 x->path, name);
    return 0;
  }
  x->rc = set(x->c, r, value, x->err, x->n);
  if (x->rc != 0) {
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", x->err);
    snprintf(x->err, x->n, "%s: %s", x->path, msg);
  }
  return x->rc == 0;
}

/* Reads the INI file path into c. A FIFO, a device or a directory is
 * refused before a byte is read: inih's own fopen() would wait for a
 * FIFO's writer forever. */
static int read_ini(dr_train_config_t *c, const char *path, char *err,
                    size_t n) {
  int fd = dr_open_regular(path);
  if (fd == DR_ENOTREG || fd == -EISDIR)
    return fail(err, n, "--config '%s' is %s, not a file; give the path of "
                "an INI file", path, fd == -EISDIR ? "a directory"
                : "a FIFO, a device or a socket");
  if (fd < 0)
    return fail(err, n, "--config '%s': cannot read the file (%s)", path,
                dr_strerror(fd));
  FILE *fp = fdopen(fd, "r");
  if (fp == NULL) {
    int e = errno;
    close(fd);
    return fail(err, n, "--config '%s': cannot read the file (%s)", path,
                strerror(e));
  }
  ini_ctx_t x = {c, path, err, n, 0};
  int rc = ini_parse_file(fp, on_ini, &x);
  fclose(fp);
  if (x.rc != 0)
    return x.rc;
  if (rc < 0)
    return fail(err, n, "--config '%s': cannot read the file (out of "
                "memory)", path);
  if (rc > 0)
    return fail(err, n, "%s:%d: not a `key = value` line", path, rc);
  return 0;
}

/* "  LEFT  text..." with the text starting at column indent and wrapped
 * at 79 columns under itself. */
static void print_wrapped(int indent, const char *left, const char *text) {
  char buf[1024];
  snprintf(buf, sizeof(buf), "%s", text);
  printf("  %-*s", indent - 2, left);
  size_t col = (size_t)indent;
  for (char *save = NULL, *w = strtok_r(buf, " ", &save); w != NULL;
       w = strtok_r(NULL, " ", &save)) {
    if (col + 1 + strlen(w) > 79) {
      printf("\n%*s", indent, "");
      col = (size_t)indent;
    }
    printf(" %s", w);
    col += 1 + strlen(w);
  }
  printf("\n");
}

static void usage(void) {
  printf("usage: train [--key value ...]\n\n"
         "Data-parallel training of an MLP; run it under ddprun, or alone\n"
         "as a single process. Every key can also be set in an INI file\n"
         "given with --config (`key = value`, top level or [train]);\n"
         "flags override the file. --help prints this; --version prints\n"
         "the version and the build's GPU code (CUDA and NCCL versions, or\n"
         "\"no GPU code\"), then whether that code loads here and which\n"
         "NCCL and cuBLAS it loaded.\n\n");
  for (size_t k = 0; k < N_ROWS; k++) {
    char left[64], text[1024];
    snprintf(left, sizeof(left), "--%s%s", rows[k].name,
             rows[k].kind == K_FLAG ? "" : " V");
    if (rows[k].def != NULL && rows[k].kind != K_FLAG)
      snprintf(text, sizeof(text), "%s (default: %s)", rows[k].help,
               rows[k].def);
    else
      snprintf(text, sizeof(text), "%s", rows[k].help);
    print_wrapped(24, left, text);
  }
  /* The job's table (proto/exit_codes.h), as ddprun acts on it. */
  printf("\nExit codes:\n");
  int n_codes;
  const dr_exit_info_t *t = dr_exit_table(&n_codes);
  for (int i = 0; i < n_codes; i++) {
    char left[16], text[512];
    snprintf(left, sizeof(left), "%d", t[i].code);
    snprintf(text, sizeof(text), "%s: %s%s", t[i].brief, t[i].meaning,
             t[i].policy == DR_EXIT_STOP ? " (ddprun does not restart it)"
                                         : "");
    print_wrapped(7, left, text);
    if (t[i].code == 0)
      print_wrapped(7, "1", "any other failure (the final weights differ "
                    "between ranks, a checkpoint that cannot be written or "
                    "read for a reason a restart may cure): a crash to "
                    "ddprun, which restarts it");
  }
  /* fault_inject.h: what the tests use to catch a job at a known step. */
  printf("\nEnvironment (fault injection, for tests):\n");
  int n_vars;
  const dr_fault_var_t *v = dr_fault_vars(&n_vars);
  for (int i = 0; i < n_vars; i++) {
    char left[64];
    snprintf(left, sizeof(left), "%s=%s", v[i].name, v[i].value);
    printf("  %s\n", left);
    print_wrapped(8, "", v[i].meaning);
  }
}

int dr_train_config_parse(int argc, char **argv, dr_train_config_t *c,
                          char *err, size_t n) {
  memset(c, 0, sizeof(*c));
  for (size_t k = 0; k < N_ROWS; k++)
    if (rows[k].def != NULL && set(c, &rows[k], rows[k].def, err, n) != 0)
      return DR_EBADARG;
  /* Set by the file or a flag from here on. */
  c->batch_given = 0;
  c->steps_given = 0;
  /* The file first, so that flags override it. */
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage();
      return 1;
    }
    if (strcmp(argv[i], "--version") == 0) {
      char gpu[8 * 4096];
      dr_gpu_train_describe(gpu, sizeof(gpu));
      printf("train %s\n", DDPRUN_VERSION_LINE);
      if (gpu[0] != '\0')
        printf("%s\n", gpu);
      return 1;
    }
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      file = argv[i + 1];
  }
  if (file != NULL) {
    int rc = read_ini(c, file, err, n);
    if (rc != 0)
      return rc;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0)
      return fail(err, n, "unexpected argument '%s'; see train --help", a);
    char name[64];
    const char *eq = strchr(a + 2, '=');
    size_t len = eq != NULL ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (len >= sizeof(name))
      return fail(err, n, "unknown option '%s'; see train --help", a);
    memcpy(name, a + 2, len);
    name[len] = '\0';
    const row_t *r = find(name);
    if (r == NULL)
      return fail(err, n, "unknown option '--%s'; see train --help", name);
    const char *v;
    if (eq != NULL)
      v = eq + 1;
    else if (r->kind == K_FLAG)
      v = "1";
    else if (i + 1 < argc)
      v = argv[++i];
    else
      return fail(err, n, "--%s needs a value", r->name);
    int rc = set(c, r, v, err, n);
    if (rc != 0)
      return rc;
  }
  if (strcmp(c->optimizer, "sgd") != 0 && strcmp(c->optimizer, "adamw") != 0)
    return fail(err, n, "--optimizer '%s': expected sgd or adamw",
                c->optimizer);
  if (strcmp(c->device, "auto") != 0 && strcmp(c->device, "cpu") != 0 &&
      strcmp(c->device, "cuda") != 0)
    return fail(err, n, "--device '%s': expected auto, cpu or cuda",
                c->device);
  if (strcmp(c->comm_schedule, "auto") != 0 &&
      strcmp(c->comm_schedule, "thread") != 0 &&
      strcmp(c->comm_schedule, "inline") != 0)
    return fail(err, n, "--comm-schedule '%s': expected auto, thread or "
                "inline", c->comm_schedule);
  if (strcmp(c->host_weights, "auto") != 0 &&
      strcmp(c->host_weights, "shared") != 0 &&
      strcmp(c->host_weights, "private") != 0)
    return fail(err, n, "--host-weights '%s': expected auto, shared or "
                "private", c->host_weights);
  if (strcmp(c->extend_schedule, "none") != 0 &&
      strcmp(c->extend_schedule, "stretch") != 0 &&
      strcmp(c->extend_schedule, "hold") != 0)
    return fail(err, n, "--extend-schedule '%s': expected none, stretch or "
                "hold", c->extend_schedule);
  if (strcmp(c->lr_scale, "none") != 0 && strcmp(c->lr_scale, "linear") != 0)
    return fail(err, n, "--lr-scale '%s': expected none or linear",
                c->lr_scale);
  if (c->lr_warmup > 0 && strcmp(c->lr_scale, "linear") != 0)
    return fail(err, n, "--lr-warmup %llu ramps in the scaling of --lr-scale "
                "linear, and --lr-scale is none; give --lr-scale linear, or "
                "--warmup for the schedule's own warmup",
                (unsigned long long)c->lr_warmup);
  if (c->smoke && !c->steps_given)
    c->steps = DR_TRAIN_SMOKE_STEPS;
  if (strcmp(c->precision, "fp32") != 0 && strcmp(c->precision, "bf16") != 0 &&
      strcmp(c->precision, "fp16") != 0)
    return fail(err, n, "--precision '%s': expected fp32, bf16 or fp16",
                c->precision);
  {
    dr_cmp_config_t cc;
    dr_loss_scale_t ls;
    if (dr_cmp_parse(c->grad_compress, &cc, err, n) != 0 ||
        dr_loss_scale_parse(c->loss_scale, &ls, err, n) != 0)
      return DR_EBADARG;
  }
  if (strcmp(c->data, "synthetic") != 0 && strncmp(c->data, "text:", 5) != 0)
    return fail(err, n, "--data '%s': expected synthetic or text:PATH",
                c->data);
  /* ddprun's node-local directory, unless the job names its own. */
  const char *env_dir = getenv("DDPRUN_CKPT_DIR");
  if (c->ckpt_dir == NULL && env_dir != NULL && env_dir[0] != '\0' &&
      (c->ckpt_dir = strdup(env_dir)) == NULL)
    return fail(err, n, "out of memory for DDPRUN_CKPT_DIR");
  if (c->ckpt_every > 0 && c->ckpt_dir == NULL)
    return fail(err, n, "--ckpt-every %llu needs --ckpt-dir (or "
                "DDPRUN_CKPT_DIR)", (unsigned long long)c->ckpt_every);
  if (c->profile_out != NULL && c->profile_out[0] == '\0')
    return fail(err, n, "--profile-out is empty");
  if (c->ckpt_dir != NULL && c->ckpt_dir[0] == '\0')
    return fail(err, n, "--ckpt-dir is empty");
  if (c->global_batch > 0 && c->batch_given)
    return fail(err, n, "give --batch (per rank) or --global-batch (all "
                "ranks), not both");
  return 0;
}

int dr_train_config_derive_batch(dr_train_config_t *c, uint32_t world,
                                 char *err, size_t n) {
  if (c->global_batch == 0)
    return 0;
  uint64_t per = (uint64_t)world * c->grad_accum;
  if (per == 0 || c->global_batch % per != 0)
    return fail(err, n, "--global-batch %llu is not a multiple of the world "
                "size %u x --grad-accum %u; choose one that every world "
                "size of the job divides",
                (unsigned long long)c->global_batch, world, c->grad_accum);
  if (c->global_batch / per > DR_MODEL_MAX_DIM)
    return fail(err, n, "--global-batch %llu over the world size %u x "
                "--grad-accum %u is %llu per rank, over %u (2^20, the "
                "model's limit of --batch)",
                (unsigned long long)c->global_batch, world, c->grad_accum,
                (unsigned long long)(c->global_batch / per),
                DR_MODEL_MAX_DIM);
  c->batch = (uint32_t)(c->global_batch / per);
  return 0;
}

void dr_train_config_free(dr_train_config_t *c) {
  for (size_t k = 0; k < N_ROWS; k++)
    if (rows[k].kind == K_STR) {
      char **p = (char **)((char *)c + rows[k].off);
      free(*p);
      *p = NULL;
    }
}
