/* The layers of flags.h: argv, the environment and (through the
 * program's reader) the config file, each applied over the one before,
 * and the lookup of a row by name. */
#include "flags.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

static int name_char_eq(char a, char b, int nocase) {
  if (a == '_')
    a = '-';
  if (b == '_')
    b = '-';
  if (nocase) {
    a = (char)tolower((unsigned char)a);
    b = (char)tolower((unsigned char)b);
  }
  return a == b;
}

/* How many of name[0..len) match the start of row_name. */
static size_t common_len(const char *row_name, const char *name, size_t len,
                         int nocase) {
  size_t j = 0;
  while (j < len && row_name[j] != '\0' &&
         name_char_eq(name[j], row_name[j], nocase))
    j++;
  return j;
}

const dr_flag_t *dr_flags_find(const dr_flags_t *spec, const char *name,
                               size_t len, int nocase) {
  for (size_t i = 0; i < spec->n_rows; i++) {
    const char *n = spec->rows[i].name;
    if (common_len(n, name, len, nocase) == len && n[len] == '\0')
      return &spec->rows[i];
  }
  return NULL;
}

int dr_flags_given(const dr_flags_t *spec, uint64_t given, const char *name) {
  const dr_flag_t *row = dr_flags_find(spec, name, strlen(name), 0);
  return row != NULL && (given & (UINT64_C(1) << (row - spec->rows)));
}

int dr_flags_apply(const dr_flags_t *spec, void *dst, const dr_flag_t *row,
                   const char *val, const char *what, uint64_t *given,
                   char *err, size_t err_len) {
  int rc = row->set(dst, row, val, what, err, err_len);
  if (rc == 0)
    *given |= UINT64_C(1) << (row - spec->rows);
  return rc;
}

/* ---- the command line ------------------------------------------------- */

typedef struct {
  const dr_flag_t *row;
  const char *val; /* borrowed from argv; "1" for a switch */
} argv_item_t;

static const dr_flag_t *find_short(const dr_flags_t *spec, char c) {
  for (size_t i = 0; i < spec->n_rows; i++)
    if (c != 0 && spec->rows[i].short_name == c)
      return &spec->rows[i];
  return NULL;
}

/* --name[=value]: the row, or NULL with the message in err. With
 * DR_FLAGS_PREFIXES a unique prefix of a name stands for it. */
static const dr_flag_t *find_long(const dr_flags_t *spec, const char *a,
                                  size_t len, char *err, size_t err_len) {
  const char *name = a + 2;
  const dr_flag_t *row = len > 0 ? dr_flags_find(spec, name, len, 0) : NULL;
  char opt[DR_FLAGS_QUOTE_MAX + 1], q[DR_FLAGS_QUOTE_LEN];
  snprintf(opt, sizeof(opt), "%.*s", (int)(len + 2), a);
  if (row == NULL && len > 0 && (spec->mode & DR_FLAGS_PREFIXES)) {
    char matches[256] = "";
    size_t n = 0;
    for (size_t i = 0; i < spec->n_rows; i++) {
      const dr_flag_t *r = &spec->rows[i];
      if (common_len(r->name, name, len, 0) != len)
        continue;
      row = r;
      size_t at = strlen(matches);
      snprintf(matches + at, sizeof(matches) - at, "%s--%s",
               n++ > 0 ? ", " : "", r->name);
    }
    if (n > 1) {
      dr_flags_fail(err, err_len,
                    "option '%s' is ambiguous (%s); see %s --help",
                    dr_flags_quote(opt, q), matches, spec->prog);
      return NULL;
    }
  }
  if (row == NULL)
    dr_flags_fail(err, err_len, "unknown option '%s'; see %s --help",
                  dr_flags_quote(opt, q), spec->prog);
  return row;
}

/* Reads the options of argv: each is checked, then applied at once when
 * `now` (a program without other layers), else kept in items[0..*n_items)
 * to be applied after the file and the environment, so that the command
 * line wins. Finds the program, or the first stray argument. Returns 0, 1
 * when --help or --version was printed, or DR_EBADARG (-ENOMEM). */
static int read_argv(const dr_flags_t *spec, void *dst, int argc, char **argv,
                     int now, argv_item_t *items, size_t *n_items,
                     dr_flags_result_t *res, const char **stray, char *err,
                     size_t err_len) {
  char q[DR_FLAGS_QUOTE_LEN];
  int program = (spec->mode & DR_FLAGS_PROGRAM) != 0, i;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    const dr_flag_t *row;
    const char *val = NULL;
    if (a[0] != '-' || strcmp(a, "--") == 0) {
      int dashes = a[0] == '-';
      if (program) {
        i += dashes;
        break;
      }
      if (*stray == NULL && i + dashes < argc)
        *stray = argv[i + dashes];
      if (dashes)
        break;
      continue;
    }
    if (a[1] == '-') {
      const char *eq = strchr(a + 2, '=');
      size_t len = eq != NULL ? (size_t)(eq - a - 2) : strlen(a + 2);
      if ((row = find_long(spec, a, len, err, err_len)) == NULL)
        return DR_EBADARG;
      if (eq != NULL)
        val = eq + 1;
    } else {
      row = find_short(spec, a[1]);
      if (row != NULL && a[2] != '\0') {
        if (row->kind == DR_FLAG_VALUE)
          val = a + 2; /* -r3, as argparse takes it */
        else
          row = NULL;
      }
      if (row == NULL)
        return dr_flags_fail(err, err_len, "unknown option '%s'; see %s --help",
                             dr_flags_quote(a, q), spec->prog);
    }
    switch (row->kind) {
    case DR_FLAG_HELP:
      dr_flags_usage(spec, stdout);
      fflush(stdout);
      return 1;
    case DR_FLAG_VERSION:
      printf("%s %s\n", spec->prog, spec->version);
      fflush(stdout);
      return 1;
    case DR_FLAG_SWITCH:
      if (val != NULL)
        return dr_flags_fail(err, err_len,
                             "option '--%s' is a flag and takes no value "
                             "(got '%s'); write --%s alone",
                             row->name, dr_flags_quote(val, q), row->name);
      val = "1";
      break;
    case DR_FLAG_VALUE:
      if (val == NULL) {
        if (i + 1 >= argc)
          return dr_flags_fail(err, err_len,
                               "option '--%s' needs a value: --%s %s",
                               row->name, row->name, row->metavar);
        val = argv[++i];
      }
      break;
    }
    if (now) {
      char what[64];
      snprintf(what, sizeof(what), "--%s", row->name);
      int rc =
          dr_flags_apply(spec, dst, row, val, what, &res->given, err, err_len);
      if (rc != 0)
        return rc;
    } else {
      items[(*n_items)++] = (argv_item_t){row, val};
    }
  }
  if (program && i < argc) {
    res->prog_argv = &argv[i];
    res->prog_argc = argc - i;
  }
  return 0;
}

