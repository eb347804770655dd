/* train's use of host-shared weights (host_weights.h): whether this run
 * may and should share, the segment's set-up across the ranks, the step.
 * --host-weights auto|shared|private. */
#include "train.h"

#include "host_weights.h"
#include "train_hostw.h"
#include "mono.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Why this rank cannot share (NULL: it can). */
static const char *cannot(const dr_run_t *r) {
  if (r->world < 2)
    return "one rank has nobody to share with";
  if (r->use_gpu)
    return "the weights are on the GPU";
  if (r->pgc.local_world != r->world)
    return "ranks run on other hosts (every rank must be on this one)";
  if (!dr_pg_links_shm(r->pg))
    return "a ring link is TCP (--force-tcp, or shared memory unusable)";
  if (r->cmp != NULL)
    return "--grad-compress or --loss-scale is set";
  if (r->c.bucket_cap_auto || r->c.profile_out != NULL)
    return "--bucket-cap-mb auto and --profile-out measure the all-reduce";
  return NULL;
}

/* auto: share where the collectives would run on the compute thread
 * anyway (the CPUs are full: nothing overlaps) and the schedule was not
 * asked for by name (--comm-schedule, DR_PG_SCHEDULE). */
static int wanted(const dr_run_t *r) {
  const char *w = r->c.host_weights;
  if (strcmp(w, "shared") == 0)
    return 1;
  if (strcmp(w, "private") == 0)
    return 0;
  return dr_pg_inline(r->pg) && r->pgc.schedule == DR_PG_SCHED_AUTO;
}

/* The model's weights before they are shared: its parameters lie one
 * after the other in registration order (model.c). */
static const float *own_weights(dr_run_t *r) {
  return dr_model_param(r->model, 0)->w;
}

/* MAX over the ranks of v (0 or a small positive number). */
static int agree_max(dr_run_t *r, float *v, const char *what) {
  char err[256] = "";
  int rc = dr_pg_allreduce_sync(r->pg, v, 1, DR_PG_MAX, err, sizeof(err));
  return rc != 0 ? dr_train_comm_failed(r, what, rc, err) : 0;
}

