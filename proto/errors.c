#define _GNU_SOURCE
#include "errors.h"

#include <string.h>

int dr_is_own_error(int code) {
  return code > DR__ERR_FIRST && code < DR__ERR_LAST;
}

const char *dr_strerror(int code) {
  switch (code) {
#define DR__ERR_MSG(name, msg)                                               \
  case DR_E##name:                                                           \
    return msg;
    DR_ERRNO_MAP(DR__ERR_MSG)
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
  case DR_E##name:                                                           \
    return "DR_E" #name;
    DR_ERRNO_MAP(DR__ERR_NAME)
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
