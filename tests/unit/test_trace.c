/* train's trace writer and peak-memory reading: the header's otherData,
 * with and without a clock offset; times on the wall clock, durations as
 * measured; a file that ends in its closing after every flush, and stays
 * so when the writer is never closed (a killed process); the all-reduce's
 * args; counters; escaping; the host thread named once, on first use;
 * the per-rank path; the strict offset parser; the peak resident set
 * growing by what is touched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "peak_mem.h"
#include "trace.h"

typedef struct {
  char dir[64];
  char path[256];
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  snprintf(f->dir, sizeof(f->dir), "/tmp/test_trace.XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  snprintf(f->path, sizeof(f->path), "%s/t.json", f->dir);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
  assert_int_equal(system(cmd), 0);
  free(f);
  return 0;
}

/* The whole file; caller frees. */
static char *slurp(const char *path) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
  fclose(fp);
  buf[n] = '\0';
  char *s = strdup(buf);
  assert_non_null(s);
  return s;
}

static int ends_closed(const char *s) {
  size_t n = strlen(s);
  return n >= 4 && strcmp(s + n - 4, "\n]}\n") == 0;
}

static size_t count(const char *s, const char *what) {
  size_t k = 0;
  for (const char *p = strstr(s, what); p != NULL; p = strstr(p + 1, what))
    k++;
  return k;
}

static uint64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int64_t real_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void test_header(void **state) {
  fx_t *f = *state;
  dr_trace_meta_t m = {"train", 3, 8, "nccl", 1, -1234};
  dr_trace_t *t = NULL;
  char used[256];
  assert_int_equal(dr_trace_open(f->path, &m, &t, used, sizeof(used)), 0);
  char want[256];
  snprintf(want, sizeof(want), "%s/t.rank3.json", f->dir);
  assert_string_equal(used, want);
  char *s = slurp(used);
  assert_non_null(strstr(s, "{\"displayTimeUnit\":\"ms\",\"otherData\":"
                            "{\"ddprun\":{\"source\":\"train\",\"rank\":3,"
                            "\"world\":8,\"backend\":\"nccl\","
                            "\"clock_offset_us\":-1234}},\"traceEvents\":["));
  assert_true(strncmp(s, "{\"displayTimeUnit\"", 18) == 0);
  assert_true(ends_closed(s));
  assert_int_equal(count(s, "\"thread_name\""), 2);
  free(s);
  assert_int_equal(dr_trace_close(&t), 0);
  assert_null(t);

  /* Without an offset: no field at all. */
  dr_trace_meta_t m2 = {"train", 0, 1, "cpu", 0, 99};
  assert_int_equal(dr_trace_open(f->path, &m2, &t, NULL, 0), 0);
  assert_int_equal(dr_trace_close(&t), 0);
  s = slurp(f->path);
  assert_non_null(strstr(s, "{\"source\":\"train\",\"rank\":0,\"world\":1,"
                            "\"backend\":\"cpu\"}},\"traceEvents\":["));
  assert_null(strstr(s, "clock_offset_us"));
  free(s);
}

static void test_paths(void **state) {
  fx_t *f = *state;
  dr_trace_meta_t m = {"train", 1, 2, "cpu", 0, 0};
  dr_trace_t *t = NULL;
  char used[256], want[256];
  assert_int_equal(dr_trace_open(f->path, &m, &t, used, sizeof(used)), 0);
  snprintf(want, sizeof(want), "%s/t.rank1.json", f->dir);
  assert_string_equal(used, want);
  assert_int_equal(dr_trace_close(&t), 0);
  char tmpl[256];
  snprintf(tmpl, sizeof(tmpl), "%s/r{rank}.json", f->dir);
  assert_int_equal(dr_trace_open(tmpl, &m, &t, used, sizeof(used)), 0);
  snprintf(want, sizeof(want), "%s/r1.json", f->dir);
  assert_string_equal(used, want);
  assert_int_equal(dr_trace_close(&t), 0);
  snprintf(tmpl, sizeof(tmpl), "%s/no/such/dir.json", f->dir);
  assert_int_equal(dr_trace_open(tmpl, &m, &t, NULL, 0), -ENOENT);
  assert_null(t);
}

