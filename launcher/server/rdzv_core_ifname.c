/* A check across the nodes of a round that no node can make alone:
 * NCCL_SOCKET_IFNAME. NCCL on each node binds the interfaces its value
 * names and tells its peers those addresses; nodes that name interfaces
 * on networks the others cannot reach (ib0 here, eth0 there), or that
 * disagree on the network at all (some set it, others let NCCL pick),
 * hang in their first collective with nothing said. Each agent checks
 * that its value names an interface that is up on its node (env_checks.c);
 * the server, which alone sees every node's, says when they differ, once
 * per round, as the round completes. */
#include "rdzv_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "log.h"

#define VAR "NCCL_SOCKET_IFNAME"
/* What the line names at most: values, and hosts of each value. */
#define VALUES_SHOWN 5u
#define HOSTS_SHOWN 4u
/* Room for the line: VALUES_SHOWN values of DR_SOCKET_IFNAME_MAX bytes
 * with HOSTS_SHOWN hosts each (a host: 255 bytes), and the words. */
#define TEXT_MAX                                                             \
  (VALUES_SHOWN * (DR_SOCKET_IFNAME_MAX + 16u + HOSTS_SHOWN * 260u) + 512u)

/* A run of nodes with one value, by[start .. start + n), the lowest node
 * rank among them first. */
typedef struct {
  size_t start, n;
  uint32_t first_rank;
} group_t;

typedef struct {
  char *p;
  size_t len, cap;
} text_t;

static void add(text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add(text_t *t, const char *fmt, ...) {
  if (t->len + 1 >= t->cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (k > 0)
    t->len = t->len + (size_t)k < t->cap ? t->len + (size_t)k : t->cap - 1;
}

/* By value, then by node rank: each value's nodes in rank order. */
static int cmp_value(const void *a, const void *b) {
  const dr_node_t *x = *(dr_node_t *const *)a, *y = *(dr_node_t *const *)b;
  int c = strcmp(x->socket_ifname, y->socket_ifname);
  if (c != 0)
    return c;
  return x->node_rank < y->node_rank ? -1 : x->node_rank > y->node_rank;
}

/* The values in the order of their lowest node rank (node 0's first). */
static int cmp_group(const void *a, const void *b) {
  uint32_t x = ((const group_t *)a)->first_rank;
  uint32_t y = ((const group_t *)b)->first_rank;
  return x < y ? -1 : x > y;
}

/* "'eth0' on host0, host1 and 2 more", or "unset on host2". */
static void add_group(text_t *t, dr_node_t *const *by, const group_t *g) {
  const char *v = by[g->start]->socket_ifname;
  if (v[0] == '\0')
    add(t, "unset on ");
  else
    add(t, "'%s' on ", v);
  size_t shown = g->n <= HOSTS_SHOWN ? g->n : HOSTS_SHOWN;
  for (size_t i = 0; i < shown; i++) {
    const char *sep = i == 0 ? "" : i + 1 == g->n ? " and " : ", ";
    add(t, "%s%s", sep, by[g->start + i]->host);
  }
  if (g->n > shown)
    add(t, " and %zu more", g->n - shown);
}

/* The values of the round's nodes, grouped, into t; 0 or -1 (out of
 * memory). */
static int describe(const dr_rdzv_t *r, text_t *t) {
  size_t n = r->n_round, n_groups = 0;
  dr_node_t **by = malloc(n * sizeof(*by));
  group_t *groups = malloc(n * sizeof(*groups));
  if (by == NULL || groups == NULL) {
    free(by);
    free(groups);
    return -1;
  }
  memcpy(by, r->round, n * sizeof(*by));
  qsort(by, n, sizeof(*by), cmp_value);
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || strcmp(by[i]->socket_ifname, by[i - 1]->socket_ifname))
      groups[n_groups++] = (group_t){i, 0, by[i]->node_rank};
    groups[n_groups - 1].n++;
  }
  qsort(groups, n_groups, sizeof(*groups), cmp_group);
  size_t shown = n_groups <= VALUES_SHOWN ? n_groups : VALUES_SHOWN;
  size_t rest = 0;
  for (size_t i = 0; i < n_groups; i++) {
    if (i < shown) {
      add(t, "%s", i == 0 ? "" : ", ");
      add_group(t, by, &groups[i]);
    } else {
      rest += groups[i].n;
    }
  }
  if (n_groups > shown)
    add(t, ", and %zu other value%s on %zu node%s", n_groups - shown,
        n_groups - shown == 1 ? "" : "s", rest, rest == 1 ? "" : "s");
  free(by);
  free(groups);
  return 0;
}

void dr__rdzv_ifname_check(dr_rdzv_t *r) {
  size_t n = r->n_round, i = 1;
  while (i < n && strcmp(r->round[i]->socket_ifname,
                         r->round[0]->socket_ifname) == 0)
    i++;
  if (i >= n)
    return; /* the same on every node (or unset on every node) */
  char *buf = malloc(TEXT_MAX);
  text_t t = {buf, 0, buf != NULL ? TEXT_MAX : 0};
  if (buf == NULL || describe(r, &t) != 0) {
    DR_WARN(VAR " differs between the nodes of round %" PRIu64 " (node "
            "'%s' and node '%s' at least); set the same on every node, or "
            "unset it", r->gen, r->round[0]->host, r->round[i]->host);
    free(buf);
    return;
  }
  DR_WARN(VAR " differs between the nodes of round %" PRIu64 ": %s; NCCL "
          "on each node binds that interface, and nodes that cannot reach "
          "each other's hang in their first collective: set the same on "
          "every node, or unset it", r->gen, buf);
  if (r->cfg.events) {
    size_t cap = 6 * t.len + 8; /* the hosts' bytes, as they are, escaped */
    char *esc = malloc(cap);
    if (esc != NULL)
      dr__rdzv_event(r, "socket_ifname_differs",
                     ",\"gen\":%" PRIu64 ",\"variable\":\"" VAR "\","
                     "\"values\":\"%s\"", r->gen,
                     dr_json_escape(buf, esc, cap));
    free(esc);
  }
  free(buf);
}
