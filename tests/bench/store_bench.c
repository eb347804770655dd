/* store_bench: throughput of the rendezvous server's key-value store.
 *
 *   store_bench [--clients 64] [--seconds S] [--value-bytes 64]
 *               [--server PATH] [--timeout S]
 *
 * Starts ddprun-rdzv (one node, which never joins: the store works without
 * a round). Each client thread opens its own blocking dr_client, then all
 * start together and alternate SET and GET on a key of their own, in the
 * job scope (gen 0), for S seconds. Every GET must return exactly what that
 * client last SET; each SET and each GET counts as one op. Prints:
 *
 *   store_bench clients=64 value_bytes=64 seconds=X ops=N ops_per_s=R errors=0
 *
 * seconds runs from the common start to the last client's last reply.
 * --timeout bounds the server's start, each connect and each request.
 * Exit status 0 when errors=0, 1 otherwise, 2 on bad usage.
 */
#include "bench_cli.h"
#include "bench_server.h"

#include "client.h"
#include "errors.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint32_t clients;
  double seconds;
  uint32_t value_bytes;
  double timeout_s;
  char server[PATH_MAX];
} opts_t;

/* The start line: clients check in once connected; main takes the start
 * time when all have, then lets them go together. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t ready;
  int go;
  int64_t start_ns; /* set before go */
} start_gate_t;

typedef struct {
  uint32_t id;
  const opts_t *o;
  uint16_t port;
  start_gate_t *gate;
  pthread_t tid;
  int started;
  uint64_t ops;
  uint64_t errors;
  int64_t end_ns;
  char msg[256];
} client_ctx_t;

/* Fills v with value_bytes bytes that name the client and the round, so a
 * GET answered with another client's or an older value cannot match. */
static void make_value(uint8_t *v, size_t n_bytes, uint32_t client,
                       uint64_t round) {
  char head[48];
  int h = snprintf(head, sizeof(head), "c%u-r%llu-", client,
                   (unsigned long long)round);
  for (size_t k = 0; k < n_bytes; k++)
    v[k] = k < (size_t)h ? (uint8_t)head[k]
                         : (uint8_t)('a' + (k + round) % 26);
}

static void client_fail(client_ctx_t *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void client_fail(client_ctx_t *w, const char *fmt, ...) {
  w->errors++;
  if (w->msg[0] != '\0')
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->msg, sizeof(w->msg), fmt, ap);
  va_end(ap);
}

static void request_failed(client_ctx_t *w, dr_client_t *c, const char *op,
                           const char *key, uint64_t round, int rc) {
  client_fail(w, "client %u: %s %s failed in round %llu (%s%s%s)", w->id, op,
              key, (unsigned long long)round, dr_strerror(rc),
              dr_client_errmsg(c)[0] != '\0' ? ": " : "", dr_client_errmsg(c));
}

static void *client_main(void *arg) {
  client_ctx_t *w = arg;
  const opts_t *o = w->o;
  dr_client_t *c = NULL;
  char key[32], host[32], errbuf[256] = "";
  uint8_t *want = malloc(o->value_bytes);

  snprintf(key, sizeof(key), "bench/c%u", w->id);
  snprintf(host, sizeof(host), "store-client-%u", w->id);
  dr_client_opts_t co;
  memset(&co, 0, sizeof(co));
  co.host = "127.0.0.1";
  co.port = w->port;
  co.run_id = "bench";
  co.client_host = host;
  co.connect_timeout_ms = (int)(o->timeout_s * 1000);
  co.io_timeout_ms = (int)(o->timeout_s * 1000);
  int rc = want == NULL ? -ENOMEM : dr_client_open(&co, &c, errbuf,
                                                   sizeof(errbuf));
  if (rc != 0)
    client_fail(w, "client %u: dr_client_open() to 127.0.0.1:%u failed (%s%s%s)",
                w->id, (unsigned)w->port, dr_strerror(rc),
                errbuf[0] != '\0' ? ": " : "", errbuf);

  /* A client that failed to connect checks in too, so nobody waits for
   * it. */
  pthread_mutex_lock(&w->gate->mu);
  w->gate->ready++;
  pthread_cond_broadcast(&w->gate->cv);
  while (!w->gate->go)
    pthread_cond_wait(&w->gate->cv, &w->gate->mu);
  int64_t stop_ns = w->gate->start_ns + (int64_t)(o->seconds * 1e9);
  pthread_mutex_unlock(&w->gate->mu);

  for (uint64_t round = 0; c != NULL && w->errors == 0; round++) {
    if (bench_stop_requested) {
      client_fail(w, "client %u: interrupted", w->id);
      break;
    }
    if (bench_now_ns() >= stop_ns)
      break;
    make_value(want, o->value_bytes, w->id, round);
    rc = dr_client_set(c, 0, key, want, o->value_bytes);
    if (rc != 0) {
      request_failed(w, c, "SET", key, round, rc);
      break;
    }
    w->ops++;
    uint8_t *got = NULL;
    size_t n_got = 0;
    rc = dr_client_get(c, 0, key, 0, &got, &n_got);
    if (rc != 0) {
      request_failed(w, c, "GET", key, round, rc);
      break;
    }
    w->ops++;
    if (n_got != o->value_bytes || memcmp(got, want, n_got) != 0)
      client_fail(w, "client %u: GET %s in round %llu returned %zu bytes "
                     "\"%.24s...\", not the %u bytes \"%.*s...\" just SET",
                  w->id, key, (unsigned long long)round, n_got,
                  got != NULL ? (const char *)got : "", o->value_bytes,
                  (int)(o->value_bytes < 24 ? o->value_bytes : 24),
                  (const char *)want);
    free(got);
  }
  w->end_ns = bench_now_ns();
  dr_client_close(&c);
  free(want);
  return NULL;
}

