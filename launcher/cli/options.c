/* The option layers (defaults, config file, PET_ environment, command line,
 * each overriding the one before), the checks that span several flags,
 * and the entry points of options.h. The flags themselves are rows of
 * options_table.c. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

#include "ddprun_version.h"
#include "errors.h"
#include "fs.h"
#include "options_internal.h"

#define ENV_PREFIX "PET_"

/* Applies one value of any layer, and records that its flag was given. */
static int apply_row(dr_options_t *o, const dr__opt_t *row, const char *val,
                     const char *what, char *err, size_t err_len) {
  int rc = row->set(o, row, val, what, err, err_len);
  if (rc == 0)
    o->given |= UINT64_C(1) << (row - dr__opt_table);
  return rc;
}

/* ---- the command line ------------------------------------------------- */

typedef struct {
  const dr__opt_t *row;
  const char *val; /* borrowed from argv; "1" for a flag */
} argv_item_t;

static const dr__opt_t *find_short(char c) {
  for (size_t i = 0; i < dr__opt_count; i++)
    if (c != 0 && dr__opt_table[i].short_name == c)
      return &dr__opt_table[i];
  return NULL;
}

/* Checks the syntax of the options in argv into items[0..*n_items), and
 * finds the program. The values are applied later, after the file and the
 * environment, so that the command line wins. Returns 0, 1 when --help or
 * --version was printed, or DR_EBADARG. */
static int scan_argv(int argc, char **argv, argv_item_t *items, size_t *n_items,
                     dr_options_t *o, char *err, size_t err_len) {
  char q[DR__QUOTE_LEN];
  int i;
  *n_items = 0;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    const dr__opt_t *row;
    const char *val = NULL;
    if (a[0] != '-')
      break;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[1] == '-') {
      const char *name = a + 2, *eq = strchr(name, '=');
      size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
      row = len > 0 ? dr__opt_find(name, len, 0) : NULL;
      if (row == NULL) {
        char opt[DR__QUOTE_MAX + 1];
        snprintf(opt, sizeof(opt), "%.*s", (int)(len + 2), a);
        return dr__opt_fail(err, err_len,
                            "unknown option '%s'; see ddprun --help",
                            dr__opt_quote(opt, q));
      }
      if (eq != NULL)
        val = eq + 1;
    } else {
      row = find_short(a[1]);
      if (row != NULL && a[2] != '\0') {
        if (row->kind == DR__OPT_VALUE)
          val = a + 2; /* -r3, as argparse takes it */
        else
          row = NULL;
      }
      if (row == NULL)
        return dr__opt_fail(err, err_len,
                            "unknown option '%s'; see ddprun --help",
                            dr__opt_quote(a, q));
    }
    switch (row->kind) {
    case DR__OPT_HELP:
      dr_options_usage();
      return 1;
    case DR__OPT_VERSION:
      printf("ddprun %s\n", DDPRUN_VERSION_LINE);
      fflush(stdout);
      return 1;
    case DR__OPT_FLAG:
      if (val != NULL)
        return dr__opt_fail(err, err_len,
                            "option '--%s' is a flag and takes no value "
                            "(got '%s'); write --%s alone",
                            row->name, dr__opt_quote(val, q), row->name);
      val = "1";
      break;
    case DR__OPT_VALUE:
      if (val == NULL) {
        if (i + 1 >= argc)
          return dr__opt_fail(err, err_len,
                              "option '--%s' needs a value: --%s %s", row->name,
                              row->name, row->metavar);
        val = argv[++i];
      }
      break;
    }
    items[(*n_items)++] = (argv_item_t){row, val};
  }
  if (i < argc) {
    o->prog_argv = &argv[i];
    o->prog_argc = argc - i;
  }
  return 0;
}

/* ---- the environment -------------------------------------------------- */

