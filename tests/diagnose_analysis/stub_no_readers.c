/* Test-only stand-ins for the trace readers (dr_dg_read*, diag_trace.h)
 * and the merge (dr_dg_merge), so that the diagnose command links into
 * its command-line test without them. They read nothing: every trace
 * fails with "reader not built into this test binary". Weak, so the real
 * ones win in a binary that links them. Never linked into ddprun. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "diag_trace.h"

int dr_dg_merge(const char *out_path, const char *const *paths, size_t n,
                const double *offset_us, char *err, size_t errlen);

__attribute__((weak)) int dr_dg_read(const char *path, dr_dg_rank_t *out,
                                     char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  snprintf(err, errlen, "%s: reader not built into this test binary", path);
  return -ENOSYS;
}

__attribute__((weak)) int dr_dg_read_buf(const void *buf, size_t n_bytes,
                                         const char *name, dr_dg_rank_t *out,
                                         char *err, size_t errlen) {
  return dr_dg_read(name, out, err, errlen);
}

__attribute__((weak)) void dr_dg_rank_free(dr_dg_rank_t *r) {
  memset(r, 0, sizeof(*r));
}

__attribute__((weak)) int dr_dg_merge(const char *out_path,
                                      const char *const *paths, size_t n,
                                      const double *offset_us, char *err,
                                      size_t errlen) {
  snprintf(err, errlen, "merge not built into this test binary");
  return -ENOSYS;
}
