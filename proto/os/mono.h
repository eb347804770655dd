/* The one monotonic clock of the tree: CLOCK_MONOTONIC, for deadlines,
 * timeouts and durations (never for timestamps other hosts read: those
 * are CLOCK_REALTIME, see wire.h "Clocks"). Header-only, so that every
 * library, train's GPU module included, has it without a link. */
#ifndef DR_MONO_H
#define DR_MONO_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds since an unspecified start, never going back. */
static inline uint64_t dr_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t dr_mono_us(void) { return dr_mono_ns() / 1000u; }

static inline uint64_t dr_mono_ms(void) { return dr_mono_ns() / 1000000u; }

#endif /* DR_MONO_H */
