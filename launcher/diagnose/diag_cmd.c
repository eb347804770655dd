/* `ddprun diagnose`: the command line around the analysis. Reads the
 * traces as one set (diag_read.h: a directory's files, a rank's several
 * files combined, one clock per source), analyses them (diag_analyze.h),
 * prints a report (diag_report.h) and, with --merge, writes one timeline
 * of all ranks (diag_merge.h). */
#include "diag_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"
#include "diag_analyze.h"
#include "diag_report.h"
#include "diag_trace.h"

#include "diag_merge.h"
#include "diag_read.h"
#include "mono.h"

/* A line on how long reading took, when it took longer than this. */
#define PROGRESS_SECONDS 1.0

static const char usage_text[] =
    "usage: ddprun diagnose [--json] [--merge OUT.json] [--steps A:B]\n"
    "                       [--max-trace-mib N] TRACE... | DIR\n"
    "\n"
    "Reads every rank's trace of a data-parallel job (train --trace files or\n"
    "PyTorch profiler traces, JSON or gzip'd JSON; a directory stands for its\n"
    "*.json and *.json.gz files) and says why its steps are slow: where the\n"
    "time goes per rank, how much communication the backward pass hides,\n"
    "the bucket patterns (a late first all-reduce, a backlog, a tail, all\n"
    "hidden, a rank that makes the others wait) with their numbers, and the\n"
    "bucket size to use, from the planner's model (see ddprun plan) fitted\n"
    "to the traced all-reduces.\n"
    "\n"
    "  --json          print the analysis as JSON (schema version 1) instead\n"
    "                  of the text report\n"
    "  --merge OUT     also write one Chrome trace of all ranks to OUT, each\n"
    "                  rank's clock moved onto the rendezvous server's where\n"
    "                  its trace knows the offset\n"
    "  --steps A:B     only the steps numbered A to B (both included; either\n"
    "                  may be left out: 10: or :50)\n"
    "  --max-trace-mib N\n"
    "                  refuse a trace file of N MiB or more, on disk or once\n"
    "                  inflated (default 256, at most 2048): a gzip bomb\n"
    "                  costs no more memory than this\n"
    "  -h, --help      this text\n"
    "\n"
    "Only the steps every rank has are analysed; a trace that cannot be read\n"
    "is named on stderr and left out. What the traces do not give (sizes,\n"
    "the backward pass, ranks) is said in the report's notes.\n"
    "\n"
    "Exit codes: 0 done; 2 bad input (an option, no trace that can be read,\n"
    "a failed --merge).\n";

#define bad(...) dr_usage_error("ddprun diagnose", __VA_ARGS__)

typedef struct {
  int json;
  const char *merge;
  size_t max_bytes; /* 0: the readers' default */
  dr_dg_options_t opt;
  char **paths;   /* the operands, borrowed from argv */
  size_t n_paths;
} args_t;

/* A step number: decimal digits only. */
static int step_number(const char *s, size_t len, uint64_t *out) {
  uint64_t v = 0;
  if (len == 0 || len > 19)
    return -1;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  *out = v;
  return 0;
}

static int parse_steps(const char *v, dr_dg_options_t *o) {
  const char *colon = strchr(v, ':');
  size_t la = colon != NULL ? (size_t)(colon - v) : 0;
  const char *b = colon != NULL ? colon + 1 : "";
  o->step_from = 0;
  o->step_to = UINT64_MAX;
  if (colon == NULL || (la == 0 && *b == '\0') ||
      (la > 0 && step_number(v, la, &o->step_from) != 0) ||
      (*b != '\0' && step_number(b, strlen(b), &o->step_to) != 0))
    return bad("--steps '%s': expected A:B, step numbers from A to B (either "
               "may be left out)", v);
  if (o->step_from > o->step_to)
    return bad("--steps '%s': the first step is after the last", v);
  return 0;
}

static int parse_max_mib(const char *v, size_t *max_bytes) {
  uint64_t mib;
  if (step_number(v, strlen(v), &mib) != 0 || mib == 0 ||
      mib > (DR_DG_LIMIT_MAX >> 20))
    return bad("--max-trace-mib '%s': expected MiB, 1 to %zu", v,
               DR_DG_LIMIT_MAX >> 20);
  *max_bytes = (size_t)mib << 20;
  return 0;
}

