/* Clock offsets between a node and the server, from the timestamps the
 * protocol already carries (wire.h, "Clocks"): no message of its own.
 *
 * One exchange gives four timestamps, as in NTP:
 *
 *   t1  the server sends its stamp (WELCOME, HEARTBEAT)   server's clock
 *   t2  the agent receives it                              agent's clock
 *   t3  the agent sends the echo (JOIN, RESUME, HEARTBEAT) agent's clock
 *   t4  the server receives the echo                       server's clock
 *
 * With the offset theta = server's clock - agent's clock and the one-way
 * delays d1 (to the agent) and d2 (back), t2 + theta = t1 + d1 and
 * t4 = t3 + theta + d2, so
 *
 *   theta = ((t1 - t2) + (t4 - t3)) / 2 + (d1 - d2) / 2
 *   rtt   = (t4 - t1) - (t3 - t2) = d1 + d2
 *
 * The first term is the estimate; the second, its error, is zero on a
 * symmetric path and never more than rtt / 2 (both delays are >= 0): the
 * uncertainty. The time the agent held the stamp before echoing it
 * (t3 - t2: until its next heartbeat, or an AUTH round trip before a JOIN)
 * drops out, up to the drift of the two clocks over it, which a bound on
 * the hold keeps small (DR_CLOCK_MAX_HOLD_US).
 *
 * Queues on either side only add to rtt; so the sample with the smallest
 * round trip of the last few is the best estimate (NTP's clock filter),
 * and the window lets a clock that is stepped or drifts be followed.
 * Pure arithmetic; never logs, never allocates.
 */
#ifndef DR_CLOCK_OFFSET_H
#define DR_CLOCK_OFFSET_H

#include <stdint.h>

/* Samples the filter keeps (NTP keeps 8): with a heartbeat every third of
 * the heartbeat timeout, about 5 s of history by default. */
#define DR_CLOCK_WINDOW 8u

/* The longest hold (t3 - t2) a sample may have: 10 s of a clock that
 * drifts by 100 ppm is 1 ms. */
#define DR_CLOCK_MAX_HOLD_US 10000000ull

/* CLOCK_REALTIME in microseconds since the Unix epoch: the clock that
 * traces (PyTorch's profiler, train's) are stamped with. */
uint64_t dr_clock_now_us(void);

/* A clock to read: a test's, or one skewed on purpose. */
typedef uint64_t (*dr_clock_fn)(void *ctx);

typedef struct {
  int64_t offset_us; /* server's clock minus the agent's */
  uint64_t rtt_us;   /* the round trip it was measured over */
} dr_clock_sample_t;

/* One exchange (t1..t4 as above). 0 and *out, or DR_EBADARG when a
 * timestamp is missing (0) or out of range (past 2^62), the stamps are out
 * of order (t4 < t1, t3 < t2, or a negative round trip: a clock stepped
 * meanwhile), or the hold is over DR_CLOCK_MAX_HOLD_US. */
int dr_clock_sample(uint64_t t1, uint64_t t2, uint64_t t3, uint64_t t4,
                    dr_clock_sample_t *out);

/* Half the round trip, rounded up: the bound on the sample's error. */
uint64_t dr_clock_uncertainty_us(const dr_clock_sample_t *x);

/* The last DR_CLOCK_WINDOW samples of one peer. Zero-initialise. */
typedef struct {
  dr_clock_sample_t s[DR_CLOCK_WINDOW];
  uint32_t n;    /* samples held, up to DR_CLOCK_WINDOW */
  uint32_t next; /* where the next one goes (the oldest once full) */
} dr_clock_filter_t;

/* Adds a sample, dropping the oldest once the window is full. */
void dr_clock_filter_add(dr_clock_filter_t *f, const dr_clock_sample_t *x);

/* The sample of the window with the smallest round trip (of equal ones,
 * the newest): 0 and *out, or DR_ENOTFOUND when there is none. */
int dr_clock_filter_best(const dr_clock_filter_t *f, dr_clock_sample_t *out);

#endif /* DR_CLOCK_OFFSET_H */
