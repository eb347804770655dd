/* Internals of ddprun's command line, shared by options.c (the entry
 * points; the checks across flags), options_table.c (one row per flag, over
 * the generic flag tables of launcher/flags.h), options_set.c and
 * options_set_workers.c and options_set_ckpt.c (the value parsers the rows
 * point to),
 * options_usage.c (what --help says around the rows) and options_sched.c
 * (what a scheduler's environment implies). */
#ifndef DR_OPTIONS_INTERNAL_H
#define DR_OPTIONS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "flags.h"
#include "options.h"

/* ddprun's flags: the table and the program it is part of. */
extern const dr_flag_t dr__opt_table[];
extern const size_t dr__opt_count;
extern const dr_flags_t dr__opt_flags;

/* The names the unit tests know the rows by. */
typedef dr_flag_t dr__opt_t;
#define DR__OPT_VALUE DR_FLAG_VALUE
#define DR__OPT_FLAG DR_FLAG_SWITCH
#define DR__OPT_HELP DR_FLAG_HELP
#define DR__OPT_VERSION DR_FLAG_VERSION

/* The row named name[0..len) with dashes or underscores; case-insensitive
 * when nocase. NULL when there is none. */
const dr_flag_t *dr__opt_find(const char *name, size_t len, int nocase);

/* Fills o with the defaults. 0 or -ENOMEM. */
int dr__opt_defaults(dr_options_t *o);

/* --help around the rows (options_usage.c): what comes before them, and
 * the program, the environment, the config file, schedulers and exit
 * codes after them. */
extern const char dr__opt_usage_head[];
void dr__opt_usage_tail(FILE *f);

/* Every refusal of a setter goes through FAIL, which writes "WHAT 'VALUE':
 * REASON" with its flag and value, and returns DR_EBADARG. */
#define FAIL(...)                                                              \
  return dr_flags_fail_value(err, err_len, what, val, __VA_ARGS__)

/* The value parsers of ddprun's own kinds of value (options_set.c,
 * options_set_workers.c); strings, switches and seconds use the generic
 * setters of flags.h. */
int dr__set_nnodes(void *dst, const dr_flag_t *row, const char *val,
                   const char *what, char *err, size_t err_len);
int dr__set_nproc(void *dst, const dr_flag_t *row, const char *val,
                  const char *what, char *err, size_t err_len);
int dr__set_node_rank(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len);
int dr__set_master_port(void *dst, const dr_flag_t *row, const char *val,
                        const char *what, char *err, size_t err_len);
int dr__set_backend(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len);
int dr__set_endpoint(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len);
int dr__set_run_id(void *dst, const dr_flag_t *row, const char *val,
                   const char *what, char *err, size_t err_len);
int dr__set_rdzv_conf(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len);
int dr__set_max_restarts(void *dst, const dr_flag_t *row, const char *val,
                         const char *what, char *err, size_t err_len);
int dr__set_monitor(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len);
int dr__set_std(void *dst, const dr_flag_t *row, const char *val,
                const char *what, char *err, size_t err_len);
int dr__set_ranks_filter(void *dst, const dr_flag_t *row, const char *val,
                         const char *what, char *err, size_t err_len);
int dr__set_template(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len);
int dr__set_signals(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len);
int dr__set_gpu_bind(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len);
int dr__set_hang_timeout(void *dst, const dr_flag_t *row, const char *val,
                         const char *what, char *err, size_t err_len);
int dr__set_cpu_bind(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len);
int dr__set_log_level(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len);
/* options_set_ckpt.c: --ckpt-replicas, --ckpt-replicate-rate, --ckpt-keep,
 * --ckpt-persist-every. */
int dr__set_ckpt_replicas(void *dst, const dr_flag_t *row, const char *val,
                          const char *what, char *err, size_t err_len);
int dr__set_ckpt_rate(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len);
int dr__set_ckpt_keep(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len);
int dr__set_ckpt_persist_every(void *dst, const dr_flag_t *row,
                               const char *val, const char *what, char *err,
                               size_t err_len);

/* options_sched.c: turns --rdzv-backend slurm/k8s (or a Slurm job
 * detected from SLURM_JOB_ID) into c10d settings; see options.h. Called
 * after every layer and before the checks across flags. 0 or DR_EBADARG
 * (or -ENOMEM) with the message in err. */
int dr__sched_apply(dr_options_t *o, char **envp, char *err, size_t err_len);

#endif /* DR_OPTIONS_INTERNAL_H */
