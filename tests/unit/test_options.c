/* The command line: flags in every spelling, PET_ variables, the INI file,
 * their precedence, the checks across flags, --help and --version.
 *
 * One file, past the few hundred lines of the rule: the project keeps one
 * cmocka executable per module, and these are the tests of one module,
 * dr_options, on one fixture (options_fixture.c). */
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
#include "log.h"
#include "options.h"
#include "options_fixture.h"
#include "options_internal.h"

/* Runs fn with stdout going to a file; returns what it printed (free it). */
static char *capture(fx_t *f, int *rc, const char *arg) {
  fflush(stdout);
  int saved = dup(1);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  dup2(fileno(tmp), 1);
  *rc = fx_parse(f, arg, "train", NULL);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  long n = ftell(tmp);
  assert_true(n >= 0);
  char *text = calloc(1, (size_t)n + 1);
  rewind(tmp);
  assert_int_equal(fread(text, 1, (size_t)n, tmp), (size_t)n);
  fclose(tmp);
  return text;
}

/* ---- defaults ---------------------------------------------------------- */

static void test_defaults(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  const dr_options_t *o = &f->o;
  assert_int_equal(o->min_nodes, 1);
  assert_int_equal(o->max_nodes, 1);
  assert_int_equal(o->nproc_kind, DR_NPROC_NUMBER);
  assert_int_equal(o->nproc_per_node, 1);
  assert_int_equal(o->node_rank, -1);
  assert_null(o->master_addr);
  assert_int_equal(o->master_port, -1);
  assert_int_equal(o->rdzv_backend, DR_RDZV_C10D);
  assert_null(o->rdzv_host);
  assert_int_equal(o->rdzv_port, 29400);
  assert_int_equal(o->have_endpoint, 0);
  assert_string_equal(o->rdzv_id, "none");
  assert_int_equal(o->join_timeout_ms, 600000);
  assert_int_equal(o->last_call_timeout_ms, 1000);
  assert_int_equal(o->heartbeat_timeout_ms, 2000);
  assert_int_equal(o->is_host, -1);
  assert_int_equal(o->standalone, 0);
  assert_int_equal(o->max_restarts, 0);
  assert_true(o->monitor_interval_s > 0.099 && o->monitor_interval_s < 0.101);
  assert_string_equal(o->role, "default");
  assert_null(o->log_dir);
  assert_int_equal(dr_std_spec_get(&o->redirects, 0), DR_STD_NONE);
  assert_int_equal(dr_std_spec_get(&o->tee, 7), DR_STD_NONE);
  assert_null(o->local_ranks_filter);
  assert_null(o->log_prefix_template);
  assert_null(o->local_addr);
  assert_int_equal(o->no_python, 0);
  assert_int_equal(o->run_module, 0);
  assert_string_equal(o->signals_to_handle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  assert_int_equal(o->stop_grace_ms, 10000);
  assert_int_equal(o->signal_hold_ms, 30000);
  assert_int_equal(o->gpu_bind, DR_GPU_BIND_NONE);
  assert_int_equal(o->cpu_bind, DR_CPU_BIND_NONE);
  assert_null(o->cpu_list);
  assert_null(o->secret_file);
  assert_int_equal(o->hang_timeout_ms, DR_HANG_AUTO);
  assert_null(o->config_file);
  assert_int_equal(o->log_level, DR_LOG_INFO);
  assert_null(o->ckpt_dir);
  assert_int_equal(o->ckpt_replicas, 0); /* one node: nobody to copy to */
  assert_int_equal(o->ckpt_rate, 48ull << 20);
  assert_int_equal(o->ckpt_keep, 3);
  assert_null(o->ckpt_persist);
  assert_int_equal(o->ckpt_persist_every_ms, 300000);
  assert_int_equal(o->prog_argc, 1);
  assert_string_equal(o->prog_argv[0], "train");
  assert_null(o->prog_argv[1]);
}

/* The defaults --help shows are the defaults: each, given explicitly,
 * changes nothing. */
static void test_help_defaults_are_real(void **state) {
  fx_t *f = *state;
  static const char *const names[] = {"nnodes",
                                      "nproc-per-node",
                                      "rdzv-backend",
                                      "rdzv-id",
                                      "rdzv-conf",
                                      "max-restarts",
                                      "monitor-interval",
                                      "role",
                                      "redirects",
                                      "tee",
                                      "signals-to-handle",
                                      "stop-grace",
                                      "signal-hold",
                                      "gpu-bind",
                                      "cpu-bind",
                                      "log-level",
                                      "standalone",
                                      "no-python",
                                      "module",
                                      NULL};
  dr_options_t def;
  assert_int_equal(dr__opt_defaults(&def), 0);
  for (int i = 0; names[i] != NULL; i++) {
    const dr__opt_t *row = dr__opt_find(names[i], strlen(names[i]), 0);
    assert_non_null(row);
    assert_non_null(row->def);
    char arg[256];
    const char *env_v = row->kind == DR__OPT_FLAG ? "0" : row->def;
    if (row->kind == DR__OPT_FLAG)
      assert_string_equal(row->def, "off");
    snprintf(arg, sizeof(arg), "--%s=%s", names[i], row->def);
    /* flags are checked through the environment, where "0" is allowed */
    char env[256];
    snprintf(env, sizeof(env), "PET_%s=%s", names[i], env_v);
    for (char *c = env + 4; *c != '='; c++)
      *c = *c == '-' ? '_' : (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    fx_set_env(f, env, NULL);
    int rc = row->kind == DR__OPT_FLAG ? fx_parse(f, "train", NULL)
                                       : fx_parse(f, arg, "train", NULL);
    fx_assert_ok(f, rc);
    const dr_options_t *o = &f->o;
    assert_int_equal(o->min_nodes, def.min_nodes);
    assert_int_equal(o->max_nodes, def.max_nodes);
    assert_int_equal(o->nproc_kind, def.nproc_kind);
    assert_int_equal(o->nproc_per_node, def.nproc_per_node);
    assert_int_equal(o->rdzv_backend, def.rdzv_backend);
    assert_string_equal(o->rdzv_id, def.rdzv_id);
    assert_int_equal(o->join_timeout_ms, def.join_timeout_ms);
    assert_int_equal(o->last_call_timeout_ms, def.last_call_timeout_ms);
    assert_int_equal(o->heartbeat_timeout_ms, def.heartbeat_timeout_ms);
    assert_int_equal(o->is_host, def.is_host);
    assert_int_equal(o->max_restarts, def.max_restarts);
    assert_true(o->monitor_interval_s == def.monitor_interval_s);
    assert_string_equal(o->role, def.role);
    assert_memory_equal(&o->redirects, &def.redirects, sizeof(def.redirects));
    assert_memory_equal(&o->tee, &def.tee, sizeof(def.tee));
    assert_string_equal(o->signals_to_handle, def.signals_to_handle);
    assert_int_equal(o->stop_grace_ms, def.stop_grace_ms);
    assert_int_equal(o->signal_hold_ms, def.signal_hold_ms);
    assert_int_equal(o->gpu_bind, def.gpu_bind);
    assert_int_equal(o->cpu_bind, def.cpu_bind);
    assert_int_equal(o->log_level, def.log_level);
    assert_int_equal(o->standalone, def.standalone);
    assert_int_equal(o->no_python, def.no_python);
    assert_int_equal(o->run_module, def.run_module);
  }
  dr_options_free(&def);
}

/* ---- every flag, every spelling ---------------------------------------- */

typedef void (*check_fn)(const dr_options_t *o);

static void ck_nnodes(const dr_options_t *o) {
  assert_int_equal(o->min_nodes, 2);
  assert_int_equal(o->max_nodes, 4);
}
static void ck_nproc(const dr_options_t *o) {
  assert_int_equal(o->nproc_kind, DR_NPROC_NUMBER);
  assert_int_equal(o->nproc_per_node, 8);
}
static void ck_node_rank(const dr_options_t *o) {
  assert_int_equal(o->node_rank, 1);
}
static void ck_master_addr(const dr_options_t *o) {
  assert_string_equal(o->master_addr, "10.0.0.1");
}
static void ck_master_port(const dr_options_t *o) {
  assert_int_equal(o->master_port, 29501);
}
static void ck_backend(const dr_options_t *o) {
  assert_int_equal(o->rdzv_backend, DR_RDZV_STATIC);
  assert_string_equal(o->master_addr, "127.0.0.1");
  assert_int_equal(o->node_rank, 0);
}
static void ck_endpoint(const dr_options_t *o) {
  assert_int_equal(o->have_endpoint, 1);
  assert_string_equal(o->rdzv_host, "host0");
  assert_int_equal(o->rdzv_port, 1234);
}
static void ck_rdzv_id(const dr_options_t *o) {
  assert_string_equal(o->rdzv_id, "job7");
}
static void ck_rdzv_conf(const dr_options_t *o) {
  assert_int_equal(o->join_timeout_ms, 5000);
  assert_int_equal(o->is_host, 1);
}
static void ck_standalone(const dr_options_t *o) {
  assert_int_equal(o->standalone, 1);
}
static void ck_max_restarts(const dr_options_t *o) {
  assert_int_equal(o->max_restarts, 3);
}
static void ck_monitor(const dr_options_t *o) {
  assert_true(o->monitor_interval_s == 5.0);
}
static void ck_role(const dr_options_t *o) {
  assert_string_equal(o->role, "trainer");
}
static void ck_log_dir(const dr_options_t *o) {
  assert_string_equal(o->log_dir, "/tmp/logs");
}
static void ck_redirects(const dr_options_t *o) {
  assert_int_equal(dr_std_spec_get(&o->redirects, 5), DR_STD_ALL);
}
static void ck_tee(const dr_options_t *o) {
  assert_int_equal(dr_std_spec_get(&o->tee, 0), DR_STD_OUT);
  assert_int_equal(dr_std_spec_get(&o->tee, 1), DR_STD_NONE);
}
static void ck_filter(const dr_options_t *o) {
  assert_string_equal(o->local_ranks_filter, "0,2");
}
static void ck_template(const dr_options_t *o) {
  assert_string_equal(o->log_prefix_template, "[${role_name}${rank}]");
}
static void ck_local_addr(const dr_options_t *o) {
  assert_string_equal(o->local_addr, "10.1.1.1");
}
static void ck_no_python(const dr_options_t *o) {
  assert_int_equal(o->no_python, 1);
}
static void ck_module(const dr_options_t *o) {
  assert_int_equal(o->run_module, 1);
}
static void ck_signals(const dr_options_t *o) {
  assert_string_equal(o->signals_to_handle, "SIGUSR1,SIGTERM");
}
static void ck_stop_grace(const dr_options_t *o) {
  assert_int_equal(o->stop_grace_ms, 2500);
}
static void ck_signal_hold(const dr_options_t *o) {
  assert_int_equal(o->signal_hold_ms, 0);
}
static void ck_gpu_bind(const dr_options_t *o) {
  assert_int_equal(o->gpu_bind, DR_GPU_BIND_ISOLATE);
}
static void ck_cpu_bind(const dr_options_t *o) {
  assert_int_equal(o->cpu_bind, DR_CPU_BIND_LIST);
  assert_string_equal(o->cpu_list, "0-3:4-7");
}
static void ck_secret(const dr_options_t *o) {
  assert_string_equal(o->secret_file, "/etc/secret");
}
static void ck_hang(const dr_options_t *o) {
  assert_int_equal(o->hang_timeout_ms, 300000);
}
static void ck_log_level(const dr_options_t *o) {
  assert_int_equal(o->log_level, DR_LOG_DEBUG);
}
static void ck_ckpt_dir(const dr_options_t *o) {
  assert_string_equal(o->ckpt_dir, "/dev/shm/ckpt");
}
static void ck_ckpt_replicas(const dr_options_t *o) {
  assert_int_equal(o->ckpt_replicas, 2);
}
static void ck_ckpt_rate(const dr_options_t *o) {
  assert_int_equal(o->ckpt_rate, 100ull << 20);
}
static void ck_ckpt_keep(const dr_options_t *o) {
  assert_int_equal(o->ckpt_keep, 5);
}
static void ck_ckpt_persist(const dr_options_t *o) {
  assert_string_equal(o->ckpt_persist, "/mnt/ckpt");
}
static void ck_ckpt_persist_every(const dr_options_t *o) {
  assert_int_equal(o->ckpt_persist_every_ms, 60000);
}

static const struct {
  const char *name;  /* dashed */
  const char *value; /* NULL for a flag */
  check_fn check;
} flags[] = {
    {"nnodes", "2:4", ck_nnodes},
    {"nproc-per-node", "8", ck_nproc},
    {"node-rank", "1", ck_node_rank},
    {"master-addr", "10.0.0.1", ck_master_addr},
    {"master-port", "29501", ck_master_port},
    {"rdzv-backend", "static", ck_backend},
    {"rdzv-endpoint", "host0:1234", ck_endpoint},
    {"rdzv-id", "job7", ck_rdzv_id},
    {"rdzv-conf", "join_timeout=5,is_host=1", ck_rdzv_conf},
    {"standalone", NULL, ck_standalone},
    {"max-restarts", "3", ck_max_restarts},
    {"monitor-interval", "5", ck_monitor},
    {"role", "trainer", ck_role},
    {"log-dir", "/tmp/logs", ck_log_dir},
    {"redirects", "3", ck_redirects},
    {"tee", "0:1", ck_tee},
    {"local-ranks-filter", "0,2", ck_filter},
    {"log-line-prefix-template", "[${role_name}${rank}]", ck_template},
    {"local-addr", "10.1.1.1", ck_local_addr},
    {"no-python", NULL, ck_no_python},
    {"module", NULL, ck_module},
    {"signals-to-handle", "SIGUSR1,SIGTERM", ck_signals},
    {"stop-grace", "2.5", ck_stop_grace},
    {"signal-hold", "0", ck_signal_hold},
    {"gpu-bind", "isolate", ck_gpu_bind},
    {"cpu-bind", "0-3:4-7", ck_cpu_bind},
    {"secret-file", "/etc/secret", ck_secret},
    {"hang-timeout", "300", ck_hang},
    {"log-level", "debug", ck_log_level},
    {"ckpt-dir", "/dev/shm/ckpt", ck_ckpt_dir},
    {"ckpt-replicas", "2", ck_ckpt_replicas},
    {"ckpt-replicate-rate", "100M", ck_ckpt_rate},
    {"ckpt-keep", "5", ck_ckpt_keep},
    {"ckpt-persist", "/mnt/ckpt", ck_ckpt_persist},
    {"ckpt-persist-every", "60", ck_ckpt_persist_every},
};
#define N_FLAGS (sizeof(flags) / sizeof(flags[0]))

/* Extra arguments some flags need to pass the checks across flags. */
static const char *const *companions(const char *name) {
  static const char *const none[] = {NULL};
  static const char *const endpoint[] = {"--rdzv-endpoint", "h", NULL};
  static const char *const two_nodes[] = {"--nnodes", "2", "--rdzv-endpoint",
                                          "h", NULL};
  static const char *const ckpt_dir[] = {"--ckpt-dir", "/dev/shm/ckpt", NULL};
  if (strcmp(name, "nnodes") == 0)
    return endpoint;
  if (strcmp(name, "ckpt-persist") == 0)
    return ckpt_dir;
  if (strcmp(name, "node-rank") == 0)
    return two_nodes;
  return none;
}

static void test_every_flag_every_spelling(void **state) {
  fx_t *f = *state;
  for (size_t i = 0; i < N_FLAGS; i++) {
    char dashed[64], under[64], eq[2][160];
    snprintf(dashed, sizeof(dashed), "--%s", flags[i].name);
    snprintf(under, sizeof(under), "--%s", flags[i].name);
    for (char *c = under + 2; *c != '\0'; c++)
      if (*c == '-')
        *c = '_';
    const char *spell[2] = {dashed, under};
    for (int s = 0; s < 2; s++) {
      for (int form = 0; form < (flags[i].value != NULL ? 2 : 1); form++) {
        const char *args[FX_MAX_ARGS] = {"ddprun"};
        int n = 1;
        for (const char *const *c = companions(flags[i].name); *c; c++)
          args[n++] = *c;
        if (flags[i].value == NULL) {
          args[n++] = spell[s];
        } else if (form == 0) {
          args[n++] = spell[s];
          args[n++] = flags[i].value;
        } else {
          snprintf(eq[s], sizeof(eq[s]), "%s=%s", spell[s], flags[i].value);
          args[n++] = eq[s];
        }
        args[n++] = "train";
        args[n] = NULL;
        int rc = fx_parse_v(f, args);
        if (rc != 0)
          fail_msg("%s (form %d): rc %d: %s", spell[s], form, rc, f->err);
        flags[i].check(&f->o);
      }
    }
  }
}

/* Every row of the table is covered above (help and version aside). */
static void test_every_row_tested(void **state) {
  for (size_t r = 0; r < dr__opt_count; r++) {
    const dr__opt_t *row = &dr__opt_table[r];
    if (row->kind == DR__OPT_HELP || row->kind == DR__OPT_VERSION ||
        strcmp(row->name, "config") == 0)
      continue;
    size_t i;
    for (i = 0; i < N_FLAGS; i++)
      if (strcmp(flags[i].name, row->name) == 0)
        break;
    if (i == N_FLAGS)
      fail_msg("--%s has no spelling test", row->name);
  }
}

/* Each flag through its PET_ variable (flags as 1/true/yes). */
static void test_every_flag_from_env(void **state) {
  fx_t *f = *state;
  static const char *const truths[] = {"1", "true", "YES"};
  for (size_t i = 0; i < N_FLAGS; i++) {
    char env[256];
    int k = snprintf(env, sizeof(env), "PET_");
    for (const char *c = flags[i].name; *c; c++)
      env[k++] = *c == '-' ? '_' : (char)(*c - 32);
    snprintf(env + k, sizeof(env) - (size_t)k, "=%s",
             flags[i].value != NULL ? flags[i].value : truths[i % 3]);
    fx_set_env(f, env, "PET_RDZV_ENDPOINT=h", NULL);
    if (strcmp(flags[i].name, "node-rank") == 0)
      fx_set_env(f, env, "PET_NNODES=2", "PET_RDZV_ENDPOINT=h", NULL);
    if (strcmp(flags[i].name, "ckpt-persist") == 0)
      fx_set_env(f, env, "PET_CKPT_DIR=/dev/shm/ckpt", NULL);
    if (strcmp(flags[i].name, "rdzv-endpoint") == 0 ||
        strcmp(flags[i].name, "rdzv-backend") == 0 ||
        strcmp(flags[i].name, "standalone") == 0)
      fx_set_env(f, env, NULL);
    int rc = fx_parse(f, "train", NULL);
    if (rc != 0)
      fail_msg("%s: rc %d: %s", env, rc, f->err);
    flags[i].check(&f->o);
  }
}

static void test_short_options(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "-m", "pkg.train", NULL));
  assert_int_equal(f->o.run_module, 1);
  assert_string_equal(f->o.prog_argv[0], "pkg.train");
  fx_assert_ok(f, fx_parse(f, "-r", "3", "-t2", "train", NULL));
  assert_int_equal(dr_std_spec_get(&f->o.redirects, 0), DR_STD_ALL);
  assert_int_equal(dr_std_spec_get(&f->o.tee, 0), DR_STD_ERR);
  fx_assert_err(f, fx_parse(f, "-mx", "train", NULL), "'-mx'");
  fx_assert_err(f, fx_parse(f, "-x", "train", NULL), "unknown option '-x'");
}

