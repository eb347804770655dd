/* The command line of the benchmarks: a table of --name VALUE options
 * parsed by getopt_long (so --name=VALUE and unambiguous abbreviations
 * work too), --help, and the programs a benchmark starts, found next to it
 * unless given. libc only.
 *
 *   static const char *const modes[] = {"kill", "stop", NULL};
 *   const bench_opt_t opts[] = {
 *       {"mode", BENCH_OPT_CHOICE, &o->mode, .choices = modes},
 *       {"runs", BENCH_OPT_U32, &o->runs, .max = 1000},
 *       {"server", BENCH_OPT_PATH, o->server, .program = "ddprun-rdzv"}};
 *   int rc = bench_cli_parse("nodeloss_bench", argc, argv, opts, 3);
 *   if (rc != 0)
 *     return bench_cli_exit_status(rc, USAGE);
 */
#ifndef DR_BENCH_CLI_H
#define DR_BENCH_CLI_H

#include <stddef.h>

typedef enum {
  BENCH_OPT_U32,     /* uint32_t: a whole number from 1 to max */
  BENCH_OPT_SECONDS, /* double: over 0, at least min, at most max */
  BENCH_OPT_PATH,    /* char[PATH_MAX]: shorter than PATH_MAX */
  BENCH_OPT_CHOICE   /* int: the index of the value in choices */
} bench_opt_kind_t;

typedef struct {
  const char *name; /* the long option, without "--" */
  bench_opt_kind_t kind;
  void *dst; /* holds the default on entry; borrowed */
  double max;
  double min;
  const char *const *choices; /* CHOICE: NULL-terminated */
  /* PATH: the file of this name next to this executable when the option
   * is absent and dst empty; NULL: dst stays as it is. */
  const char *program;
} bench_opt_t;

/* bench_cli_parse's results besides 0 (run). */
#define BENCH_CLI_HELP 1
#define BENCH_CLI_USAGE (-1)
#define BENCH_CLI_LOCATE (-2) /* said on stderr */

/* Line-buffers stdout and stderr (results and diagnostics often go to
 * pipes), then parses argv against opts[0..n) (n <= 16). No operand is
 * accepted. Stops at the first --help (BENCH_CLI_HELP) or bad option or
 * value (BENCH_CLI_USAGE); then fills the PATH defaults, saying on stderr
 * "PROG: cannot locate NAME next to PROG; pass --OPTION" when it cannot
 * (BENCH_CLI_LOCATE). */
int bench_cli_parse(const char *prog, int argc, char **argv,
                    const bench_opt_t *opts, size_t n);

/* For a nonzero bench_cli_parse result (or BENCH_CLI_USAGE from the
 * benchmark's own checks): prints usage on stdout after --help, on stderr
 * for bad usage, and returns what main exits with: 0 after --help, else 2. */
int bench_cli_exit_status(int rc, const char *usage);

/* Fills an empty dst (PATH_MAX) with NAME next to this executable, or with
 * this executable itself when name is NULL; leaves a set dst alone. 0 or a
 * negative errno. */
int bench_default_path(char *dst, const char *name);

#endif /* DR_BENCH_CLI_H */
