/* Places grouped over ranks: "ranks 0-2, 4-7: X; rank 3: Y", from one
 * node's ranks or a whole job's. Pure text; see stacks.h. */
#include "stacks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *dr_ranks_format(const uint32_t *ranks, size_t n, char *out,
                      size_t out_n) {
  size_t o = 0;
  if (out_n == 0)
    return out;
  out[0] = '\0';
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
      j++;
    int w = j > i ? snprintf(out + o, out_n - o, "%s%u-%u", i ? ", " : "",
                             ranks[i], ranks[j])
                  : snprintf(out + o, out_n - o, "%s%u", i ? ", " : "",
                             ranks[i]);
    if (w < 0 || (size_t)w >= out_n - o) {
      if (out_n >= 4)
        memcpy(out + out_n - 4, "...", 4);
      return out;
    }
    o += (size_t)w;
    i = j + 1;
  }
  return out;
}

static const char *where_of(const dr_rank_where_t *r) {
  return r->where != NULL && r->where[0] != '\0' ? r->where : "unknown";
}

static int by_where_rank(const void *a, const void *b) {
  const dr_rank_where_t *x = a, *y = b;
  int c = strcmp(where_of(x), where_of(y));
  if (c != 0)
    return c;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

typedef struct {
  size_t first, n; /* a run of the sorted entries */
  uint32_t low;
} group_t;

static int by_size_low(const void *a, const void *b) {
  const group_t *x = a, *y = b;
  if (x->n != y->n)
    return x->n > y->n ? -1 : 1;
  return x->low < y->low ? -1 : x->low > y->low;
}

size_t dr_stacks_group(const dr_rank_where_t *in, size_t n_in,
                       const char *sep, char *out, size_t n) {
  if (n > 0)
    out[0] = '\0';
  if (n_in == 0)
    return 0;
  dr_rank_where_t *v = malloc(n_in * sizeof(*v));
  group_t *g = malloc(n_in * sizeof(*g));
  uint32_t *ranks = malloc(n_in * sizeof(*ranks));
  char *list = malloc(8 * n_in + 16);
  size_t n_groups = 0;
  if (v == NULL || g == NULL || ranks == NULL || list == NULL)
    goto done;
  memcpy(v, in, n_in * sizeof(*v));
  qsort(v, n_in, sizeof(*v), by_where_rank);
  for (size_t i = 0; i < n_in;) {
    size_t j = i;
    while (j < n_in && strcmp(where_of(&v[j]), where_of(&v[i])) == 0)
      j++;
    g[n_groups++] = (group_t){i, j - i, v[i].rank};
    i = j;
  }
  qsort(g, n_groups, sizeof(*g), by_size_low);
  size_t o = 0;
  for (size_t k = 0; k < n_groups && n > 0; k++) {
    size_t m = 0;
    for (size_t i = 0; i < g[k].n; i++)
      if (m == 0 || ranks[m - 1] != v[g[k].first + i].rank)
        ranks[m++] = v[g[k].first + i].rank; /* a rank given twice: once */
    dr_ranks_format(ranks, m, list, 8 * n_in + 16);
    int w = snprintf(out + o, n - o, "%s%s %s: %s", k > 0 ? sep : "",
                     m > 1 ? "ranks" : "rank", list, where_of(&v[g[k].first]));
    if (w < 0 || (size_t)w >= n - o) {
      if (n >= 4)
        memcpy(out + n - 4, "...", 4);
      n_groups = k + 1;
      break;
    }
    o += (size_t)w;
  }
done:
  free(v);
  free(g);
  free(ranks);
  free(list);
  return n_groups;
}
