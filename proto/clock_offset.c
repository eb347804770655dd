/* The clock-offset arithmetic and its min-round-trip filter; see
 * clock_offset.h for the derivation. */
#include "clock_offset.h"

#include <time.h>

#include "errors.h"

/* Past this a timestamp is garbage (year 148,000): below it, differences
 * and their sums fit an int64_t. */
#define STAMP_MAX (1ull << 62)

uint64_t dr_clock_now_us(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0 || ts.tv_sec < 0)
    return 0; /* "none": no sample is made of it */
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int dr_clock_sample(uint64_t t1, uint64_t t2, uint64_t t3, uint64_t t4,
                    dr_clock_sample_t *out) {
  if (t1 == 0 || t2 == 0 || t3 == 0 || t4 == 0 || t1 >= STAMP_MAX ||
      t2 >= STAMP_MAX || t3 >= STAMP_MAX || t4 >= STAMP_MAX)
    return DR_EBADARG;
  if (t4 < t1 || t3 < t2)
    return DR_EBADARG;
  uint64_t span = t4 - t1, hold = t3 - t2;
  if (hold > DR_CLOCK_MAX_HOLD_US || hold > span)
    return DR_EBADARG;
  int64_t out_leg = (int64_t)t1 - (int64_t)t2; /* theta - d1 */
  int64_t back_leg = (int64_t)t4 - (int64_t)t3; /* theta + d2 */
  out->offset_us = (out_leg + back_leg) / 2;
  out->rtt_us = span - hold;
  return 0;
}

uint64_t dr_clock_uncertainty_us(const dr_clock_sample_t *x) {
  return x->rtt_us / 2 + (x->rtt_us & 1);
}

void dr_clock_filter_add(dr_clock_filter_t *f, const dr_clock_sample_t *x) {
  f->s[f->next] = *x;
  f->next = (f->next + 1) % DR_CLOCK_WINDOW;
  if (f->n < DR_CLOCK_WINDOW)
    f->n++;
}

int dr_clock_filter_best(const dr_clock_filter_t *f, dr_clock_sample_t *out) {
  if (f->n == 0)
    return DR_ENOTFOUND;
  /* Oldest to newest, so that of equal round trips the newest wins. */
  uint32_t first = f->n < DR_CLOCK_WINDOW ? 0 : f->next;
  const dr_clock_sample_t *best = NULL;
  for (uint32_t k = 0; k < f->n; k++) {
    const dr_clock_sample_t *x = &f->s[(first + k) % DR_CLOCK_WINDOW];
    if (best == NULL || x->rtt_us <= best->rtt_us)
      best = x;
  }
  *out = *best;
  return 0;
}
