/* Slurm's hostlist syntax, as in SLURM_JOB_NODELIST, expanded to host
 * names.
 *
 * A list is host expressions separated by commas: `gpu-a[01-03,07],gpu-b5`
 * is gpu-a01 gpu-a02 gpu-a03 gpu-a07 gpu-b5. Inside brackets, numbers and
 * ranges LO-HI separated by commas; a number is written at least as wide
 * as LO is (zero padding: [08-10] is 08 09 10, [8-10] is 8 9 10). An
 * expression may hold several bracket groups, which multiply:
 * `r[1-2]n[1-2]` is r1n1 r1n2 r2n1 r2n2. Names keep the order of the list
 * (Slurm's node order: SLURM_NODEID i is the i-th name). Host names hold
 * no blanks, control characters or brackets and commas outside a group;
 * brackets do not nest.
 */
#ifndef DR_HOSTLIST_H
#define DR_HOSTLIST_H

#include <stddef.h>

/* Expands list into *hosts[0..*n), at most max_hosts names (a larger list
 * is refused rather than allocated). Returns 0; DR_EBADARG with a one-line
 * message in err that says what is wrong and where ("hostlist 'n[3-1]':
 * range 3-1 runs backwards; write LO-HI with LO <= HI"); or -ENOMEM.
 * The caller owns *hosts and every name: free with dr_hostlist_free().
 * On an error *hosts is NULL and *n is 0. err may be NULL. */
int dr_hostlist_expand(const char *list, size_t max_hosts, char ***hosts,
                       size_t *n, char *err, size_t err_len);

/* Frees what dr_hostlist_expand() returned and sets *hosts to NULL. */
void dr_hostlist_free(char ***hosts, size_t n);

#endif /* DR_HOSTLIST_H */
