/* Order statistics of measured times (train's reports, the bucket
 * planner's profile and its probe). */
#ifndef DR_STATS_H
#define DR_STATS_H

#include <stddef.h>

/* Sorts v[0..n) and returns its median (the mean of the two middle values
 * when n is even; 0 when n is 0). */
double dr_median(double *v, size_t n);

#endif /* DR_STATS_H */
