/* The entry points of options.h: the layers (defaults, config file, PET_
 * environment, command line, each overriding the one before) are read by
 * launcher/flags.c from the rows of options_table.c; what is ddprun's own
 * is here: the checks that span several flags. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "options_internal.h"

/* ---- checks across flags ---------------------------------------------- */

static const char *nnodes_str(const dr_options_t *o, char *buf, size_t n) {
  if (o->min_nodes == o->max_nodes)
    snprintf(buf, n, "%u", o->max_nodes);
  else
    snprintf(buf, n, "%u:%u", o->min_nodes, o->max_nodes);
  return buf;
}

/* The same path, but for trailing slashes. */
static int same_dir(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  while (na > 1 && a[na - 1] == '/')
    na--;
  while (nb > 1 && b[nb - 1] == '/')
    nb--;
  return na == nb && memcmp(a, b, na) == 0;
}

static int check(dr_options_t *o, char *err, size_t err_len) {
  char nn[32];
  nnodes_str(o, nn, sizeof(nn));
  if (o->no_python && o->run_module)
    return dr_flags_fail(err, err_len,
                         "--no-python and -m/--module exclude each other: -m "
                         "runs a Python module, --no-python runs PROGRAM "
                         "directly");
  if (o->standalone) {
    if (o->rdzv_backend == DR_RDZV_STATIC)
      return dr_flags_fail(err, err_len,
                           "--standalone hosts a c10d rendezvous; drop "
                           "--rdzv-backend 'static'");
    if (o->have_endpoint)
      return dr_flags_fail(
          err, err_len,
          "--standalone picks its own endpoint; drop "
          "--rdzv-endpoint '%s%s%s:%u'",
          strchr(o->rdzv_host, ':') != NULL ? "[" : "", o->rdzv_host,
          strchr(o->rdzv_host, ':') != NULL ? "]" : "", o->rdzv_port);
    if (o->max_nodes > 1)
      return dr_flags_fail(err, err_len,
                           "--standalone runs a single node; --nnodes '%s' "
                           "needs --rdzv-endpoint instead",
                           nn);
    o->min_nodes = o->max_nodes = 1;
  }
  if (o->rdzv_backend == DR_RDZV_STATIC) {
    if (o->min_nodes != o->max_nodes)
      return dr_flags_fail(err, err_len,
                           "--nnodes '%s': --rdzv-backend static needs a fixed "
                           "node count, not a range",
                           nn);
    if (o->master_addr == NULL &&
        (o->master_addr = strdup("127.0.0.1")) == NULL)
      return -ENOMEM;
    if (o->node_rank < 0 && o->max_nodes > 1)
      return dr_flags_fail(err, err_len,
                           "--rdzv-backend static with --nnodes %s needs "
                           "--node-rank (0..%u) on each node",
                           nn, o->max_nodes - 1);
    if (o->node_rank < 0)
      o->node_rank = 0;
  } else if (!o->standalone && o->max_nodes > 1 && !o->have_endpoint) {
    return dr_flags_fail(err, err_len,
                         "--nnodes %s needs --rdzv-endpoint HOST[:PORT], the "
                         "node that hosts the rendezvous (or use "
                         "--rdzv-backend static)",
                         nn);
  }
  if (o->node_rank >= (int64_t)o->max_nodes)
    return dr_flags_fail(err, err_len,
                         "--node-rank %lld is out of range for --nnodes %s "
                         "(0..%u)",
                         (long long)o->node_rank, nn, o->max_nodes - 1);
  if (o->ckpt_persist != NULL && o->ckpt_dir == NULL)
    return dr_flags_fail(err, err_len,
                         "--ckpt-persist '%s' needs --ckpt-dir: it keeps "
                         "copies of that directory's checkpoints",
                         o->ckpt_persist);
  if (o->ckpt_persist != NULL && same_dir(o->ckpt_persist, o->ckpt_dir))
    return dr_flags_fail(err, err_len,
                         "--ckpt-persist '%s' is --ckpt-dir itself: give it "
                         "storage that outlives the nodes",
                         o->ckpt_persist);
  /* Copies need another node: by default one where there may be one. */
  if (o->ckpt_replicas < 0)
    o->ckpt_replicas = o->max_nodes > 1 ? 1 : 0;
  if (o->prog_argv == NULL)
    return dr_flags_fail(err, err_len,
                         "no program to run: ddprun [options] PROGRAM "
                         "[ARGS...]");
  return 0;
}