/* ts is the wall clock's, dur the monotonic difference; args as given. */
static void test_times_and_args(void **state) {
  fx_t *f = *state;
  dr_trace_meta_t m = {"train", 0, 1, "cpu", 0, 0};
  dr_trace_t *t = NULL;
  int64_t r0 = real_us();
  assert_int_equal(dr_trace_open(f->path, &m, &t, NULL, 0), 0);
  uint64_t now = mono_us();
  int64_t file_now = dr_trace_file_us(t, now);
  int64_t r1 = real_us();
  /* Within the open call's clock readings, give or take a tick. */
  assert_true(file_now >= r0 - 2 && file_now <= r1 + 2);
  dr_trace_span(t, DR_TRACE_COMPUTE, "step 7", now, now + 1500);
  dr_trace_allreduce(t, 2, 1048576, now + 10, now + 20, now + 30);
  dr_trace_allreduce(t, 3, 6, 0, now + 40, now + 41);
  dr_trace_span(t, DR_TRACE_COMPUTE, "back", now + 9, now + 3);
  assert_int_equal(dr_trace_close(&t), 0);
  char *s = slurp(f->path);
  char want[512];
  snprintf(want, sizeof(want),
           "{\"name\":\"step 7\",\"ph\":\"X\",\"pid\":0,\"tid\":0,"
           "\"ts\":%" PRId64 ",\"dur\":1500}", file_now);
  assert_non_null(strstr(s, want));
  snprintf(want, sizeof(want),
           "{\"name\":\"allreduce bucket 2 (1.00 MiB)\",\"ph\":\"X\","
           "\"pid\":0,\"tid\":1,\"ts\":%" PRId64 ",\"dur\":10,\"args\":"
           "{\"bucket\":2,\"bytes\":1048576,\"ready_us\":%" PRId64 "}}",
           file_now + 20, file_now + 10);
  assert_non_null(strstr(s, want));
  /* An unknown ready time is left out, not written as a time. */
  snprintf(want, sizeof(want),
           "{\"name\":\"allreduce bucket 3 (0.00 MiB)\",\"ph\":\"X\","
           "\"pid\":0,\"tid\":1,\"ts\":%" PRId64 ",\"dur\":1,\"args\":"
           "{\"bucket\":3,\"bytes\":6}}", file_now + 40);
  assert_non_null(strstr(s, want));
  /* An end before the start: zero, never a wrapped duration. */
  assert_non_null(strstr(s, "{\"name\":\"back\""));
  assert_non_null(strstr(strstr(s, "{\"name\":\"back\""), "\"dur\":0}"));
  free(s);
}

/* A counter: its series as given, on the file's clock; a value that JSON
 * cannot hold is written as 0. */
static void test_counter(void **state) {
  fx_t *f = *state;
  dr_trace_meta_t m = {"train", 3, 4, "cpu", 0, 0};
  dr_trace_t *t = NULL;
  char used[512];
  assert_int_equal(dr_trace_open(f->path, &m, &t, used, sizeof(used)), 0);
  uint64_t now = mono_us();
  int64_t file_now = dr_trace_file_us(t, now);
  const char *keys[2] = {"compute", "comm"};
  double vals[2] = {12.5, 3};
  dr_trace_counter(t, "cpu ms", now, keys, vals, 2);
  double bad[1] = {NAN};
  dr_trace_counter(t, "run-queue wait ms", now + 5, keys, bad, 1);
  assert_int_equal(dr_trace_close(&t), 0);
  char *s = slurp(used);
  char want[256];
  snprintf(want, sizeof(want),
           "{\"name\":\"cpu ms\",\"ph\":\"C\",\"pid\":3,\"ts\":%" PRId64
           ",\"args\":{\"compute\":12.5,\"comm\":3}}", file_now);
  assert_non_null(strstr(s, want));
  snprintf(want, sizeof(want),
           "{\"name\":\"run-queue wait ms\",\"ph\":\"C\",\"pid\":3,"
           "\"ts\":%" PRId64 ",\"args\":{\"compute\":0}}", file_now + 5);
  assert_non_null(strstr(s, want));
  assert_true(ends_closed(s));
  free(s);
}

static void test_escape_and_host_thread(void **state) {
  fx_t *f = *state;
  dr_trace_meta_t m = {"tr\"ain", 0, 1, "c\\pu", 0, 0};
  dr_trace_t *t = NULL;
  assert_int_equal(dr_trace_open(f->path, &m, &t, NULL, 0), 0);
  dr_trace_span(t, DR_TRACE_COMPUTE, "a\"b\\c\nd", 1, 2);
  dr_trace_span(t, DR_TRACE_HOST, "data", 1, 2);
  dr_trace_span(t, DR_TRACE_HOST, "data", 3, 4);
  assert_int_equal(dr_trace_close(&t), 0);
  char *s = slurp(f->path);
  assert_non_null(strstr(s, "\"source\":\"tr\\\"ain\""));
  assert_non_null(strstr(s, "\"backend\":\"c\\\\pu\""));
  assert_non_null(strstr(s, "{\"name\":\"a\\\"b\\\\c?d\""));
  assert_int_equal(count(s, "\"thread_name\""), 3);
  assert_non_null(strstr(s, "\"tid\":2,\"args\":{\"name\":\"host\"}}"));
  assert_int_equal(count(s, "\"name\":\"data\",\"ph\":\"X\",\"pid\":0,"
                            "\"tid\":2,"), 2);
  free(s);
}