/* ---- the environment -------------------------------------------------- */

/* PET_NPROC_PER_NODE for nproc-per-node. */
static void env_name(const char *prefix, const dr_flag_t *row, char *out,
                     size_t n) {
  int k = snprintf(out, n, "%s", prefix);
  for (const char *c = row->name; *c != '\0' && (size_t)k + 1 < n; c++)
    out[k++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
  out[k] = '\0';
}

/* The non-empty value of name in envp, or NULL: an empty variable counts
 * as unset, so that `PET_X= ddprun ...` clears it for one run. */
static const char *env_get(char **envp, const char *name) {
  size_t n = strlen(name);
  for (char **e = envp; e != NULL && *e != NULL; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
      return (*e)[n + 1] != '\0' ? *e + n + 1 : NULL;
  return NULL;
}

static int apply_env(const dr_flags_t *spec, void *dst, char **envp,
                     uint64_t *given, char *err, size_t err_len) {
  for (size_t i = 0; i < spec->n_rows; i++) {
    const dr_flag_t *row = &spec->rows[i];
    char name[64];
    if (!(row->from & DR_FLAG_FROM_ENV))
      continue;
    env_name(spec->env_prefix, row, name, sizeof(name));
    const char *v = env_get(envp, name);
    if (v == NULL)
      continue;
    int rc = dr_flags_apply(spec, dst, row, v, name, given, err, err_len);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* ---- all layers ------------------------------------------------------- */

/* The config file's path: the last value of its row in argv, else its
 * variable; NULL when neither names one. */
static const char *file_path(const dr_flags_t *spec, char **envp,
                             const argv_item_t *items, size_t n_items) {
  const dr_flag_t *row =
      dr_flags_find(spec, spec->file_row, strlen(spec->file_row), 0);
  const char *path = NULL;
  if (row == NULL) /* a table without the row it names */
    return NULL;
  if (spec->env_prefix != NULL && (row->from & DR_FLAG_FROM_ENV)) {
    char name[64];
    env_name(spec->env_prefix, row, name, sizeof(name));
    path = env_get(envp, name);
  }
  for (size_t i = 0; i < n_items; i++)
    if (items[i].row == row)
      path = items[i].val;
  return path != NULL && path[0] != '\0' ? path : NULL;
}

int dr_flags_parse(const dr_flags_t *spec, void *dst, int argc, char **argv,
                   char **envp, dr_flags_result_t *res, char *err,
                   size_t err_len) {
  if (err != NULL && err_len > 0)
    err[0] = '\0';
  memset(res, 0, sizeof(*res));
  int layered = spec->env_prefix != NULL || spec->read_file != NULL;
  argv_item_t *items = NULL;
  size_t n_items = 0;
  const char *stray = NULL;
  int rc = 0;
  if (layered &&
      (items = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*items))) == NULL) {
    rc = -ENOMEM;
    goto out;
  }
  rc = read_argv(spec, dst, argc, argv, !layered, items, &n_items, res, &stray,
                 err, err_len);
  if (rc != 0)
    goto out;
  const char *path =
      spec->read_file != NULL ? file_path(spec, envp, items, n_items) : NULL;
  if (path != NULL &&
      (rc = spec->read_file(spec, dst, path, &res->given, err, err_len)) != 0)
    goto out;
  if (spec->env_prefix != NULL &&
      (rc = apply_env(spec, dst, envp, &res->given, err, err_len)) != 0)
    goto out;
  for (size_t i = 0; i < n_items; i++) {
    char what[64];
    snprintf(what, sizeof(what), "--%s", items[i].row->name);
    rc = dr_flags_apply(spec, dst, items[i].row, items[i].val, what,
                        &res->given, err, err_len);
    if (rc != 0)
      goto out;
  }
  if (stray != NULL) {
    char q[DR_FLAGS_QUOTE_LEN];
    rc = dr_flags_fail(err, err_len, "unexpected argument '%s'",
                       dr_flags_quote(stray, q));
  }
out:
  if (rc == -ENOMEM)
    dr_flags_oom(err, err_len);
  free(items);
  return rc;
}
