/* ddprun's command line: the options of a launch, parsed from the command
 * line, PET_<NAME> environment variables and an INI file, with that
 * precedence (command line > environment > file > default).
 *
 * Flag names follow torchrun; each is accepted with dashes or underscores
 * (--nproc-per-node, --nproc_per_node), as --flag VALUE or --flag=VALUE.
 * Flags without a value (--standalone, --no-python, -m) take none on the
 * command line, and 1/0/true/false/yes/no in the environment and the file.
 * The environment variable of a flag is PET_ followed by its name in upper
 * case with underscores (PET_NPROC_PER_NODE); an empty one counts as unset.
 * The INI file (--config FILE, or PET_CONFIG) holds `name = value` lines,
 * outside any section or in a [ddprun] section, with the same names; any
 * other key or section is an error. A later layer replaces a flag's whole
 * value (--rdzv-conf is not merged key by key). The first argument that
 * does not start with '-' (or the one after `--`) is the program; the rest
 * are its arguments, even those that start with '-'.
 *
 * After a successful parse the checks across flags hold: --standalone means
 * 1:1 nodes and no endpoint; static rendezvous has a fixed node count, a
 * master_addr and a node_rank; c10d over more than one node has an
 * endpoint; node_rank < max_nodes; there is a program.
 *
 * Schedulers: --rdzv-backend slurm, or SLURM_JOB_ID set while none of
 * --nnodes, --rdzv-endpoint, --node-rank, --rdzv-backend and --standalone
 * is (in any layer), takes nnodes from SLURM_NNODES, the node rank from
 * SLURM_NODEID, the endpoint host from the first name of
 * SLURM_JOB_NODELIST (port 29400; node 0 hosts it) and the run id from
 * SLURM_JOB_ID, and adds SIGUSR1 to --signals-to-handle. --rdzv-backend
 * k8s takes the node rank from JOB_COMPLETION_INDEX, the endpoint from
 * <job>-0.$DDPRUN_K8S_SERVICE, where <job> is $DDPRUN_K8S_JOB or the pod's
 * HOSTNAME without its "-<index>", and the run id from <job>; --nnodes is
 * required. A flag given in any layer wins over the scheduler's value.
 * Both then become DR_RDZV_C10D, and `notice` says what was derived.
 */
#ifndef DR_OPTIONS_H
#define DR_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "agent.h" /* what the agent takes: binding, streams */

typedef enum {
  DR_RDZV_C10D,   /* dynamic rendezvous at --rdzv-endpoint */
  DR_RDZV_STATIC, /* --node-rank and --master-addr/--master-port */
  DR_RDZV_SLURM,  /* c10d set up from Slurm's environment; never left
                     after a successful parse (see dr_options_parse) */
  DR_RDZV_K8S     /* c10d set up from an Indexed Job's; likewise */
} dr_rdzv_backend_t;

