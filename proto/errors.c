#define _GNU_SOURCE
#include "errors.h"

#include <string.h>

/* Each module within its range, and its range below errno's. A value used
 * twice across the modules fails to compile below (duplicate case). */
#define DR__ERR_CHECK(mod, list, base, first, last)                          \
  _Static_assert(first == base && last <= base + DR_ERR_RANGE &&             \
                     base + DR_ERR_RANGE <= -4096,                           \
                 #mod " codes outside their range");
DR_ERR_MODULES(DR__ERR_CHECK)
#undef DR__ERR_CHECK

int dr_is_own_error(int code) {
#define DR__ERR_IN(mod, list, base, first, last)                             \
  if (code > first && code < last)                                           \
    return 1;
  DR_ERR_MODULES(DR__ERR_IN)
#undef DR__ERR_IN
  return 0;
}

const char *dr_strerror(int code) {
  switch (code) {
#define DR__ERR_MSG(name, msg)                                               \
  case name:                                                                 \
    return msg;
    DR_ERR_ALL(DR__ERR_MSG)
#undef DR__ERR_MSG
  default:
    break;
  }
  if (code == 0)
    return "success";
  if (code < 0 && code > -4096)
    return strerror(-code);
  return "unknown error";
}

const char *dr_err_name(int code) {
  switch (code) {
#define DR__ERR_NAME(name, msg)                                              \
  case name:                                                                 \
    return #name;
    DR_ERR_ALL(DR__ERR_NAME)
#undef DR__ERR_NAME
  default:
    break;
  }
  if (code == 0)
    return "OK";
  if (code < 0 && code > -4096) {
    const char *n = strerrorname_np(-code);
    if (n != NULL)
      return n;
  }
  return "UNKNOWN";
}