/* ---- precedence ---------------------------------------------------------- */

static void test_precedence(void **state) {
  fx_t *f = *state;
  const char *cfg = fx_write_file(f, "p.ini",
                               "max-restarts = 1\n"
                               "role = from-file\n"
                               "stop_grace = 1\n"
                               "log-level = warn\n"
                               "nproc-per-node = 2\n"
                               "rdzv-id = file-id\n");
  char pet_config[160];
  snprintf(pet_config, sizeof(pet_config), "PET_CONFIG=%s", cfg);
  /* the file alone over the defaults */
  fx_set_env(f, pet_config, NULL);
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  assert_int_equal(f->o.max_restarts, 1);
  assert_string_equal(f->o.role, "from-file");
  assert_int_equal(f->o.stop_grace_ms, 1000);
  assert_int_equal(f->o.log_level, DR_LOG_WARN);
  assert_int_equal(f->o.nproc_per_node, 2);
  assert_string_equal(f->o.config_file, cfg);
  /* the environment over the file */
  fx_set_env(f, pet_config, "PET_MAX_RESTARTS=2", "PET_ROLE=from-env",
          "PET_STOP_GRACE=2", "PET_RDZV_ID=", NULL);
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  assert_int_equal(f->o.max_restarts, 2);
  assert_string_equal(f->o.role, "from-env");
  assert_int_equal(f->o.stop_grace_ms, 2000);
  assert_int_equal(f->o.log_level, DR_LOG_WARN);
  assert_string_equal(f->o.rdzv_id, "file-id"); /* empty = unset */
  /* the command line over both */
  fx_assert_ok(f, fx_parse(f, "--max-restarts", "3", "--role=from-argv",
                     "--log-level", "error", "train", NULL));
  assert_int_equal(f->o.max_restarts, 3);
  assert_string_equal(f->o.role, "from-argv");
  assert_int_equal(f->o.stop_grace_ms, 2000);
  assert_int_equal(f->o.log_level, DR_LOG_ERROR);
  assert_int_equal(f->o.nproc_per_node, 2);
  /* the last of a repeated flag wins */
  fx_assert_ok(f, fx_parse(f, "--role", "a", "--role", "b", "train", NULL));
  assert_string_equal(f->o.role, "b");
}

