/* `ddprun diagnose`: the command line around the analysis. Reads the
 * traces through the readers (dr_dg_read, diag_trace.h), analyses them
 * (diag_analyze.h), prints a report (diag_report.h) and, with --merge,
 * writes one timeline of all ranks (dr_dg_merge). */
#include "diag_cmd.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli_util.h"
#include "diag_analyze.h"
#include "diag_report.h"
#include "diag_trace.h"

#if defined(__has_include)
#if __has_include("diag_merge.h")
#include "diag_merge.h"
#define DR_HAVE_DIAG_MERGE_H 1
#endif
#endif
#ifndef DR_HAVE_DIAG_MERGE_H
/* From diag_merge.h: writes one Chrome trace of every rank in paths[0..n),
 * rank i's times shifted by offset_us[i]. 0, or a negative code with a
 * one-line reason in err. */
int dr_dg_merge(const char *out_path, const char *const *paths, size_t n,
                const double *offset_us, char *err, size_t errlen);
#endif

/* Per-file progress lines when the reading is likely to take more than
 * about a second: this many bytes of traces in all, or once a second has
 * passed. */
#define PROGRESS_BYTES (64ull << 20)
#define PROGRESS_SECONDS 1.0

static const char usage_text[] =
    "usage: ddprun diagnose [--json] [--merge OUT.json] [--steps A:B]\n"
    "                       TRACE... | DIR\n"
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
    } else if (strcmp(f, "--merge") == 0 || strcmp(f, "--steps") == 0) {
      if (i + 1 >= argc)
        return bad("%s needs a value", f);
      const char *v = argv[++i];
      if (f[2] == 'm') {
        if (v[0] == '\0')
          return bad("--merge needs a file name");
        a->merge = v;
      } else if (parse_steps(v, &a->opt) != 0) {
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

/* ---- the files ----------------------------------------------------------- */

typedef struct {
  char **v;
  size_t n, cap;
  unsigned long long bytes;
} files_t;

static int push(files_t *fl, const char *path, unsigned long long size) {
  if (fl->n == fl->cap) {
    size_t cap = fl->cap ? 2 * fl->cap : 16;
    char **v = realloc(fl->v, cap * sizeof(*v));
    if (v == NULL)
      return -ENOMEM;
    fl->v = v;
    fl->cap = cap;
  }
  if ((fl->v[fl->n] = strdup(path)) == NULL)
    return -ENOMEM;
  fl->n++;
  fl->bytes += size;
  return 0;
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), m = strlen(tail);
  return n > m && strcmp(s + n - m, tail) == 0;
}

static int cmp_name(const void *a, const void *b) {
  return strverscmp(*(char *const *)a, *(char *const *)b); /* rank2 < rank10 */
}

/* DIR's *.json and *.json.gz files, in natural order, except skip (the
 * --merge output, which may sit among them). */
static int list_dir(const char *dir, const struct stat *skip, files_t *fl) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr, "ddprun diagnose: %s: cannot read the directory (%s)\n",
            dir, strerror(errno));
    return 2;
  }
  size_t first = fl->n;
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' ||
        !(ends_with(e->d_name, ".json") || ends_with(e->d_name, ".json.gz")))
      continue;
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path) ||
        stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
        (skip != NULL && st.st_dev == skip->st_dev && st.st_ino == skip->st_ino))
      continue;
    rc = push(fl, path, (unsigned long long)st.st_size);
  }
  closedir(d);
  if (rc != 0)
    return rc;
  if (fl->n == first) {
    fprintf(stderr, "ddprun diagnose: %s: no .json or .json.gz trace in the "
            "directory\n", dir);
    return 2;
  }
  qsort(fl->v + first, fl->n - first, sizeof(*fl->v), cmp_name);
  return 0;
}

