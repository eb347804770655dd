/* Floods and bounds: thousands of garbage connections, connections past
 * the file-descriptor limit, idle and slow clients. Each must cost a bounded
 * number of log lines, be counted exactly, and leave the server serving;
 * clients busy in a blocked request, and nodes, are never idle. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness.h"

#define N_GARBAGE 2000
#define N_WRONG_ID 50
#define MAX_POOL 512

/* Raw connections beyond the fixture's few, closed by the teardown. */
static dr_h_raw_t *pool[MAX_POOL];
static size_t n_pool;

static dr_h_raw_t *pool_connect(uint16_t port, int *rc) {
  if (n_pool == MAX_POOL) {
    *rc = -EMFILE;
    return NULL;
  }
  dr_h_raw_t *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    *rc = -ENOMEM;
    return NULL;
  }
  r->fd = -1;
  pool[n_pool++] = r;
  *rc = dr_h_raw_connect(r, port);
  return r;
}

static void pool_close_all(void) {
  for (size_t i = 0; i < n_pool; i++) {
    dr_h_raw_close(pool[i]);
    free(pool[i]);
  }
  n_pool = 0;
}

static int teardown(void **state) {
  pool_close_all();
  return dr_h_teardown(state);
}

/* The server's log, read whole (after it stopped). Free it. */
static char *read_log(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return NULL;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  size_t n;
  while (buf != NULL && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len < 4096) {
      char *p = realloc(buf, cap * 2);
      if (p == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = p;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf != NULL)
    buf[len] = '\0';
  return buf;
}

#define SUMMARY " more connections refused"

/* Lines of log holding needle; summaries too when with_summaries. */
static size_t count_lines_(const char *log, const char *needle,
                           int with_summaries) {
  size_t n = 0;
  for (const char *line = log; line != NULL && *line != '\0';) {
    const char *end = strchr(line, '\n');
    size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
    char one[4096];
    snprintf(one, sizeof(one), "%.*s", (int)len, line);
    if (strstr(one, needle) != NULL &&
        (with_summaries || strstr(one, SUMMARY) == NULL))
      n++;
    line = end != NULL ? end + 1 : NULL;
  }
  return n;
}
#define count_lines(log, needle) count_lines_((log), (needle), 1)
/* Events logged in full (a summary quotes one of each kind). */
#define count_full(log, needle) count_lines_((log), (needle), 0)

/* The sum of "N KIND (first:" over the summary lines of log. */
static uint64_t summarised(const char *log, const char *kind) {
  char needle[64];
  snprintf(needle, sizeof(needle), " %s (first: ", kind);
  uint64_t sum = 0;
  for (const char *line = log; line != NULL && *line != '\0';) {
    const char *end = strchr(line, '\n');
    size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
    char one[4096];
    snprintf(one, sizeof(one), "%.*s", (int)len, line);
    char *hit;
    if (strstr(one, SUMMARY) != NULL &&
        (hit = strstr(one, needle)) != NULL) {
      char *d = hit;
      while (d > one && d[-1] >= '0' && d[-1] <= '9')
        d--;
      sum += strtoull(d, NULL, 10);
    }
    line = end != NULL ? end + 1 : NULL;
  }
  return sum;
}

/* c still gets right answers. */
static int serves(dr_client_t *c, const char *key) {
  if (dr_client_set(c, 0, key, "ok", 2) != 0)
    return 0;
  uint8_t *v = NULL;
  size_t n = 0;
  int rc = dr_client_get(c, 0, key, 0, &v, &n);
  int same = rc == 0 && n == 2 && memcmp(v, "ok", 2) == 0;
  free(v);
  return same;
}

DR_H_TEST(test_garbage_flood_logs_a_summary) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--log-level", "warn"),
             NULL);
  dr_client_t *good = dr_h_open(fx, "good");
  uint16_t port = dr_h_server_port(fx->srv);
  static const char http[] = "GET / HTTP/1.1\r\nHost: rdzv\r\n\r\n";
  dr_buf_t *b = &fx->buf;
  double t0 = dr_h_now_ms();
  int open_failed = 0, not_closed = 0;
  for (int i = 0; i < N_GARBAGE + N_WRONG_ID; i++) {
    dr_h_raw_t r;
    if (dr_h_raw_connect(&r, port) != 0) {
      open_failed++;
      continue;
    }
    if (i < N_GARBAGE) {
      dr_h_raw_send(&r, http, sizeof(http) - 1);
    } else {
      dr_enc_hello(b, 1, dr_str("another-job"), dr_str("stranger"));
      dr_h_raw_send_buf(&r, b);
    }
    not_closed += dr_h_raw_wait_closed(&r, 2000) != 0;
    dr_h_raw_close(&r);
  }
  fprintf(stderr, "  %d bad connections in %.0f ms\n",
          N_GARBAGE + N_WRONG_ID, dr_h_now_ms() - t0);
  assert_int_equal(open_failed, 0);
  assert_int_equal(not_closed, 0);
  assert_true(serves(good, "after-flood"));

  /* Stopping logs the summary of what is held. */
  char path[300];
  snprintf(path, sizeof(path), "%s", dr_h_server_log_path(fx->srv));
  assert_int_equal(dr_h_server_stop(&fx->srv, 3000), 0);
  char *log = read_log(path);
  assert_non_null(log);
  size_t lines = count_lines(log, "");
  size_t full_garbage = count_full(log, "malformed frame (bad frame magic");
  size_t full_wrong = count_full(log, "is not this job's");
  uint64_t sum_garbage = summarised(log, "malformed");
  uint64_t sum_wrong = summarised(log, "run id");
  size_t summaries = count_lines(log, " more connections refused or dropped");
  fprintf(stderr,
          "  log: %zu lines (%zu summaries); malformed %zu in full + %llu "
          "summarised; wrong run id %zu + %llu\n",
          lines, summaries, full_garbage, (unsigned long long)sum_garbage,
          full_wrong, (unsigned long long)sum_wrong);
  if (lines > 12)
    dr_h_log_dump(path, 12);
  free(log);
  /* A few in full, then a summary per 10 s (the flood takes about one). */
  assert_true(lines <= 12);
  assert_true(summaries >= 1 && summaries <= 3);
  assert_int_equal(full_garbage + sum_garbage, N_GARBAGE);
  assert_int_equal(full_wrong + sum_wrong, N_WRONG_ID);
}

