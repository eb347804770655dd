/* The value parsers behind the rows of options_table.c for checkpoints in
 * node memory: --ckpt-replicas, --ckpt-replicate-rate, --ckpt-keep,
 * --ckpt-persist-every (--ckpt-dir and --ckpt-persist are plain
 * strings). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "errors.h"
#include "options_internal.h"

/* The replicas the rendezvous names at most (DR_PEERS_REPLICAS). */
#define MAX_REPLICAS 8u
#define MAX_KEEP 1000u

int dr__set_ckpt_replicas(void *dst, const dr_flag_t *row, const char *val,
                          const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  uint64_t n;
  if (dr_parse_uint(val, strlen(val), MAX_REPLICAS, &n) != 0)
    FAIL("must be a number of nodes from 0 to %u", MAX_REPLICAS);
  o->ckpt_replicas = (int32_t)n;
  return 0;
}

int dr__set_ckpt_rate(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  size_t len = strlen(val);
  unsigned shift = 0;
  if (len > 0) {
    switch (val[len - 1]) {
    case 'K':
    case 'k':
      shift = 10;
      break;
    case 'M':
    case 'm':
      shift = 20;
      break;
    case 'G':
    case 'g':
      shift = 30;
      break;
    default:
      break;
    }
  }
  uint64_t n;
  /* At most 1 TiB/s: far above any link, and far from overflowing. */
  uint64_t max = (1ull << 40) >> shift;
  int rc = dr_parse_uint(val, len - (shift != 0), max, &n);
  if (rc == DR_EBADARG)
    FAIL("must be bytes per second, with K, M or G: 100M, 1G; 0 for no "
         "cap");
  if (rc == -ERANGE)
    FAIL("must be at most 1024G");
  o->ckpt_rate = n << shift;
  return 0;
}

int dr__set_ckpt_keep(void *dst, const dr_flag_t *row, const char *val,
                      const char *what, char *err, size_t err_len) {
  dr_options_t *o = dst;
  uint64_t n;
  int rc = dr_parse_uint(val, strlen(val), MAX_KEEP, &n);
  if (rc != 0 || n == 0)
    FAIL("must be a number of checkpoints from 1 to %u", MAX_KEEP);
  o->ckpt_keep = (uint32_t)n;
  return 0;
}

int dr__set_ckpt_persist_every(void *dst, const dr_flag_t *row,
                               const char *val, const char *what, char *err,
                               size_t err_len) {
  dr_options_t *o = dst;
  uint32_t ms;
  /* Under a second, each look at DIR2 (a listing on shared storage)
   * would come faster than any checkpoint worth keeping. */
  if (dr_parse_seconds_ms(val, 1000, &ms) != 0)
    FAIL("must be a number of seconds from 1 to 86400, such as 300");
  o->ckpt_persist_every_ms = ms;
  return 0;
}
