/* `ddprun status --stacks`: every rank's stack as the agents collected
 * it, and the ranks grouped by where they are (agent/stacks.h's
 * grouping, over every node). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stacks.h"
#include "status_internal.h"

/* Where rank x is, from its stack's "where:" line, else why none: the
 * text's first line, found within the text's length (it is not
 * NUL-terminated: it may end where the receive buffer does). out holds
 * the server's bytes as they are; they are escaped where printed. */
void dr__status_stack_where(const dr_stack_rec_t *x, char *out, size_t n) {
  if (x->code == 0 &&
      dr_stack_text_where((const char *)x->text.p, x->text.len, out, n) == 0)
    return;
  const uint8_t *nl = x->text.len > 0 ? memchr(x->text.p, '\n', x->text.len)
                                      : NULL;
  size_t len = nl != NULL ? (size_t)(nl - x->text.p) : x->text.len;
  snprintf(out, n, "%s%.*s", x->code != 0 ? "no stack: " : "unknown: ",
           (int)len, (const char *)x->text.p); /* a record is <= 64 KiB */
}

/* The ranks grouped by where they are, over every node, then each one's
 * full stacks. */
void dr__status_print_stacks(const dr_status_report_t *r) {
  if (r->n_stacks > 0) {
    dr_rank_where_t *rw = calloc(r->n_stacks, sizeof(*rw));
    char(*where)[200] = calloc(r->n_stacks, sizeof(*where));
    size_t cap = 256 * r->n_stacks + 256;
    char *groups = malloc(cap);
    if (rw != NULL && where != NULL && groups != NULL) {
      for (size_t i = 0; i < r->n_stacks; i++) {
        dr__status_stack_where(&r->stacks[i], where[i], sizeof(where[i]));
        rw[i] = (dr_rank_where_t){r->stacks[i].rank, where[i]};
      }
      dr_stacks_group(rw, r->n_stacks, "\n", groups, cap);
      printf("where the ranks are:\n");
      dr__status_put_lines("  ", groups, strlen(groups));
    }
    free(rw);
    free(where);
    free(groups);
  }
  for (size_t i = 0; i < r->n_stacks; i++) {
    const dr_stack_rec_t *x = &r->stacks[i];
    const dr_node_rec_t *n = dr__status_node_of(r, x->node_rank);
    char host[64] = "?";
    if (n != NULL)
      dr__status_host_cell(n->host, host, sizeof(host));
    printf("--- rank %u (node %u on %s, pid %u)%s\n", x->rank, x->node_rank,
           host, x->pid, x->code != 0 ? ": no stack" : "");
    if (x->text.len == 0)
      printf("\n");
    dr__status_put_lines("", x->text.p, x->text.len);
  }
}
