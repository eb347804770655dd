/* `ddprun status`: the server's answer decoded, and the slowest rank
 * found among the ranks that report their steps. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "status_internal.h"

/* A rank whose step has not changed for this long is not advancing: its
 * agent reports a new step at least every heartbeat interval. */
#define STALE_MS 2000u

static int alive(const dr_rank_rec_t *x) {
  return x->step != DR_NONE &&
         (x->state == DR_RS_RUNNING || x->state == DR_RS_STOPPED);
}

int dr__status_stale(const dr_rank_rec_t *x) {
  return x->state == DR_RS_STOPPED || x->step_age_ms > STALE_MS;
}

/* The step x has reached by now: the agents read the ranks at different
 * moments, so an advancing rank's last step is carried forward at its
 * rate over its age; a stale one stays where it stopped. */
static double step_now(const dr_rank_rec_t *x) {
  if (dr__status_stale(x) || x->rate_milli == DR_NONE ||
      x->step_age_ms == DR_NONE)
    return (double)x->step;
  return (double)x->step +
         (double)x->rate_milli / 1000.0 * (double)x->step_age_ms / 1000.0;
}

/* The slowest of the ranks alive: a stopped one (what the others wait for
 * in their collectives), then the one whose step is stale longest, then
 * the one with the lowest step by now. */
static int slower(const dr_rank_rec_t *x, const dr_rank_rec_t *y) {
  int xs = x->state == DR_RS_STOPPED, ys = y->state == DR_RS_STOPPED;
  if (xs != ys)
    return xs;
  if (dr__status_stale(x) != dr__status_stale(y))
    return dr__status_stale(x);
  if (dr__status_stale(x) && x->step_age_ms != y->step_age_ms)
    return x->step_age_ms > y->step_age_ms;
  return step_now(x) < step_now(y);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The median RSS of the ranks whose RSS is known (the mean of the middle
 * two of an even count), DR_NONE with fewer than two; and whether any
 * rank has a GPU figure. */
static int health(dr_status_report_t *r) {
  r->rss_median = DR_NONE;
  uint64_t *v = malloc((r->n_ranks > 0 ? r->n_ranks : 1) * sizeof(*v));
  if (v == NULL)
    return -ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < r->n_ranks; i++) {
    const dr_rank_rec_t *x = &r->ranks[i];
    if (x->rss_bytes != DR_NONE)
      v[n++] = x->rss_bytes;
    r->have_gpu |= x->gpu_mem_bytes != DR_NONE || x->gpu_util != DR_NO_U32;
  }
  if (n >= 2) {
    qsort(v, n, sizeof(*v), cmp_u64);
    r->rss_median = n % 2 ? v[n / 2] : v[n / 2 - 1] / 2 + v[n / 2] / 2 +
                                           (v[n / 2 - 1] % 2 + v[n / 2] % 2) / 2;
  }
  free(v);
  return 0;
}

double dr__status_rss_above(const dr_status_report_t *r,
                            const dr_rank_rec_t *x) {
  if (r->rss_median == DR_NONE || r->rss_median == 0 ||
      x->rss_bytes == DR_NONE)
    return 0;
  /* In integers, so that exactly 10% above is not above (as a double,
   * 1.1 - 1 is more than 0.1). */
  uint64_t m = r->rss_median;
  if (x->rss_bytes <= m ||
      x->rss_bytes - m <= (uint64_t)((double)m * DR_STATUS_RSS_ABOVE))
    return 0;
  return (double)x->rss_bytes / (double)m - 1.0;
}

double dr__status_gpu_full(const dr_rank_rec_t *x) {
  if (x->gpu_used_bytes == DR_NONE || x->gpu_total_bytes == DR_NONE ||
      x->gpu_total_bytes == 0)
    return 0;
  uint64_t t = x->gpu_total_bytes;
  if (x->gpu_used_bytes <= (uint64_t)((double)t * DR_STATUS_GPU_FULL))
    return 0;
  return (double)x->gpu_used_bytes / (double)t;
}

int dr__status_decode(const dr_msg_t *m, dr_status_report_t *r) {
  memset(r, 0, sizeof(*r));
  if (dr_msg_job_status(m, &r->js) != 0)
    return DR_EFIELD;
  r->nodes = calloc(r->js.nodes.count + 1, sizeof(*r->nodes));
  r->ranks = calloc(r->js.ranks.count + 1, sizeof(*r->ranks));
  r->stacks = calloc(r->js.stacks.count + 1, sizeof(*r->stacks));
  r->envs = calloc(r->js.envs.count + 1, sizeof(*r->envs));
  if (r->nodes == NULL || r->ranks == NULL || r->stacks == NULL ||
      r->envs == NULL)
    return -ENOMEM;
  uint32_t pos = 0;
  while (dr_node_rec_next(&r->js.nodes, &pos, &r->nodes[r->n_nodes]))
    r->n_nodes++;
  pos = 0;
  while (dr_rank_rec_next(&r->js.ranks, &pos, &r->ranks[r->n_ranks]))
    r->n_ranks++;
  pos = 0;
  while (dr_stack_rec_next(&r->js.stacks, &pos, &r->stacks[r->n_stacks]))
    r->n_stacks++;
  pos = 0; /* the view checked: none, or one per node */
  while (dr_env_rec_next(&r->js.envs, &pos, &r->envs[r->n_envs]))
    r->n_envs++;
  r->slowest = -1;
  double top = 0;
  for (size_t i = 0; i < r->n_ranks; i++) {
    const dr_rank_rec_t *x = &r->ranks[i];
    if (!alive(x))
      continue;
    if (r->slowest < 0 || slower(x, &r->ranks[r->slowest]))
      r->slowest = (int)i;
    if (step_now(x) > top)
      top = step_now(x);
  }
  if (r->slowest >= 0)
    r->behind = top - step_now(&r->ranks[r->slowest]);
  return health(r);
}

void dr__status_report_free(dr_status_report_t *r) {
  free(r->nodes);
  free(r->ranks);
  free(r->stacks);
  free(r->envs);
}

const dr_node_rec_t *dr__status_node_of(const dr_status_report_t *r,
                                        uint32_t node_rank) {
  for (size_t i = 0; i < r->n_nodes; i++)
    if (r->nodes[i].node_rank == node_rank &&
        r->nodes[i].state != DR_NS_WAITING)
      return &r->nodes[i];
  return NULL;
}