/* A flag set in the file can be turned off from the environment; a later
 * layer replaces a whole value, it does not merge into it. */
static void test_precedence_replaces(void **state) {
  fx_t *f = *state;
  const char *cfg = fx_write_file(f, "r.ini",
                               "standalone = true\n"
                               "rdzv-conf = join_timeout=5,is_host=1\n"
                               "redirects = 0:3,1:3\n");
  char pet_config[160];
  snprintf(pet_config, sizeof(pet_config), "PET_CONFIG=%s", cfg);
  fx_set_env(f, pet_config, "PET_STANDALONE=0", NULL);
  fx_assert_ok(f, fx_parse(f, "--rdzv-conf", "heartbeat_timeout=7", "--redirects",
                     "1", "train", NULL));
  assert_int_equal(f->o.standalone, 0);
  assert_int_equal(f->o.join_timeout_ms, 600000);
  assert_int_equal(f->o.heartbeat_timeout_ms, 7000);
  assert_int_equal(f->o.is_host, -1);
  assert_int_equal(dr_std_spec_get(&f->o.redirects, 0), DR_STD_OUT);
  assert_int_equal(dr_std_spec_get(&f->o.redirects, 1), DR_STD_OUT);
}

static void test_env(void **state) {
  fx_t *f = *state;
  fx_set_env(f, "PET_NPROC_PER_NODE=gpu", "PET_RDZV_ENDPOINT=[::1]:5000",
          "PET_NNODES=1:2", "PATH=/bin", "PET_UNKNOWN_THING=1", "PET_NPROC=9",
          NULL);
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  assert_int_equal(f->o.nproc_kind, DR_NPROC_GPU);
  assert_string_equal(f->o.rdzv_host, "::1");
  assert_int_equal(f->o.rdzv_port, 5000);
  assert_int_equal(f->o.min_nodes, 1);
  assert_int_equal(f->o.max_nodes, 2);
  fx_set_env(f, "PET_STANDALONE=1", NULL);
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  assert_int_equal(f->o.standalone, 1);
  fx_set_env(f, "PET_STANDALONE=maybe", NULL);
  fx_assert_err(f, fx_parse(f, "train", NULL), "PET_STANDALONE 'maybe'");
  fx_set_env(f, "PET_NNODES=0", NULL);
  fx_assert_err(f, fx_parse(f, "train", NULL), "PET_NNODES '0': must be at least 1");
  /* a NULL environment is an empty one */
  dr_options_free(&f->o);
  f->argv[0] = "ddprun";
  f->argv[1] = "train";
  f->argv[2] = NULL;
  assert_int_equal(
      dr_options_parse(2, f->argv, NULL, &f->o, f->err, sizeof(f->err)), 0);
}

