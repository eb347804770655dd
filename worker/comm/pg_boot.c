/* Bootstrap: the ranks meet through the rendezvous store and connect the
 * ring.
 *
 *  1. Each rank listens on TCP port 0 on the address its store connection
 *     leaves from (the interface that reaches the server, also inside a
 *     network namespace) and publishes "pg/<instance>/<rank>": its host
 *     identity, address, port, pid and a random token, in the store's
 *     generation scope, so a restart never reads an earlier round's entry.
 *  2. It reads every rank's entry and orders the ring by (host identity,
 *     rank): ranks of one host sit next to each other. Above SORT_MAX
 *     ranks it reads only its neighbours' entries and keeps rank order,
 *     which ddprun's placement (a node's ranks are consecutive) already
 *     groups by host.
 *  3. It connects a control connection to its right neighbour (a hello
 *     carrying the neighbour's token, which only store readers know) and
 *     offers the data path: shared memory (a ring it created) when both
 *     share a host identity, else TCP. It accepts its left neighbour's
 *     control connection and answers that one's offer. A shared-memory
 *     ring is unlinked as soon as the consumer answered that it mapped it;
 *     a refused or failed one falls back to a TCP data connection.
 *  4. A store barrier, then the store connection is closed: collectives
 *     never touch the store.
 *
 * The order of these steps cannot deadlock: every rank writes what its
 * neighbours need (connect, hello, offer) before it blocks on reading
 * anything, and connects complete through the listen backlog.
 *
 * Steps 1, 2 and 4 live here, the sockets and step 3 in pg_net.c.
 */
#include "pg_boot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "mono.h"

#define SORT_MAX 1024

/* The n-th group this process creates: the same on every rank when all
 * create their groups in the same order, as collectives require anyway. */
static _Atomic uint64_t instances;

int dr__boot_fail(dr_boot_t *b, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->err, b->err_len, fmt, ap);
  va_end(ap);
  return code;
}

int dr__boot_remaining_ms(const dr_boot_t *b) {
  uint64_t now = dr_mono_ns();
  if (now >= b->deadline)
    return 0;
  uint64_t ms = (b->deadline - now + 999999u) / 1000000u;
  return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* ---- host identity ----------------------------------------------------- */

static unsigned long long ns_inode(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* Ranks with the same identity can share memory: the same boot of the
 * same machine, the same network namespace (the one the addresses
 * belong to) and the same pid namespace (pids in the ring header must
 * mean the same process to both). When the boot id cannot be read the
 * identity is unique to this process, which only costs shared memory. */
static void host_identity(char *out, size_t len, uint32_t rank) {
  char boot[64] = "";
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, boot, sizeof(boot) - 1);
    close(fd);
    boot[n > 0 ? n : 0] = '\0';
    boot[strcspn(boot, "\n \t")] = '\0';
  }
  unsigned long long net = ns_inode("/proc/self/ns/net");
  unsigned long long pid = ns_inode("/proc/self/ns/pid");
  if (boot[0] == '\0' || net == 0 || pid == 0)
    snprintf(out, len, "unknown-%d-%u", (int)getpid(), rank);
  else
    snprintf(out, len, "%s-%llu-%llu", boot, net, pid);
}

/* ---- entries ------------------------------------------------------------ */

static void hex(char *out, const uint8_t *p, size_t n) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[p[i] >> 4];
    out[2 * i + 1] = d[p[i] & 15];
  }
  out[2 * n] = '\0';
}

static int unhex(uint8_t *out, const char *s, size_t n) {
  for (size_t i = 0; i < 2 * n; i++) {
    char c = s[i];
    int v = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (v < 0)
      return -1;
    if (i % 2 == 0)
      out[i / 2] = (uint8_t)(v << 4);
    else
      out[i / 2] |= (uint8_t)v;
  }
  return s[2 * n] == '\0' ? 0 : -1;
}

/* "DRPG1 <host> <ip> <port> <token hex> <pid>" */
static int entry_format(const dr_boot_entry_t *e, char *out, size_t len) {
  char tok[2 * DR_BOOT_TOKEN_BYTES + 1];
  hex(tok, e->token, DR_BOOT_TOKEN_BYTES);
  int n = snprintf(out, len, "DRPG1 %s %s %u %s %d", e->host, e->ip,
                   (unsigned)e->port, tok, e->pid);
  return n > 0 && (size_t)n < len ? n : -1;
}

static int entry_parse(const uint8_t *v, size_t n, dr_boot_entry_t *e) {
  char buf[512], tok[2 * DR_BOOT_TOKEN_BYTES + 2];
  unsigned port;
  if (n >= sizeof(buf))
    return -1;
  memcpy(buf, v, n);
  buf[n] = '\0';
  memset(e, 0, sizeof(*e));
  if (sscanf(buf, "DRPG1 %159s %45s %u %33s %d", e->host, e->ip, &port, tok,
             &e->pid) != 5 ||
      port == 0 || port > 65535 ||
      unhex(e->token, tok, DR_BOOT_TOKEN_BYTES) != 0)
    return -1;
  e->port = (uint16_t)port;
  return 0;
}