/* PET_NPROC_PER_NODE for nproc-per-node. */
static void env_name(const dr__opt_t *row, char *out, size_t n) {
  size_t k = strlen(ENV_PREFIX);
  memcpy(out, ENV_PREFIX, k);
  for (const char *c = row->name; *c != '\0' && k + 1 < n; c++)
    out[k++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
  out[k] = '\0';
}

static const char *env_get(char **envp, const char *name) {
  size_t n = strlen(name);
  for (char **e = envp; e != NULL && *e != NULL; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
      return *e + n + 1;
  return NULL;
}

/* An empty PET_ variable counts as unset, so `PET_X= ddprun ...` clears
 * it for one run. */
static int apply_env(dr_options_t *o, char **envp, char *err, size_t err_len) {
  for (size_t i = 0; i < dr__opt_count; i++) {
    const dr__opt_t *row = &dr__opt_table[i];
    char name[64];
    if (!(row->from & DR__FROM_ENV))
      continue;
    env_name(row, name, sizeof(name));
    const char *v = env_get(envp, name);
    if (v == NULL || v[0] == '\0')
      continue;
    int rc = apply_row(o, row, v, name, err, err_len);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* ---- the config file -------------------------------------------------- */

typedef struct {
  dr_options_t *o;
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
  char msg[DR__QUOTE_LEN * 2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  c->rc =
      dr__opt_fail(c->err, c->err_len, "%s:%d: %s", c->path, c->lineno, msg);
  return 0;
}

static int is_ddprun_section(const char *s, size_t len) {
  return len == 6 && strncmp(s, "ddprun", 6) == 0;
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
      if (!is_ddprun_section(name, n)) {
        char sec[DR__QUOTE_MAX + 1], q[DR__QUOTE_LEN];
        snprintf(sec, sizeof(sec), "%.*s", (int)n, name);
        ini_fail(c,
                 "unknown section [%s]; put the keys at the top or in "
                 "[ddprun]",
                 dr__opt_quote(sec, q));
        return NULL;
      }
    }
  }
  return str;
}

static int ini_on_pair(void *user, const char *section, const char *name,
                       const char *value) {
  ini_ctx_t *c = user;
  char q[DR__QUOTE_LEN];
  if (c->rc != 0)
    return 0;
  if (section[0] != '\0' && !is_ddprun_section(section, strlen(section)))
    return ini_fail(c,
                    "unknown section [%s]; put the keys at the top or in "
                    "[ddprun]",
                    dr__opt_quote(section, q));
  const dr__opt_t *row = dr__opt_find(name, strlen(name), 1);
  if (row == NULL)
    return ini_fail(c, "unknown key '%s'; see ddprun --help",
                    dr__opt_quote(name, q));
  if (!(row->from & DR__FROM_FILE))
    return ini_fail(c, "'%s' cannot be set in a config file",
                    dr__opt_quote(name, q));
  char what[DR__QUOTE_LEN * 2 + 32];
  snprintf(what, sizeof(what), "%s:%d: %s", c->path, c->lineno,
           dr__opt_quote(name, q));
  c->rc = apply_row(c->o, row, value, what, c->err, c->err_len);
  return c->rc == 0;
}

static int apply_file(dr_options_t *o, const char *path, char *err,
                      size_t err_len) {
  char shown[DR__QUOTE_LEN];
  ini_ctx_t c = {o, dr__opt_quote(path, shown), NULL, 0, 0, 0, err, err_len};
  /* fopen() of a FIFO without a writer would wait forever. */
  int fd = dr_open_regular(path);
  if (fd < 0)
    return dr__opt_fail(err, err_len, "cannot open config file '%s': %s",
                        c.path, dr_strerror(fd));
  c.f = fdopen(fd, "r");
  if (c.f == NULL) {
    int e = errno;
    close(fd);
    return dr__opt_fail(err, err_len, "cannot open config file '%s': %s",
                        c.path, strerror(e));
  }
  int line = ini_parse_stream(ini_read, &c, ini_on_pair, &c);
  fclose(c.f);
  if (c.rc != 0)
    return c.rc;
  if (c.read_errno != 0)
    return dr__opt_fail(err, err_len, "cannot read config file '%s': %s",
                        c.path, strerror(c.read_errno));
  if (line > 0)
    return dr__opt_fail(err, err_len,
                        "%s:%d: expected 'name = value' or [ddprun]", c.path,
                        line);
  if (line < 0)
    return dr__opt_fail(err, err_len, "cannot read config file '%s'", c.path);
  return 0;
}

/* ---- checks across flags ---------------------------------------------- */

static const char *nnodes_str(const dr_options_t *o, char *buf, size_t n) {
  if (o->min_nodes == o->max_nodes)
    snprintf(buf, n, "%u", o->max_nodes);
  else
    snprintf(buf, n, "%u:%u", o->min_nodes, o->max_nodes);
  return buf;
}

static int check(dr_options_t *o, char *err, size_t err_len) {
  char nn[32];
  nnodes_str(o, nn, sizeof(nn));
  if (o->no_python && o->run_module)
    return dr__opt_fail(err, err_len,
                        "--no-python and -m/--module exclude each other: -m "
                        "runs a Python module, --no-python runs PROGRAM "
                        "directly");
  if (o->standalone) {
    if (o->rdzv_backend == DR_RDZV_STATIC)
      return dr__opt_fail(err, err_len,
                          "--standalone hosts a c10d rendezvous; drop "
                          "--rdzv-backend 'static'");
    if (o->have_endpoint)
      return dr__opt_fail(
          err, err_len,
          "--standalone picks its own endpoint; drop "
          "--rdzv-endpoint '%s%s%s:%u'",
          strchr(o->rdzv_host, ':') != NULL ? "[" : "", o->rdzv_host,
          strchr(o->rdzv_host, ':') != NULL ? "]" : "", o->rdzv_port);
    if (o->max_nodes > 1)
      return dr__opt_fail(err, err_len,
                          "--standalone runs a single node; --nnodes '%s' "
                          "needs --rdzv-endpoint instead",
                          nn);
    o->min_nodes = o->max_nodes = 1;
  }
  if (o->rdzv_backend == DR_RDZV_STATIC) {
    if (o->min_nodes != o->max_nodes)
      return dr__opt_fail(err, err_len,
                          "--nnodes '%s': --rdzv-backend static needs a fixed "
                          "node count, not a range",
                          nn);
    if (o->master_addr == NULL &&
        (o->master_addr = strdup("127.0.0.1")) == NULL)
      return -ENOMEM;
    if (o->node_rank < 0 && o->max_nodes > 1)
      return dr__opt_fail(err, err_len,
                          "--rdzv-backend static with --nnodes %s needs "
                          "--node-rank (0..%u) on each node",
                          nn, o->max_nodes - 1);
    if (o->node_rank < 0)
      o->node_rank = 0;
  } else if (!o->standalone && o->max_nodes > 1 && !o->have_endpoint) {
    return dr__opt_fail(err, err_len,
                        "--nnodes %s needs --rdzv-endpoint HOST[:PORT], the "
                        "node that hosts the rendezvous (or use "
                        "--rdzv-backend static)",
                        nn);
  }
  if (o->node_rank >= (int64_t)o->max_nodes)
    return dr__opt_fail(err, err_len,
                        "--node-rank %lld is out of range for --nnodes %s "
                        "(0..%u)",
                        (long long)o->node_rank, nn, o->max_nodes - 1);
  if (o->prog_argv == NULL)
    return dr__opt_fail(err, err_len,
                        "no program to run: ddprun [options] PROGRAM "
                        "[ARGS...]");
  return 0;
}

/* ---- the entry points ------------------------------------------------- */

int dr_options_parse(int argc, char **argv, char **envp, dr_options_t *o,
                     char *err, size_t err_len) {
  if (err != NULL && err_len > 0)
    err[0] = '\0';
  argv_item_t *items = NULL;
  size_t n_items = 0;
  int rc = dr__opt_defaults(o);
  if (rc != 0)
    goto out;
  items = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*items));
  if (items == NULL) {
    rc = -ENOMEM;
    goto out;
  }
  rc = scan_argv(argc, argv, items, &n_items, o, err, err_len);
  if (rc != 0)
    goto out;

  /* The file's name comes first: the last --config, else PET_CONFIG. */
  const dr__opt_t *config = dr__opt_find("config", 6, 0);
  const char *path = env_get(envp, ENV_PREFIX "CONFIG");
  if (path != NULL && path[0] == '\0')
    path = NULL;
  for (size_t i = 0; i < n_items; i++)
    if (items[i].row == config)
      path = items[i].val;
  if (path != NULL && path[0] != '\0' &&
      (rc = apply_file(o, path, err, err_len)) != 0)
    goto out;
  if ((rc = apply_env(o, envp, err, err_len)) != 0)
    goto out;
  for (size_t i = 0; i < n_items; i++) {
    char what[64];
    snprintf(what, sizeof(what), "--%s", items[i].row->name);
    rc = apply_row(o, items[i].row, items[i].val, what, err, err_len);
    if (rc != 0)
      goto out;
  }
  if ((rc = dr__sched_apply(o, envp, err, err_len)) != 0)
    goto out;
  rc = check(o, err, err_len);
out:
  if (rc == -ENOMEM)
    dr__opt_fail(err, err_len, "out of memory while reading the options");
  free(items);
  /* A caller that exits at once after --help or an error leaks nothing. */
  if (rc != 0)
    dr_options_free(o);
  return rc;
}

void dr_options_free(dr_options_t *o) {
  if (o == NULL)
    return;
  char **owned[] = {&o->master_addr,
                    &o->rdzv_host,
                    &o->rdzv_id,
                    &o->role,
                    &o->log_dir,
                    &o->local_ranks_filter,
                    &o->log_prefix_template,
                    &o->local_addr,
                    &o->signals_to_handle,
                    &o->cpu_list,
                    &o->secret_file,
                    &o->config_file,
                    &o->notice};
  for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) {
    free(*owned[i]);
    *owned[i] = NULL;
  }
  o->prog_argv = NULL;
  o->prog_argc = 0;
}

dr_bind_opts_t dr_options_bind(const dr_options_t *o) {
  dr_bind_opts_t b = {o->nproc_kind, o->nproc_per_node, o->cpu_bind,
                      o->cpu_list, o->gpu_bind};
  return b;
}

void dr_options_agent(const dr_options_t *o, dr_agent_opts_t *a) {
  memset(a, 0, sizeof(*a));
  a->rdzv_id = o->rdzv_id;
  a->max_restarts = o->max_restarts;
  a->node_rank = o->node_rank;
  a->local_addr = o->local_addr;
  a->join_timeout_ms = o->join_timeout_ms;
  a->heartbeat_timeout_ms = o->heartbeat_timeout_ms;
  a->hang_timeout_ms = o->hang_timeout_ms;
  a->stop_grace_ms = o->stop_grace_ms;
  a->signal_hold_ms = o->signal_hold_ms;
  a->role = o->role;
  a->log_dir = o->log_dir;
  a->redirects = o->redirects;
  a->tee = o->tee;
  a->local_ranks_filter = o->local_ranks_filter;
  a->log_prefix_template = o->log_prefix_template;
  a->signals_to_handle = o->signals_to_handle;
  a->secret_file = o->secret_file;
  a->bind = dr_options_bind(o);
}
