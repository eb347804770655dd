/* The value parsers behind the rows of options_table.c for the topology and
 * the rendezvous. Each checks the whole value before it changes anything,
 * and explains a refusal in one line that quotes the value: "--nnodes
 * '3:2': MIN must not exceed MAX". */
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

#define MAX_RUN_ID 128u
#define MAX_HOST 253u /* a DNS name */

int dr__set_nnodes(void *dst, const dr_flag_t *row, const char *val,
                   const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  char why[80];
  if (dr_parse_nnodes_why(val, &o->min_nodes, &o->max_nodes, why,
                          sizeof(why)) != 0)
    FAIL("%s", why);
  return 0;
}

int dr__set_nproc(void *dst, const dr_flag_t *row, const char *val,
                  const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
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
  int rc = dr_parse_uint(val, strlen(val), DR_MAX_LOCAL, &n);
  if (rc == DR_EBADARG || (rc == 0 && n == 0))
    FAIL("must be a positive number, auto, cpu or gpu");
  if (rc == -ERANGE)
    FAIL("must be at most %u workers per node", DR_MAX_LOCAL);
  o->nproc_kind = DR_NPROC_NUMBER;
  o->nproc_per_node = (uint32_t)n;
  return 0;
}

int dr__set_node_rank(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  uint64_t r;
  int rc = dr_parse_uint(val, strlen(val), DR_MAX_NODES - 1, &r);
  if (rc == DR_EBADARG)
    FAIL("must be a non-negative integer");
  if (rc == -ERANGE)
    FAIL("must be below %u", DR_MAX_NODES);
  o->node_rank = (int64_t)r;
  return 0;
}

int dr__set_master_port(void *dst, const dr_flag_t *row, const char *val,
                        const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  uint64_t p;
  if (dr_parse_uint(val, strlen(val), 65535, &p) != 0)
    FAIL("must be a port number 0-65535");
  o->master_port = (int32_t)p;
  return 0;
}

int dr__set_backend(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
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

int dr__set_endpoint(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
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
    if (dr_parse_uint(port_s, strlen(port_s), 65535, &port) != 0 || port == 0)
      FAIL("port must be 1-65535");
  }
  char *copy = strndup(host, host_len);
  if (copy == NULL)
    return dr_flags_oom(err, err_len);
  free(o->rdzv_host);
  o->rdzv_host = copy;
  o->rdzv_port = (uint16_t)port;
  o->have_endpoint = 1;
  return 0;
}

int dr__set_run_id(void *dst, const dr_flag_t *row, const char *val,
                   const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  size_t n = strlen(val);
  if (n == 0 || n > MAX_RUN_ID)
    FAIL("must be 1 to %u characters", MAX_RUN_ID);
  if (val[0] == '.')
    FAIL("must not start with '.'");
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)val[i]) && strchr("._:@+-", val[i]) == NULL)
      FAIL("may hold only letters, digits and ._:@+-");
  return dr_flags_replace_str(&o->rdzv_id, val, err, err_len);
}

int dr__set_rdzv_conf(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  uint32_t join = 600000, last_call = 1000, heartbeat = 2000;
  uint32_t replacement = 60000;
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
    else if (strcmp(k, "replacement_timeout") == 0)
      ms = &replacement, min_ms = 0;
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
           "heartbeat_timeout, replacement_timeout, is_host, metrics_port)",
           k);
    }
  }
  o->join_timeout_ms = join;
  o->last_call_timeout_ms = last_call;
  o->heartbeat_timeout_ms = heartbeat;
  o->replacement_timeout_ms = replacement;
  o->is_host = is_host;
  o->metrics_port = metrics_port;
  return 0;
}

int dr__set_max_restarts(void *dst, const dr_flag_t *row, const char *val,
                         const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  uint64_t n;
  int rc = dr_parse_uint(val, strlen(val), INT32_MAX, &n);
  if (rc == DR_EBADARG)
    FAIL("must be a non-negative integer");
  if (rc == -ERANGE)
    FAIL("must be at most %d", INT32_MAX);
  o->max_restarts = (uint32_t)n;
  return 0;
}

int dr__set_monitor(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  char *end;
  double s = strtod(val, &end);
  if ((!isdigit((unsigned char)val[0]) && val[0] != '.') || *end != '\0' ||
      !isfinite(s) || s <= 0 || s > 86400)
    FAIL("must be a positive number of seconds, such as 0.1");
  o->monitor_interval_s = s;
  return 0;
}
