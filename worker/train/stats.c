/* Order statistics of measured times; see stats.h. */
#include "stats.h"

#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void sort_doubles(double *v, size_t n) {
  qsort(v, n, sizeof(double), cmp_double);
}

double dr_median(double *v, size_t n) {
  if (n == 0)
    return 0;
  sort_doubles(v, n);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