static size_t open_fds(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (d == NULL)
    return 0;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

DR_H_TEST(test_fd_limit_warns_once_and_recovers) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "1", "--heartbeat-timeout", "30",
                       "--log-level", "warn"),
             NULL);
  pid_t pid = dr_h_server_pid(fx->srv);
  uint16_t port = dr_h_server_port(fx->srv);
  /* As `prlimit --nofile`: room for a few clients above what it holds. */
  size_t held = open_fds(pid);
  assert_true(held > 0);
  struct rlimit rl = {held + 8, held + 8};
  assert_int_equal(prlimit(pid, RLIMIT_NOFILE, &rl, NULL), 0);

  dr_buf_t *b = &fx->buf;
  int served = 0, refused = 0, other = 0;
  for (int i = 0; i < 200 && refused < 40; i++) {
    int rc;
    dr_h_raw_t *r = pool_connect(port, &rc);
    assert_non_null(r);
    if (rc != 0) {
      other++;
      continue;
    }
    dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str("many"));
    rc = dr_h_raw_send_buf(r, b);
    dr_msg_t m;
    if (rc == 0)
      rc = dr_h_raw_recv(r, 2000, &m);
    if (rc == 0 && m.type == DR_MSG_WELCOME) {
      served++;
    } else if (rc == DR_ECLOSED || rc == -ECONNRESET || rc == -EPIPE) {
      refused++;
      dr_h_raw_close(r);
    } else {
      other++;
    }
  }
  fprintf(stderr, "  limit %llu: %d served, %d refused, %d other\n",
          (unsigned long long)rl.rlim_cur, served, refused, other);
  assert_int_equal(other, 0);
  assert_true(served >= 1);
  assert_true(refused >= 2);
  assert_true(dr_h_log_contains(fx->srv, "out of file descriptors", 2000));

  /* Once the connections close, new clients are served again. */
  pool_close_all();
  dr_client_t *c = NULL;
  double t0 = dr_h_now_ms();
  int ok = 0;
  while (!ok && dr_h_now_ms() - t0 < 3000) {
    if (dr_h_client_open(fx->srv, NULL, "after", NULL, 0, &c, NULL, 0) == 0)
      ok = serves(c, "after-limit");
    dr_client_close(&c);
    if (!ok)
      dr_h_sleep_ms(20);
  }
  fprintf(stderr, "  served again after %.0f ms\n", dr_h_now_ms() - t0);
  assert_true(ok);

  char path[300];
  snprintf(path, sizeof(path), "%s", dr_h_server_log_path(fx->srv));
  assert_int_equal(dr_h_server_stop(&fx->srv, 3000), 0);
  char *log = read_log(path);
  assert_non_null(log);
  size_t warned = count_full(log, "WARN  out of file descriptors");
  uint64_t sum = summarised(log, "at the descriptor limit");
  /* The warning in full names how many it closed: "...): N new
   * connection(s) on port ..." */
  uint64_t first = 0;
  const char *w = strstr(log, "WARN  out of file descriptors");
  const char *nc = w != NULL ? strstr(w, " new connection") : NULL;
  if (nc != NULL) {
    while (nc > w && nc[-1] >= '0' && nc[-1] <= '9')
      nc--;
    first = strtoull(nc, NULL, 10);
  }
  fprintf(stderr, "  %zu warning in full (for %llu), %llu more in the "
          "summary\n", warned, (unsigned long long)first,
          (unsigned long long)sum);
  free(log);
  /* One warning, not one per connection; every refusal counted. */
  assert_int_equal(warned, 1);
  assert_int_equal(first + sum, (uint64_t)refused);
}

