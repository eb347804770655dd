/* The config file of flags_ini.h, read with inih. */
#include "flags_ini.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

#include "errors.h"
#include "fs.h"

typedef struct {
  const dr_flags_t *spec;
  void *dst;
  uint64_t *given;
  const char *path; /* as quoted in messages */
  FILE *f;
  int lineno;     /* of the line last handed to inih */
  int read_errno; /* of a failed read, which inih takes for the end */
  int rc;         /* the first error; later lines are not looked at */
  char *err;
  size_t err_len;
} ini_ctx_t;

/* Records "PATH:LINE: MESSAGE" as the file's error; returns 0 for inih. */
static int ini_fail(ini_ctx_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int ini_fail(ini_ctx_t *c, const char *fmt, ...) {
  char msg[DR_FLAGS_QUOTE_LEN * 2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  c->rc =
      dr_flags_fail(c->err, c->err_len, "%s:%d: %s", c->path, c->lineno, msg);
  return 0;
}

static int is_own_section(const ini_ctx_t *c, const char *s, size_t len) {
  const char *own = c->spec->file_section;
  return len == strlen(own) && strncmp(s, own, len) == 0;
}

static int unknown_section(ini_ctx_t *c, const char *name) {
  char q[DR_FLAGS_QUOTE_LEN];
  return ini_fail(c, "unknown section [%s]; put the keys at the top or in [%s]",
                  dr_flags_quote(name, q), c->spec->file_section);
}

/* inih's reader. Counts lines itself, so that a message can name the line
 * of a key, and refuses a line longer than inih's buffer rather than let
 * inih read its tail as a line of its own. Leading blanks are dropped:
 * inih would take an indented line for the continuation of the previous
 * value. Sections are checked here so that an empty one is caught too. */
static char *ini_read(char *str, int num, void *stream) {
  ini_ctx_t *c = stream;
  if (c->rc != 0)
    return NULL;
  if (fgets(str, num, c->f) == NULL) {
    if (ferror(c->f))
      c->read_errno = errno;
    return NULL;
  }
  c->lineno++;
  size_t len = strlen(str);
  if (len > 0 && str[len - 1] != '\n') {
    int ch = getc(c->f);
    if (ch != EOF) {
      ungetc(ch, c->f);
      ini_fail(c, "line is longer than %d characters", num - 2);
      return NULL;
    }
  }
  if (c->lineno == 1 && strncmp(str, "\xEF\xBB\xBF", 3) == 0)
    memmove(str, str + 3, strlen(str + 3) + 1);
  size_t lead = strspn(str, " \t");
  memmove(str, str + lead, strlen(str + lead) + 1);
  if (str[0] == '[') {
    const char *close = strchr(str, ']');
    if (close != NULL) {
      size_t n = (size_t)(close - str - 1);
      const char *name = str + 1;
      while (n > 0 && isspace((unsigned char)*name))
        name++, n--;
      while (n > 0 && isspace((unsigned char)name[n - 1]))
        n--;
      if (!is_own_section(c, name, n)) {
        char sec[DR_FLAGS_QUOTE_MAX + 1];
        snprintf(sec, sizeof(sec), "%.*s", (int)n, name);
        unknown_section(c, sec);
        return NULL;
      }
    }
  }
  return str;
}

static int ini_on_pair(void *user, const char *section, const char *name,
                       const char *value) {
  ini_ctx_t *c = user;
  char q[DR_FLAGS_QUOTE_LEN];
  if (c->rc != 0)
    return 0;
  if (section[0] != '\0' && !is_own_section(c, section, strlen(section)))
    return unknown_section(c, section);
  const dr_flag_t *row = dr_flags_find(c->spec, name, strlen(name), 1);
  if (row == NULL)
    return ini_fail(c, "unknown key '%s'; see %s --help",
                    dr_flags_quote(name, q), c->spec->prog);
  if (!(row->from & DR_FLAG_FROM_FILE))
    return ini_fail(c, "'%s' cannot be set in a config file",
                    dr_flags_quote(name, q));
  char what[DR_FLAGS_QUOTE_LEN * 2 + 32];
  snprintf(what, sizeof(what), "%s:%d: %s", c->path, c->lineno,
           dr_flags_quote(name, q));
  c->rc = dr_flags_apply(c->spec, c->dst, row, value, what, c->given, c->err,
                         c->err_len);
  return c->rc == 0;
}

int dr_flags_ini_read(const dr_flags_t *spec, void *dst, const char *path,
                      uint64_t *given, char *err, size_t err_len) {
  char shown[DR_FLAGS_QUOTE_LEN];
  ini_ctx_t c = {.spec = spec,
                 .dst = dst,
                 .given = given,
                 .path = dr_flags_quote(path, shown),
                 .err = err,
                 .err_len = err_len};
  /* fopen() of a FIFO without a writer would wait forever. */
  int fd = dr_open_regular(path);
  if (fd < 0)
    return dr_flags_fail(err, err_len, "cannot open config file '%s': %s",
                         c.path, dr_strerror(fd));
  c.f = fdopen(fd, "r");
  if (c.f == NULL) {
    int e = errno;
    close(fd);
    return dr_flags_fail(err, err_len, "cannot open config file '%s': %s",
                         c.path, strerror(e));
  }
  int line = ini_parse_stream(ini_read, &c, ini_on_pair, &c);
  fclose(c.f);
  if (c.rc != 0)
    return c.rc;
  if (c.read_errno != 0)
    return dr_flags_fail(err, err_len, "cannot read config file '%s': %s",
                         c.path, strerror(c.read_errno));
  if (line > 0)
    return dr_flags_fail(err, err_len, "%s:%d: expected 'name = value' or [%s]",
                         c.path, line, spec->file_section);
  if (line < 0)
    return dr_flags_fail(err, err_len, "cannot read config file '%s'", c.path);
  return 0;
}
