/* The rate limiter of repeated warnings, on a clock the test drives: the
 * burst, the summary per interval, a flood that goes on, a quiet spell that
 * gives the burst back, and nothing counted is lost at a flush. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "ratelimit.h"

static const char *const kinds[] = {"malformed", "idle"};

/* stderr goes to a file for the test's time, so lines can be read. */
typedef struct {
  FILE *f;
  int saved;
  char *text;
} capture_t;

static int setup(void **state) {
  capture_t *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return -1;
  c->f = tmpfile();
  c->saved = dup(STDERR_FILENO);
  if (c->f == NULL || c->saved < 0 ||
      dup2(fileno(c->f), STDERR_FILENO) < 0)
    return -1;
  dr_log_init("rltest", DR_LOG_INFO);
  *state = c;
  return 0;
}

static const char *logged(capture_t *c);

/* Puts stderr back, and replays what it caught there (the lines logged,
 * and cmocka's report of a failed assertion). */
static int teardown(void **state) {
  capture_t *c = *state;
  const char *text = logged(c);
  dup2(c->saved, STDERR_FILENO);
  if (write(STDERR_FILENO, text, strlen(text)) < 0)
    perror("write");
  close(c->saved);
  fclose(c->f);
  free(c->text);
  free(c);
  return 0;
}

/* Everything logged so far (owned by c). */
static const char *logged(capture_t *c) {
  fflush(c->f);
  long n = ftell(c->f);
  free(c->text);
  c->text = calloc(1, (size_t)n + 1);
  assert_non_null(c->text);
  assert_int_equal(pread(fileno(c->f), c->text, (size_t)n, 0), n);
  return c->text;
}

static size_t count(const char *text, const char *needle) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

static void test_burst_then_summary(void **state) {
  capture_t *c = *state;
  dr_ratelimit_t rl;
  dr_rl_init(&rl, "bad things", kinds, 2, 3, 10000);
  for (int i = 0; i < 1000; i++)
    dr_rl_warn(&rl, 1000 + (uint64_t)i, i % 10 == 9 ? 1 : 0, 1,
               "bad thing %d", i);
  const char *t = logged(c);
  assert_int_equal(count(t, "\n"), 3);
  assert_non_null(strstr(t, "bad thing 0\n"));
  assert_non_null(strstr(t, "bad thing 2\n"));
  /* Before the interval is over, no summary. */
  dr_rl_tick(&rl, 10999);
  assert_int_equal(count(logged(c), "\n"), 3);
  dr_rl_tick(&rl, 11000);
  t = logged(c);
  assert_int_equal(count(t, "\n"), 4);
  /* 997 held: 897 of kind 0 (the first held is #3), 100 of kind 1. */
  assert_non_null(strstr(t, "997 more bad things in the last 10.0 s: 897 "
                            "malformed (first: bad thing 3), 100 idle "
                            "(first: bad thing 9)\n"));
}

static void test_flood_is_one_line_per_interval(void **state) {
  capture_t *c = *state;
  dr_ratelimit_t rl;
  dr_rl_init(&rl, "bad things", kinds, 2, 5, 1000);
  /* 10 s of a flood, 100 events a second. */
  for (uint64_t ms = 0; ms < 10000; ms += 10) {
    dr_rl_warn(&rl, ms, 0, 1, "flood at %llu", (unsigned long long)ms);
    dr_rl_tick(&rl, ms);
  }
  dr_rl_flush(&rl, 10000);
  const char *t = logged(c);
  size_t lines = count(t, "\n"), summaries = count(t, " more bad things");
  /* 5 in full at the start only, then one summary per second. */
  assert_int_equal(lines - summaries, 5);
  assert_true(summaries >= 9 && summaries <= 11);
  uint64_t held = 0;
  for (const char *p = t; (p = strstr(p, "WARN  ")) != NULL; p++) {
    unsigned long long n;
    if (sscanf(p, "WARN  %llu more", &n) == 1)
      held += n;
  }
  assert_int_equal(held + 5, 1000);

  /* After a quiet interval, the burst is back. */
  dr_rl_warn(&rl, 30000, 0, 1, "after the calm");
  assert_non_null(strstr(logged(c), "after the calm\n"));
}

static void test_counts_and_flush(void **state) {
  capture_t *c = *state;
  dr_ratelimit_t rl;
  dr_rl_init(&rl, "connections refused", kinds, 2, 1, 10000);
  dr_rl_warn(&rl, 5, 0, 3, "three at once");
  dr_rl_warn(&rl, 6, 0, 4, "four at once");
  dr_rl_warn(&rl, 7, 7, 2, "kind out of range counts as the last");
  dr_rl_flush(&rl, 2507);
  const char *t = logged(c);
  assert_non_null(strstr(t, "three at once\n"));
  assert_non_null(strstr(t, "6 more connections refused in the last 2.5 s: 4 "
                            "malformed (first: four at once), 2 idle (first: "
                            "kind out of range counts as the last)\n"));
  /* Nothing held: a flush says nothing. */
  dr_rl_flush(&rl, 3000);
  assert_int_equal(count(logged(c), "\n"), 2);
}

static void test_nothing_when_warnings_are_off(void **state) {
  capture_t *c = *state;
  dr_log_init("rltest", DR_LOG_ERROR);
  dr_ratelimit_t rl;
  dr_rl_init(&rl, "bad things", kinds, 2, 1, 10);
  for (int i = 0; i < 10; i++)
    dr_rl_warn(&rl, (uint64_t)i * 100, 0, 1, "x");
  dr_rl_flush(&rl, 5000);
  assert_int_equal(strlen(logged(c)), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_burst_then_summary, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_flood_is_one_line_per_interval,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_counts_and_flush, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nothing_when_warnings_are_off,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
