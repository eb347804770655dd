/* The NCCL backend's history of its collectives (worker/gpu/
 * coll_history.h), without CUDA: the ring keeps the last 64 in order, the
 * stderr line and the file name each one's sequence number, kind, size
 * and state, and the file lands beside the error file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll_history.h"

#define S 1000000ull /* microseconds */

static void test_ring_order(void **state) {
  (void)state;
  dr_coll_history_t h;
  memset(&h, 0, sizeof(h));
  assert_int_equal(dr_coll_history_len(&h), 0);
  assert_null(dr_coll_history_at(&h, 0, NULL));
  for (uint64_t i = 0; i < 3; i++)
    dr_coll_history_add(&h, "allreduce", 4 * (i + 1), i * S);
  assert_int_equal(dr_coll_history_len(&h), 3);
  assert_int_equal(dr_coll_history_at(&h, 0, NULL)->seq, 1);
  assert_int_equal(dr_coll_history_at(&h, 2, NULL)->n_bytes, 12);
  assert_int_equal(dr_coll_history_at(&h, 2, NULL)->state, DR_COLL_ENQUEUING);
  /* Past the ring's size: the oldest kept is the 64th from the end. */
  for (uint64_t i = 3; i < 70; i++)
    dr_coll_history_add(&h, "allreduce", 4, i * S);
  assert_int_equal(h.n, 70);
  assert_int_equal(dr_coll_history_len(&h), DR_COLL_HISTORY);
  size_t slot;
  assert_int_equal(dr_coll_history_at(&h, 0, &slot)->seq, 7);
  assert_int_equal(slot, 6);
  assert_int_equal(dr_coll_history_at(&h, 63, &slot)->seq, 70);
  assert_int_equal(slot, 5);
  assert_int_equal(dr_coll_history_add(&h, "allreduce", 4, 0), 6);
}

/* #551 and #552 done, #553 pending since 31.2 s, #554 still enqueuing. */
static void fill(dr_coll_history_t *h) {
  memset(h, 0, sizeof(*h));
  for (int k = 0; k < 550; k++) {
    size_t j = dr_coll_history_add(h, "allreduce", 8, 5 * S);
    h->slot[j].state = DR_COLL_DONE;
  }
  size_t i = dr_coll_history_add(h, "allreduce", 25u << 20, 10 * S);
  h->slot[i].state = DR_COLL_DONE;
  i = dr_coll_history_add(h, "allreduce", 25u << 20, 10 * S + 1000);
  h->slot[i].state = DR_COLL_DONE;
  i = dr_coll_history_add(h, "broadcast", 4, 10 * S + 2000);
  h->slot[i].state = DR_COLL_PENDING;
  dr_coll_history_add(h, "allreduce", 34816, 41 * S);
}

static void test_line(void **state) {
  (void)state;
  dr_coll_history_t h;
  memset(&h, 0, sizeof(h));
  char line[512];
  dr_coll_history_line(&h, 8, 0, line, sizeof(line));
  assert_string_equal(line, "none");
  fill(&h);
  uint64_t now = 10 * S + 2000 + 31200000ull;
  dr_coll_history_line(&h, 5, now, line, sizeof(line));
  assert_string_equal(line,
                      "#550 allreduce 8 B done, #551 allreduce 25.0 MiB done, #552 allreduce 25.0 MiB "
                      "done, #553 broadcast 4 B pending since 31.2 s, #554 "
                      "allreduce 34.0 KiB enqueuing since 0.2 s");
  dr_coll_history_line(&h, 2, now, line, sizeof(line));
  assert_string_equal(line, "#553 broadcast 4 B pending since 31.2 s, #554 "
                            "allreduce 34.0 KiB enqueuing since 0.2 s");
  /* Cut short, still a string. */
  dr_coll_history_line(&h, 5, now, line, 20);
  assert_int_equal(strlen(line), 19);
}

static void test_file(void **state) {
  (void)state;
  char dir[] = "/tmp/dr-test-coll-history-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof(path), "%s/%s", dir, DR_COLL_HISTORY_FILE);
  dr_coll_history_t h;
  fill(&h);
  uint64_t now = 10 * S + 2000 + 31200000ull;
  assert_int_equal(dr_coll_history_write(&h, 3, 8, "a training step failed",
                                         now, path), 0);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char text[8192];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = '\0';
  fclose(f);
  const char *head =
      "# rank 3 of 8: the last 64 of 554 NCCL collectives, oldest first,\n"
      "#   when a training step failed\n"
      "rank=3 seq=491 kind=allreduce bytes=8 state=done age_s=36.202\n";
  assert_memory_equal(text, head, strlen(head));
  int lines = 0;
  for (char *c = text; *c; c++)
    lines += *c == '\n';
  assert_int_equal(lines, 2 + DR_COLL_HISTORY);
  const char *tail = strstr(text, "rank=3 seq=551 ");
  assert_non_null(tail);
  assert_string_equal(
      tail,
      "rank=3 seq=551 kind=allreduce bytes=26214400 state=done age_s=31.202\n"
      "rank=3 seq=552 kind=allreduce bytes=26214400 state=done age_s=31.201\n"
      "rank=3 seq=553 kind=broadcast bytes=4 state=pending age_s=31.200\n"
      "rank=3 seq=554 kind=allreduce bytes=34816 state=enqueuing "
      "age_s=0.202\n");
  /* No temporary file left behind. */
  char tmp[300];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  assert_int_equal(access(tmp, F_OK), -1);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(rmdir(dir), 0);
  /* A directory that is not there: an error, no file. */
  assert_true(dr_coll_history_write(&h, 3, 8, "x", now,
                                    "/nonexistent/dir/f.txt") < 0);
}

static void test_path(void **state) {
  (void)state;
  char p[256];
  unsetenv("DDPRUN_ERROR_FILE");
  unsetenv("TORCHELASTIC_ERROR_FILE");
  assert_int_equal(dr_coll_history_path(p, sizeof(p)), -1);
  setenv("TORCHELASTIC_ERROR_FILE", "/logs/job/attempt_0/2/error.json", 1);
  assert_int_equal(dr_coll_history_path(p, sizeof(p)), 0);
  assert_string_equal(p, "/logs/job/attempt_0/2/nccl_collectives.txt");
  setenv("DDPRUN_ERROR_FILE", "/var/ddp/attempt_1/3/error.json", 1);
  assert_int_equal(dr_coll_history_path(p, sizeof(p)), 0);
  assert_string_equal(p, "/var/ddp/attempt_1/3/nccl_collectives.txt");
  setenv("DDPRUN_ERROR_FILE", "error.json", 1);
  assert_int_equal(dr_coll_history_path(p, sizeof(p)), 0);
  assert_string_equal(p, "nccl_collectives.txt");
  assert_int_equal(dr_coll_history_path(p, 8), -1);
  unsetenv("DDPRUN_ERROR_FILE");
  unsetenv("TORCHELASTIC_ERROR_FILE");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring_order),
      cmocka_unit_test(test_line),
      cmocka_unit_test(test_file),
      cmocka_unit_test(test_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
