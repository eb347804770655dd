/* The worker's environment: exactly torchrun's variables, plus ddprun's
 * own (DDPRUN_*, PyTorch's flight recorder, the Python start-up hook
 * first on PYTHONPATH), over the agent's environment. */
#include "agent_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyboot.h"

extern char **environ;

/* Variables the contract sets; inherited values of these are dropped. */
static const char *const owned[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
    "DDPRUN_RDZV_ENDPOINT", "DDPRUN_RUN_ID", "DDPRUN_GENERATION",
    "DDPRUN_NODE_RANK", "DDPRUN_NNODES", "DDPRUN_ERROR_FILE",
    "DDPRUN_SECRET_FILE", "DDPRUN_CPUS", "DDPRUN_BOOTSTRAP",
    "DDPRUN_PROGRESS_FILE", "DDPRUN_CLOCK_OFFSET_US",
    "DDPRUN_CLOCK_UNCERTAINTY_US", "DDPRUN_SHM_PREFIX", "DDPRUN_CKPT_DIR",
    "DDPRUN_CKPT_STEP", "DDPRUN_MIN_NNODES", "DDPRUN_MAX_NNODES",
    "DDPRUN_FR_DUMP", NULL};

static int is_owned(const char *kv) {
  const char *eq = strchr(kv, '=');
  size_t n = eq != NULL ? (size_t)(eq - kv) : strlen(kv);
  for (int i = 0; owned[i] != NULL; i++)
    if (strlen(owned[i]) == n && strncmp(kv, owned[i], n) == 0)
      return 1;
  return 0;
}

typedef struct {
  char text[16384];
  size_t used;
  const char *vars[64];
  size_t n;
} extra_t;

