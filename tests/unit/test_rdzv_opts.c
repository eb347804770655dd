/* ddprun-rdzv's command line (launcher/server/rdzv_opts.c): defaults, each
 * flag into its field, getopt_long's spellings it has always taken (a
 * unique prefix, --flag=value, options after a stray argument), and each
 * refusal as one line that names the flag. */
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
#include "rdzv_opts.h"

#define MAX_ARGS 64

typedef struct {
  dr_rdzv_opts_t o;
  char err[512];
} fx_t;

/* Parses "ddprun-rdzv" followed by the NULL-terminated arguments. */
static int parse(fx_t *f, ...) {
  static char *argv[MAX_ARGS + 1];
  va_list ap;
  va_start(ap, f);
  int n = 0;
  argv[n++] = "ddprun-rdzv";
  for (const char *s; (s = va_arg(ap, const char *)) != NULL;) {
    assert_true(n < MAX_ARGS);
    argv[n++] = (char *)s;
  }
  argv[n] = NULL;
  va_end(ap);
  memset(f->err, 0, sizeof(f->err));
  return dr_rdzv_opts_parse(n, argv, &f->o, f->err, sizeof(f->err));
}

static void assert_err(fx_t *f, int rc, const char *want) {
  if (rc != DR_EBADARG || strcmp(f->err, want) != 0)
    fail_msg("rc %d, err \"%s\", wanted DR_EBADARG and \"%s\"", rc, f->err,
             want);
}

static void test_defaults(void **state) {
  fx_t f;
  assert_int_equal(parse(&f, "--nnodes", "2", "--rdzv-id", "j", NULL), 0);
  const dr_server_config_t *c = &f.o.cfg;
  assert_string_equal(c->host, "0.0.0.0");
  assert_int_equal(c->port, 29400);
  assert_string_equal(c->run_id, "j");
  assert_int_equal(c->min_nodes, 2);
  assert_int_equal(c->max_nodes, 2);
  assert_int_equal(c->max_restarts, 0);
  assert_int_equal(c->heartbeat_timeout_ms, 2000);
  assert_int_equal(c->last_call_timeout_ms, 1000);
  assert_int_equal(c->handshake_timeout_ms, 5000);
  assert_int_equal(c->idle_timeout_ms, 60000);
  assert_int_equal(c->frame_timeout_ms, 30000);
  assert_true(c->max_frame_memory == 128ull << 20);
  assert_int_equal(c->allow_mixed_nproc, 0);
  assert_int_equal(c->exit_when_done, 1);
  assert_int_equal(c->metrics_port, -1);
  assert_null(c->metrics_host);
  assert_null(c->state_file);
  assert_null(c->log_dir);
  assert_null(f.o.port_file);
  assert_null(f.o.secret_file);
  assert_null(f.o.metrics_port_file);
  assert_int_equal(f.o.linger_ms, 0);
  assert_int_equal(f.o.log_level, DR_LOG_INFO);
}

static void test_every_flag(void **state) {
  fx_t f;
  assert_int_equal(parse(&f, "--host", "127.0.0.1", "--port", "0",
                         "--port-file", "pf", "--nnodes", "2:4", "--rdzv-id",
                         "job7", "--max-restarts", "3", "--secret-file", "sf",
                         "--heartbeat-timeout", "0.5", "--last-call-timeout",
                         "0", "--handshake-timeout", "0.01", "--idle-timeout",
                         "0", "--frame-timeout", "7", "--max-frame-memory", "2",
                         "--allow-mixed-nproc", "--log-dir", "ld",
                         "--log-level", "debug", "--state-file", "st",
                         "--metrics-port", "0", "--metrics-host", "::1",
                         "--metrics-port-file", "mf", "--linger", "1.5", NULL),
                   0);
  const dr_server_config_t *c = &f.o.cfg;
  assert_string_equal(c->host, "127.0.0.1");
  assert_int_equal(c->port, 0);
  assert_string_equal(f.o.port_file, "pf");
  assert_int_equal(c->min_nodes, 2);
  assert_int_equal(c->max_nodes, 4);
  assert_string_equal(c->run_id, "job7");
  assert_int_equal(c->max_restarts, 3);
  assert_string_equal(f.o.secret_file, "sf");
  assert_int_equal(c->heartbeat_timeout_ms, 500);
  assert_int_equal(c->last_call_timeout_ms, 0);
  assert_int_equal(c->handshake_timeout_ms, 10);
  assert_int_equal(c->idle_timeout_ms, 0);
  assert_int_equal(c->frame_timeout_ms, 7000);
  assert_true(c->max_frame_memory == 2ull << 20);
  assert_int_equal(c->allow_mixed_nproc, 1);
  assert_string_equal(c->log_dir, "ld");
  assert_int_equal(f.o.log_level, DR_LOG_DEBUG);
  assert_string_equal(c->state_file, "st");
  assert_int_equal(c->metrics_port, 0);
  assert_string_equal(c->metrics_host, "::1");
  assert_string_equal(f.o.metrics_port_file, "mf");
  assert_int_equal(f.o.linger_ms, 1500);
}

/* What getopt_long took keeps working: --flag=value, a unique prefix, the
 * last of a repeated flag, options after `--`-less operands reported once
 * the options are read. */
