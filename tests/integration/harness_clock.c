/* The harness' clocks: the monotonic time in milliseconds, a scenario's
 * delay, and what is left of a deadline. See harness.h. */
#include "harness.h"
#include "harness_internal.h"

#include <errno.h>
#include <limits.h>
#include <time.h>

double dr_h_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void dr_h_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Milliseconds left until deadline, rounded up so that a poll() does not
 * wake a fraction of a millisecond early and spin. */
int dr__h_ms_left(double deadline) {
  double left = deadline - dr_h_now_ms();
  if (left <= 0)
    return 0;
  return left > INT_MAX ? INT_MAX : (int)left + 1;
}