/* ---- the store --------------------------------------------------------- */

static void key_of(char *out, size_t len, uint64_t inst, uint32_t rank) {
  snprintf(out, len, "pg/%" PRIu64 "/%u", inst, rank);
}

/* Names up to 8 ranks whose entries are missing, for the timeout
 * message; returns how many it found. */
static size_t missing_ranks(dr_boot_t *b, const uint32_t *ranks, size_t n,
                            char *out, size_t len) {
  size_t used = 0, found = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && found < 8; i++) {
    char key[64];
    uint8_t *v = NULL;
    size_t vn;
    key_of(key, sizeof(key), b->inst, ranks[i]);
    int rc = dr_client_get(b->client, b->cfg->gen, key, 0, &v, &vn);
    free(v);
    if (rc == DR_ENOTFOUND && used < len) {
      int k =
          snprintf(out + used, len - used, "%s%u", found ? ", " : "", ranks[i]);
      if (k > 0)
        used += (size_t)k;
      found++;
    }
  }
  if (found == 0)
    snprintf(out, len, "?");
  return found;
}

static int get_entries(dr_boot_t *b, const uint32_t *ranks, size_t n,
                       dr_boot_entry_t *out) {
  const char **keys = calloc(n, sizeof(*keys));
  char *names = calloc(n, 32);
  if (keys == NULL || names == NULL) {
    free(keys);
    free(names);
    return dr__boot_fail(b, -ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    key_of(names + 32 * i, 32, b->inst, ranks[i]);
    keys[i] = names + 32 * i;
  }
  dr_bytes_t *vals = NULL;
  int rc = dr_client_multi_get(b->client, b->cfg->gen, keys, n,
                               (uint64_t)dr__boot_remaining_ms(b), &vals);
  free(keys);
  free(names);
  if (rc == -ETIMEDOUT) {
    char miss[128];
    size_t k = missing_ranks(b, ranks, n, miss, sizeof(miss));
    return dr__boot_fail(
        b, DR_PG_ETIMEOUT,
        "%s %s did not publish %s address within "
        "%g s (not started, or stuck before joining the group)",
        k == 1 ? "rank" : "ranks", miss, k == 1 ? "its" : "their",
        b->cfg->timeout_ms / 1000.0);
  }
  if (rc != 0)
    return dr__boot_fail(b, rc,
                         "reading the ranks' addresses from the store failed: "
                         "%s%s%s",
                         dr_strerror(rc),
                         *dr_client_errmsg(b->client) ? ": " : "",
                         dr_client_errmsg(b->client));
  for (size_t i = 0; i < n; i++)
    if (entry_parse(vals[i].p, vals[i].len, &out[i]) != 0) {
      free(vals);
      return dr__boot_fail(b, DR_EBADARG, "rank %u's store entry is malformed",
                           ranks[i]);
    }
  free(vals);
  return 0;
}

static const dr_boot_entry_t *sort_base;
static int by_host_then_rank(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  int c = strcmp(sort_base[x].host, sort_base[y].host);
  return c != 0 ? c : (x > y) - (x < y);
}

static int build_ring(dr_boot_t *b) {
  dr_pg_t *pg = b->pg;
  uint32_t W = pg->world;
  pg->order = malloc(W * sizeof(*pg->order));
  if (pg->order == NULL)
    return dr__boot_fail(b, -ENOMEM, "out of memory");
  for (uint32_t i = 0; i < W; i++)
    pg->order[i] = i;
  if (W <= SORT_MAX) {
    b->all = calloc(W, sizeof(*b->all));
    if (b->all == NULL)
      return dr__boot_fail(b, -ENOMEM, "out of memory");
    int rc = get_entries(b, pg->order, W, b->all);
    if (rc != 0)
      return rc;
    /* qsort has no context argument in C11; the bootstrap runs once per
     * group, on one thread. */
    sort_base = b->all;
    qsort(pg->order, W, sizeof(*pg->order), by_host_then_rank);
    sort_base = NULL;
  }
  for (uint32_t i = 0; i < W; i++)
    if (pg->order[i] == pg->rank)
      pg->pos = i;
  uint32_t l = pg->order[(pg->pos + W - 1) % W];
  uint32_t r = pg->order[(pg->pos + 1) % W];
  if (b->all != NULL) {
    b->left = b->all[l];
    b->right = b->all[r];
  } else {
    uint32_t want[2] = {l, r};
    dr_boot_entry_t got[2];
    int rc = get_entries(b, want, 2, got);
    if (rc != 0)
      return rc;
    b->left = got[0];
    b->right = got[1];
  }
  pg->recv.peer = l;
  pg->send.peer = r;
  pg->send.sending = 1;
  return 0;
}

/* ---- description ------------------------------------------------------- */

static const char *kind_str(dr_link_kind_t k) {
  return k == DR_LINK_SHM ? "shm" : "tcp";
}

static void describe(dr_boot_t *b) {
  dr_pg_t *pg = b->pg;
  uint32_t W = pg->world;
  size_t cap = 64 + (W <= 16 ? (size_t)W * 32 : 128);
  char *s = malloc(cap);
  if (s == NULL)
    return;
  size_t used = (size_t)snprintf(s, cap, "ring of %u:", W);
  if (W <= 16 && b->all != NULL) {
    /* Links between other ranks as their host identities predict; a
     * fallback there is reported by those ranks themselves. */
    for (uint32_t i = 0; i < W && used < cap; i++) {
      uint32_t from = pg->order[i], to = pg->order[(i + 1) % W];
      const char *k;
      if (from == pg->rank)
        k = kind_str(pg->send.kind);
      else if (to == pg->rank)
        k = kind_str(pg->recv.kind);
      else
        k = !b->cfg->force_tcp &&
                    strcmp(b->all[from].host, b->all[to].host) == 0
                ? "shm"
                : "tcp";
      used += (size_t)snprintf(s + used, cap - used, "%s %s %u>%u",
                               i ? "," : "", k, from, to);
    }
  } else {
    snprintf(s + used, cap - used, " this rank's links %s %u>%u, %s %u>%u",
             kind_str(pg->recv.kind), pg->recv.peer, pg->rank,
             kind_str(pg->send.kind), pg->rank, pg->send.peer);
  }
  pg->describe = s;
}

/* ---- bootstrap --------------------------------------------------------- */

int dr__pg_bootstrap(dr_pg_t *pg, const dr_pg_config_t *cfg, char *err,
                     size_t err_len) {
  dr_boot_t b;
  memset(&b, 0, sizeof(b));
  b.pg = pg;
  b.cfg = cfg;
  b.err = err;
  b.err_len = err_len;
  b.lfd = -1;
  uint32_t timeout_ms = pg->timeout_ms;
  b.deadline = dr_mono_ns() + (uint64_t)timeout_ms * 1000000u;
  b.inst = atomic_fetch_add(&instances, 1) + 1;

  dr_client_opts_t o = {
      .host = cfg->store_host,
      .port = cfg->store_port,
      .run_id = cfg->run_id,
      .secret = cfg->secret,
      .secret_len = cfg->secret_len,
      .connect_timeout_ms =
          (int)(timeout_ms > INT32_MAX ? INT32_MAX : timeout_ms),
      .io_timeout_ms = 30000,
  };
  char cerr[256] = "";
  int rc = dr_client_open(&o, &b.client, cerr, sizeof(cerr));
  if (rc != 0) {
    rc = dr__boot_fail(&b, rc == -ETIMEDOUT ? DR_PG_ETIMEOUT : rc,
                       "cannot reach the store at %s:%u: %s%s%s",
                       cfg->store_host, (unsigned)cfg->store_port,
                       dr_strerror(rc), cerr[0] ? ": " : "", cerr);
    goto out;
  }
  if ((rc = dr__boot_listen(&b)) != 0)
    goto out;
  host_identity(b.me.host, sizeof(b.me.host), pg->rank);
  b.me.pid = (int)getpid();
  if (getrandom(b.me.token, DR_BOOT_TOKEN_BYTES, 0) != DR_BOOT_TOKEN_BYTES) {
    rc = dr__boot_fail(&b, -EIO, "getrandom() failed: %s", strerror(errno));
    goto out;
  }
  char key[64], val[512];
  key_of(key, sizeof(key), b.inst, pg->rank);
  int vn = entry_format(&b.me, val, sizeof(val));
  rc = vn < 0 ? -EOVERFLOW
              : dr_client_set(b.client, cfg->gen, key, val, (size_t)vn);
  if (rc != 0) {
    rc = dr__boot_fail(&b, rc, "publishing this rank's address failed: %s%s%s",
                       dr_strerror(rc), *dr_client_errmsg(b.client) ? ": " : "",
                       dr_client_errmsg(b.client));
    goto out;
  }
  if ((rc = build_ring(&b)) != 0)
    goto out;
  if ((rc = dr__boot_link_up(&b)) != 0)
    goto out;
  close(b.lfd);
  b.lfd = -1;
  char bar[64];
  snprintf(bar, sizeof(bar), "pg/%" PRIu64 "/ready", b.inst);
  rc = dr_client_barrier(b.client, cfg->gen, bar, pg->world,
                         (uint64_t)dr__boot_remaining_ms(&b));
  if (rc != 0) {
    rc = dr__boot_fail(&b, rc == -ETIMEDOUT ? DR_PG_ETIMEOUT : rc,
                       "not every rank connected its links within %g s (%s)",
                       timeout_ms / 1000.0, dr_strerror(rc));
    goto out;
  }
  describe(&b);
  if (pg->describe == NULL)
    rc = dr__boot_fail(&b, -ENOMEM, "out of memory");
out:
  dr__boot_unlink_shm(&b);
  if (b.lfd >= 0)
    close(b.lfd);
  dr_client_close(&b.client);
  free(b.all);
  return rc;
}