typedef struct {
  dr_client_t *c;
  int rc;
  double took;
} arrival_t;

static void *arrive_main(void *arg) {
  arrival_t *a = arg;
  double t0 = dr_h_now_ms();
  a->rc = dr_client_barrier(a->c, 0, "slow-barrier", 2, 5000);
  a->took = dr_h_now_ms() - t0;
  return NULL;
}

typedef struct {
  dr_client_t *c;
  int failed; /* requests that were not served */
} chatty_t;

static void *chatty_main(void *arg) {
  chatty_t *ch = arg;
  for (int i = 0; i < 8; i++) {
    dr_h_sleep_ms(200);
    ch->failed += !serves(ch->c, "chatty");
  }
  return NULL;
}

/* Expects the server's last word on r, an ERROR naming why, then a close
 * between min_ms and max_ms after t0. */
static void expect_dropped(dr_h_raw_t *r, double t0, int min_ms, int max_ms,
                           const char *why) {
  dr_msg_t m;
  int rc = dr_h_raw_recv(r, max_ms + 1000, &m);
  double took = dr_h_now_ms() - t0;
  char msg[256] = "";
  if (rc == 0 && m.type == DR_MSG_ERROR)
    snprintf(msg, sizeof(msg), "%.*s", (int)m.f[1].b.len,
             (const char *)m.f[1].b.p);
  fprintf(stderr, "  %s: %s after %.0f ms: %s\n", why, dr_err_name(rc), took,
          msg);
  assert_int_equal(rc, 0);
  assert_int_equal(m.type, DR_MSG_ERROR);
  assert_non_null(strstr(msg, why));
  assert_int_equal(dr_h_raw_wait_closed(r, 1000), 0);
  assert_true(took >= min_ms && took <= max_ms);
}

