/* stamp: a worker that records when it started, for launch_bench.
 *
 *   stamp FILE
 *
 * Reads CLOCK_MONOTONIC first thing in main, then appends one line
 * "RANK NANOSECONDS\n" to FILE (RANK from the environment, "-" when unset)
 * with a single write() on an O_APPEND descriptor, so the lines of
 * concurrent workers never interleave. Exits 0, or 1 when the line could
 * not be written, 2 on bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);

  if (argc != 2) {
    fprintf(stderr, "usage: stamp FILE\n");
    return 2;
  }
  const char *rank = getenv("RANK");
  char line[96];
  int n = snprintf(line, sizeof(line), "%s %lld\n",
                   rank != NULL && rank[0] != '\0' ? rank : "-",
                   (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
  if (n < 0 || (size_t)n >= sizeof(line)) {
    fprintf(stderr, "stamp: RANK '%.32s' is too long\n", rank);
    return 1;
  }
  int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "stamp: open() of %s failed (%d: %s)\n", argv[1], errno,
            strerror(errno));
    return 1;
  }
  ssize_t w = write(fd, line, (size_t)n);
  int err = errno;
  if (close(fd) != 0 && w == n) {
    w = -1;
    err = errno;
  }
  if (w != n) {
    fprintf(stderr, "stamp: write() to %s failed (%d: %s)\n", argv[1],
            w < 0 ? err : 0, w < 0 ? strerror(err) : "short write");
    return 1;
  }
  return 0;
}
