/* The rendezvous a batch scheduler implies: --rdzv-backend slurm and k8s
 * (and Slurm detected from SLURM_JOB_ID) become c10d with the node count,
 * node rank, endpoint and run id taken from the scheduler's environment.
 * Anything given as a flag (any layer) wins over what is derived. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "errors.h"
#include "hostlist.h"
#include "options_internal.h"

static const char *env_of(char **envp, const char *name) {
  size_t n = strlen(name);
  for (char **e = envp; e != NULL && *e != NULL; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
      return (*e)[n + 1] != '\0' ? *e + n + 1 : NULL;
  return NULL;
}

static int given(const dr_options_t *o, const char *name) {
  return dr_flags_given(&dr__opt_flags, o->given, name);
}

/* A count or rank from the variable var: 0 and *out, or DR_EBADARG. */
static int env_uint(char **envp, const char *var, uint64_t cap, uint64_t *out,
                    const char *why, char *err, size_t err_len) {
  const char *v = env_of(envp, var);
  if (v == NULL)
    return dr_flags_fail(err, err_len, "%s is not set; %s", var, why);
  if (dr_parse_uint(v, strlen(v), cap, out) != 0) {
    char q[DR_FLAGS_QUOTE_LEN];
    return dr_flags_fail(err, err_len, "%s '%s' is not a number 0..%" PRIu64,
                         var, dr_flags_quote(v, q), cap);
  }
  return 0;
}

/* The endpoint names node 0, and node 0 alone hosts it: the name may not
 * resolve to an address this node can bind (a NAT, an alias). */
static void hosted_by_node0(dr_options_t *o) {
  o->have_endpoint = 1;
  if (o->is_host < 0)
    o->is_host = o->node_rank == 0;
}

static int set_host(dr_options_t *o, const char *host, char *err,
                    size_t err_len) {
  char *copy = strdup(host);
  if (copy == NULL)
    return dr_flags_oom(err, err_len);
  free(o->rdzv_host);
  o->rdzv_host = copy;
  hosted_by_node0(o);
  return 0;
}

/* The run id from the scheduler, through the --rdzv-id checks. */
static int set_run_id(dr_options_t *o, const char *var, const char *val,
                      char *err, size_t err_len) {
  const dr_flag_t *row = dr__opt_find("rdzv-id", 7, 0);
  return row->set(o, row, val, var, err, err_len);
}

/* Slurm forwards SIGUSR1 (#SBATCH --signal) to ask for a checkpoint. */
static int add_sigusr1(dr_options_t *o, char *err, size_t err_len) {
  if (strstr(o->signals_to_handle, "SIGUSR1") != NULL)
    return 0;
  size_t n = strlen(o->signals_to_handle) + sizeof(",SIGUSR1");
  char *s = malloc(n);
  if (s == NULL)
    return dr_flags_oom(err, err_len);
  snprintf(s, n, "%s,SIGUSR1", o->signals_to_handle);
  free(o->signals_to_handle);
  o->signals_to_handle = s;
  return 0;
}

static int from_slurm(dr_options_t *o, char **envp, char *err,
                      size_t err_len) {
  const char *job = env_of(envp, "SLURM_JOB_ID");
  if (job == NULL)
    return dr_flags_fail(err, err_len,
                         "--rdzv-backend slurm: SLURM_JOB_ID is not set; run "
                         "ddprun inside a Slurm job (sbatch, srun), or use "
                         "--rdzv-backend c10d");
  const char *list = env_of(envp, "SLURM_JOB_NODELIST");
  if (list == NULL)
    list = env_of(envp, "SLURM_NODELIST");
  char **hosts = NULL;
  size_t n_hosts = 0;
  int rc = 0;
  if (list == NULL)
    return dr_flags_fail(err, err_len,
                         "--rdzv-backend slurm: SLURM_JOB_NODELIST is not "
                         "set; run ddprun through srun in the allocation");
  char herr[384];
  rc = dr_hostlist_expand(list, DR_MAX_NODES, &hosts, &n_hosts, herr,
                          sizeof(herr));
  if (rc == -ENOMEM)
    return dr_flags_oom(err, err_len);
  if (rc != 0)
    return dr_flags_fail(err, err_len, "SLURM_JOB_NODELIST: %s", herr);
  if (!given(o, "nnodes")) {
    uint64_t nn = n_hosts;
    if (env_of(envp, "SLURM_NNODES") != NULL)
      rc = env_uint(envp, "SLURM_NNODES", DR_MAX_NODES, &nn, "", err, err_len);
    if (rc == 0 && (nn == 0 || nn != n_hosts))
      rc = dr_flags_fail(err, err_len,
                         "SLURM_NNODES %" PRIu64 " does not match the %zu "
                         "hosts of SLURM_JOB_NODELIST; give --nnodes",
                         nn, n_hosts);
    if (rc == 0)
      o->min_nodes = o->max_nodes = (uint32_t)nn;
  }
  /* A fixed-size job keeps Slurm's node ranks; under --nnodes MIN:MAX the
   * rendezvous orders the nodes, so that the job can go on without one
   * (a static rank beyond a smaller round would wait for the lost node).
   * Either way Slurm's node 0 hosts the server. */
  uint64_t id = 0;
  if (rc == 0 && !given(o, "node-rank")) {
    rc = env_uint(envp, "SLURM_NODEID", DR_MAX_NODES - 1, &id,
                  "start one ddprun per node with srun --ntasks-per-node=1, "
                  "or give --node-rank",
                  err, err_len);
    if (o->min_nodes == o->max_nodes)
      o->node_rank = (int64_t)id;
  } else if (rc == 0) {
    id = o->node_rank >= 0 ? (uint64_t)o->node_rank : 1;
  }
  if (rc == 0 && !given(o, "rdzv-endpoint")) {
    if (o->is_host < 0 && o->node_rank < 0)
      o->is_host = id == 0;
    rc = set_host(o, hosts[0], err, err_len);
  }
  if (rc == 0 && !given(o, "rdzv-id"))
    rc = set_run_id(o, "SLURM_JOB_ID", job, err, err_len);
  if (rc == 0)
    rc = add_sigusr1(o, err, err_len);
  dr_hostlist_free(&hosts, n_hosts);
  return rc;
}