/* 0, 1 for --help, 2 for a usage error (printed). */
static int parse(int argc, char **argv, args_t *a) {
  static const dr_dg_options_t all = DR_DG_OPTIONS_ALL;
  memset(a, 0, sizeof(*a));
  a->opt = all;
  /* Operands are gathered in place at the front of argv: the k-th operand
   * is at argv[i] with i > k, so no unread argument is overwritten. */
  a->paths = argv + 1;
  int operands_only = 0;
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (operands_only || f[0] != '-' || strcmp(f, "-") == 0) {
      a->paths[a->n_paths++] = argv[i];
    } else if (strcmp(f, "--") == 0) {
      operands_only = 1;
    } else if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) {
      fputs(usage_text, stdout);
      return 1;
    } else if (strcmp(f, "--json") == 0) {
      a->json = 1;
    } else if (strcmp(f, "--merge") == 0 || strcmp(f, "--steps") == 0 ||
               strcmp(f, "--max-trace-mib") == 0) {
      if (i + 1 >= argc)
        return bad("%s needs a value", f);
      const char *v = argv[++i];
      if (strcmp(f, "--merge") == 0) {
        if (v[0] == '\0')
          return bad("--merge needs a file name");
        a->merge = v;
      } else if (strcmp(f, "--steps") == 0) {
        if (parse_steps(v, &a->opt) != 0)
          return 2;
      } else if (parse_max_mib(v, &a->max_bytes) != 0) {
        return 2;
      }
    } else {
      return bad("unknown option '%s'", f);
    }
  }
  if (a->n_paths == 0)
    return bad("no trace given (TRACE... or a directory of them)");
  return 0;
}

static int merge(const char *out, const dr_dg_rank_t *ranks, size_t n,
                 size_t max_bytes) {
  double *off = calloc(n, sizeof(double));
  const char **paths = calloc(n, sizeof(*paths));
  if (off == NULL || paths == NULL) {
    free(off);
    free(paths);
    fprintf(stderr, "ddprun diagnose: out of memory\n");
    return 2;
  }
  /* A trace that does not know its offset stays on its own clock. */
  for (size_t i = 0; i < n; i++) {
    off[i] = ranks[i].have_clock_offset ? ranks[i].clock_offset_us : 0;
    paths[i] = ranks[i].path;
  }
  char err[512] = "";
  int rc = dr_dg_merge(out, paths, n, off, max_bytes, err, sizeof(err));
  free(off);
  free(paths);
  if (rc != 0) {
    fprintf(stderr, "ddprun diagnose: --merge %s: %s\n", out,
            err[0] ? err : "failed");
    return 2;
  }
  fprintf(stderr, "ddprun diagnose: merged %zu traces into %s\n", n, out);
  return 0;
}

int dr_diagnose_main(int argc, char **argv) {
  args_t a;
  int rc = parse(argc, argv, &a);
  if (rc != 0)
    return rc == 1 ? 0 : rc;
  dr_dg_set_t set;
  memset(&set, 0, sizeof(set));
  char err[1024] = "";
  double t0 = (double)dr_mono_ns() / 1e9;
  rc = dr_dg_read_set((const char *const *)a.paths, a.n_paths, a.max_bytes,
                      &set, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, "ddprun diagnose: %s\n", err[0] ? err : "cannot read");
    return 2;
  }
  if ((double)dr_mono_ns() / 1e9 - t0 > PROGRESS_SECONDS)
    fprintf(stderr, "ddprun diagnose: read %zu ranks' traces in %.1f s\n",
            set.n_ranks, (double)dr_mono_ns() / 1e9 - t0);
  dr_dg_analysis_t an;
  rc = dr_dg_analyze(set.ranks, set.n_ranks, &a.opt, &an);
  if (rc == 0) {
    if (set.note[0] != '\0')
      dr_dg_analysis_note(&an, "%s", set.note);
    if ((a.json ? dr_dg_report_json(stdout, &an)
                : dr_dg_report_text(stdout, &an)) != 0 ||
        fflush(stdout) != 0) {
      fprintf(stderr, "ddprun diagnose: cannot write the report (%s)\n",
              strerror(errno));
      rc = 2;
    }
    dr_dg_analysis_free(&an);
    if (rc == 0 && a.merge != NULL)
      rc = merge(a.merge, set.ranks, set.n_ranks, a.max_bytes);
  }
  if (rc < 0) {
    fprintf(stderr, "ddprun diagnose: out of memory\n");
    rc = 2;
  }
  dr_dg_set_free(&set);
  return rc;
}