/* ---- the config file ----------------------------------------------------- */

static void test_ini(void **state) {
  fx_t *f = *state;
  const char *cfg = fx_write_file(f, "a.ini",
                               "; a comment\n"
                               "# another\n"
                               "nnodes = 2\n"
                               "rdzv_endpoint = host0:29500\n"
                               "\n"
                               "NProc-Per-Node = 4\n");
  fx_assert_ok(f, fx_parse(f, "--config", cfg, "train", NULL));
  assert_int_equal(f->o.max_nodes, 2);
  assert_int_equal(f->o.nproc_per_node, 4);
  assert_int_equal(f->o.rdzv_port, 29500);

  cfg = fx_write_file(f, "b.ini",
                   "\xEF\xBB\xBFrole = top\n"
                   "[ddprun]\n"
                   "  max_restarts = 4\n"
                   "  standalone = yes\n"
                   "\tlog-dir = /var/log/x ; inline comment\n");
  fx_assert_ok(f, fx_parse(f,
                     "--config="
                     "/nonexistent",
                     "--config", cfg, "train", NULL));
  assert_string_equal(f->o.role, "top");
  assert_int_equal(f->o.max_restarts, 4);
  assert_int_equal(f->o.standalone, 1);
  assert_string_equal(f->o.log_dir, "/var/log/x");
  assert_string_equal(f->o.config_file, cfg);

  /* --config over PET_CONFIG */
  fx_set_env(f, "PET_CONFIG=/nonexistent/x.ini", NULL);
  fx_assert_ok(f, fx_parse(f, "--config", cfg, "train", NULL));
  assert_int_equal(f->o.max_restarts, 4);
}

static void test_ini_errors(void **state) {
  fx_t *f = *state;
  char want[256];
  const char *cfg = fx_write_file(f, "k.ini", "nnodes = 1\n\n# c\nnprocs = 4\n");
  snprintf(want, sizeof(want), "%s:4: unknown key 'nprocs'", cfg);
  fx_assert_err(f, fx_parse(f, "--config", cfg, "train", NULL), want);

  cfg = fx_write_file(f, "s.ini", "[ddprun]\nrole = x\n[torchrun]\n");
  snprintf(want, sizeof(want), "%s:3: unknown section [torchrun]", cfg);
  fx_assert_err(f, fx_parse(f, "--config", cfg, "train", NULL), want);

  cfg = fx_write_file(f, "s2.ini", "role = x\n  [other]  \nrole = y\n");
  snprintf(want, sizeof(want), "%s:2: unknown section [other]", cfg);
  fx_assert_err(f, fx_parse(f, "--config", cfg, "train", NULL), want);

  cfg = fx_write_file(f, "v.ini", "[ddprun]\nrole = x\nnnodes = 0\n");
  snprintf(want, sizeof(want), "%s:3: nnodes '0': must be at least 1", cfg);
  fx_assert_err(f, fx_parse(f, "--config", cfg, "train", NULL), want);

  cfg = fx_write_file(f, "f.ini", "standalone = maybe\n");
  snprintf(want, sizeof(want), "%s:1: standalone 'maybe'", cfg);
  fx_assert_err(f, fx_parse(f, "--config", cfg, "train", NULL), want);

  cfg = fx_write_file(f, "x.ini", "role = x\nthis line has no equals\n");
  snprintf(want, sizeof(want), "%s:2: expected 'name = value'", cfg);
  fx_assert_err(f, fx_parse(f, "--config", cfg, "train", NULL), want);

  cfg = fx_write_file(f, "c.ini", "config = other.ini\n");
  snprintf(want, sizeof(want), "%s:1: 'config' cannot be set", cfg);
  fx_assert_err(f, fx_parse(f, "--config", cfg, "train", NULL), want);

  cfg = fx_write_file(f, "h.ini", "help = 1\n");
  snprintf(want, sizeof(want), "%s:1: 'help' cannot be set", cfg);
  fx_assert_err(f, fx_parse(f, "--config", cfg, "train", NULL), want);

  char long_line[600];
  memset(long_line, 'a', sizeof(long_line));
  memcpy(long_line, "log-dir = ", 10);
  long_line[sizeof(long_line) - 2] = '\n';
  long_line[sizeof(long_line) - 1] = '\0';
  char text[700];
  snprintf(text, sizeof(text), "role = r\n%s", long_line);
  cfg = fx_write_file(f, "l.ini", text);
  snprintf(want, sizeof(want), "%s:2: line is longer than", cfg);
  fx_assert_err(f, fx_parse(f, "--config", cfg, "train", NULL), want);

  fx_assert_err(f, fx_parse(f, "--config", "/nonexistent/cfg.ini", "train", NULL),
             "cannot open config file '/nonexistent/cfg.ini'");
  fx_set_env(f, "PET_CONFIG=/nonexistent/env.ini", NULL);
  fx_assert_err(f, fx_parse(f, "train", NULL), "'/nonexistent/env.ini'");
  fx_set_env(f, NULL);
  fx_assert_err(f, fx_parse(f, "--config", f->dir, "train", NULL), f->dir);
  fx_assert_err(f, fx_parse(f, "--config", "", "train", NULL), "--config ''");
}

/* ---- bad input ---------------------------------------------------------- */