static int from_k8s(dr_options_t *o, char **envp, char *err, size_t err_len) {
  uint64_t index = 0;
  int rc = env_uint(envp, "JOB_COMPLETION_INDEX", DR_MAX_NODES - 1, &index,
                    "--rdzv-backend k8s runs in the pods of an Indexed Job "
                    "(completionMode: Indexed)",
                    err, err_len);
  if (rc != 0)
    return rc;
  if (!given(o, "nnodes"))
    return dr_flags_fail(err, err_len,
                         "--rdzv-backend k8s needs --nnodes (the Job's "
                         "completions; PET_NNODES in the pod spec)");
  if (!given(o, "node-rank"))
    o->node_rank = (int64_t)index;
  /* The Job's name: DDPRUN_K8S_JOB, else the pod's host name, which an
   * Indexed Job with a subdomain sets to <job>-<index>. */
  const char *job = env_of(envp, "DDPRUN_K8S_JOB");
  size_t job_len = job != NULL ? strlen(job) : 0;
  if (job == NULL) {
    const char *h = env_of(envp, "HOSTNAME");
    char suffix[32];
    int k = snprintf(suffix, sizeof(suffix), "-%" PRIu64, index);
    size_t hl = h != NULL ? strlen(h) : 0;
    if (hl > (size_t)k && strcmp(h + hl - (size_t)k, suffix) == 0) {
      job = h;
      job_len = hl - (size_t)k;
    }
  }
  if (!given(o, "rdzv-endpoint")) {
    const char *svc = env_of(envp, "DDPRUN_K8S_SERVICE");
    if (svc == NULL)
      return dr_flags_fail(err, err_len,
                           "--rdzv-backend k8s: DDPRUN_K8S_SERVICE is not "
                           "set; set it to the Job's headless Service (the "
                           "pods' subdomain), or give --rdzv-endpoint");
    if (job == NULL)
      return dr_flags_fail(err, err_len,
                           "--rdzv-backend k8s: cannot tell the Job's name: "
                           "HOSTNAME does not end in -%" PRIu64 " "
                           "(JOB_COMPLETION_INDEX); set DDPRUN_K8S_JOB",
                           index);
    char host[600];
    int n = snprintf(host, sizeof(host), "%.*s-0.%s", (int)job_len, job, svc);
    const dr_flag_t *row = dr__opt_find("rdzv-endpoint", 13, 0);
    /* Through the endpoint's own checks: a bad name fails here. */
    if (n < 0 || (size_t)n >= sizeof(host))
      return dr_flags_fail(err, err_len, "DDPRUN_K8S_SERVICE is too long");
    rc = row->set(o, row, host, "the endpoint from DDPRUN_K8S_SERVICE", err,
                  err_len);
    if (rc != 0)
      return rc;
    hosted_by_node0(o);
  }
  if (!given(o, "rdzv-id") && job != NULL) {
    char id[256];
    snprintf(id, sizeof(id), "%.*s", (int)job_len, job);
    rc = set_run_id(o, "the Job's name", id, err, err_len);
  }
  return rc;
}

/* One line for ddprun to print: where the settings came from. */
static int note(dr_options_t *o, const char *from, int auto_detected) {
  char line[512];
  snprintf(line, sizeof(line),
           "%s%s: nnodes %u, node rank %lld, rendezvous %s:%u%s, run id %s",
           auto_detected ? "SLURM_JOB_ID is set and no --nnodes, "
                           "--rdzv-endpoint, --node-rank or --rdzv-backend "
                           "given; using --rdzv-backend slurm: "
                         : "",
           from, o->max_nodes, (long long)o->node_rank, o->rdzv_host,
           o->rdzv_port, o->is_host == 1 ? " (hosted here)" : "", o->rdzv_id);
  free(o->notice);
  o->notice = strdup(line);
  return o->notice != NULL ? 0 : -ENOMEM;
}

int dr__sched_apply(dr_options_t *o, char **envp, char *err, size_t err_len) {
  int auto_detected = 0;
  if (o->rdzv_backend != DR_RDZV_SLURM && o->rdzv_backend != DR_RDZV_K8S) {
    static const char *const explicit[] = {"nnodes", "rdzv-endpoint",
                                           "node-rank", "rdzv-backend",
                                           "standalone"};
    if (env_of(envp, "SLURM_JOB_ID") == NULL)
      return 0;
    for (size_t i = 0; i < sizeof(explicit) / sizeof(explicit[0]); i++)
      if (given(o, explicit[i]))
        return 0;
    o->rdzv_backend = DR_RDZV_SLURM;
    auto_detected = 1;
  }
  int slurm = o->rdzv_backend == DR_RDZV_SLURM;
  if (o->standalone)
    return dr_flags_fail(err, err_len,
                         "--standalone runs without a scheduler; drop "
                         "--rdzv-backend %s",
                         slurm ? "slurm" : "k8s");
  int rc = slurm ? from_slurm(o, envp, err, err_len)
                 : from_k8s(o, envp, err, err_len);
  if (rc != 0)
    return rc;
  o->rdzv_backend = DR_RDZV_C10D;
  return note(o, slurm ? "Slurm" : "Kubernetes", auto_detected);
}
