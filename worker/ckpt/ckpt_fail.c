/* Checkpoint failures: the message a failing call leaves in err, and what
 * a code says about the directory (dr_ckpt_fail_kind). */
#include "ckpt_internal.h"

#include "errors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

dr_ckpt_fail_kind_t dr_ckpt_fail_kind(int code) {
  switch (-code) {
  case ENOSPC:
  case EDQUOT:
  case EFBIG:
  case EROFS:
  case EACCES:
  case EPERM:
  case EIO:
    return DR_CKPT_FAIL_STORAGE;
  case ENOMEM:
    return DR_CKPT_FAIL_NOMEM;
  default:
    return DR_CKPT_FAIL_OTHER;
  }
}

int dr__ckpt_fail(char *err, size_t n, int code, const char *fmt, ...) {
  if (err != NULL && n > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return code;
}

int dr__ckpt_not_a_file(char *err, size_t n, const char *path, int rc) {
  if (rc == -EISDIR)
    return dr__ckpt_fail(err, n, rc, "%s is a directory, not a checkpoint "
                         "file", path);
  if (rc == DR_ENOTREG)
    return dr__ckpt_fail(err, n, rc, "%s is not a regular file (a FIFO, "
                         "device or socket), not a checkpoint", path);
  return dr__ckpt_fail(err, n, rc, "open() of %s failed (%s)", path,
                       strerror(-rc));
}
