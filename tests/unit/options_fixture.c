/* The command-line fixture of options_fixture.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "options_fixture.h"

int fx_setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  snprintf(f->dir, sizeof(f->dir), "/tmp/ddprun_options.XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  *state = f;
  return 0;
}

int fx_teardown(void **state) {
  fx_t *f = *state;
  dr_options_free(&f->o);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
  assert_int_equal(system(cmd), 0);
  free(f);
  return 0;
}

const char *fx_write_file(fx_t *f, const char *name, const char *text) {
  snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
  FILE *fp = fopen(f->path, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
  return f->path;
}

void fx_set_env(fx_t *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = 0;
  for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
    f->env[n++] = (char *)s;
  f->env[n] = NULL;
  va_end(ap);
}

int fx_parse(fx_t *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = 0;
  f->argv[n++] = "ddprun";
  for (const char *s; (s = va_arg(ap, const char *)) != NULL;) {
    assert_true(n < FX_MAX_ARGS);
    f->argv[n++] = (char *)s;
  }
  f->argv[n] = NULL;
  va_end(ap);
  dr_options_free(&f->o);
  memset(f->err, 0, sizeof(f->err));
  return dr_options_parse(n, f->argv, f->env, &f->o, f->err, sizeof(f->err));
}

int fx_parse_v(fx_t *f, const char *const *args) {
  int n = 0;
  for (; args[n] != NULL; n++)
    f->argv[n] = (char *)args[n];
  f->argv[n] = NULL;
  dr_options_free(&f->o);
  memset(f->err, 0, sizeof(f->err));
  return dr_options_parse(n, f->argv, f->env, &f->o, f->err, sizeof(f->err));
}

void fx_assert_err(fx_t *f, int rc, const char *want) {
  if (rc != DR_EBADARG || strstr(f->err, want) == NULL)
    fail_msg("rc %d, err \"%s\", wanted DR_EBADARG and \"%s\"", rc, f->err,
             want);
  assert_null(strchr(f->err, '\n'));
  assert_null(strstr(f->err, "ddprun:"));
}

void fx_assert_ok(fx_t *f, int rc) {
  if (rc != 0)
    fail_msg("rc %d: %s", rc, f->err);
}