DR_H_TEST(test_idle_and_slow_clients_dropped_busy_ones_kept) {
  dr_h_start(fx,
             DR_H_ARGS("--nnodes", "2", "--heartbeat-timeout", "30",
                       "--last-call-timeout", "30", "--idle-timeout", "0.5",
                       "--frame-timeout", "0.5"),
             NULL);
  dr_buf_t *b = &fx->buf;
  dr_msg_t m;
  /* Idle after HELLO; and a frame begun and never finished. */
  dr_h_raw_t *idle = dr_h_raw(fx);
  dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str("idle"));
  assert_int_equal(dr_h_raw_send_buf(idle, b), 0);
  assert_int_equal(dr_h_raw_recv(idle, 2000, &m), 0);
  double t_idle = dr_h_now_ms();
  dr_h_raw_t *slow = dr_h_raw(fx);
  dr_enc_hello(b, 1, dr_str(DR_H_RUN_ID), dr_str("slow"));
  assert_int_equal(dr_h_raw_send_buf(slow, b), 0);
  assert_int_equal(dr_h_raw_recv(slow, 2000, &m), 0);
  dr_enc_set(b, 2, 0, dr_str("k"), dr_str("a value that never arrives"));
  assert_int_equal(dr_h_raw_send(slow, b->data, b->len - 5), 0);
  dr_buf_reset(b);
  double t_slow = dr_h_now_ms();

  /* Busy in their own ways, each longer than the bounds: a barrier that
   * waits for its second arrival, a node waiting for its round, a client
   * with a request every 200 ms. */
  arrival_t first = {dr_h_open(fx, "first"), -EINPROGRESS, 0};
  assert_int_equal(dr_h_thread(fx, arrive_main, &first), 0);
  dr_client_t *n0 = dr_h_open(fx, "node-0");
  dr_join_t j0;
  dr_h_join_fill(&j0, DR_H_RUN_ID, "node-0", "", 1, DR_NONE, 0, "");
  dr_h_join_t *jt0 = dr_h_join_async(fx, n0, &j0, 10000);
  chatty_t chatty = {dr_h_open(fx, "chatty"), 0};
  assert_int_equal(dr_h_thread(fx, chatty_main, &chatty), 0);

  expect_dropped(idle, t_idle, 450, 1500, "idle");
  expect_dropped(slow, t_slow, 450, 1500, "frame");
  /* Past the bounds, and a while more. */
  dr_h_sleep_ms(1000);

  arrival_t second = {dr_h_open(fx, "second"), -EINPROGRESS, 0};
  arrive_main(&second);
  dr_client_t *n1 = dr_h_open(fx, "node-1");
  dr_join_t j1;
  dr_h_join_fill(&j1, DR_H_RUN_ID, "node-1", "", 1, DR_NONE, 0, "");
  dr_h_join_t *jt1 = dr_h_join_async(fx, n1, &j1, 10000);
  dr_h_join_threads(fx);
  fprintf(stderr, "  barrier: %s after %.0f ms; joins: %s, %s\n",
          dr_err_name(first.rc), first.took, dr_err_name(jt0->rc),
          dr_err_name(jt1->rc));
  assert_int_equal(chatty.failed, 0);
  assert_int_equal(first.rc, 0);
  assert_int_equal(second.rc, 0);
  assert_true(first.took > 1000); /* twice the idle bound */
  assert_int_equal(jt0->rc, 0);
  assert_int_equal(jt1->rc, 0);
  assert_int_equal(jt0->a.nnodes, 2);
  dr_assignment_free(&jt0->a);
  dr_assignment_free(&jt1->a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, dr_h_setup, teardown)
      T(test_garbage_flood_logs_a_summary),
      T(test_fd_limit_warns_once_and_recovers),
      T(test_idle_and_slow_clients_dropped_busy_ones_kept),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
