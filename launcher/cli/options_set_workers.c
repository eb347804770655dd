/* The value parsers behind the rows of options_table.c for the workers:
 * their output streams, console filter and prefix, signals and binding. */
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli_util.h"
#include "errors.h"
#include "log.h"
#include "options_internal.h"

int dr__set_std(void *dst, const dr_flag_t *row, const char *val,
                const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  dr_std_spec_t *out = (dr_std_spec_t *)((char *)o + row->off);
  dr_std_spec_t spec; /* copied to *out only once the value is valid */
  memset(&spec, 0, sizeof(spec));
  uint64_t v;
  if (strchr(val, ':') == NULL) {
    if (dr_parse_uint(val, strlen(val), DR_STD_ALL, &v) != 0)
      FAIL("must be 0 (none), 1 (stdout), 2 (stderr), 3 (both), or "
           "LOCAL_RANK:MASK pairs such as 0:3,1:2");
    spec.default_mask = (uint8_t)v;
    *out = spec;
    return 0;
  }
  const char *p = val;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    uint64_t lr;
    if (colon == NULL ||
        dr_parse_uint(p, (size_t)(colon - p), UINT32_MAX, &lr) != 0 ||
        dr_parse_uint(colon + 1, len - (size_t)(colon - p) - 1, DR_STD_ALL,
                      &v) != 0)
      FAIL("'%.*s' is not LOCAL_RANK:MASK with MASK 0-3 (0 none, 1 stdout, "
           "2 stderr, 3 both)",
           (int)len, p);
    if (lr >= DR_MAX_LOCAL)
      FAIL("local rank %llu is above the limit of %u", (unsigned long long)lr,
           DR_MAX_LOCAL - 1);
    if (spec.per_rank_set[lr])
      FAIL("local rank %llu is given twice", (unsigned long long)lr);
    spec.per_rank[lr] = (uint8_t)v;
    spec.per_rank_set[lr] = 1;
    if (comma == NULL)
      break;
    p = comma + 1;
  }
  *out = spec;
  return 0;
}

int dr__set_ranks_filter(void *dst, const dr_flag_t *row, const char *val,
                         const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  const char *p = val;
  while (*p != '\0') {
    size_t len = strcspn(p, ",");
    uint64_t lr;
    int rc = dr_parse_uint(p, len, DR_MAX_LOCAL - 1, &lr);
    if (rc == DR_EBADARG)
      FAIL("must be local ranks separated by commas, such as 0,2");
    if (rc == -ERANGE)
      FAIL("local rank '%.*s' is above the limit of %u", (int)len, p,
           DR_MAX_LOCAL - 1);
    p += len;
    if (*p == ',') {
      p++;
      if (*p == '\0')
        FAIL("must be local ranks separated by commas, such as 0,2");
    }
  }
  /* An empty filter shows every rank, as when it is not given. */
  return dr_flags_replace_str(&o->local_ranks_filter,
                              val[0] != '\0' ? val : NULL, err, err_len);
}

int dr__set_template(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  static const char *const names[] = {"rank", "local_rank", "role_name",
                                      "host"};
  for (const char *p = strstr(val, "${"); p != NULL; p = strstr(p, "${")) {
    const char *close = strchr(p, '}');
    if (close == NULL)
      FAIL("'${' without a closing '}'");
    size_t len = (size_t)(close - p - 2), i;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
      if (strlen(names[i]) == len && memcmp(p + 2, names[i], len) == 0)
        break;
    if (i == sizeof(names) / sizeof(names[0]))
      FAIL("unknown '%.*s'; use ${rank}, ${local_rank}, ${role_name} or "
           "${host}",
           (int)(len + 3), p);
    p = close + 1;
  }
  return dr_flags_replace_str(&o->log_prefix_template, val, err, err_len);
}

static const char *const signal_names[] = {
    "HUP",  "INT",    "QUIT", "ILL",   "TRAP", "ABRT", "BUS",
    "FPE",  "USR1",   "SEGV", "USR2",  "PIPE", "ALRM", "TERM",
    "CHLD", "CONT",   "TSTP", "TTIN",  "TTOU", "URG",  "XCPU",
    "XFSZ", "VTALRM", "PROF", "WINCH", "IO",   "PWR",  "SYS"};