static const char USAGE[] = "usage: store_bench [--clients 64] [--seconds S] "
                            "[--value-bytes 64] [--server PATH]\n"
                            "                   [--timeout S]\n";

/* bench_cli_parse's results. */
static int parse_args(int argc, char **argv, opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->clients = 64;
  o->seconds = 5;
  o->value_bytes = 64;
  o->timeout_s = 10;
  const bench_opt_t opts[] = {
      {"clients", BENCH_OPT_U32, &o->clients, .max = 4096},
      {"seconds", BENCH_OPT_SECONDS, &o->seconds, .max = 1e6},
      {"value-bytes", BENCH_OPT_U32, &o->value_bytes, .max = 1 << 20},
      {"server", BENCH_OPT_PATH, o->server, .program = "ddprun-rdzv"},
      {"timeout", BENCH_OPT_SECONDS, &o->timeout_s, .max = 1e6}};
  return bench_cli_parse("store_bench", argc, argv, opts, 5);
}

int main(int argc, char **argv) {
  opts_t o;
  bench_server_t srv;
  char err[512];

  int rc = parse_args(argc, argv, &o);
  if (rc != 0)
    return bench_cli_exit_status(rc, USAGE);
  const char *extra[] = {"--nnodes", "1", "--heartbeat-timeout", "120", NULL};
  if (bench_server_open(&srv, "store_bench", o.server, extra,
                        bench_now_ns() + (int64_t)(o.timeout_s * 1e9)) != 0)
    return 1;

  start_gate_t gate;
  memset(&gate, 0, sizeof(gate));
  pthread_mutex_init(&gate.mu, NULL);
  pthread_cond_init(&gate.cv, NULL);
  client_ctx_t *w = calloc(o.clients, sizeof(*w));
  if (w == NULL) {
    fprintf(stderr, "store_bench: out of memory for %u clients\n", o.clients);
    bench_server_stop(&srv, 2000, err, sizeof(err));
    return 1;
  }
  uint32_t n_started = 0;
  for (uint32_t k = 0; k < o.clients; k++) {
    w[k].id = k;
    w[k].o = &o;
    w[k].port = srv.port;
    w[k].gate = &gate;
    rc = pthread_create(&w[k].tid, NULL, client_main, &w[k]);
    if (rc != 0) {
      fprintf(stderr, "store_bench: pthread_create() of client %u failed "
                      "(%d: %s)\n",
              k, rc, strerror(rc));
      break;
    }
    w[k].started = 1;
    n_started++;
  }
  int failed = n_started != o.clients;
  pthread_mutex_lock(&gate.mu);
  while (gate.ready < n_started)
    pthread_cond_wait(&gate.cv, &gate.mu);
  gate.start_ns = bench_now_ns();
  int64_t start_ns = gate.start_ns;
  gate.go = 1;
  pthread_cond_broadcast(&gate.cv);
  pthread_mutex_unlock(&gate.mu);

  uint64_t ops = 0, errors = 0;
  int64_t end_ns = start_ns;
  for (uint32_t k = 0; k < o.clients; k++) {
    if (!w[k].started)
      continue;
    pthread_join(w[k].tid, NULL);
    ops += w[k].ops;
    errors += w[k].errors;
    if (w[k].end_ns > end_ns)
      end_ns = w[k].end_ns;
    if (w[k].msg[0] != '\0')
      fprintf(stderr, "store_bench: %s\n", w[k].msg);
  }
  pthread_cond_destroy(&gate.cv);
  pthread_mutex_destroy(&gate.mu);
  free(w);

  rc = bench_server_stop(&srv, 2000, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, "store_bench: %s\n", err);
    failed = 1;
  }
  double seconds = (double)(end_ns - start_ns) / 1e9;
  printf("store_bench clients=%u value_bytes=%u seconds=%.3f ops=%llu "
         "ops_per_s=%.0f errors=%llu\n",
         o.clients, o.value_bytes, seconds, (unsigned long long)ops,
         seconds > 0 ? (double)ops / seconds : 0.0,
         (unsigned long long)errors);
  return failed || errors != 0 ? 1 : 0;
}
