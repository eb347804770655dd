/* ddprun-rdzv's command line: a table of rows over launcher/flags.h
 * (rdzv_opts.c), read from argv alone (no environment, no file; the shared
 * secret's DDPRUN_SECRET is the auth module's). As with getopt_long, which
 * it replaces, a unique prefix of a flag's name stands for it. */
#ifndef DR_RDZV_OPTS_H
#define DR_RDZV_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"

typedef struct {
  dr_server_config_t cfg;        /* host 0.0.0.0, port 29400; strings are
                                    borrowed from argv */
  const char *port_file;         /* --port-file, NULL = none */
  const char *secret_file;       /* --secret-file, NULL = DDPRUN_SECRET */
  const char *metrics_port_file; /* --metrics-port-file, NULL = none */
  uint32_t linger_ms;            /* --linger, default 0 */
  int log_level;                 /* --log-level, a dr_log_level_t */
} dr_rdzv_opts_t;

/* Parses argv into *o, defaults first. Returns 0; 1 when --help or
 * --version was printed (exit 0); DR_EBADARG with a one-line message in
 * err, without the program's name (main prints it through dr_usage_error:
 * exit 2). After 0, --nnodes and --rdzv-id were given, and --metrics-host
 * and --metrics-port-file only with --metrics-port. */
int dr_rdzv_opts_parse(int argc, char **argv, dr_rdzv_opts_t *o, char *err,
                       size_t err_len);

#endif /* DR_RDZV_OPTS_H */
