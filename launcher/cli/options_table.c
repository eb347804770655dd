/* ddprun's flags, one row each: its name, kind, default and help, and the
 * setter that parses its value (launcher/flags.h). --help is printed from
 * this table, so a flag cannot exist without its documentation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ddprun_version.h"
#include "flags_ini.h"
#include "log.h"
#include "options_internal.h"

#define OFF(field) offsetof(dr_options_t, field)

/* clang-format off */
const dr_flag_t dr__opt_table[] = {
  {"nnodes", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "N|MIN:MAX", "1",
   "Number of nodes, or the elastic range MIN:MAX: a round starts with MAX "
   "nodes, or with at least MIN once last_call_timeout has passed.",
   "Nodes and rendezvous", dr__set_nnodes, 0},
  {"nproc-per-node", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "N|auto|cpu|gpu", "1",
   "Workers on this node: a number; gpu = one per visible GPU; cpu = one "
   "per CPU this process may use; auto = gpu when there are GPUs, else cpu.",
   NULL, dr__set_nproc, 0},
  {"node-rank", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "R", "assigned",
   "This node's rank, 0..MAX-1. Required by --rdzv-backend static when "
   "--nnodes is above 1 (0 when it is 1); with c10d a request the "
   "rendezvous honours.",
   NULL, dr__set_node_rank, 0},
  {"master-addr", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "HOST", "rank 0's host",
   "Address of node 0 for static rendezvous (127.0.0.1 when not given); "
   "given to workers as MASTER_ADDR.",
   NULL, dr_flag_set_str, OFF(master_addr)},
  {"master-port", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "PORT", "a free port",
   "MASTER_PORT for the workers, 0-65535; by default a port free on the "
   "master host when the workers start.",
   NULL, dr__set_master_port, 0},
  {"rdzv-backend", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "c10d|static|slurm|k8s",
   "c10d",
   "c10d: nodes meet at --rdzv-endpoint (elastic, restartable). static: "
   "fixed --nnodes, --node-rank per node, node 0 hosts. slurm: c10d with "
   "nnodes, node rank, endpoint (first node, port 29400) and run id from "
   "SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST and SLURM_JOB_ID; "
   "SIGUSR1 is forwarded. k8s: c10d in an Indexed Job: node rank from "
   "JOB_COMPLETION_INDEX, endpoint <job>-0.$DDPRUN_K8S_SERVICE, run id the "
   "Job's name; needs --nnodes. Flags given win over derived values; slurm "
   "is the default when SLURM_JOB_ID is set and no --nnodes, "
   "--rdzv-endpoint, --node-rank or --standalone is.",
   NULL, dr__set_backend, 0},
  {"rdzv-endpoint", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "HOST[:PORT]", "none",
   "Rendezvous server; the port defaults to 29400, IPv6 as [ADDR]:PORT. The "
   "node whose address it names hosts the server.",
   NULL, dr__set_endpoint, 0},
  {"rdzv-id", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "ID", "none",
   "Job id, shared by every node of the job: letters, digits and ._:@+- "
   "(it names the --log-dir subdirectory).",
   NULL, dr__set_run_id, 0},
  {"rdzv-conf", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "K=V,...",
   "join_timeout=600, last_call_timeout=1, heartbeat_timeout=2, "
   "replacement_timeout=60",
   "Rendezvous settings, times in seconds: join_timeout (give up joining), "
   "last_call_timeout (wait for more nodes once MIN are in), "
   "heartbeat_timeout (declare a silent node dead), replacement_timeout "
   "(a job of fixed --nnodes N that loses a node waits this long for a "
   "replacement before it stops; 0: at once), is_host=0|1 (host the "
   "server here; by default when the endpoint names this node), "
   "metrics_port=PORT (the hosted server also serves GET /metrics and "
   "GET /healthz over HTTP on PORT; 0 picks a free one, logged).",
   NULL, dr__set_rdzv_conf, 0},
  {"standalone", 0, DR_FLAG_SWITCH, DR_FLAG_FROM_ALL, NULL, "off",
   "Single-node job: hosts its own rendezvous on a free port; implies "
   "--nnodes 1 and takes no --rdzv-endpoint.",
   NULL, dr_flag_set_bool, OFF(standalone)},
  {"max-restarts", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "N", "0",
   "Restarts of the worker group the job may spend, counted over all "
   "nodes.",
   NULL, dr__set_max_restarts, 0},
  {"monitor-interval", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "SECONDS", "0.1",
   "Accepted for torchrun compatibility; exits are seen by event.",
   NULL, dr__set_monitor, 0},

  {"role", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "NAME", "default",
   "Role of the workers (ROLE_NAME).",
   "Workers", dr_flag_set_str, OFF(role)},
  {"no-python", 0, DR_FLAG_SWITCH, DR_FLAG_FROM_ALL, NULL, "off",
   "Execute PROGRAM directly even when it ends in .py.",
   NULL, dr_flag_set_bool, OFF(no_python)},
  {"module", 'm', DR_FLAG_SWITCH, DR_FLAG_FROM_ALL, NULL, "off",
   "PROGRAM is a Python module: runs python3 -u -m PROGRAM.",
   NULL, dr_flag_set_bool, OFF(run_module)},
  {"log-dir", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "DIR", "none",
   "Write each worker's output to "
   "DIR/RUN_ID/attempt_N/RANK/{stdout,stderr}.log.",
   NULL, dr_flag_set_str, OFF(log_dir)},
  {"redirects", 'r', DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "MASK|LR:MASK,...", "0",
   "Send these streams to the log files only (under --log-dir, or a new "
   "directory in TMPDIR that ddprun names): 0 none, "
   "1 stdout, 2 stderr, 3 both; for all local ranks, or per local rank as "
   "0:3,1:1.",
   NULL, dr__set_std, OFF(redirects)},
  {"tee", 't', DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "MASK|LR:MASK,...", "0",
   "Copy these streams to the log files and the console; same syntax as "
   "--redirects.",
   NULL, dr__set_std, OFF(tee)},
  {"local-ranks-filter", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "LR,...", "all",
   "Show only these local ranks' output on the console, e.g. 0,2.",
   NULL, dr__set_ranks_filter, 0},
  {"log-line-prefix-template", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "TEMPLATE",
   "[rank${rank}]:",
   "Prefix of each worker output line; ${rank}, ${local_rank}, "
   "${role_name} and ${host} are replaced.",
   NULL, dr__set_template, 0},
  {"local-addr", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "ADDR", "the address the server sees",
   "Address this node announces to the rendezvous.",
   NULL, dr_flag_set_str, OFF(local_addr)},
  {"signals-to-handle", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "SIG,...",
   "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
   "Signals forwarded to the workers before ddprun exits 128+signal; names "
   "with or without SIG (SIGUSR1 for Slurm preemption).",
   NULL, dr__set_signals, 0},
  {"signal-hold", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "SECONDS", "30",
   "A forwarded signal that is not a stop (SIGUSR1, ...) waits, up to this "
   "long after a worker's start, until the worker catches, ignores or "
   "blocks it, so that one sent while a worker starts does not kill it; "
   "0: at once.",
   NULL, dr_flag_set_seconds, OFF(signal_hold_ms)},
  {"stop-grace", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "SECONDS", "10",
   "Time between SIGTERM and SIGKILL when workers are stopped.",
   NULL, dr_flag_set_seconds, OFF(stop_grace_ms)},

  {"ckpt-dir", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "DIR", "none",
   "A node-local directory (tmpfs or local disk) for the workers' "
   "checkpoints, made (mode 0700) if missing; workers get "
   "DDPRUN_CKPT_DIR and DDPRUN_CKPT_STEP. Each checkpoint renamed into it "
   "is copied to the next nodes, and a node that lacks the newest "
   "checkpoint any node holds fetches it before its workers start.",
   "Checkpoints in node memory", dr_flag_set_str, OFF(ckpt_dir)},
  {"ckpt-replicas", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "R",
   "1 when --nnodes allows other nodes, else 0",
   "Copies of each new checkpoint, on the next R nodes by node rank, 0 to "
   "8; 0: none.",
   NULL, dr__set_ckpt_replicas, 0},
  {"ckpt-replicate-rate", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "RATE", "48M",
   "The most bytes per second the copies take, with K, M or G (1024-based), "
   "so that they never starve the training's collectives; 0: no cap.",
   NULL, dr__set_ckpt_rate, 0},
  {"ckpt-keep", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "K", "3",
   "Checkpoints kept in --ckpt-dir of each node that wrote some: the newest "
   "K of this node's own, and of each peer's copies.",
   NULL, dr__set_ckpt_keep, 0},
  {"ckpt-persist", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "DIR2", "none",
   "Slower shared storage (NFS, a bucket mount) that outlives every node, "
   "made (mode 0700) if missing; needs --ckpt-dir. The agent of node 0 "
   "copies the newest checkpoint of --ckpt-dir there in the background, "
   "at most once per --ckpt-persist-every, keeping the newest --ckpt-keep; "
   "a node whose --ckpt-dir holds none at start copies DIR2's newest in "
   "first.",
   NULL, dr_flag_set_str, OFF(ckpt_persist)},
  {"ckpt-persist-every", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "SECONDS",
   "300",
   "The least time between two copies to --ckpt-persist, 1 to 86400.",
   NULL, dr__set_ckpt_persist_every, 0},

  {"gpu-bind", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "none|isolate", "none",
   "isolate: CUDA_VISIBLE_DEVICES holds only the worker's own GPU.",
   "Placement, security and ddprun itself", dr__set_gpu_bind, 0},
  {"cpu-bind", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "none|auto|LIST", "none",
   "auto: each local rank gets an equal, disjoint share of the allowed CPUs "
   "(near its GPU when known). LIST: one Linux cpulist per local rank, "
   "separated by ':', e.g. 0-3:4-7.",
   NULL, dr__set_cpu_bind, 0},
  {"secret-file", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "FILE", "none",
   "Shared secret of the job; without it no client can join or read the "
   "store.",
   NULL, dr_flag_set_str, OFF(secret_file)},
  {"hang-timeout", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "SECONDS|auto|off",
   "auto",
   "Treat a worker group that makes no progress for this long as hung. "
   "auto: no progress for 10 x the slowest step seen (at least 5 min; "
   "10 min of no CPU time for a program that does not report), a busy "
   "rank counts as working, and a node whose ranks only wait leaves the "
   "verdict to the node of the culprit.",
   NULL, dr__set_hang_timeout, 0},
  {"config", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ARGV | DR_FLAG_FROM_ENV, "FILE", "none",
   "Read options from this INI file (see below).",
   NULL, dr_flag_set_str, OFF(config_file)},
  {"log-level", 0, DR_FLAG_VALUE, DR_FLAG_FROM_ALL, "error|warn|info|debug",
   "info", "ddprun's own messages on stderr.",
   NULL, dr__set_log_level, 0},
  {"help", 'h', DR_FLAG_HELP, DR_FLAG_FROM_ARGV, NULL, NULL,
   "Show this help and exit.", NULL, NULL, 0},
  {"version", 0, DR_FLAG_VERSION, DR_FLAG_FROM_ARGV, NULL, NULL,
   "Print the version and the build's GPU code (CUDA and NCCL "
   "versions, or \"no GPU code\"), and exit.", NULL, NULL, 0},
};
/* clang-format on */