static void test_spellings(void **state) {
  fx_t f;
  assert_int_equal(parse(&f, "--nnodes=1:3", "--rdzv-id=a", "--port=5", NULL),
                   0);
  assert_int_equal(f.o.cfg.max_nodes, 3);
  assert_int_equal(f.o.cfg.port, 5);
  assert_int_equal(parse(&f, "--nn", "2", "--rdzv", "b", "--max-r", "9",
                         "--allow", "--metrics-port", "0", NULL),
                   0);
  assert_int_equal(f.o.cfg.max_nodes, 2);
  assert_string_equal(f.o.cfg.run_id, "b");
  assert_int_equal(f.o.cfg.max_restarts, 9);
  assert_int_equal(f.o.cfg.allow_mixed_nproc, 1);
  /* --metrics-port is a name of its own, not a prefix of -file */
  assert_int_equal(f.o.cfg.metrics_port, 0);
  assert_int_equal(
      parse(&f, "--nnodes", "1", "--nnodes", "5", "--rdzv-id", "c", NULL), 0);
  assert_int_equal(f.o.cfg.min_nodes, 5);
}

static void test_help_version(void **state) {
  fx_t f;
  fflush(stdout);
  int saved = dup(1);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  dup2(fileno(tmp), 1);
  int rc_help = parse(&f, "--help", NULL);
  int rc_h = parse(&f, "-h", NULL);
  int rc_version = parse(&f, "--version", NULL);
  /* The first of --help and a bad value wins, as with getopt. */
  int rc_late = parse(&f, "--port", "x", "--help", NULL);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  assert_int_equal(rc_help, 1);
  assert_int_equal(rc_h, 1);
  assert_int_equal(rc_version, 1);
  assert_int_equal(rc_late, DR_EBADARG);
  char buf[16384];
  rewind(tmp);
  size_t n = fread(buf, 1, sizeof(buf) - 1, tmp);
  buf[n] = '\0';
  fclose(tmp);
  static const char *const must[] = {
      "usage: ddprun-rdzv --nnodes N|MIN:MAX --rdzv-id ID [options]",
      "--max-frame-memory MIB",
      "(default: 0.0.0.0)",
      "(default: info)",
      "-h, --help",
      "ddprun-rdzv ",
      NULL};
  for (int i = 0; must[i] != NULL; i++)
    if (strstr(buf, must[i]) == NULL)
      fail_msg("the output lacks '%s':\n%s", must[i], buf);
}

static const struct {
  const char *args[8];
  const char *want; /* the whole message */
} bad[] = {
    {{"--rdzv-id", "x"}, "--nnodes is required"},
    {{"--nnodes", "1"}, "--rdzv-id is required"},
    {{"--nnodes", "0", "--rdzv-id", "x"},
     "--nnodes '0' must be N or MIN:MAX with 1 <= MIN <= MAX"},
    {{"--nnodes", "3:2", "--rdzv-id", "x"},
     "--nnodes '3:2' must be N or MIN:MAX with 1 <= MIN <= MAX"},
    {{"--nnodes", "1000001", "--rdzv-id", "x"},
     "--nnodes '1000001' must be N or MIN:MAX with 1 <= MIN <= MAX"},
    {{"--port", "70000"}, "--port '70000' is not a port number (0-65535)"},
    {{"--metrics-port", "-1"},
     "--metrics-port '-1' is not a port number (0-65535)"},
    {{"--max-restarts", "1000001"}, "--max-restarts '1000001' is not a count"},
    {{"--heartbeat-timeout", "0.001"},
     "--heartbeat-timeout '0.001' must be seconds >= 0.01"},
    {{"--last-call-timeout", "-1"},
     "--last-call-timeout '-1' must be seconds >= 0"},
    {{"--idle-timeout", "0.005"},
     "--idle-timeout '0.005' must be 0 or seconds >= 0.01"},
    {{"--max-frame-memory", "0"},
     "--max-frame-memory '0' must be MiB, 1 to 1048576"},
    {{"--state-file", ""}, "--state-file must not be empty"},
    {{"--log-level", "loud"},
     "--log-level 'loud' must be error, warn, info or debug"},
    {{"--linger", "x"}, "--linger 'x' must be seconds >= 0"},
    {{"--nnodes", "1", "--rdzv-id", "x", "--metrics-port-file", "f"},
     "--metrics-host and --metrics-port-file need --metrics-port"},
    {{"--nnodes", "1", "--rdzv-id", "x", "stray"},
     "unexpected argument 'stray'"},
    {{"stray", "--nnodes", "1", "--rdzv-id", "x"},
     "unexpected argument 'stray'"},
    {{"stray", "--port", "x"}, "--port 'x' is not a port number (0-65535)"},
    {{"--nnodes", "1", "--rdzv-id", "x", "--", "--port"},
     "unexpected argument '--port'"},
    {{"--bogus"}, "unknown option '--bogus'; see ddprun-rdzv --help"},
    {{"--port"}, "option '--port' needs a value: --port PORT"},
    {{"--max", "3"},
     "option '--max' is ambiguous (--max-restarts, --max-frame-memory); see "
     "ddprun-rdzv --help"},
    {{"--nnodes", "1\n2"},
     "--nnodes '1\\x0a2' must be N or MIN:MAX with 1 <= MIN <= MAX"},
};

static void test_bad_input(void **state) {
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    const char *const *a = bad[i].args;
    fx_t f;
    int rc = parse(&f, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], NULL);
    assert_err(&f, rc, bad[i].want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),  cmocka_unit_test(test_every_flag),
      cmocka_unit_test(test_spellings), cmocka_unit_test(test_help_version),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