typedef struct {
  /* topology */
  uint32_t min_nodes, max_nodes;      /* --nnodes N|MIN:MAX, default 1:1 */
  dr_nproc_kind_t nproc_kind;         /* --nproc-per-node N|auto|cpu|gpu */
  uint32_t nproc_per_node;            /* default 1; 0 for auto/cpu/gpu */
  int64_t node_rank;                  /* --node-rank, -1 = not given; static
                                         backend: 0 when nnodes is 1 */
  char *master_addr;                  /* --master-addr, NULL = not given;
                                         static backend: "127.0.0.1" */
  int32_t master_port;                /* --master-port, -1 = not given */
  /* rendezvous */
  dr_rdzv_backend_t rdzv_backend;     /* --rdzv-backend static|c10d */
  char *rdzv_host;                    /* --rdzv-endpoint HOST[:PORT]; an
                                         IPv6 address without brackets */
  uint16_t rdzv_port;                 /* default 29400 */
  int have_endpoint;                  /* --rdzv-endpoint was given */
  char *rdzv_id;                      /* --rdzv-id, default "none";
                                         [A-Za-z0-9._:@+-], no leading '.' */
  uint32_t join_timeout_ms;           /* rdzv-conf join_timeout, 600 s */
  uint32_t last_call_timeout_ms;      /* rdzv-conf last_call_timeout, 1 s */
  uint32_t replacement_timeout_ms;    /* rdzv-conf replacement_timeout, 60 s;
                                         0: a fixed job stops at once */
  uint32_t heartbeat_timeout_ms;      /* rdzv-conf heartbeat_timeout, 2 s */
  int is_host;                        /* rdzv-conf is_host: -1 auto, 0, 1 */
  int32_t metrics_port;               /* rdzv-conf metrics_port: -1 = off,
                                         0 = a free port */
  int standalone;                     /* --standalone; nodes are then 1:1 */
  uint32_t max_restarts;              /* --max-restarts, default 0 */
  double monitor_interval_s;          /* --monitor-interval (accepted) */
  /* workers */
  char *role;                         /* --role, default "default" */
  char *log_dir;                      /* --log-dir */
  dr_std_spec_t redirects;            /* --redirects 0|1|2|3|i:m,... */
  dr_std_spec_t tee;                  /* --tee */
  char *local_ranks_filter;           /* --local-ranks-filter "0,2"; valid
                                         local ranks; NULL = all */
  char *log_prefix_template;          /* --log-line-prefix-template, with
                                         ${rank} ${local_rank} ${role_name}
                                         ${host} only; NULL = unset */
  char *local_addr;                   /* --local-addr */
  int no_python;                      /* --no-python */
  int run_module;                     /* -m / --module */
  char *signals_to_handle;            /* default SIGTERM,SIGINT,SIGHUP,SIGQUIT;
                                         always this canonical form: SIG
                                         names, upper case, each once */
  uint32_t stop_grace_ms;             /* --stop-grace, default 10 s */
  uint32_t signal_hold_ms;            /* --signal-hold, default 30 s */
  dr_gpu_bind_t gpu_bind;             /* --gpu-bind none|isolate */
  dr_cpu_bind_t cpu_bind;             /* --cpu-bind none|auto|LIST */
  char *cpu_list;                     /* the LIST of --cpu-bind ("0-3:4-7",
                                         CPUs < CPU_SETSIZE); else NULL */
  char *secret_file;                  /* --secret-file */
  uint32_t hang_timeout_ms;           /* --hang-timeout, 0 = off,
                                         DR_HANG_AUTO: auto */
  /* checkpoints in node memory */
  char *ckpt_dir;                     /* --ckpt-dir, NULL = none */
  int32_t ckpt_replicas;              /* --ckpt-replicas 0..8; after a
                                         parse, 1 when not given and MAX
                                         nodes > 1, else 0 */
  uint64_t ckpt_rate;                 /* --ckpt-replicate-rate, bytes/s,
                                         default 64 MiB/s, 0 = no cap */
  uint32_t ckpt_keep;                 /* --ckpt-keep, default 3 */
  char *ckpt_persist;                 /* --ckpt-persist, NULL = none */
  uint32_t ckpt_persist_every_ms;     /* --ckpt-persist-every, default
                                         300 s */
  char *config_file;                  /* --config or PET_CONFIG */
  char *notice;                       /* one line for ddprun to print: the
                                         settings a scheduler gave; NULL */
  uint64_t given;                     /* bit i: row i of the flag table was
                                         set by some layer (internal) */
  int log_level;                      /* --log-level, dr_log_level_t */
  /* the program */
  char **prog_argv;                   /* NULL-terminated, borrowed from argv */
  int prog_argc;
} dr_options_t;

/* Parses argv (and envp, a NULL-terminated "NAME=value" array, and the
 * config file they name) into *o; getenv() is not used. Returns 0; 1 when
 * --help or --version was handled (printed to stdout; exit 0); DR_EBADARG
 * with a one-line message in err (for example "--nnodes '3:2': MIN must not
 * exceed MAX"; no "ddprun:" prefix, nothing printed), exit 2; or -ENOMEM.
 * Strings in *o are owned by it: free with dr_options_free(). On any
 * return but 0 they are already freed, and dr_options_free() is harmless.
 * *o is overwritten, not freed, first. argv must stay alive while
 * prog_argv is used; err may be NULL. */
int dr_options_parse(int argc, char **argv, char **envp, dr_options_t *o,
                     char *err, size_t err_len);

/* What the agent takes of o (borrowing o's strings) and what placement
 * takes of it. */
void dr_options_agent(const dr_options_t *o, dr_agent_opts_t *out);
dr_bind_opts_t dr_options_bind(const dr_options_t *o);

/* Frees the strings *o owns and sets them to NULL; safe to call twice. */
void dr_options_free(dr_options_t *o);

/* Prints the --help text (every flag with its default) to stdout. */
void dr_options_usage(void);


#endif /* DR_OPTIONS_H */
