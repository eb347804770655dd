/* The value parsers behind the rows of options_table.c for the topology and
 * the rendezvous, and the helpers every parser shares. Each checks the
 * whole value before it changes anything, and explains a refusal in one
 * line that quotes the value: "--nnodes '3:2': MIN must not exceed MAX". */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli_util.h"
#include "errors.h"
#include "log.h"
#include "options_internal.h"

#define MAX_NODES 1000000u
#define MAX_RUN_ID 128u
#define MAX_HOST 253u /* a DNS name */

int dr__opt_fail(char *err, size_t err_len, const char *fmt, ...) {
  if (err != NULL && err_len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return DR_EBADARG;
}

char *dr__opt_quote(const char *v, char out[DR__QUOTE_LEN]) {
  size_t n = strlen(v);
  size_t shown = n > DR__QUOTE_MAX ? DR__QUOTE_MAX : n;
  dr_log_sample(v, shown, out, DR__QUOTE_LEN - 3);
  if (shown < n)
    strcat(out, "...");
  return out;
}

int dr__opt_fail_value(char *err, size_t err_len, const char *what,
                       const char *val, const char *fmt, ...) {
  if (err == NULL || err_len == 0)
    return DR_EBADARG;
  char q[DR__QUOTE_LEN];
  int n = snprintf(err, err_len, "%s '%s': ", what, dr__opt_quote(val, q));
  if (n >= 0 && (size_t)n < err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return DR_EBADARG;
}

int dr__opt_oom(char *err, size_t err_len) {
  dr__opt_fail(err, err_len, "out of memory while reading the options");
  return -ENOMEM;
}

int dr__opt_replace_str(char **slot, const char *s, char *err, size_t err_len) {
  char *copy = NULL;
  if (s != NULL && (copy = strdup(s)) == NULL)
    return dr__opt_oom(err, err_len);
  free(*slot);
  *slot = copy;
  return 0;
}

int dr__opt_parse_uint(const char *s, size_t len, uint64_t cap, uint64_t *out) {
  if (len == 0)
    return -1;
  uint64_t v = 0;
  int over = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    if (!over) {
      v = v * 10 + (uint64_t)(s[i] - '0');
      over = v > cap;
    }
  }
  if (over)
    return 1;
  *out = v;
  return 0;
}

int dr__opt_parse_bool(const char *s, int *out) {
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

int dr__set_string(dr_options_t *o, const dr__opt_t *row, const char *val,
                   const char *what, char *err, size_t err_len) {
  if (val[0] == '\0')
    FAIL("must not be empty");
  char **slot = (char **)((char *)o + row->off);
  return dr__opt_replace_str(slot, val, err, err_len);
}

int dr__set_flag(dr_options_t *o, const dr__opt_t *row, const char *val,
                 const char *what, char *err, size_t err_len) {
  int b;
  if (dr__opt_parse_bool(val, &b) != 0)
    FAIL("must be 1, 0, true, false, yes or no");
  *(int *)((char *)o + row->off) = b;
  return 0;
}

int dr__set_seconds(dr_options_t *o, const dr__opt_t *row, const char *val,
                    const char *what, char *err, size_t err_len) {
  uint32_t ms;
  if (dr_parse_seconds_ms(val, 0, &ms) != 0)
    FAIL("must be a number of seconds from 0 to 86400, such as 10 or 2.5");
  *(uint32_t *)((char *)o + row->off) = ms;
  return 0;
}

int dr__set_nnodes(dr_options_t *o, const dr__opt_t *row, const char *val,
                   const char *what, char *err, size_t err_len) {
  const char *colon = strchr(val, ':');
  size_t len_lo = colon != NULL ? (size_t)(colon - val) : strlen(val);
  const char *hi_s = colon != NULL ? colon + 1 : val;
  uint64_t lo = 0, hi = 0;
  int rc_lo = dr__opt_parse_uint(val, len_lo, MAX_NODES, &lo);
  int rc_hi = dr__opt_parse_uint(hi_s, strlen(hi_s), MAX_NODES, &hi);
  if (rc_lo < 0 || rc_hi < 0)
    FAIL("must be a node count N or a range MIN:MAX, such as 2 or 1:4");
  if (rc_lo > 0 || rc_hi > 0)
    FAIL("must be at most %u", MAX_NODES);
  if (lo == 0 || hi == 0)
    FAIL("must be at least 1");
  if (lo > hi)
    FAIL("MIN must not exceed MAX");
  o->min_nodes = (uint32_t)lo;
  o->max_nodes = (uint32_t)hi;
  return 0;
}

int dr__set_nproc(dr_options_t *o, const dr__opt_t *row, const char *val,
                  const char *what, char *err, size_t err_len) {
  static const struct {
    const char *name;
    dr_nproc_kind_t kind;
  } kinds[] = {
      {"auto", DR_NPROC_AUTO}, {"cpu", DR_NPROC_CPU}, {"gpu", DR_NPROC_GPU}};
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    if (strcmp(val, kinds[i].name) == 0) {
      o->nproc_kind = kinds[i].kind;
      o->nproc_per_node = 0;
      return 0;
    }
  }
  uint64_t n;
  int rc = dr__opt_parse_uint(val, strlen(val), DR_MAX_LOCAL, &n);
  if (rc < 0 || (rc == 0 && n == 0))
    FAIL("must be a positive number, auto, cpu or gpu");
  if (rc > 0)
    FAIL("must be at most %u workers per node", DR_MAX_LOCAL);
  o->nproc_kind = DR_NPROC_NUMBER;
  o->nproc_per_node = (uint32_t)n;
  return 0;
}

int dr__set_node_rank(dr_options_t *o, const dr__opt_t *row, const char *val,
                      const char *what, char *err, size_t err_len) {
  uint64_t r;
  int rc = dr__opt_parse_uint(val, strlen(val), MAX_NODES - 1, &r);
  if (rc < 0)
    FAIL("must be a non-negative integer");
  if (rc > 0)
    FAIL("must be below %u", MAX_NODES);
  o->node_rank = (int64_t)r;
  return 0;
}

int dr__set_master_port(dr_options_t *o, const dr__opt_t *row, const char *val,
                        const char *what, char *err, size_t err_len) {
  uint64_t p;
  if (dr__opt_parse_uint(val, strlen(val), 65535, &p) != 0)
    FAIL("must be a port number 0-65535");
  o->master_port = (int32_t)p;
  return 0;
}

int dr__set_backend(dr_options_t *o, const dr__opt_t *row, const char *val,
                    const char *what, char *err, size_t err_len) {
  if (strcmp(val, "c10d") == 0)
    o->rdzv_backend = DR_RDZV_C10D;
  else if (strcmp(val, "static") == 0)
    o->rdzv_backend = DR_RDZV_STATIC;
  else if (strcmp(val, "slurm") == 0)
    o->rdzv_backend = DR_RDZV_SLURM;
  else if (strcmp(val, "k8s") == 0)
    o->rdzv_backend = DR_RDZV_K8S;
  else
    FAIL("must be c10d, static, slurm or k8s");
  return 0;
}

static int host_char_ok(char c, int bracketed) {
  if (isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_')
    return 1;
  return bracketed && (c == ':' || c == '%');
}

int dr__set_endpoint(dr_options_t *o, const dr__opt_t *row, const char *val,
                     const char *what, char *err, size_t err_len) {
  const char *host = val, *port_s = NULL;
  size_t host_len;
  int bracketed = val[0] == '[';
  if (val[0] == '\0')
    FAIL("must not be empty; use HOST[:PORT]");
  if (bracketed) {
    const char *close = strchr(val, ']');
    if (close == NULL)
      FAIL("missing ']' after the IPv6 address; use [ADDR]:PORT");
    host = val + 1;
    host_len = (size_t)(close - host);
    if (close[1] == ':')
      port_s = close + 2;
    else if (close[1] != '\0')
      FAIL("expected ':PORT' after ']'");
  } else {
    const char *colon = strchr(val, ':');
    if (colon != NULL && strchr(colon + 1, ':') != NULL)
      FAIL("an IPv6 address needs brackets, as [ADDR]:PORT");
    host_len = colon != NULL ? (size_t)(colon - val) : strlen(val);
    if (colon != NULL)
      port_s = colon + 1;
  }
  if (host_len == 0)
    FAIL("the host is empty; use HOST[:PORT]");
  if (host_len > MAX_HOST)
    FAIL("the host is longer than %u characters", MAX_HOST);
  for (size_t i = 0; i < host_len; i++)
    if (!host_char_ok(host[i], bracketed))
      FAIL("'%.*s' is not a host name or address", (int)host_len, host);
  uint64_t port = 29400;
  if (port_s != NULL) {
    if (port_s[0] == '\0')
      FAIL("the port is empty; give HOST:PORT or leave out the ':'");
    if (dr__opt_parse_uint(port_s, strlen(port_s), 65535, &port) != 0 ||
        port == 0)
      FAIL("port must be 1-65535");
  }
  char *copy = strndup(host, host_len);
  if (copy == NULL)
    return dr__opt_oom(err, err_len);
  free(o->rdzv_host);
  o->rdzv_host = copy;
  o->rdzv_port = (uint16_t)port;
  o->have_endpoint = 1;
  return 0;
}

int dr__set_run_id(dr_options_t *o, const dr__opt_t *row, const char *val,
                   const char *what, char *err, size_t err_len) {
  size_t n = strlen(val);
  if (n == 0 || n > MAX_RUN_ID)
    FAIL("must be 1 to %u characters", MAX_RUN_ID);
  if (val[0] == '.')
    FAIL("must not start with '.'");
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)val[i]) && strchr("._:@+-", val[i]) == NULL)
      FAIL("may hold only letters, digits and ._:@+-");
  return dr__opt_replace_str(&o->rdzv_id, val, err, err_len);
}