int dr_train_hostw_open(dr_run_t *r) {
  if (strcmp(r->c.host_weights, "private") == 0 || r->world < 2)
    return 0;
  const int asked = strcmp(r->c.host_weights, "shared") == 0;
  const char *why = cannot(r);
  /* Every rank takes part in the agreement whatever it found alone. */
  float v = why != NULL ? 2.0f : wanted(r) ? 0.0f : 1.0f;
  int rc = agree_max(r, &v, "shared-weights agreement");
  if (rc != 0)
    return rc;
  if (v != 0.0f) {
    if (asked) {
      if (why != NULL)
        fprintf(stderr, "train: rank %u: --host-weights shared: %s; use "
                "--host-weights private or auto (exit %d)\n", r->rank, why,
                DR_TRAIN_ECONFIG);
      return DR_TRAIN_ECONFIG;
    }
    return 0;
  }
  dr_hostw_shape_t s = {
      .rank = r->rank,
      .world = r->world,
      .n_elems = dr_model_n_elems(r->model),
      .state_elems = dr_optim_state_elems(r->opt),
      .max_buckets = dr_model_n_params(r->model),
  };
  /* Rank 0 names and makes the segment; the name reaches the others with
   * its verdict. */
  struct {
    char name[DR_HOSTW_NAME_MAX + 1];
    int32_t rc;
  } msg;
  memset(&msg, 0, sizeof(msg));
  char err[512] = "";
  int taken = 0;
  if (r->rank == 0) {
    /* A name nobody can guess: one that another local user created first
     * would cost the sharing (auto) or the run (shared). */
    msg.rc = dr_hostw_create(msg.name, sizeof(msg.name), "weights", &s,
                             own_weights(r), dr_optim_state(r->opt),
                             &r->hostw, &taken, err, sizeof(err));
    if (msg.rc == 0 && taken > 0)
      fprintf(stderr, "train: rank 0: %d shared-memory name%s for the shared "
              "weights %s already taken in /dev/shm (by another user?); "
              "created %s instead\n", taken, taken == 1 ? "" : "s",
              taken == 1 ? "was" : "were", msg.name);
    else if (msg.rc == -EEXIST)
      snprintf(err + strlen(err), sizeof(err) - strlen(err), " (every one of "
               "%d names tried was taken)", taken);
  }
  char berr[256] = "";
  rc = dr_pg_broadcast_sync(r->pg, &msg, sizeof(msg), 0, berr, sizeof(berr));
  if (rc != 0) {
    if (r->hostw != NULL)
      dr_hostw_unlink(r->hostw);
    dr_hostw_close(&r->hostw);
    return dr_train_comm_failed(r, "shared-weights set-up", rc, berr);
  }
  int mine = msg.rc;
  if (r->rank != 0 && msg.rc == 0)
    mine = dr_hostw_open(msg.name, &s, own_weights(r),
                         dr_optim_state(r->opt), &r->hostw, err, sizeof(err));
  v = mine != 0 ? 1.0f : 0.0f;
  rc = agree_max(r, &v, "shared-weights set-up");
  /* Every rank mapped it, or none will: the name goes either way, from
   * every rank that holds it, so that it goes also when rank 0 is killed
   * in the agreement. */
  if (r->hostw != NULL)
    dr_hostw_unlink(r->hostw);
  if (rc != 0 || v != 0.0f) {
    dr_hostw_close(&r->hostw);
    if (rc != 0)
      return rc;
    int own_failure = r->rank == 0 ? msg.rc != 0 : msg.rc == 0 && mine != 0;
    if (own_failure)
      fprintf(stderr, "train: rank %u: %s the shared weights (%.1f MiB in "
              "/dev/shm): %s; %s\n", r->rank, asked ? "cannot set up" :
              "going on without", dr_hostw_bytes(&s) / 1048576.0, err,
              asked ? "use --host-weights private or a larger /dev/shm "
              "(exit 2)" : "each rank keeps its own copy");
    return asked ? DR_TRAIN_ECONFIG : 0;
  }
  if (dr_hostw_attach(r->hostw, r->model, r->opt) != 0)
    return dr_train_nomem(r, "the shared weights' parameter table");
  dr_hostw_watch(r->hostw, r->pg);
  rc = dr_reducer_redirect(r->red, dr_hostw_launch, r->hostw, dr_hostw_alloc,
                           dr_hostw_free, r->hostw);
  if (rc != 0)
    return dr_train_nomem(r, "the gradient buckets in shared memory");
  if (r->rank == 0)
    fprintf(stderr, "train: rank 0: one shared copy of the weights for the "
            "%u ranks of this host (%.1f MiB in /dev/shm%s): each rank sums "
            "its shard of every bucket from the others' gradients and "
            "updates it; no all-reduce of the gradients "
            "(--host-weights private to keep a copy each)\n", r->world,
            dr_hostw_bytes(&s) / 1048576.0,
            asked ? ", asked for" : "; the CPUs are full");
  return 0;
}

int dr_train_hostw_step(dr_run_t *r, uint64_t step, dr_step_time_t *st) {
  dr_hostw_stats_t hs;
  char err[256] = "";
  uint64_t deadline = dr_mono_us() * 1000u +
                      (uint64_t)r->pgc.timeout_ms * 1000000u;
  int rc = dr_hostw_step(r->hostw, r->model, r->opt,
                         dr_reducer_n_buckets(r->red), step, deadline, &hs,
                         err, sizeof(err));
  if (rc != 0)
    return dr_train_comm_failed(r, "gradient sum (shared weights)", rc, err);
  st->comm_ms = (hs.wait_us + hs.work_us) / 1e3;
  st->exposed_ms = st->comm_ms;
  return 0;
}
