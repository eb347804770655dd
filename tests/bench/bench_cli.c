/* The command line of the benchmarks; see bench_cli.h. */
#include "bench_cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_OPTS 16
/* getopt_long's value for opts[i]: above every character. */
#define OPT_VAL(i) (256 + (int)(i))

/* 0, or -1 when arg is not a value of o. */
static int set_value(const bench_opt_t *o, const char *arg) {
  char *end;
  switch (o->kind) {
  case BENCH_OPT_U32: {
    errno = 0;
    unsigned long v = strtoul(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || v == 0 ||
        (double)v > o->max)
      return -1;
    *(uint32_t *)o->dst = (uint32_t)v;
    return 0;
  }
  case BENCH_OPT_SECONDS: {
    double v = strtod(arg, &end);
    if (end == arg || *end != '\0' || !(v > 0) || !(v >= o->min) ||
        v > o->max)
      return -1;
    *(double *)o->dst = v;
    return 0;
  }
  case BENCH_OPT_PATH:
    if (strlen(arg) >= PATH_MAX)
      return -1;
    strcpy(o->dst, arg);
    return 0;
  case BENCH_OPT_CHOICE:
    for (int k = 0; o->choices[k] != NULL; k++)
      if (strcmp(arg, o->choices[k]) == 0) {
        *(int *)o->dst = k;
        return 0;
      }
    return -1;
  }
  return -1;
}

int bench_cli_parse(const char *prog, int argc, char **argv,
                    const bench_opt_t *opts, size_t n) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  setvbuf(stderr, NULL, _IOLBF, 0);
  if (n > MAX_OPTS)
    return BENCH_CLI_USAGE;
  struct option longopts[MAX_OPTS + 2];
  for (size_t i = 0; i < n; i++)
    longopts[i] = (struct option){opts[i].name, required_argument, NULL,
                                  OPT_VAL(i)};
  longopts[n] = (struct option){"help", no_argument, NULL, 'h'};
  longopts[n + 1] = (struct option){NULL, 0, NULL, 0};
  int ch;
  while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    if (ch == 'h')
      return BENCH_CLI_HELP;
    if (ch < OPT_VAL(0) || ch >= OPT_VAL(n) ||
        set_value(&opts[ch - OPT_VAL(0)], optarg) != 0)
      return BENCH_CLI_USAGE;
  }
  if (optind != argc)
    return BENCH_CLI_USAGE;
  for (size_t i = 0; i < n; i++)
    if (opts[i].kind == BENCH_OPT_PATH && opts[i].program != NULL &&
        bench_default_path(opts[i].dst, opts[i].program) != 0) {
      fprintf(stderr, "%s: cannot locate %s next to %s; pass --%s\n", prog,
              opts[i].program, prog, opts[i].name);
      return BENCH_CLI_LOCATE;
    }
  return 0;
}

int bench_cli_exit_status(int rc, const char *usage) {
  if (rc == BENCH_CLI_HELP) {
    fputs(usage, stdout);
    return 0;
  }
  if (rc == BENCH_CLI_USAGE)
    fputs(usage, stderr);
  return 2;
}

int bench_default_path(char *dst, const char *name) {
  if (dst[0] != '\0')
    return 0;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n < 0)
    return -errno;
  self[n] = '\0';
  if (name == NULL) {
    memcpy(dst, self, (size_t)n + 1);
    return 0;
  }
  char *slash = strrchr(self, '/');
  if (slash == NULL)
    return -EINVAL;
  *slash = '\0';
  if ((size_t)snprintf(dst, PATH_MAX, "%s/%s", self, name) >= PATH_MAX)
    return -ENAMETOOLONG;
  return 0;
}