int dr__set_rdzv_conf(dr_options_t *o, const dr__opt_t *row, const char *val,
                      const char *what, char *err, size_t err_len) {
  uint32_t join = 600000, last_call = 1000, heartbeat = 2000;
  int is_host = -1;
  int32_t metrics_port = -1;
  const char *p = val;
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    char item[256];
    if (len >= sizeof(item))
      FAIL("'%.40s...' is too long", p);
    memcpy(item, p, len);
    item[len] = '\0';
    p += len + (end != NULL);
    char *k = item;
    while (isspace((unsigned char)*k))
      k++;
    if (*k == '\0')
      continue; /* "a=1,,b=2" or a trailing comma */
    char *eq = strchr(k, '=');
    if (eq == NULL)
      FAIL("'%s' is not KEY=VALUE", k);
    char *v = eq + 1;
    while (eq > k && isspace((unsigned char)eq[-1]))
      eq--;
    *eq = '\0';
    while (isspace((unsigned char)*v))
      v++;
    for (char *e = v + strlen(v); e > v && isspace((unsigned char)e[-1]);)
      *--e = '\0';
    for (char *c = k; *c != '\0'; c++)
      if (*c == '-')
        *c = '_';
    uint32_t *ms = NULL, min_ms = 1;
    if (strcmp(k, "join_timeout") == 0)
      ms = &join;
    else if (strcmp(k, "last_call_timeout") == 0)
      ms = &last_call, min_ms = 0;
    else if (strcmp(k, "heartbeat_timeout") == 0)
      ms = &heartbeat;
    if (ms != NULL) {
      if (dr_parse_seconds_ms(v, min_ms, ms) != 0)
        FAIL("%s must be a number of seconds%s up to 86400, such as 30 or "
             "0.5",
             k, min_ms > 0 ? " above 0" : "");
    } else if (strcmp(k, "is_host") == 0) {
      if (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0)
        is_host = 1;
      else if (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0)
        is_host = 0;
      else
        FAIL("is_host must be 0, 1, true or false");
    } else if (strcmp(k, "metrics_port") == 0) {
      uint32_t port;
      if (dr_parse_u32(v, 0, 65535, &port) != 0)
        FAIL("metrics_port must be a port number (0-65535; 0 picks a free "
             "one)");
      metrics_port = (int32_t)port;
    } else {
      FAIL("unknown key '%s' (known: join_timeout, last_call_timeout, "
           "heartbeat_timeout, is_host, metrics_port)",
           k);
    }
  }
  o->join_timeout_ms = join;
  o->last_call_timeout_ms = last_call;
  o->heartbeat_timeout_ms = heartbeat;
  o->is_host = is_host;
  o->metrics_port = metrics_port;
  return 0;
}

int dr__set_max_restarts(dr_options_t *o, const dr__opt_t *row, const char *val,
                         const char *what, char *err, size_t err_len) {
  uint64_t n;
  int rc = dr__opt_parse_uint(val, strlen(val), INT32_MAX, &n);
  if (rc < 0)
    FAIL("must be a non-negative integer");
  if (rc > 0)
    FAIL("must be at most %d", INT32_MAX);
  o->max_restarts = (uint32_t)n;
  return 0;
}

int dr__set_monitor(dr_options_t *o, const dr__opt_t *row, const char *val,
                    const char *what, char *err, size_t err_len) {
  char *end;
  double s = strtod(val, &end);
  if ((!isdigit((unsigned char)val[0]) && val[0] != '.') || *end != '\0' ||
      !isfinite(s) || s <= 0 || s > 86400)
    FAIL("must be a positive number of seconds, such as 0.1");
  o->monitor_interval_s = s;
  return 0;
}
