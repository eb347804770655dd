/* A cmocka fixture for tests of ddprun's command line (dr_options_parse):
 * the argv and environment handed to it, what it parsed, its error, and a
 * temporary directory for config files. Used by the options tests and the
 * scheduler-environment tests. */
#ifndef DR_OPTIONS_FIXTURE_H
#define DR_OPTIONS_FIXTURE_H

#include "options.h"

#define FX_MAX_ARGS 32

typedef struct {
  dr_options_t o;
  char err[1024];
  char *argv[FX_MAX_ARGS + 1];
  char *env[FX_MAX_ARGS + 1];
  char dir[64];   /* a temporary directory for config files */
  char path[128]; /* the last file written by fx_write_file() */
} fx_t;

/* cmocka setup and teardown: *state is an fx_t with its directory. */
int fx_setup(void **state);
int fx_teardown(void **state);

/* Writes text to DIR/name and returns its path (in f->path). */
const char *fx_write_file(fx_t *f, const char *name, const char *text);

/* Sets the environment: NULL-terminated "NAME=value" strings. */
void fx_set_env(fx_t *f, ...);

/* Parses "ddprun" followed by the NULL-terminated arguments. */
int fx_parse(fx_t *f, ...);

/* Parses an argv array (NULL-terminated, argv[0] included). */
int fx_parse_v(fx_t *f, const char *const *args);

/* rc is 0; else fails with the error. */
void fx_assert_ok(fx_t *f, int rc);

/* rc is DR_EBADARG and the error, one line without the program's prefix,
 * contains want. */
void fx_assert_err(fx_t *f, int rc, const char *want);

#endif /* DR_OPTIONS_FIXTURE_H */