/* After each flush the file is complete JSON; a writer that is never
 * closed (its process killed) leaves the last flush's state. */
static void test_flush_keeps_it_closed(void **state) {
  fx_t *f = *state;
  dr_trace_meta_t m = {"train", 0, 1, "cpu", 0, 0};
  dr_trace_t *t = NULL;
  assert_int_equal(dr_trace_open(f->path, &m, &t, NULL, 0), 0);
  dr_trace_span(t, DR_TRACE_COMPUTE, "one", 1, 2);
  char *s = slurp(f->path);
  assert_null(strstr(s, "\"one\"")); /* kept until a flush */
  assert_true(ends_closed(s));
  free(s);
  assert_int_equal(dr_trace_flush(t), 0);
  s = slurp(f->path);
  assert_non_null(strstr(s, "\"one\""));
  assert_true(ends_closed(s));
  assert_int_equal(count(s, "]}"), 1);
  free(s);
  /* Past the buffer's size: written on the way, each time closed. */
  for (int i = 0; i < 4000; i++)
    dr_trace_span(t, DR_TRACE_COMPUTE, "fc0.fwd", 10, 20);
  s = slurp(f->path);
  assert_true(count(s, "fc0.fwd") > 0);
  assert_true(ends_closed(s));
  assert_int_equal(count(s, "]}"), 1);
  free(s);
  assert_int_equal(dr_trace_flush(t), 0);
  assert_int_equal(dr_trace_flush(t), 0); /* nothing new: nothing written */
  s = slurp(f->path);
  assert_int_equal(count(s, "fc0.fwd"), 4000);
  assert_true(ends_closed(s));
  free(s);
  assert_int_equal(dr_trace_close(&t), 0);
  assert_int_equal(dr_trace_close(&t), 0); /* NULL: nothing */
  dr_trace_span(NULL, 0, "x", 1, 2);       /* no trace: no-ops */
  dr_trace_allreduce(NULL, 0, 4, 1, 2, 3);
  assert_int_equal(dr_trace_flush(NULL), 0);
}

static void test_parse_offset(void **state) {
  (void)state;
  int64_t v = 7;
  assert_int_equal(dr_trace_parse_offset("-1234", &v), 0);
  assert_int_equal(v, -1234);
  assert_int_equal(dr_trace_parse_offset("0", &v), 0);
  assert_int_equal(v, 0);
  assert_int_equal(dr_trace_parse_offset("+42", &v), 0);
  assert_int_equal(v, 42);
  assert_int_equal(dr_trace_parse_offset("9223372036854775807", &v), 0);
  assert_true(v == INT64_MAX);
  assert_int_equal(dr_trace_parse_offset("-9223372036854775808", &v), 0);
  assert_true(v == INT64_MIN);
  v = 7;
  static const char *bad[] = {"", "-", "+", "12x", " 5", "5 ", "1e3", "1.5",
                              "0x10", "--1", "9223372036854775808",
                              "-9223372036854775809", "99999999999999999999"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(dr_trace_parse_offset(bad[i], &v), -EINVAL);
    assert_int_equal(v, 7);
  }
  assert_int_equal(dr_trace_parse_offset(NULL, &v), -EINVAL);
}

static void test_peak_rss(void **state) {
  (void)state;
  uint64_t before = dr_peak_rss_bytes();
  assert_true(before > 0);
  size_t n = 64u << 20;
  char *p = malloc(n);
  assert_non_null(p);
  volatile char *v = p;
  for (size_t i = 0; i < n; i += 4096)
    v[i] = 1;
  uint64_t after = dr_peak_rss_bytes();
  free(p);
  /* Most of the 64 MiB is new (some may reuse pages already counted). */
  assert_true(after >= before + (48u << 20));
  /* A peak stays after the free, within the kernel's counting (its
   * per-CPU RSS counters lag by some hundred KiB). */
  assert_true(dr_peak_rss_bytes() + (4u << 20) >= after);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_header, setup, teardown),
      cmocka_unit_test_setup_teardown(test_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_times_and_args, setup, teardown),
      cmocka_unit_test_setup_teardown(test_counter, setup, teardown),
      cmocka_unit_test_setup_teardown(test_escape_and_host_thread, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_flush_keeps_it_closed, setup,
                                      teardown),
      cmocka_unit_test(test_parse_offset),
      cmocka_unit_test(test_peak_rss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