static const struct {
  const char *args[8];
  const char *want; /* in the message, with the offending value */
} bad[] = {
    {{"--nproc", "4", "train"}, "unknown option '--nproc'; see ddprun --help"},
    {{"--nproc=4", "train"}, "unknown option '--nproc'"},
    {{"--nnodes", "0", "train"}, "--nnodes '0': must be at least 1"},
    {{"--nnodes", "3:2", "train"}, "--nnodes '3:2': MIN must not exceed MAX"},
    {{"--nnodes", "0:2", "train"}, "--nnodes '0:2': must be at least 1"},
    {{"--nnodes", "two", "train"}, "--nnodes 'two'"},
    {{"--nnodes", "1:", "train"}, "--nnodes '1:'"},
    {{"--nnodes", "1:2:3", "train"}, "--nnodes '1:2:3'"},
    {{"--nnodes", "2000000", "train"}, "--nnodes '2000000': must be at most"},
    {{"--nproc-per-node", "-1", "train"},
     "--nproc-per-node '-1': must be a positive number, auto, cpu or gpu"},
    {{"--nproc-per-node", "0", "train"}, "--nproc-per-node '0'"},
    {{"--nproc-per-node", "GPU", "train"}, "--nproc-per-node 'GPU'"},
    {{"--nproc-per-node", "1025", "train"}, "'1025': must be at most 1024"},
    {{"--node-rank", "x", "train"}, "--node-rank 'x'"},
    {{"--node-rank", "-1", "train"}, "--node-rank '-1'"},
    {{"--nnodes", "2", "--rdzv-endpoint", "h", "--node-rank", "2", "train"},
     "--node-rank 2 is out of range for --nnodes 2 (0..1)"},
    {{"--node-rank", "1", "train"},
     "--node-rank 1 is out of range for --nnodes 1 (0..0)"},
    {{"--master-port", "65536", "train"}, "--master-port '65536'"},
    {{"--master-port", "-1", "train"}, "--master-port '-1'"},
    {{"--master-addr", "", "train"}, "--master-addr '': must not be empty"},
    {{"--rdzv-backend", "etcd", "train"},
     "--rdzv-backend 'etcd': must be c10d, static, slurm or k8s"},
    {{"--rdzv-endpoint", "h:99999", "train"},
     "--rdzv-endpoint 'h:99999': port must be 1-65535"},
    {{"--rdzv-endpoint", "h:0", "train"}, "'h:0': port must be 1-65535"},
    {{"--rdzv-endpoint", "host:", "train"}, "'host:': the port is empty"},
    {{"--rdzv-endpoint", ":1", "train"}, "':1': the host is empty"},
    {{"--rdzv-endpoint", "", "train"}, "--rdzv-endpoint '': must not be empty"},
    {{"--rdzv-endpoint", "h:12x", "train"}, "'h:12x': port must be 1-65535"},
    {{"--rdzv-endpoint", "::1", "train"}, "'::1': an IPv6 address needs"},
    {{"--rdzv-endpoint", "[::1", "train"}, "'[::1': missing ']'"},
    {{"--rdzv-endpoint", "[::1]x", "train"}, "'[::1]x': expected ':PORT'"},
    {{"--rdzv-endpoint", "[]:5", "train"}, "'[]:5': the host is empty"},
    {{"--rdzv-endpoint", "a b:5", "train"}, "'a b:5'"},
    {{"--rdzv-id", "../etc", "train"}, "--rdzv-id '../etc'"},
    {{"--rdzv-id", "a/b", "train"}, "--rdzv-id 'a/b'"},
    {{"--rdzv-conf", "bogus=1", "train"}, "unknown key 'bogus'"},
    {{"--rdzv-conf", "join_timeout", "train"}, "'join_timeout' is not"},
    {{"--rdzv-conf", "join_timeout=x", "train"}, "'join_timeout=x'"},
    {{"--rdzv-conf", "join_timeout=0", "train"}, "'join_timeout=0'"},
    {{"--rdzv-conf", "heartbeat_timeout=-1", "train"}, "heartbeat_timeout"},
    {{"--rdzv-conf", "is_host=2", "train"}, "'is_host=2'"},
    {{"--max-restarts", "-1", "train"}, "--max-restarts '-1'"},
    {{"--max-restarts", "3.5", "train"}, "--max-restarts '3.5'"},
    {{"--monitor-interval", "0", "train"}, "--monitor-interval '0'"},
    {{"--monitor-interval", "fast", "train"}, "--monitor-interval 'fast'"},
    {{"--role", "", "train"}, "--role ''"},
    {{"--redirects", "4", "train"}, "--redirects '4'"},
    {{"--redirects", "0:4", "train"}, "--redirects '0:4'"},
    {{"--redirects", "x:1", "train"}, "'x:1'"},
    {{"--redirects", "0:1,", "train"}, "'0:1,'"},
    {{"--redirects", "0:1,0:2", "train"}, "local rank 0 is given twice"},
    {{"--redirects", "1024:1", "train"}, "local rank 1024 is above the limit"},
    {{"--tee", "", "train"}, "--tee ''"},
    {{"--tee", "1,0:1", "train"}, "--tee '1,0:1'"},
    {{"--local-ranks-filter", "0,x", "train"}, "--local-ranks-filter '0,x'"},
    {{"--local-ranks-filter", "0,", "train"}, "'0,'"},
    {{"--local-ranks-filter", "-1", "train"}, "'-1'"},
    {{"--local-ranks-filter", "5000", "train"}, "'5000'"},
    {{"--log-line-prefix-template", "${oops}", "train"}, "'${oops}'"},
    {{"--log-line-prefix-template", "[${rank", "train"}, "'[${rank'"},
    {{"--signals-to-handle", "SIGFOO", "train"}, "unknown signal 'SIGFOO'"},
    {{"--signals-to-handle", "TERM,,INT", "train"}, "'TERM,,INT'"},
    {{"--signals-to-handle", "SIGKILL", "train"}, "SIGKILL cannot be caught"},
    {{"--signals-to-handle", "", "train"}, "--signals-to-handle ''"},
    {{"--stop-grace", "-1", "train"}, "--stop-grace '-1'"},
    {{"--stop-grace", "10s", "train"}, "--stop-grace '10s'"},
    {{"--signal-hold", "soon", "train"},
     "--signal-hold 'soon': must be a number of seconds"},
    {{"--gpu-bind", "all", "train"}, "--gpu-bind 'all': must be none or"},
    {{"--cpu-bind", "foo", "train"}, "--cpu-bind 'foo'"},
    {{"--cpu-bind", "3-1", "train"}, "--cpu-bind '3-1'"},
    {{"--cpu-bind", "0-3::4", "train"}, "'0-3::4'"},
    {{"--cpu-bind", "0-99999", "train"}, "'0-99999'"},
    {{"--cpu-bind", "", "train"}, "--cpu-bind ''"},
    {{"--hang-timeout", "x", "train"}, "--hang-timeout 'x'"},
    {{"--log-level", "verbose", "train"}, "--log-level 'verbose'"},
    {{"--standalone=1", "train"},
     "'--standalone' is a flag and takes no value (got '1')"},
    {{"--module=yes", "train"}, "'--module' is a flag and takes no value"},
    {{"--nnodes"}, "option '--nnodes' needs a value"},
    {{"--nnodes", "2", "train"}, "--nnodes 2 needs --rdzv-endpoint"},
    {{"--standalone", "--nnodes", "2", "train"}, "--nnodes '2'"},
    {{"--standalone", "--rdzv-endpoint", "h:5", "train"}, "'h:5'"},
    {{"--standalone", "--rdzv-backend", "static", "train"}, "'static'"},
    {{"--rdzv-backend", "static", "--nnodes", "1:2", "train"}, "'1:2'"},
    {{"--rdzv-backend", "static", "--nnodes", "3", "train"},
     "--nnodes 3 needs --node-rank (0..2)"},
    {{"--no-python", "-m", "train"}, "--no-python and -m/--module"},
    {{"-", "train"}, "unknown option '-'"},
    {{"---x", "train"}, "'---x'"},
    {{"--nnodes=a\nb", "train"}, "'a\\x0ab'"},
    {{NULL}, "no program to run: ddprun [options] PROGRAM [ARGS...]"},
    {{"--role", "x"}, "no program to run"},
};