_Static_assert(sizeof(dr__opt_table) / sizeof(dr__opt_table[0]) <= 64,
               "dr_options_t.given has one bit per row");

const size_t dr__opt_count = sizeof(dr__opt_table) / sizeof(dr__opt_table[0]);

const dr_flags_t dr__opt_flags = {
    .prog = "ddprun",
    .version = DDPRUN_VERSION_LINE,
    .rows = dr__opt_table,
    .n_rows = sizeof(dr__opt_table) / sizeof(dr__opt_table[0]),
    .mode = DR_FLAGS_PROGRAM,
    .env_prefix = "PET_",
    .file_row = "config",
    .read_file = dr_flags_ini_read,
    .file_section = "ddprun",
    .usage = dr__opt_usage_head,
    .usage_tail = dr__opt_usage_tail,
};

const dr_flag_t *dr__opt_find(const char *name, size_t len, int nocase) {
  return dr_flags_find(&dr__opt_flags, name, len, nocase);
}

int dr__opt_defaults(dr_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->min_nodes = 1;
  o->max_nodes = 1;
  o->nproc_kind = DR_NPROC_NUMBER;
  o->nproc_per_node = 1;
  o->node_rank = -1;
  o->master_port = -1;
  o->rdzv_backend = DR_RDZV_C10D;
  o->rdzv_port = 29400;
  o->join_timeout_ms = 600000;
  o->last_call_timeout_ms = 1000;
  o->replacement_timeout_ms = 60000;
  o->heartbeat_timeout_ms = 2000;
  o->is_host = -1;
  o->metrics_port = -1;
  o->monitor_interval_s = 0.1;
  o->stop_grace_ms = 10000;
  o->signal_hold_ms = 30000;
  o->hang_timeout_ms = DR_HANG_AUTO;
  o->gpu_bind = DR_GPU_BIND_NONE;
  o->cpu_bind = DR_CPU_BIND_NONE;
  o->log_level = DR_LOG_INFO;
  o->ckpt_replicas = -1;
  o->ckpt_rate = 48ull << 20;
  o->ckpt_keep = 3;
  o->ckpt_persist_every_ms = 300000;
  o->rdzv_id = strdup("none");
  o->role = strdup("default");
  o->signals_to_handle = strdup("SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  if (o->rdzv_id == NULL || o->role == NULL || o->signals_to_handle == NULL)
    return -ENOMEM;
  return 0;
}