/* 1 when added; 0 when there is no room left. */
static int put(extra_t *x, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int put(extra_t *x, const char *name, const char *fmt, ...) {
  if (x->n >= sizeof(x->vars) / sizeof(x->vars[0]))
    return 0;
  char *dst = x->text + x->used;
  size_t room = sizeof(x->text) - x->used;
  int k = snprintf(dst, room, "%s=", name);
  if (k < 0 || (size_t)k >= room)
    return 0;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(dst + k, room - (size_t)k, fmt, ap);
  va_end(ap);
  if (m < 0 || (size_t)(k + m) >= room)
    return 0;
  x->vars[x->n++] = dst;
  x->used += (size_t)(k + m) + 1;
  return 1;
}

void dr_env_fr_dump_path(const char *error_file, char *out, size_t n) {
  const char *slash = strrchr(error_file, '/');
  if (slash == NULL)
    snprintf(out, n, "%s", "");
  else
    snprintf(out, n, "%.*s/fr_trace.json", (int)(slash - error_file),
             error_file);
}

void dr_env_nccl_dump_prefix(const dr_agent_opts_t *o, const char *error_file,
                             char *out, size_t n) {
  const char *fr = getenv("TORCH_FR_DUMP_TEMP_FILE");
  const char *nccl = getenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE");
  /* <attempt dir>/<rank>/error.json: the attempt's directory, where
   * torchfrtrace reads every rank's dump at once. */
  const char *slash = strrchr(error_file, '/');
  const char *up = slash != NULL
                       ? memrchr(error_file, '/', (size_t)(slash - error_file))
                       : NULL;
  if (fr != NULL || nccl != NULL || o->log_dir == NULL || up == NULL)
    snprintf(out, n, "%s", fr != NULL     ? fr
                           : nccl != NULL ? nccl
                                          : "/tmp/nccl_trace_rank_");
  else
    snprintf(out, n, "%.*s/nccl_trace_rank_", (int)(up - error_file),
             error_file);
}

char **dr_env_build(const dr_env_t *e) {
  static const char hex[] = "0123456789abcdef";
  extra_t *x = calloc(1, sizeof(*x));
  if (x == NULL)
    return NULL;
  const char *role = e->o->role != NULL ? e->o->role : "default";
  put(x, "RANK", "%u", e->rank);
  put(x, "LOCAL_RANK", "%u", e->local_rank);
  put(x, "WORLD_SIZE", "%u", e->world);
  put(x, "LOCAL_WORLD_SIZE", "%u", e->local_world);
  put(x, "GROUP_RANK", "%u", e->node_rank);
  put(x, "GROUP_WORLD_SIZE", "%u", e->nnodes);
  put(x, "ROLE_RANK", "%u", e->rank);
  put(x, "ROLE_WORLD_SIZE", "%u", e->world);
  put(x, "ROLE_NAME", "%s", role);
  put(x, "MASTER_ADDR", "%s", e->master_addr);
  put(x, "MASTER_PORT", "%u", e->master_port);
  put(x, "TORCHELASTIC_RESTART_COUNT", "%u", e->restart_count);
  put(x, "TORCHELASTIC_MAX_RESTARTS", "%u", e->max_restarts);
  put(x, "TORCHELASTIC_RUN_ID", "%s", e->run_id);
  /* Rank 0 hosts its own TCPStore on MASTER_PORT. */
  put(x, "TORCHELASTIC_USE_AGENT_STORE", "False");
  if (e->error_file != NULL) {
    put(x, "TORCHELASTIC_ERROR_FILE", "%s", e->error_file);
    put(x, "DDPRUN_ERROR_FILE", "%s", e->error_file);
  }
  if (e->local_world > 1 && getenv("OMP_NUM_THREADS") == NULL)
    put(x, "OMP_NUM_THREADS", "1");
  /* PyTorch's flight recorder: every process group keeps its last
   * collectives, with sequence numbers, for a hang report (fr.h); other
   * programs ignore it. Its dumps go under the rank's files (with
   * --log-dir: kept): NCCL's on its own timeout in the attempt's
   * directory, the one the Python start-up hook (pyboot.h) writes to
   * DDPRUN_FR_DUMP, when the agent asks, in the rank's. */
  if (getenv("TORCH_FR_BUFFER_SIZE") == NULL &&
      getenv("TORCH_NCCL_TRACE_BUFFER_SIZE") == NULL)
    put(x, "TORCH_FR_BUFFER_SIZE", "2000");
  char fr_dump[1100] = "";
  if (e->error_file != NULL)
    dr_env_fr_dump_path(e->error_file, fr_dump, sizeof(fr_dump));
  if (fr_dump[0] != '\0') {
    put(x, "DDPRUN_FR_DUMP", "%s", fr_dump);
    if (e->o->log_dir != NULL && getenv("TORCH_FR_DUMP_TEMP_FILE") == NULL &&
        getenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == NULL) {
      char prefix[1100];
      dr_env_nccl_dump_prefix(e->o, e->error_file, prefix, sizeof(prefix));
      put(x, "TORCH_FR_DUMP_TEMP_FILE", "%s", prefix);
      put(x, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "%s", prefix);
    }
  }
  /* The Python start-up hook (pyboot.h) ahead of the user's PYTHONPATH:
   * every Python rank answers the agent's flight recorder requests. */
  int set_pp = 0;
  if (e->pyboot != NULL && e->pyboot[0] != '\0') {
    char pp[8192];
    set_pp = dr_pyboot_pythonpath(e->pyboot, getenv("PYTHONPATH"), pp,
                                  sizeof(pp)) == 0 &&
             put(x, "PYTHONPATH", "%s", pp);
  }
  if (getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING") == NULL)
    put(x, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  int set_cuda = e->bind != NULL && e->bind->have_gpu;
  if (set_cuda)
    put(x, "CUDA_VISIBLE_DEVICES", "%s", e->bind->gpu);
  put(x, "DDPRUN_RDZV_ENDPOINT", "%s:%u", e->rdzv_host, e->rdzv_port);
  put(x, "DDPRUN_RUN_ID", "%s", e->run_id);
  put(x, "DDPRUN_GENERATION", "%llu", (unsigned long long)e->gen);
  put(x, "DDPRUN_NODE_RANK", "%u", e->node_rank);
  put(x, "DDPRUN_NNODES", "%u", e->nnodes);
  if (e->o->max_nodes > 0) {
    put(x, "DDPRUN_MIN_NNODES", "%u", e->o->min_nodes);
    put(x, "DDPRUN_MAX_NNODES", "%u", e->o->max_nodes);
  }
  /* Added to this host's CLOCK_REALTIME, a timestamp reads on the
   * rendezvous server's clock: traces of every node merge on it. */
  if (e->clock_uncertainty_us != DR_NONE) {
    put(x, "DDPRUN_CLOCK_OFFSET_US", "%lld", (long long)e->clock_offset_us);
    put(x, "DDPRUN_CLOCK_UNCERTAINTY_US", "%llu",
        (unsigned long long)e->clock_uncertainty_us);
  }
  if (e->progress_file != NULL && e->progress_file[0] != '\0')
    put(x, "DDPRUN_PROGRESS_FILE", "%s", e->progress_file);
  if (e->shm_prefix != NULL && e->shm_prefix[0] != '\0')
    put(x, "DDPRUN_SHM_PREFIX", "%s", e->shm_prefix);
  if (e->o->secret_file != NULL)
    put(x, "DDPRUN_SECRET_FILE", "%s", e->o->secret_file);
  /* The node-local checkpoints, and the newest complete one there as the
   * workers start (after any restore). */
  if (e->o->ckpt_dir != NULL) {
    put(x, "DDPRUN_CKPT_DIR", "%s", e->o->ckpt_dir);
    if (e->ckpt_step != DR_NONE)
      put(x, "DDPRUN_CKPT_STEP", "%llu", (unsigned long long)e->ckpt_step);
  }
  if (e->bind != NULL && e->bind->have_cpus) {
    char cpus[512];
    put(x, "DDPRUN_CPUS", "%s",
        dr_cpuset_format(&e->bind->cpus, cpus, sizeof(cpus)));
  }
  if (e->bootstrap_len > 0 && e->bootstrap_len <= 4096) {
    char *h = malloc(e->bootstrap_len * 2 + 1);
    if (h != NULL) {
      for (size_t i = 0; i < e->bootstrap_len; i++) {
        h[2 * i] = hex[e->bootstrap[i] >> 4];
        h[2 * i + 1] = hex[e->bootstrap[i] & 15];
      }
      h[2 * e->bootstrap_len] = '\0';
      put(x, "DDPRUN_BOOTSTRAP", "%s", h);
      free(h);
    }
  }

  size_t n_env = 0, bytes = x->used;
  for (char **p = environ; *p != NULL; p++) {
    if (is_owned(*p) ||
        (set_cuda && strncmp(*p, "CUDA_VISIBLE_DEVICES=", 21) == 0) ||
        (set_pp && strncmp(*p, "PYTHONPATH=", 11) == 0))
      continue;
    n_env++;
    bytes += strlen(*p) + 1;
  }
  size_t n_ptr = n_env + x->n + 1;
  char **out = malloc(n_ptr * sizeof(char *) + bytes);
  if (out == NULL) {
    free(x);
    return NULL;
  }
  char *pool = (char *)(out + n_ptr);
  size_t k = 0;
  for (char **p = environ; *p != NULL; p++) {
    if (is_owned(*p) ||
        (set_cuda && strncmp(*p, "CUDA_VISIBLE_DEVICES=", 21) == 0) ||
        (set_pp && strncmp(*p, "PYTHONPATH=", 11) == 0))
      continue;
    size_t len = strlen(*p) + 1;
    memcpy(pool, *p, len);
    out[k++] = pool;
    pool += len;
  }
  for (size_t i = 0; i < x->n; i++) {
    size_t len = strlen(x->vars[i]) + 1;
    memcpy(pool, x->vars[i], len);
    out[k++] = pool;
    pool += len;
  }
  out[k] = NULL;
  free(x);
  return out;
}
