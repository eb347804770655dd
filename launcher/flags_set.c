/* What the setters of flags.h share: the one-line messages that quote a
 * value, and the setters of plain fields (strings, switches, seconds). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli_util.h"
#include "errors.h"
#include "flags.h"
#include "log.h"

int dr_flags_fail(char *err, size_t err_len, const char *fmt, ...) {
  if (err != NULL && err_len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return DR_EBADARG;
}

char *dr_flags_quote(const char *v, char out[DR_FLAGS_QUOTE_LEN]) {
  size_t n = strlen(v);
  size_t shown = n > DR_FLAGS_QUOTE_MAX ? DR_FLAGS_QUOTE_MAX : n;
  dr_log_sample(v, shown, out, DR_FLAGS_QUOTE_LEN - 3);
  if (shown < n)
    strcat(out, "...");
  return out;
}

int dr_flags_fail_value(char *err, size_t err_len, const char *what,
                        const char *val, const char *fmt, ...) {
  if (err == NULL || err_len == 0)
    return DR_EBADARG;
  char q[DR_FLAGS_QUOTE_LEN];
  int n = snprintf(err, err_len, "%s '%s': ", what, dr_flags_quote(val, q));
  if (n >= 0 && (size_t)n < err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return DR_EBADARG;
}

int dr_flags_oom(char *err, size_t err_len) {
  dr_flags_fail(err, err_len, "out of memory while reading the options");
  return -ENOMEM;
}

int dr_flags_replace_str(char **slot, const char *s, char *err,
                         size_t err_len) {
  char *copy = NULL;
  if (s != NULL && (copy = strdup(s)) == NULL)
    return dr_flags_oom(err, err_len);
  free(*slot);
  *slot = copy;
  return 0;
}

int dr_flags_parse_bool(const char *s, int *out) {
  static const char *yes[] = {"1", "true", "yes"};
  static const char *no[] = {"0", "false", "no"};
  for (int i = 0; i < 3; i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = 1;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = 0;
      return 0;
    }
  }
  return DR_EBADARG;
}

int dr_flag_set_str(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len) {
  if (val[0] == '\0')
    return dr_flags_fail_value(err, err_len, what, val, "must not be empty");
  char **slot = (char **)((char *)dst + row->off);
  return dr_flags_replace_str(slot, val, err, err_len);
}

int dr_flag_set_bool(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len) {
  int b;
  if (dr_flags_parse_bool(val, &b) != 0)
    return dr_flags_fail_value(err, err_len, what, val,
                               "must be 1, 0, true, false, yes or no");
  *(int *)((char *)dst + row->off) = b;
  return 0;
}

int dr_flag_set_seconds(void *dst, const dr_flag_t *row, const char *val,
                        const char *what, char *err, size_t err_len) {
  uint32_t ms;
  if (dr_parse_seconds_ms(val, 0, &ms) != 0)
    return dr_flags_fail_value(err, err_len, what, val,
                               "must be a number of seconds from 0 to "
                               "86400, such as 10 or 2.5");
  *(uint32_t *)((char *)dst + row->off) = ms;
  return 0;
}
