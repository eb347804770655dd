/* The all-reduce probe of --bucket-cap-mb auto: what one all-reduce costs
 * here, as alpha + bytes / B. See train_plan.h. */
#include "train_plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "stats.h"

#define REPS 3
#define MAX_SIZES 8

/* One all-reduce of n_elems, timed on the communication thread (as the
 * reducer times its buckets). */
static int timed(dr_pg_t *pg, float *buf, size_t n_elems, double *ms,
                 char *err, size_t err_len) {
  dr_work_t *w = NULL;
  int rc = dr_pg_allreduce(pg, buf, n_elems, DR_PG_AVG, &w);
  if (rc != 0) {
    snprintf(err, err_len, "cannot queue the probe all-reduce (%d)", rc);
    return rc;
  }
  rc = dr_work_wait_keep(w, err, err_len);
  uint64_t t0 = dr_work_start_us(w), t1 = dr_work_end_us(w);
  dr_work_free(&w);
  *ms = t1 > t0 ? (t1 - t0) / 1e3 : 0;
  return rc;
}

int dr_train_probe(dr_pg_t *pg, size_t max_bytes, double *alpha_ms,
                   double *bytes_per_ms, char *err, size_t err_len) {
  /* Sizes a bucket may have: 64 KiB up to 16 MiB by fours, no larger than
   * the gradients; for small models, an eighth, a half and all of them. */
  size_t sizes[MAX_SIZES], n = 0;
  for (size_t s = 64u << 10; s <= (16u << 20) && s <= max_bytes; s *= 4)
    sizes[n++] = s;
  if (n < 3) {
    n = 0;
    sizes[n++] = max_bytes / 8;
    sizes[n++] = max_bytes / 2;
    sizes[n++] = max_bytes;
  }
  for (size_t i = 0; i < n; i++)
    sizes[i] = sizes[i] < 4 ? 4 : sizes[i] / 4 * 4;
  size_t top = sizes[n - 1];
  float *buf = calloc(top / 4, sizeof(float));
  if (buf == NULL) {
    snprintf(err, err_len, "out of memory for the probe (%zu bytes)", top);
    return -ENOMEM;
  }
  double x[MAX_SIZES], t[MAX_SIZES], ms, reps[REPS];
  /* Warm-up: the connections' windows grow on the largest size. */
  int rc = timed(pg, buf, top / 4, &ms, err, err_len);
  for (size_t i = 0; i < n && rc == 0; i++) {
    for (size_t k = 0; k < REPS && rc == 0; k++)
      rc = timed(pg, buf, sizes[i] / 4, &reps[k], err, err_len);
    x[i] = (double)sizes[i];
    t[i] = dr_median(reps, REPS);
  }
  free(buf);
  if (rc != 0)
    return rc;
  double fit[2];
  dr_plan_fit(x, t, n, &fit[0], &fit[1]);
  if (dr_pg_world(pg) > 1)
    rc = dr_pg_broadcast_sync(pg, fit, sizeof(fit), 0, err, err_len);
  *alpha_ms = fit[0];
  *bytes_per_ms = fit[1];
  return rc;
}