static void test_bad_input(void **state) {
  fx_t *f = *state;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    const char *args[10] = {"ddprun"};
    int n = 1;
    for (int k = 0; k < 8 && bad[i].args[k] != NULL; k++)
      args[n++] = bad[i].args[k];
    args[n] = NULL;
    int rc = fx_parse_v(f, args);
    if (rc != DR_EBADARG || strstr(f->err, bad[i].want) == NULL)
      fail_msg("case %zu (%s %s): rc %d, err \"%s\", wanted \"%s\"", i,
               args[1] ? args[1] : "", args[1] && args[2] ? args[2] : "", rc,
               f->err, bad[i].want);
    assert_null(strchr(f->err, '\n'));
    dr_options_free(&f->o);
    dr_options_free(&f->o);
  }
}

/* ---- --help, --version ----------------------------------------------- */

static void test_help(void **state) {
  fx_t *f = *state;
  int rc;
  char *text = capture(f, &rc, "--help");
  assert_int_equal(rc, 1);
  /* the text with each line break and its indent as one space */
  char *flat = calloc(1, strlen(text) + 1);
  assert_non_null(flat);
  for (const char *p = text; *p != '\0';) {
    if (*p == '\n') {
      p += strspn(p, "\n ");
      flat[strlen(flat)] = ' ';
    } else {
      flat[strlen(flat)] = *p++;
    }
  }
  for (size_t r = 0; r < dr__opt_count; r++) {
    char name[64];
    snprintf(name, sizeof(name), "--%s", dr__opt_table[r].name);
    if (strstr(text, name) == NULL)
      fail_msg("--help does not mention %s", name);
    if (dr__opt_table[r].def != NULL) {
      char def[128];
      snprintf(def, sizeof(def), "(default: %s)", dr__opt_table[r].def);
      if (strstr(flat, def) == NULL)
        fail_msg("--help does not show %s for --%s", def,
                 dr__opt_table[r].name);
    }
  }
  free(flat);
  static const char *const must[] = {
      "usage: ddprun [options] PROGRAM [ARGS...]",
      "-m, --module",
      "-h, --help",
      "PET_NPROC_PER_NODE",
      "PET_CONFIG",
      "[ddprun]",
      "python3 -u",
      ".py",
      "--no-python",
      "29400",
      "name = value",
      "dashes or underscores",
      "--nproc_per_node",
      NULL};
  for (int i = 0; must[i] != NULL; i++)
    if (strstr(text, must[i]) == NULL)
      fail_msg("--help does not mention '%s'", must[i]);
  /* no line is wider than 79 columns */
  for (const char *line = text; *line != '\0';) {
    size_t len = strcspn(line, "\n");
    if (len > 79)
      fail_msg("--help line too long: %.*s", (int)len, line);
    line += len + (line[len] == '\n');
  }
  free(text);

  text = capture(f, &rc, "-h");
  assert_int_equal(rc, 1);
  assert_non_null(strstr(text, "usage: ddprun"));
  free(text);

  text = capture(f, &rc, "--version");
  assert_int_equal(rc, 1);
  assert_int_equal(strncmp(text, "ddprun ", 7), 0);
  assert_non_null(strchr(text, '\n'));
  assert_null(strstr(text, "unknown"));
  free(text);

  /* after the program, --help belongs to the program */
  fx_assert_ok(f, fx_parse(f, "train", "--help", NULL));
  assert_int_equal(f->o.prog_argc, 2);
  assert_string_equal(f->o.prog_argv[1], "--help");
}

/* ---- the program --------------------------------------------------------- */

static void test_program(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--nproc-per-node", "2", "train.py", "--lr", "0.1",
                     "-x", "--nnodes", "5", "--", NULL));
  assert_int_equal(f->o.nproc_per_node, 2);
  assert_int_equal(f->o.max_nodes, 1);
  assert_int_equal(f->o.prog_argc, 7);
  assert_ptr_equal(f->o.prog_argv, &f->argv[3]);
  assert_string_equal(f->o.prog_argv[0], "train.py");
  assert_string_equal(f->o.prog_argv[1], "--lr");
  assert_string_equal(f->o.prog_argv[4], "--nnodes");
  assert_string_equal(f->o.prog_argv[6], "--");
  assert_null(f->o.prog_argv[7]);

  /* -- ends the options; the program may then start with '-' */
  fx_assert_ok(f, fx_parse(f, "--role", "r", "--", "-weird", "--role", NULL));
  assert_string_equal(f->o.role, "r");
  assert_int_equal(f->o.prog_argc, 2);
  assert_string_equal(f->o.prog_argv[0], "-weird");
  assert_string_equal(f->o.prog_argv[1], "--role");

  /* a value that does not start with '-' is the option's, not the program */
  fx_assert_ok(f, fx_parse(f, "--log-dir", "logs", "prog", NULL));
  assert_string_equal(f->o.log_dir, "logs");
  assert_string_equal(f->o.prog_argv[0], "prog");
  /* and a value may start with '-' */
  fx_assert_ok(f, fx_parse(f, "--role", "-r", "prog", NULL));
  assert_string_equal(f->o.role, "-r");

  fx_assert_err(f, fx_parse(f, "--", NULL), "no program to run");
  fx_assert_err(f, fx_parse(f, "--role", "x", NULL), "no program to run");
}

/* ---- the value parsers in detail ---------------------------------------- */

static void test_std_spec(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--redirects", "0:1,3:2,1023:3", "--tee", "2", "train",
                     NULL));
  const dr_std_spec_t *r = &f->o.redirects;
  assert_int_equal(dr_std_spec_get(r, 0), DR_STD_OUT);
  assert_int_equal(dr_std_spec_get(r, 1), DR_STD_NONE);
  assert_int_equal(dr_std_spec_get(r, 3), DR_STD_ERR);
  assert_int_equal(dr_std_spec_get(r, 1023), DR_STD_ALL);
  assert_int_equal(dr_std_spec_get(r, 1024), DR_STD_NONE);
  assert_int_equal(dr_std_spec_get(r, UINT32_MAX), DR_STD_NONE);
  assert_int_equal(dr_std_spec_get(&f->o.tee, 0), DR_STD_ERR);
  assert_int_equal(dr_std_spec_get(&f->o.tee, 5000), DR_STD_ERR);
  fx_assert_ok(f, fx_parse(f, "--redirects", "0", "train", NULL));
  assert_int_equal(dr_std_spec_get(&f->o.redirects, 3), DR_STD_NONE);
  fx_assert_ok(f, fx_parse(f, "--tee", "12:0", "train", NULL));
  assert_int_equal(dr_std_spec_get(&f->o.tee, 12), DR_STD_NONE);
  assert_int_equal(f->o.tee.per_rank_set[12], 1);

  dr_std_spec_t s;
  memset(&s, 0, sizeof(s));
  s.default_mask = DR_STD_ERR;
  s.per_rank[2] = DR_STD_NONE;
  s.per_rank_set[2] = 1;
  assert_int_equal(dr_std_spec_get(&s, 2), DR_STD_NONE);
  assert_int_equal(dr_std_spec_get(&s, 1), DR_STD_ERR);
}

