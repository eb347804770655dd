/* cpulists ("0-3,8,10-11"), as the kernel and taskset write them: parsed
 * into a cpu_set_t and formatted from one (bind.h). */
#include "bind.h"

#include <stdio.h>
#include <string.h>

#include "errors.h"

/* A CPU number below CPU_SETSIZE at *s; advances *s. 0 or -1. */
static int parse_cpu(const char **s, int *out) {
  const char *p = *s;
  if (*p < '0' || *p > '9') return -1;
  int v = 0;
  while (*p >= '0' && *p <= '9') {
    v = v * 10 + (*p++ - '0');
    if (v >= CPU_SETSIZE) return -1;
  }
  *s = p;
  *out = v;
  return 0;
}

int dr_cpuset_parse(const char *s, cpu_set_t *out) {
  CPU_ZERO(out);
  if (s == NULL || *s == '\0') return DR_EBADARG;
  for (;;) {
    int lo, hi;
    if (parse_cpu(&s, &lo) != 0) goto bad;
    hi = lo;
    if (*s == '-') {
      s++;
      if (parse_cpu(&s, &hi) != 0) goto bad;
    }
    if (hi < lo) goto bad;
    for (int c = lo; c <= hi; c++) CPU_SET(c, out);
    if (*s == '\0') return 0;
    if (*s != ',') goto bad;
    s++;
  }
bad:
  CPU_ZERO(out);
  return DR_EBADARG;
}

char *dr_cpuset_format(const cpu_set_t *set, char *out, size_t n) {
  if (out == NULL || n == 0) return out;
  out[0] = '\0';
  size_t o = 0;
  int truncated = 0;
  for (int c = 0; c < CPU_SETSIZE && !truncated; c++) {
    if (!CPU_ISSET(c, set)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set)) e++;
    int w = e == c ? snprintf(out + o, n - o, "%s%d", o ? "," : "", c)
                   : snprintf(out + o, n - o, "%s%d-%d", o ? "," : "", c, e);
    if (w < 0 || (size_t)w >= n - o) {
      truncated = 1;
      out[o] = '\0';
    } else {
      o += (size_t)w;
    }
    c = e;
  }
  if (truncated) {
    /* Whole items that fit, then ",...": "0,2,4,...", or "..." alone. */
    size_t keep = o;
    while (keep > 0 && keep + 5 > n) {
      do keep--;
      while (keep > 0 && out[keep] != ',');
    }
    if (keep > 0)
      memcpy(out + keep, ",...", 5);
    else if (n >= 4)
      memcpy(out, "...", 4);
    else
      out[0] = '\0';
  }
  return out;
}
