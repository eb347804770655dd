#include "wire.h"

#include <string.h>

dr_limits_t dr_limits_default(void) {
  dr_limits_t l;
  l.max_frame_unauth = 4096;
  l.max_frame = 64u << 20;
  l.max_str = 1024;
  l.max_key = 4096;
  l.max_value = 32u << 20;
  l.max_blob = 64u << 10;
  l.max_count = 65536;
  return l;
}

const char *dr_msg_schema(uint8_t type) {
  switch (type) {
#define DR__MSG_SCHEMA(name, id, schema, doc)                                \
  case id:                                                                   \
    return schema;
    DR_MSG_TYPES(DR__MSG_SCHEMA)
#undef DR__MSG_SCHEMA
  default:
    return NULL;
  }
}

const char *dr_msg_name(uint8_t type) {
  switch (type) {
#define DR__MSG_NAME(name, id, schema, doc)                                  \
  case id:                                                                   \
    return #name;
    DR_MSG_TYPES(DR__MSG_NAME)
#undef DR__MSG_NAME
  default:
    return "UNKNOWN";
  }
}

dr_bytes_t dr_str(const char *s) {
  dr_bytes_t b;
  b.p = (const uint8_t *)s;
  b.len = s != NULL ? (uint32_t)strlen(s) : 0;
  return b;
}

const char *dr_fail_kind_name(dr_fail_kind_t k) {
  switch (k) {
  case DR_FAIL_EXIT:
    return "exit";
  case DR_FAIL_SIGNAL:
    return "signal";
  case DR_FAIL_HANG:
    return "hang";
  case DR_FAIL_START:
    return "start";
  case DR_FAIL_HANG_WAIT:
    return "hang_wait";
  default:
    return "unknown";
  }
}