/* ---- the entry points ------------------------------------------------- */

int dr_options_parse(int argc, char **argv, char **envp, dr_options_t *o,
                     char *err, size_t err_len) {
  if (err != NULL && err_len > 0)
    err[0] = '\0';
  dr_flags_result_t res;
  int rc = dr__opt_defaults(o);
  if (rc != 0)
    goto out;
  rc = dr_flags_parse(&dr__opt_flags, o, argc, argv, envp, &res, err, err_len);
  if (rc != 0)
    goto out;
  o->given = res.given;
  o->prog_argv = res.prog_argv;
  o->prog_argc = res.prog_argc;
  if ((rc = dr__sched_apply(o, envp, err, err_len)) != 0)
    goto out;
  rc = check(o, err, err_len);
out:
  if (rc == -ENOMEM)
    dr_flags_oom(err, err_len);
  /* A caller that exits at once after --help or an error leaks nothing. */
  if (rc != 0)
    dr_options_free(o);
  return rc;
}

void dr_options_free(dr_options_t *o) {
  if (o == NULL)
    return;
  char **owned[] = {&o->master_addr,
                    &o->rdzv_host,
                    &o->rdzv_id,
                    &o->role,
                    &o->log_dir,
                    &o->local_ranks_filter,
                    &o->log_prefix_template,
                    &o->local_addr,
                    &o->signals_to_handle,
                    &o->cpu_list,
                    &o->secret_file,
                    &o->ckpt_dir,
                    &o->ckpt_persist,
                    &o->config_file,
                    &o->notice};
  for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) {
    free(*owned[i]);
    *owned[i] = NULL;
  }
  o->prog_argv = NULL;
  o->prog_argc = 0;
}

dr_bind_opts_t dr_options_bind(const dr_options_t *o) {
  dr_bind_opts_t b = {o->nproc_kind, o->nproc_per_node, o->cpu_bind,
                      o->cpu_list, o->gpu_bind};
  return b;
}

void dr_options_agent(const dr_options_t *o, dr_agent_opts_t *a) {
  memset(a, 0, sizeof(*a));
  a->rdzv_id = o->rdzv_id;
  a->max_restarts = o->max_restarts;
  a->min_nodes = o->min_nodes;
  a->max_nodes = o->max_nodes;
  a->node_rank = o->node_rank;
  a->local_addr = o->local_addr;
  a->join_timeout_ms = o->join_timeout_ms;
  a->heartbeat_timeout_ms = o->heartbeat_timeout_ms;
  a->hang_timeout_ms = o->hang_timeout_ms;
  a->stop_grace_ms = o->stop_grace_ms;
  a->signal_hold_ms = o->signal_hold_ms;
  a->role = o->role;
  a->log_dir = o->log_dir;
  a->redirects = o->redirects;
  a->tee = o->tee;
  a->local_ranks_filter = o->local_ranks_filter;
  a->log_prefix_template = o->log_prefix_template;
  a->signals_to_handle = o->signals_to_handle;
  a->secret_file = o->secret_file;
  a->ckpt_dir = o->ckpt_dir;
  a->ckpt_replicas = o->ckpt_replicas > 0 ? (uint32_t)o->ckpt_replicas : 0;
  a->ckpt_rate = o->ckpt_rate;
  a->ckpt_keep = o->ckpt_keep;
  a->ckpt_persist = o->ckpt_persist;
  a->ckpt_persist_every_ms = o->ckpt_persist_every_ms;
  a->bind = dr_options_bind(o);
}