static void test_rdzv_conf(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--rdzv-conf",
                     " join_timeout = 30 , last_call_timeout=0,"
                     "heartbeat-timeout=0.5,is_host=false,",
                     "train", NULL));
  assert_int_equal(f->o.join_timeout_ms, 30000);
  assert_int_equal(f->o.last_call_timeout_ms, 0);
  assert_int_equal(f->o.heartbeat_timeout_ms, 500);
  assert_int_equal(f->o.is_host, 0);
  fx_assert_ok(f, fx_parse(f, "--rdzv-conf", "is_host=TRUE", "train", NULL));
  assert_int_equal(f->o.is_host, 1);
  assert_int_equal(f->o.join_timeout_ms, 600000);
  fx_assert_ok(f, fx_parse(f, "--rdzv-conf", "", "train", NULL));
  assert_int_equal(f->o.is_host, -1);
  /* a bad key leaves nothing half-applied */
  fx_assert_err(
      f,
      fx_parse(f, "--rdzv-conf", "join_timeout=5,read_timeout=1", "train", NULL),
      "--rdzv-conf 'join_timeout=5,read_timeout=1': unknown key "
      "'read_timeout'");
}

static void test_endpoint(void **state) {
  fx_t *f = *state;
  static const struct {
    const char *in, *host;
    uint16_t port;
  } ok[] = {
      {"host0", "host0", 29400},
      {"host0:1", "host0", 1},
      {"10.0.0.2:65535", "10.0.0.2", 65535},
      {"node-3.cluster_a.example", "node-3.cluster_a.example", 29400},
      {"[::1]", "::1", 29400},
      {"[::1]:29500", "::1", 29500},
      {"[fe80::1%eth0]:7", "fe80::1%eth0", 7},
  };
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    fx_assert_ok(f, fx_parse(f, "--rdzv-endpoint", ok[i].in, "train", NULL));
    assert_string_equal(f->o.rdzv_host, ok[i].host);
    assert_int_equal(f->o.rdzv_port, ok[i].port);
    assert_int_equal(f->o.have_endpoint, 1);
  }
}

static void test_nproc_kinds(void **state) {
  fx_t *f = *state;
  static const struct {
    const char *in;
    dr_nproc_kind_t kind;
  } k[] = {
      {"auto", DR_NPROC_AUTO}, {"cpu", DR_NPROC_CPU}, {"gpu", DR_NPROC_GPU}};
  for (size_t i = 0; i < 3; i++) {
    fx_assert_ok(f, fx_parse(f, "--nproc-per-node", k[i].in, "train", NULL));
    assert_int_equal(f->o.nproc_kind, k[i].kind);
    assert_int_equal(f->o.nproc_per_node, 0);
  }
  fx_assert_ok(f, fx_parse(f, "--nproc-per-node", "1024", "train", NULL));
  assert_int_equal(f->o.nproc_per_node, 1024);
}

static void test_signals(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--signals-to-handle", "usr1, SIGTERM ,term,SigInt",
                     "train", NULL));
  assert_string_equal(f->o.signals_to_handle, "SIGUSR1,SIGTERM,SIGINT");
  fx_assert_ok(f, fx_parse(f, "--signals-to-handle", "HUP", "train", NULL));
  assert_string_equal(f->o.signals_to_handle, "SIGHUP");
}

static void test_cpu_bind(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--cpu-bind", "0-3,8:4-7,9:10", "train", NULL));
  assert_int_equal(f->o.cpu_bind, DR_CPU_BIND_LIST);
  assert_string_equal(f->o.cpu_list, "0-3,8:4-7,9:10");
  fx_assert_ok(f, fx_parse(f, "--cpu-bind", "auto", "train", NULL));
  assert_int_equal(f->o.cpu_bind, DR_CPU_BIND_AUTO);
  assert_null(f->o.cpu_list);
  /* a later layer's none clears an earlier layer's list */
  fx_set_env(f, "PET_CPU_BIND=1,2", NULL);
  fx_assert_ok(f, fx_parse(f, "--cpu-bind", "none", "train", NULL));
  assert_int_equal(f->o.cpu_bind, DR_CPU_BIND_NONE);
  assert_null(f->o.cpu_list);
}

static void test_filter_and_template(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--local-ranks-filter", "0,12,3", "train", NULL));
  assert_string_equal(f->o.local_ranks_filter, "0,12,3");
  fx_assert_ok(f, fx_parse(f, "--local-ranks-filter", "", "train", NULL));
  assert_null(f->o.local_ranks_filter);
  fx_assert_ok(f, fx_parse(f, "--log-line-prefix-template",
                     "$x ${host}/${local_rank}:", "train", NULL));
  assert_string_equal(f->o.log_prefix_template, "$x ${host}/${local_rank}:");
}

static void test_cross_checks(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--standalone", "--nnodes", "1", "train", NULL));
  assert_int_equal(f->o.min_nodes, 1);
  assert_int_equal(f->o.max_nodes, 1);
  assert_int_equal(f->o.have_endpoint, 0);
  fx_assert_ok(f, fx_parse(f, "--standalone", "--nnodes", "1:1", "train", NULL));

  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "static", "train", NULL));
  assert_string_equal(f->o.master_addr, "127.0.0.1");
  assert_int_equal(f->o.node_rank, 0);
  fx_assert_ok(f, fx_parse(f, "--rdzv-backend", "static", "--nnodes", "2",
                     "--node-rank", "1", "--master-addr", "n0", "train", NULL));
  assert_string_equal(f->o.master_addr, "n0");
  assert_int_equal(f->o.node_rank, 1);

  /* c10d over several nodes with a node rank request */
  fx_assert_ok(f, fx_parse(f, "--nnodes", "1:3", "--rdzv-endpoint", "h",
                     "--node-rank", "2", "train", NULL));
  assert_int_equal(f->o.node_rank, 2);
  fx_assert_err(f,
             fx_parse(f, "--nnodes", "1:3", "--rdzv-endpoint", "h", "--node-rank",
                   "3", "train", NULL),
             "--node-rank 3 is out of range for --nnodes 1:3 (0..2)");
}

/* ---- ownership ----------------------------------------------------------- */

/* The checkpoint plane's values: replicas by default where another node
 * may be, rates with their suffixes, and the bounds of each. */