int dr__set_signals(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  const size_t n_names = sizeof(signal_names) / sizeof(signal_names[0]);
  /* The canonical list, "SIGTERM,SIGUSR1", each signal once. */
  char out[sizeof(signal_names) / sizeof(signal_names[0]) * 10];
  size_t n_out = 0;
  int seen[sizeof(signal_names) / sizeof(signal_names[0])] = {0};
  const char *p = val;
  for (;;) {
    size_t len = strcspn(p, ",");
    const char *name = p;
    while (len > 0 && isspace((unsigned char)*name))
      name++, len--;
    while (len > 0 && isspace((unsigned char)name[len - 1]))
      len--;
    const char *tok = name;
    size_t tok_len = len;
    if (len >= 3 && strncasecmp(name, "SIG", 3) == 0)
      name += 3, len -= 3;
    if (len == 0)
      FAIL("must be signal names separated by commas, such as "
           "SIGTERM,SIGUSR1");
    if ((len == 4 && strncasecmp(name, "KILL", 4) == 0) ||
        (len == 4 && strncasecmp(name, "STOP", 4) == 0))
      FAIL("SIG%.4s cannot be caught", name);
    size_t i;
    for (i = 0; i < n_names; i++)
      if (strlen(signal_names[i]) == len &&
          strncasecmp(name, signal_names[i], len) == 0)
        break;
    if (i == n_names)
      FAIL("unknown signal '%.*s'", (int)tok_len, tok);
    if (!seen[i]) {
      seen[i] = 1;
      n_out += (size_t)snprintf(out + n_out, sizeof(out) - n_out, "%sSIG%s",
                                n_out > 0 ? "," : "", signal_names[i]);
    }
    p += strcspn(p, ",");
    if (*p == '\0')
      break;
    p++;
  }
  return dr_flags_replace_str(&o->signals_to_handle, out, err, err_len);
}

int dr__set_hang_timeout(void *dst, const dr_flag_t *row, const char *val,
                         const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  uint32_t ms;
  if (strcmp(val, "auto") == 0)
    o->hang_timeout_ms = DR_HANG_AUTO;
  else if (strcmp(val, "off") == 0)
    o->hang_timeout_ms = 0;
  else if (dr_parse_seconds_ms(val, 0, &ms) == 0)
    o->hang_timeout_ms = ms;
  else
    FAIL("must be auto, off, or a number of seconds from 0 (off) to 86400, "
         "such as 600");
  return 0;
}

int dr__set_gpu_bind(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  if (strcmp(val, "none") == 0)
    o->gpu_bind = DR_GPU_BIND_NONE;
  else if (strcmp(val, "isolate") == 0)
    o->gpu_bind = DR_GPU_BIND_ISOLATE;
  else
    FAIL("must be none or isolate");
  return 0;
}

/* One Linux cpulist per local rank, separated by ':': "0-3,8:4-7,9". CPU
 * numbers must fit a cpu_set_t, which is what the binding is applied
 * with. */
static int cpu_list_ok(const char *s) {
  size_t groups = 0;
  for (;;) {
    groups++;
    for (;;) {
      size_t len = strspn(s, "0123456789");
      uint64_t lo, hi;
      if (dr_parse_uint(s, len, CPU_SETSIZE - 1, &lo) != 0)
        return 0;
      s += len;
      hi = lo;
      if (*s == '-') {
        len = strspn(++s, "0123456789");
        if (dr_parse_uint(s, len, CPU_SETSIZE - 1, &hi) != 0 || hi < lo)
          return 0;
        s += len;
      }
      if (*s != ',')
        break;
      s++;
    }
    if (*s == '\0')
      return groups <= DR_MAX_LOCAL;
    if (*s != ':')
      return 0;
    s++;
  }
}

int dr__set_cpu_bind(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  if (strcmp(val, "none") == 0 || strcmp(val, "auto") == 0) {
    o->cpu_bind = val[0] == 'n' ? DR_CPU_BIND_NONE : DR_CPU_BIND_AUTO;
    return dr_flags_replace_str(&o->cpu_list, NULL, err, err_len);
  }
  if (!cpu_list_ok(val))
    FAIL("must be none, auto, or one CPU list per local rank separated by "
         "':' (CPUs 0-%d), such as 0-3:4-7",
         CPU_SETSIZE - 1);
  int rc = dr_flags_replace_str(&o->cpu_list, val, err, err_len);
  if (rc == 0)
    o->cpu_bind = DR_CPU_BIND_LIST;
  return rc;
}

int dr__set_log_level(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  int level = dr_log_parse_level(val);
  if (level < 0)
    FAIL("must be error, warn, info or debug");
  o->log_level = level;
  return 0;
}
