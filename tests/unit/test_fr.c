/* PyTorch's flight recorder dumps (fr.h): the newest collective of a dump
 * as PyTorch 2.11 writes it (_dump_fr_trace_json), dumps that are not,
 * and the one line a hang report says of a node's ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fr.h"
#include "mono.h"

/* One entry as torch writes it, trimmed to what fr.c reads and a little
 * more. */
#define ENTRY(rec, seq, name, state, p2p)                                    \
  "{\"collective_seq_id\": " #seq ", \"is_p2p\": " p2p ", \"pg_id\": 0, "    \
  "\"process_group\": [\"0\", \"default_pg\"], \"profiling_name\": \""       \
  name "\", \"record_id\": " #rec ", \"retired\": false, \"state\": \""      \
  state "\", \"input_sizes\": [[4]]}"

static const char dump_skip[] =
    "{\"version\": \"2.10\", \"pg_status\": {\"0\": "
    "{\"last_completed_collective\": \"3\", \"last_enqueued_collective\": "
    "\"4\"}}, \"entries\": [" ENTRY(0, 2, "gloo:all_reduce", "completed",
                                    "false") ", "
    ENTRY(2, 4, "gloo:broadcast", "scheduled", "false") ", "
    ENTRY(1, 3, "gloo:all_reduce", "completed", "false") ", "
    ENTRY(3, 9, "gloo:send", "scheduled", "true") "]}";

static void test_parse_newest(void **state) {
  (void)state;
  dr_fr_rank_t r;
  assert_int_equal(dr_fr_parse(dump_skip, strlen(dump_skip), &r), 0);
  assert_int_equal(r.have, 1);
  assert_int_equal(r.seq, 4); /* newest by record id; p2p left out */
  assert_string_equal(r.name, "gloo:broadcast");
  assert_string_equal(r.state, "scheduled");
  assert_string_equal(r.pg, "default_pg");
  assert_int_equal(r.done, 0);
}

static void test_parse_bad(void **state) {
  (void)state;
  dr_fr_rank_t r;
  const char *bad[] = {
      "", "{", "[]", "{\"entries\": 3}", "{\"entries\": []}",
      "{\"error\": \"torch.distributed is not loaded\"}",
      "{\"entries\": [" ENTRY(0, 1, "nccl:send", "started", "true") "]}"};
  const char *why[] = {"not JSON", "not JSON", "no entries",
                       "no entries", "no collective recorded",
                       "torch.distributed is not loaded",
                       "no collective recorded"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(dr_fr_parse(bad[i], strlen(bad[i]), &r), -1);
    assert_int_equal(r.have, 0);
    assert_non_null(strstr(r.why, why[i]));
  }
}

static dr_fr_rank_t rank(uint64_t seq, const char *name) {
  dr_fr_rank_t r;
  memset(&r, 0, sizeof(r));
  r.have = 1;
  r.seq = seq;
  snprintf(r.name, sizeof(r.name), "%s", name);
  return r;
}

static void test_verdict(void **state) {
  (void)state;
  char out[400];
  uint32_t ids[3] = {4, 5, 6};
  dr_fr_rank_t r[3] = {rank(4, "gloo:all_reduce"), rank(4, "gloo:broadcast"),
                       rank(4, "gloo:all_reduce")};
  dr_fr_verdict(r, ids, 3, out, sizeof(out));
  assert_string_equal(out, "rank 4 in #4 gloo:all_reduce, rank 5 in #4 "
                           "gloo:broadcast, rank 6 in #4 gloo:all_reduce: "
                           "the ranks disagree at #4 (one skipped or "
                           "reordered a collective)");
  r[1] = rank(3, "gloo:all_reduce");
  r[2] = rank(2, "gloo:all_reduce");
  dr_fr_verdict(r, ids, 3, out, sizeof(out));
  assert_non_null(strstr(out, ": ranks 5, 6 never entered #4"));
  r[1] = rank(4, "gloo:all_reduce");
  r[2].have = 0;
  dr_fr_verdict(r, ids, 3, out, sizeof(out));
  assert_string_equal(out, "rank 4 in #4 gloo:all_reduce, rank 5 in #4 "
                           "gloo:all_reduce: every rank here waits in #4; "
                           "the one missing from it is elsewhere");
  r[0].have = r[1].have = 0;
  dr_fr_verdict(r, ids, 3, out, sizeof(out));
  assert_string_equal(out, "");
}

/* A request removes the old dump and makes path.request; a dump that does
 * not come is said once the deadline passes. */
static void test_request_collect(void **state) {
  (void)state;
  char dir[] = "/tmp/test_fr_XXXXXX", path[128], req[160];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/fr_trace.json", dir);
  snprintf(req, sizeof(req), "%s.request", path);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("old", f);
  fclose(f);
  assert_int_equal(dr_fr_request(path), 0);
  assert_int_equal(access(path, F_OK), -1);
  assert_int_equal(access(req, F_OK), 0);
  dr_fr_rank_t r;
  assert_int_equal(dr_fr_collect(path, dr_mono_ms() + 100, &r), 0);
  assert_non_null(strstr(r.why, "no dump"));
  f = fopen(path, "w");
  assert_non_null(f);
  fputs(dump_skip, f);
  fclose(f);
  assert_int_equal(dr_fr_collect(path, dr_mono_ms(), &r), 1);
  assert_int_equal(r.seq, 4);
  unlink(path);
  unlink(req);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_newest),
      cmocka_unit_test(test_parse_bad),
      cmocka_unit_test(test_verdict),
      cmocka_unit_test(test_request_collect),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