static void test_ckpt_values(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--nnodes", "1:2", "--rdzv-endpoint", "h",
                           "train", NULL));
  assert_int_equal(f->o.ckpt_replicas, 1);
  fx_assert_ok(f, fx_parse(f, "--nnodes", "4", "--rdzv-endpoint", "h",
                           "--ckpt-replicas", "0", "train", NULL));
  assert_int_equal(f->o.ckpt_replicas, 0);
  static const struct {
    const char *v;
    uint64_t bytes;
  } rates[] = {{"0", 0},          {"1234", 1234},       {"8k", 8192},
               {"64M", 64 << 20}, {"2G", 2ull << 30},  {"1024G", 1ull << 40}};
  for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
    fx_assert_ok(f, fx_parse(f, "--ckpt-replicate-rate", rates[i].v, "train",
                             NULL));
    assert_int_equal(f->o.ckpt_rate, rates[i].bytes);
  }
  fx_assert_err(f, fx_parse(f, "--ckpt-replicate-rate", "fast", "train",
                            NULL),
                "--ckpt-replicate-rate 'fast': must be bytes per second");
  fx_assert_err(f, fx_parse(f, "--ckpt-replicate-rate", "M", "train", NULL),
                "must be bytes per second");
  fx_assert_err(f, fx_parse(f, "--ckpt-replicate-rate", "1025G", "train",
                            NULL),
                "must be at most 1024G");
  fx_assert_err(f, fx_parse(f, "--ckpt-replicate-rate", "-1", "train", NULL),
                "must be bytes per second");
  fx_assert_err(f, fx_parse(f, "--ckpt-replicas", "9", "train", NULL),
                "--ckpt-replicas '9': must be a number of nodes from 0 to 8");
  fx_assert_err(f, fx_parse(f, "--ckpt-keep", "0", "train", NULL),
                "--ckpt-keep '0': must be a number of checkpoints from 1");
  fx_assert_err(f, fx_parse(f, "--ckpt-dir", "", "train", NULL),
                "--ckpt-dir");
  /* From the environment and the file, as every flag. */
  fx_set_env(f, "PET_CKPT_DIR=/tmp/x", "PET_CKPT_KEEP=7", NULL);
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  assert_string_equal(f->o.ckpt_dir, "/tmp/x");
  assert_int_equal(f->o.ckpt_keep, 7);
}

/* --ckpt-persist: only beside --ckpt-dir and apart from it; the period's
 * bounds. */
static void test_ckpt_persist_values(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--ckpt-dir", "/dev/shm/a", "--ckpt-persist",
                           "/mnt/a", "train", NULL));
  assert_string_equal(f->o.ckpt_persist, "/mnt/a");
  assert_int_equal(f->o.ckpt_persist_every_ms, 300000);
  fx_assert_ok(f, fx_parse(f, "--ckpt-dir", "/dev/shm/a", "--ckpt-persist",
                           "/mnt/a", "--ckpt-persist-every", "2.5", "train",
                           NULL));
  assert_int_equal(f->o.ckpt_persist_every_ms, 2500);
  fx_assert_err(f, fx_parse(f, "--ckpt-persist", "/mnt/a", "train", NULL),
                "--ckpt-persist '/mnt/a' needs --ckpt-dir");
  fx_assert_err(f, fx_parse(f, "--ckpt-dir", "/dev/shm/a", "--ckpt-persist",
                            "/dev/shm/a/", "train", NULL),
                "--ckpt-persist '/dev/shm/a/' is --ckpt-dir itself");
  fx_assert_err(f, fx_parse(f, "--ckpt-dir", "/dev/shm/a", "--ckpt-persist",
                            "", "train", NULL),
                "--ckpt-persist");
  static const char *const periods[] = {"0", "0.5", "-1", "86401", "5m", ""};
  for (size_t i = 0; i < sizeof(periods) / sizeof(periods[0]); i++)
    fx_assert_err(f, fx_parse(f, "--ckpt-persist-every", periods[i], "train",
                              NULL),
                  "must be a number of seconds from 1 to 86400");
  /* From the environment, as every flag. */
  fx_set_env(f, "PET_CKPT_DIR=/tmp/x", "PET_CKPT_PERSIST=/nfs/x",
             "PET_CKPT_PERSIST_EVERY=60", NULL);
  fx_assert_ok(f, fx_parse(f, "train", NULL));
  assert_string_equal(f->o.ckpt_persist, "/nfs/x");
  assert_int_equal(f->o.ckpt_persist_every_ms, 60000);
}

static void test_free_after_failure(void **state) {
  fx_t *f = *state;
  /* strings set by every layer, then a failure at the end */
  const char *cfg = fx_write_file(f, "o.ini", "log-dir = /a\nrole = r\n");
  char pet[160];
  snprintf(pet, sizeof(pet), "PET_CONFIG=%s", cfg);
  fx_set_env(f, pet, "PET_LOCAL_ADDR=10.0.0.1", "PET_SECRET_FILE=/s", NULL);
  assert_int_equal(fx_parse(f, "--master-addr", "m", "--rdzv-endpoint", "h",
                         "--cpu-bind", "0:1", "--log-line-prefix-template", "x",
                         "--local-ranks-filter", "1", "--nnodes", "0", "train",
                         NULL),
                   DR_EBADARG);
  dr_options_free(&f->o);
  dr_options_free(&f->o);
  assert_null(f->o.role);
  assert_null(f->o.rdzv_host);
  /* and after success */
  fx_assert_ok(f, fx_parse(f, "--master-addr", "m", "--rdzv-endpoint", "h",
                     "--rdzv-endpoint", "h2", "train", NULL));
  assert_string_equal(f->o.rdzv_host, "h2");
  dr_options_free(&f->o);
  dr_options_free(&f->o);
  assert_null(f->o.prog_argv);
  dr_options_free(NULL);
  /* a failure while scanning argv */
  assert_int_equal(fx_parse(f, "--bogus", NULL), DR_EBADARG);
  dr_options_free(&f->o);
  dr_options_free(&f->o);
  /* a NULL err buffer is allowed */
  dr_options_t o;
  char *argv[] = {"ddprun", "--nnodes", "0", "x", NULL};
  assert_int_equal(dr_options_parse(4, argv, NULL, &o, NULL, 0), DR_EBADARG);
  dr_options_free(&o);
  char small[8];
  assert_int_equal(dr_options_parse(4, argv, NULL, &o, small, sizeof(small)),
                   DR_EBADARG);
  assert_int_equal(strlen(small), 7);
  dr_options_free(&o);
}

/* --hang-timeout: auto (the default), off, 0 (off) or seconds; anything
 * else is refused. */
static void test_hang_timeout(void **state) {
  fx_t *f = *state;
  fx_assert_ok(f, fx_parse(f, "--hang-timeout", "off", "train", NULL));
  assert_int_equal(f->o.hang_timeout_ms, 0);
  dr_options_free(&f->o);
  fx_assert_ok(f, fx_parse(f, "--hang-timeout", "auto", "train", NULL));
  assert_int_equal(f->o.hang_timeout_ms, DR_HANG_AUTO);
  dr_options_free(&f->o);
  fx_assert_ok(f, fx_parse(f, "--hang-timeout", "0", "train", NULL));
  assert_int_equal(f->o.hang_timeout_ms, 0);
  dr_options_free(&f->o);
  fx_assert_ok(f, fx_parse(f, "--hang-timeout", "2.5", "train", NULL));
  assert_int_equal(f->o.hang_timeout_ms, 2500);
  dr_options_free(&f->o);
  assert_int_equal(fx_parse(f, "--hang-timeout", "sometimes", "train", NULL),
                   DR_EBADARG);
  assert_non_null(strstr(f->err, "must be auto, off, or a number of seconds"));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_defaults),
      T(test_help_defaults_are_real),
      T(test_every_flag_every_spelling),
      T(test_every_row_tested),
      T(test_every_flag_from_env),
      T(test_short_options),
      T(test_precedence),
      T(test_precedence_replaces),
      T(test_env),
      T(test_ini),
      T(test_ini_errors),
      T(test_bad_input),
      T(test_hang_timeout),
      T(test_help),
      T(test_program),
      T(test_std_spec),
      T(test_rdzv_conf),
      T(test_endpoint),
      T(test_nproc_kinds),
      T(test_signals),
      T(test_cpu_bind),
      T(test_filter_and_template),
      T(test_cross_checks),
      T(test_ckpt_values),
      T(test_ckpt_persist_values),
      T(test_free_after_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
