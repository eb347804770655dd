/* Worker output through the agent: four workers flood stdout at once;
 * every line must come out whole, once, prefixed with its own rank. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_harness.h"

#define N_RANKS 4
#define N_LINES 10000
#define JOB_MS 30000
/* What probe prints after "rank=R seq=I " (see probe.c). */
#define PAYLOAD                                                                \
  "payload-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKLMNOPQRSTUVWXYZ-"  \
  "end"

/* Checks one line of ddprun's stdout; counts it in seen. Returns 1 for a
 * flood line, 0 for the PROBE line; fails on anything else. */
static int check_line(const char *line, size_t len, size_t line_no,
                      unsigned char seen[N_RANKS][N_LINES], int *next_seq) {
  char buf[512];
  if (len >= sizeof(buf))
    fail_msg("line %zu: %zu bytes, longer than any probe line", line_no, len);
  memcpy(buf, line, len);
  buf[len] = '\0';
  int prefix = -1, rank = -1, seq = -1, used = 0;
  if (sscanf(buf, "[rank%d]:%n", &prefix, &used) != 1 || used == 0)
    fail_msg("line %zu has no [rankN]: prefix: '%s'", line_no, buf);
  const char *body = buf + used;
  if (strncmp(body, "PROBE ", 6) == 0)
    return 0;
  int at = 0;
  if (sscanf(body, "rank=%d seq=%d %n", &rank, &seq, &at) != 2 || at == 0 ||
      strcmp(body + at, PAYLOAD) != 0)
    fail_msg("line %zu is not a whole probe line: '%s'", line_no, buf);
  if (rank != prefix)
    fail_msg("line %zu: rank %d's line prefixed [rank%d]:", line_no, rank,
             prefix);
  if (rank < 0 || rank >= N_RANKS || seq < 0 || seq >= N_LINES)
    fail_msg("line %zu: rank %d seq %d out of range", line_no, rank, seq);
  if (seen[rank][seq]++ != 0)
    fail_msg("line %zu: rank %d seq %d printed twice", line_no, rank, seq);
  /* One worker's lines keep their order. */
  if (seq != next_seq[rank])
    fail_msg("line %zu: rank %d seq %d where seq %d was next", line_no, rank,
             seq, next_seq[rank]);
  next_seq[rank] = seq + 1;
  return 1;
}

DR_L_TEST(lines_4x10000) {
  char lines[16];
  snprintf(lines, sizeof(lines), "%d", N_LINES);
  char nproc[16];
  snprintf(nproc, sizeof(nproc), "%d", N_RANKS);
  dr_l_proc_t *p = dr_l_ddprun(fx, "node0",
                               DR_H_ARGS("--standalone", "--nproc-per-node",
                                         nproc, dr_l_probe_path(), "--lines",
                                         lines, "--marker", fx->marker),
                               NULL);
  dr_l_expect_exit(p, 0, JOB_MS);

  static unsigned char seen[N_RANKS][N_LINES];
  memset(seen, 0, sizeof(seen));
  const char *out = dr_l_out(p);
  size_t n_flood = 0, n_probe = 0, line_no = 0;
  int next_seq[N_RANKS] = {0};
  for (const char *line = out; *line != '\0';) {
    const char *nl = strchr(line, '\n');
    if (nl == NULL)
      fail_msg("the output ends in a partial line: '%.200s'", line);
    line_no++;
    if (check_line(line, (size_t)(nl - line), line_no, seen, next_seq))
      n_flood++;
    else
      n_probe++;
    line = nl + 1;
  }
  if (n_probe != N_RANKS)
    fail_msg("%zu PROBE lines, expected %d", n_probe, N_RANKS);
  if (n_flood != (size_t)N_RANKS * N_LINES)
    fail_msg("%zu probe lines, expected exactly %d", n_flood,
             N_RANKS * N_LINES);
  for (int r = 0; r < N_RANKS; r++)
    for (int s = 0; s < N_LINES; s++)
      if (seen[r][s] != 1)
        fail_msg("rank %d seq %d missing", r, s);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(lines_4x10000, dr_l_setup, dr_l_teardown),
  };
  return DR_L_MAIN("launch_output", tests, argc, argv);
}
