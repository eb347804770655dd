/* stamp: a worker that records when it started, for launch_bench.
 *
 *   stamp FILE
 *
 * Reads CLOCK_MONOTONIC first thing in main, then appends its stamp,
 * "COUNT RANK NANOSECONDS PID\n" (bench_stamp.h), to FILE with a single
 * write() on an O_APPEND descriptor, so the lines of concurrent workers
 * never interleave. Exits 0, or 1 when the line could not be written, 2 on
 * bad usage.
 */
#include "bench_stamp.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);

  if (argc != 2) {
    fprintf(stderr, "usage: stamp FILE\n");
    return 2;
  }
  int rc = bench_stamp_append(argv[1], &ts);
  if (rc != 0) {
    fprintf(stderr, "stamp: appending to %s failed (%d: %s)\n", argv[1], -rc,
            strerror(-rc));
    return 1;
  }
  return 0;
}