/* The operands as files: 0, 2 (printed) or -ENOMEM. */
static int expand(const args_t *a, files_t *fl) {
  struct stat out, *skip = NULL;
  if (a->merge != NULL && stat(a->merge, &out) == 0)
    skip = &out;
  for (size_t i = 0; i < a->n_paths; i++) {
    struct stat st;
    int rc;
    if (stat(a->paths[i], &st) != 0) {
      fprintf(stderr, "ddprun diagnose: %s: %s\n", a->paths[i], strerror(errno));
      return 2;
    }
    if (S_ISDIR(st.st_mode))
      rc = list_dir(a->paths[i], skip, fl);
    else
      rc = push(fl, a->paths[i], (unsigned long long)st.st_size);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Reads every file; those that fail are named on stderr and in skipped
 * (*lost set where even that ran out of memory). Returns how many were
 * read into ranks (with their paths in read). */
static size_t read_all(const files_t *fl, dr_dg_rank_t *ranks, const char **read,
                       files_t *skipped, int *lost) {
  double t0 = now_s();
  int verbose = fl->bytes >= PROGRESS_BYTES;
  size_t n = 0;
  for (size_t i = 0; i < fl->n; i++) {
    char err[512] = "";
    memset(&ranks[n], 0, sizeof(ranks[n]));
    int rc = dr_dg_read(fl->v[i], &ranks[n], err, sizeof(err));
    verbose = verbose || now_s() - t0 > PROGRESS_SECONDS;
    if (rc != 0) {
      fprintf(stderr, "ddprun diagnose: %s; left out\n",
              err[0] ? err : fl->v[i]);
      dr_dg_rank_free(&ranks[n]);
      if (push(skipped, err[0] ? err : fl->v[i], 0) != 0)
        *lost = 1;
      continue;
    }
    if (verbose)
      fprintf(stderr, "ddprun diagnose: read %s: rank %d, %zu steps (%zu/%zu, "
              "%.1f s)\n", fl->v[i], ranks[n].rank, ranks[n].n_steps, i + 1,
              fl->n, now_s() - t0);
    read[n++] = fl->v[i];
  }
  return n;
}

static int merge(const char *out, const dr_dg_rank_t *ranks, const char **paths,
                 size_t n) {
  double *off = calloc(n, sizeof(double));
  if (off == NULL) {
    fprintf(stderr, "ddprun diagnose: out of memory\n");
    return 2;
  }
  /* A trace that does not know its offset stays on its own clock. */
  for (size_t i = 0; i < n; i++)
    off[i] = ranks[i].have_clock_offset ? ranks[i].clock_offset_us : 0;
  char err[512] = "";
  int rc = dr_dg_merge(out, paths, n, off, err, sizeof(err));
  free(off);
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
  files_t fl = {0}, skipped = {0};
  dr_dg_rank_t *ranks = NULL;
  const char **read = NULL;
  size_t n = 0;
  int lost = 0;
  rc = expand(&a, &fl);
  if (rc == 0) {
    ranks = calloc(fl.n, sizeof(*ranks));
    read = calloc(fl.n, sizeof(*read));
    rc = ranks != NULL && read != NULL ? 0 : -ENOMEM;
  }
  if (rc == 0) {
    n = read_all(&fl, ranks, read, &skipped, &lost);
    if (n == 0) {
      fprintf(stderr, "ddprun diagnose: no trace could be read\n");
      rc = 2;
    }
  }
  dr_dg_analysis_t an;
  if (rc == 0 && (rc = dr_dg_analyze(ranks, n, &a.opt, &an)) == 0) {
    for (size_t i = 0; i < skipped.n; i++)
      dr_dg_analysis_note(&an, "%s; left out", skipped.v[i]);
    if (lost)
      dr_dg_analysis_note(&an, "some traces could not be read; left out");
    if ((a.json ? dr_dg_report_json(stdout, &an)
                : dr_dg_report_text(stdout, &an)) != 0 ||
        fflush(stdout) != 0) {
      fprintf(stderr, "ddprun diagnose: cannot write the report (%s)\n",
              strerror(errno));
      rc = 2;
    }
    dr_dg_analysis_free(&an);
    if (rc == 0 && a.merge != NULL)
      rc = merge(a.merge, ranks, read, n);
  }
  if (rc < 0) {
    fprintf(stderr, "ddprun diagnose: out of memory\n");
    rc = 2;
  }
  for (size_t i = 0; i < n; i++)
    dr_dg_rank_free(&ranks[i]);
  for (size_t i = 0; i < fl.n; i++)
    free(fl.v[i]);
  for (size_t i = 0; i < skipped.n; i++)
    free(skipped.v[i]);
  free(fl.v);
  free(skipped.v);
  free(ranks);
  free(read);
  return rc;
}
