/* An elastic job's global batch (ddprun --nnodes MIN:MAX, which says so in
 * DDPRUN_MIN_NNODES and DDPRUN_MAX_NNODES): a resume at another world size
 * keeps the checkpoint's global batch when the new world divides it (the
 * loss it trains towards stays the same), and refuses in one line what
 * cannot fit; a fresh start says which sizes the job may reach that its
 * global batch cannot be split over, before any step is lost there.
 *
 * Runs after the process group is up and before anything is sized by the
 * batch: rank 0 reads the newest checkpoint's header and broadcasts its
 * global batch, so every rank takes the same per-rank batch. */
#include "train_elastic.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "elastic_batch.h"

/* The most nodes a job has (ddprun's own limit, DR_MAX_NODES). */
#define MAX_NODES 1000000ul

/* The variable's value as a node count (1..MAX_NODES), or 0. */
static uint32_t env_nodes(const char *name) {
  const char *s = getenv(name);
  if (s == NULL || s[0] < '0' || s[0] > '9')
    return 0;
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno != 0 || *end != '\0' || v == 0 || v > MAX_NODES)
    return 0;
  return (uint32_t)v;
}

/* The global batch of the newest checkpoint in dir by the step its header
 * records (the one a resume takes unless it fails its checksum), or 0. */
static uint64_t newest_global_batch(const char *dir) {
  uint64_t *steps = NULL, best_step = 0, global = 0;
  size_t n = 0;
  if (dr_ckpt_list(dir, &steps, &n) != 0)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char path[4096], err[256];
    dr_ckpt_header_t h;
    if (dr_ckpt_path(path, sizeof(path), dir, steps[i]) != 0 ||
        dr_ckpt_read_header(path, &h, err, sizeof(err)) != 0)
      continue;
    if (global == 0 || h.step > best_step) {
      best_step = h.step;
      global = h.global_batch;
    }
  }
  free(steps);
  return global;
}

/* A start with no checkpoint: the sizes the job may reach that its global
 * batch cannot be split over, said by rank 0. */
static void warn_unfit(const dr_run_t *r, uint32_t min, uint32_t max) {
  const dr_train_config_t *c = &r->c;
  uint32_t local = r->pgc.local_world > 0 ? r->pgc.local_world : 1;
  uint64_t global = c->global_batch > 0
                        ? c->global_batch
                        : (uint64_t)c->batch * r->world * c->grad_accum;
  uint32_t bad[8];
  size_t n = dr_eb_unfit_nodes(global, c->grad_accum, local, min, max, bad,
                               sizeof(bad) / sizeof(bad[0]));
  if (n == 0)
    return;
  char list[160] = "";
  size_t used = 0;
  for (size_t i = 0; i < n && i < sizeof(bad) / sizeof(bad[0]); i++) {
    int k = snprintf(list + used, sizeof(list) - used, "%s%u", i ? ", " : "",
                     bad[i]);
    if (k < 0 || (size_t)k >= sizeof(list) - used)
      break;
    used += (size_t)k;
  }
  char common[96] = "";
  uint64_t l = dr_eb_common(c->grad_accum, local, min, max, 1ull << 40);
  if (l != 0)
    snprintf(common, sizeof(common), " with a multiple of %" PRIu64
             " (every size divides it)", l);
  char how[128];
  if (c->global_batch > 0)
    snprintf(how, sizeof(how), "--global-batch");
  else
    snprintf(how, sizeof(how), "--batch %u x %u rank%s x --grad-accum %u",
             c->batch, r->world, r->world > 1 ? "s" : "", c->grad_accum);
  fprintf(stderr, "train: rank 0: warning: the global batch %" PRIu64
          " (%s) cannot be split over %s%s node%s of %u rank%s, which "
          "--nnodes %u:%u allows: a generation there would stop (exit 2); give "
          "--global-batch%s\n", global, how, list,
          n > sizeof(bad) / sizeof(bad[0]) ? " (and more)" : "",
          n > 1 || bad[0] != 1 ? "s" : "", local, local > 1 ? "s" : "", min,
          max, common);
}

int dr_train_elastic(dr_run_t *r) {
  dr_train_config_t *c = &r->c;
  uint32_t min = env_nodes("DDPRUN_MIN_NNODES");
  uint32_t max = env_nodes("DDPRUN_MAX_NNODES");
  if (min == 0 || max <= min)
    return 0; /* not elastic */
  if (c->global_batch > 0) {
    /* It decides the batch (dr_train_config_derive_batch); only rank 0's
     * warning, where no checkpoint says the job ran already. */
    if (r->rank == 0 &&
        (c->ckpt_dir == NULL || newest_global_batch(c->ckpt_dir) == 0))
      warn_unfit(r, min, max);
    return 0;
  }
  uint64_t ckpt_global = 0;
  if (c->ckpt_dir != NULL) {
    if (r->rank == 0)
      ckpt_global = newest_global_batch(c->ckpt_dir);
    char err[256] = "";
    int rc = dr_pg_broadcast_sync(r->pg, &ckpt_global, sizeof(ckpt_global), 0,
                                  err, sizeof(err));
    if (rc != 0)
      return dr_train_comm_failed(r, "the checkpoint's global batch", rc,
                                  err);
  }
  if (ckpt_global == 0) {
    if (r->rank == 0)
      warn_unfit(r, min, max);
    return 0;
  }
  uint32_t per_rank;
  switch (dr_eb_fit(ckpt_global, c->batch, r->world, c->grad_accum,
                    DR_MODEL_MAX_DIM, &per_rank)) {
  case DR_EB_SAME:
    return 0;
  case DR_EB_KEEP:
    if (r->rank == 0)
      fprintf(stderr, "train: rank 0: the elastic job (--nnodes %u:%u) runs "
              "on %u rank%s now: keeping the checkpoint's global batch %"
              PRIu64 " with --batch %u per rank (was %u)\n", min, max,
              r->world, r->world > 1 ? "s" : "", ckpt_global, per_rank, c->batch);
    c->batch = per_rank;
    return 0;
  case DR_EB_UNFIT:
    break;
  }
  if (r->rank == 0)
    fprintf(stderr, "train: rank 0: the checkpoint's global batch %" PRIu64
            " cannot be split over %u rank%s x --grad-accum %u of this "
            "generation (--nnodes %u:%u); resume with a --grad-accum or a "
            "node count that divides it, or start the job with a "
            "--global-batch that every size divides (exit %d)\n",
            ckpt_global, r->world, r->world > 1 ? "s" : "", c->grad_accum,
            min, max,
            DR_TRAIN_ECONFIG);
  return DR_TRAIN_ECONFIG;
}
