/* Internals of the option parser, shared by options.c (the layers: argv,
 * environment, config file; the checks across flags), options_table.c (one
 * row per flag), options_set.c and options_set_workers.c (the value parsers
 * the rows point to) and options_usage.c (--help from the table). */
#ifndef DR_OPTIONS_INTERNAL_H
#define DR_OPTIONS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "options.h"

typedef enum {
  DR__OPT_VALUE,  /* --name VALUE or --name=VALUE */
  DR__OPT_FLAG,   /* --name alone; 1/0/true/false/yes/no in env and file */
  DR__OPT_HELP,   /* -h/--help: handled while scanning argv */
  DR__OPT_VERSION /* --version: likewise */
} dr__opt_kind_t;

/* Where a row may be set from. */
#define DR__FROM_ARGV 1u
#define DR__FROM_ENV 2u
#define DR__FROM_FILE 4u
#define DR__FROM_ALL (DR__FROM_ARGV | DR__FROM_ENV | DR__FROM_FILE)

typedef struct dr__opt dr__opt_t;

/* Applies val to o. `what` names where the value came from, for the error
 * message: "--nnodes", "PET_NNODES" or "cfg.ini:3: nnodes"; a failing
 * setter writes "WHAT 'VALUE': what is wrong" to err and returns DR_EBADARG
 * (or -ENOMEM). A setter replaces everything its flag controls, so a later
 * layer fully overrides an earlier one. FLAG rows get "1" from argv. */
typedef int (*dr__opt_set_fn)(dr_options_t *o, const dr__opt_t *row,
                              const char *val, const char *what, char *err,
                              size_t err_len);

struct dr__opt {
  const char *name; /* canonical, dashed, without the leading "--" */
  char short_name;  /* 'h' for -h, or 0 */
  dr__opt_kind_t kind;
  unsigned from;       /* DR__FROM_* */
  const char *metavar; /* shown by --help after the name; NULL for flags */
  const char *def;     /* default as --help shows it; NULL: none shown */
  const char *help;
  const char *group; /* a heading printed before this row, or NULL */
  dr__opt_set_fn set;
  size_t off; /* the field the generic setters write */
};

extern const dr__opt_t dr__opt_table[];
extern const size_t dr__opt_count;

/* The row named name[0..len) with dashes or underscores; case-insensitive
 * when nocase. NULL when there is none. */
const dr__opt_t *dr__opt_find(const char *name, size_t len, int nocase);

/* Fills o with the defaults. 0 or -ENOMEM. */
int dr__opt_defaults(dr_options_t *o);

/* Writes the --help text to f. */
void dr__opt_usage_write(FILE *f);

/* "1", "0", "true", "false", "yes", "no" (any case). 0 or DR_EBADARG. */
int dr__opt_parse_bool(const char *s, int *out);

/* Formats into err (when there is room) and returns DR_EBADARG. */
int dr__opt_fail(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A value as it may appear in a one-line message: non-printable bytes as
 * \xNN, cut after DR__QUOTE_MAX bytes with "...". Returns out. */
#define DR__QUOTE_MAX 100
#define DR__QUOTE_LEN (DR__QUOTE_MAX * 4 + 4)
char *dr__opt_quote(const char *v, char out[DR__QUOTE_LEN]);

/* Writes "WHAT 'VALUE': REASON" (REASON from fmt) and returns DR_EBADARG.
 * Every refusal of a setter goes through FAIL, which quotes its flag and
 * value. */
int dr__opt_fail_value(char *err, size_t err_len, const char *what,
                       const char *val, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define FAIL(...)                                                              \
  return dr__opt_fail_value(err, err_len, what, val, __VA_ARGS__)

/* Writes "out of memory ..." and returns -ENOMEM. */
int dr__opt_oom(char *err, size_t err_len);

/* Replaces *slot with a copy of s (NULL clears it). 0 or -ENOMEM. */
int dr__opt_replace_str(char **slot, const char *s, char *err, size_t err_len);

/* Decimal digits s[0..len), nothing else: 0 and *out; -1 when it is not a
 * number; 1 when it is above cap. */
int dr__opt_parse_uint(const char *s, size_t len, uint64_t cap, uint64_t *out);

/* The value parsers (options_set.c, options_set_workers.c), one per kind
 * of value. */
int dr__set_string(dr_options_t *o, const dr__opt_t *row, const char *val,
                   const char *what, char *err, size_t err_len);
int dr__set_flag(dr_options_t *o, const dr__opt_t *row, const char *val,
                 const char *what, char *err, size_t err_len);
int dr__set_seconds(dr_options_t *o, const dr__opt_t *row, const char *val,
                    const char *what, char *err, size_t err_len);
int dr__set_nnodes(dr_options_t *o, const dr__opt_t *row, const char *val,
                   const char *what, char *err, size_t err_len);
int dr__set_nproc(dr_options_t *o, const dr__opt_t *row, const char *val,
                  const char *what, char *err, size_t err_len);
int dr__set_node_rank(dr_options_t *o, const dr__opt_t *row, const char *val,
                      const char *what, char *err, size_t err_len);
int dr__set_master_port(dr_options_t *o, const dr__opt_t *row, const char *val,
                        const char *what, char *err, size_t err_len);
int dr__set_backend(dr_options_t *o, const dr__opt_t *row, const char *val,
                    const char *what, char *err, size_t err_len);
int dr__set_endpoint(dr_options_t *o, const dr__opt_t *row, const char *val,
                     const char *what, char *err, size_t err_len);
int dr__set_run_id(dr_options_t *o, const dr__opt_t *row, const char *val,
                   const char *what, char *err, size_t err_len);
int dr__set_rdzv_conf(dr_options_t *o, const dr__opt_t *row, const char *val,
                      const char *what, char *err, size_t err_len);
int dr__set_max_restarts(dr_options_t *o, const dr__opt_t *row, const char *val,
                         const char *what, char *err, size_t err_len);
int dr__set_monitor(dr_options_t *o, const dr__opt_t *row, const char *val,
                    const char *what, char *err, size_t err_len);
int dr__set_std(dr_options_t *o, const dr__opt_t *row, const char *val,
                const char *what, char *err, size_t err_len);
int dr__set_ranks_filter(dr_options_t *o, const dr__opt_t *row, const char *val,
                         const char *what, char *err, size_t err_len);
int dr__set_template(dr_options_t *o, const dr__opt_t *row, const char *val,
                     const char *what, char *err, size_t err_len);
int dr__set_signals(dr_options_t *o, const dr__opt_t *row, const char *val,
                    const char *what, char *err, size_t err_len);
int dr__set_gpu_bind(dr_options_t *o, const dr__opt_t *row, const char *val,
                     const char *what, char *err, size_t err_len);
int dr__set_cpu_bind(dr_options_t *o, const dr__opt_t *row, const char *val,
                     const char *what, char *err, size_t err_len);
/* options_sched.c: turns --rdzv-backend slurm/k8s (or a Slurm job
 * detected from SLURM_JOB_ID) into c10d settings; see options.h. Called
 * after every layer and before the checks across flags. 0 or DR_EBADARG
 * (or -ENOMEM) with the message in err. */
int dr__sched_apply(dr_options_t *o, char **envp, char *err, size_t err_len);

int dr__set_log_level(dr_options_t *o, const dr__opt_t *row, const char *val,
                      const char *what, char *err, size_t err_len);

#endif /* DR_OPTIONS_INTERNAL_H */
