#include "launch_probe.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long num(const char *v) {
  if (strcmp(v, "UNSET") == 0)
    return DR_LP_UNSET;
  char *end = NULL;
  long r = strtol(v, &end, 10);
  return end != v && *end == '\0' ? r : DR_LP_UNSET;
}

static void str(char *dst, size_t cap, const char *v) {
  snprintf(dst, cap, "%s", v);
}

/* Stores one key=value of a PROBE line; 0, or -1 for an unknown key. */
static int set_field(dr_lp_t *p, const char *k, const char *v) {
  struct {
    const char *key;
    long *field;
  } nums[] = {
      {"rank", &p->rank},
      {"local_rank", &p->local_rank},
      {"world", &p->world},
      {"local_world", &p->local_world},
      {"group_rank", &p->group_rank},
      {"group_world", &p->group_world},
      {"role_rank", &p->role_rank},
      {"role_world", &p->role_world},
      {"restart", &p->restart},
      {"max_restarts", &p->max_restarts},
      {"pid", &p->pid},
      {"port_free", &p->port_free},
      {"gen", &p->gen},
      {"node_rank", &p->node_rank},
      {"nnodes", &p->nnodes},
  };
  for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
    if (strcmp(k, nums[i].key) == 0) {
      *nums[i].field = num(v);
      return 0;
    }
  if (strcmp(k, "master") == 0) {
    const char *colon = strrchr(v, ':');
    if (colon == NULL)
      return -1;
    snprintf(p->master_addr, sizeof(p->master_addr), "%.*s", (int)(colon - v),
             v);
    p->master_port = num(colon + 1);
  } else if (strcmp(k, "role") == 0) {
    str(p->role, sizeof(p->role), v);
  } else if (strcmp(k, "run_id") == 0) {
    str(p->run_id, sizeof(p->run_id), v);
  } else if (strcmp(k, "agent_store") == 0) {
    str(p->agent_store, sizeof(p->agent_store), v);
  } else if (strcmp(k, "omp") == 0) {
    str(p->omp, sizeof(p->omp), v);
  } else if (strcmp(k, "endpoint") == 0) {
    str(p->endpoint, sizeof(p->endpoint), v);
  } else if (strcmp(k, "bootstrap") == 0) {
    str(p->bootstrap, sizeof(p->bootstrap), v);
  } else if (strcmp(k, "error_file") == 0) {
    str(p->error_file, sizeof(p->error_file), v);
  } else if (strcmp(k, "torch_error_file") == 0) {
    str(p->torch_error_file, sizeof(p->torch_error_file), v);
  } else {
    return -1;
  }
  return 0;
}

size_t dr_lp_parse(const char *text, size_t node, dr_lp_t *out, size_t n,
                   size_t max) {
  const char *line = text;
  while (*line != '\0') {
    const char *nl = strchr(line, '\n');
    size_t len = nl != NULL ? (size_t)(nl - line) : strlen(line);
    const char *tag = memmem(line, len, "]:PROBE ", 8);
    if (tag != NULL) {
      if (n >= max)
        fail_msg("more than %zu PROBE lines", max);
      char buf[2048];
      if (len >= sizeof(buf))
        fail_msg("PROBE line of %zu bytes", len);
      memcpy(buf, line, len);
      buf[len] = '\0';
      dr_lp_t *p = &out[n];
      memset(p, 0, sizeof(*p));
      p->node = node;
      p->prefix_rank = DR_LP_UNSET;
      if (sscanf(buf, "[rank%ld]:PROBE ", &p->prefix_rank) != 1)
        fail_msg("PROBE line without a [rankN]: prefix: '%s'", buf);
      char *save = NULL;
      char *body = buf + (tag - line) + 8;
      for (char *t = strtok_r(body, " ", &save); t != NULL;
           t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        if (eq == NULL)
          fail_msg("PROBE field without '=': '%s' in '%.*s'", t, (int)len,
                   line);
        *eq = '\0';
        if (set_field(p, t, eq + 1) != 0)
          fail_msg("PROBE field '%s' unknown", t);
      }
      n++;
    }
    line += len;
    if (*line == '\n')
      line++;
  }
  return n;
}

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond))                                                               \
      fail_msg(__VA_ARGS__);                                                   \
  } while (0)

void dr_lp_check(const dr_lp_t *p, size_t n, const dr_lp_expect_t *e) {
  long world = e->nnodes * e->nproc;
  CHECK(world <= DR_LP_MAX && e->nnodes >= 1,
        "a job of %ld ranks: more "
        "than this check handles",
        world);
  CHECK((long)n == world, "%zu PROBE lines, expected %ld (%ld nodes x %ld)", n,
        world, e->nnodes, e->nproc);
  int seen[DR_LP_MAX] = {0};
  long node_group[DR_LP_MAX];
  for (size_t i = 0; i < DR_LP_MAX; i++)
    node_group[i] = DR_LP_UNSET;
  int group_seen[DR_LP_MAX] = {0};
  const dr_lp_t *r0 = NULL;

  for (size_t i = 0; i < n; i++) {
    const dr_lp_t *q = &p[i];
    long r = q->rank;
    CHECK(r >= 0 && r < world, "RANK %ld outside 0..%ld", r, world - 1);
    CHECK(!seen[r], "RANK %ld given twice", r);
    seen[r] = 1;
    CHECK(q->prefix_rank == r, "rank %ld's line is prefixed [rank%ld]:", r,
          q->prefix_rank);
    CHECK(q->world == world, "rank %ld: WORLD_SIZE %ld, expected %ld", r,
          q->world, world);
    CHECK(q->local_world == e->nproc,
          "rank %ld: LOCAL_WORLD_SIZE %ld, expected %ld", r, q->local_world,
          e->nproc);
    CHECK(q->local_rank >= 0 && q->local_rank < e->nproc,
          "rank %ld: LOCAL_RANK %ld outside 0..%ld", r, q->local_rank,
          e->nproc - 1);
    CHECK(q->group_world == e->nnodes,
          "rank %ld: GROUP_WORLD_SIZE %ld, expected %ld", r, q->group_world,
          e->nnodes);
    CHECK(q->group_rank >= 0 && q->group_rank < e->nnodes,
          "rank %ld: GROUP_RANK %ld outside 0..%ld", r, q->group_rank,
          e->nnodes - 1);
    CHECK(r == q->group_rank * e->nproc + q->local_rank,
          "rank %ld: RANK is not GROUP_RANK %ld * %ld + LOCAL_RANK %ld", r,
          q->group_rank, e->nproc, q->local_rank);
    /* One node, one group rank; two nodes, two. */
    if (node_group[q->node] == DR_LP_UNSET) {
      node_group[q->node] = q->group_rank;
      CHECK(!group_seen[q->group_rank], "GROUP_RANK %ld given to two nodes",
            q->group_rank);
      group_seen[q->group_rank] = 1;
    }
    CHECK(node_group[q->node] == q->group_rank,
          "rank %ld: GROUP_RANK %ld, but its node has %ld", r, q->group_rank,
          node_group[q->node]);
    if (e->node_ranks != NULL)
      CHECK(q->group_rank == e->node_ranks[q->node],
            "rank %ld: GROUP_RANK %ld on the node started with --node-rank "
            "%ld",
            r, q->group_rank, e->node_ranks[q->node]);
    CHECK(q->role_rank == r && q->role_world == world,
          "rank %ld: ROLE_RANK %ld / ROLE_WORLD_SIZE %ld, expected %ld / %ld "
          "(one role)",
          r, q->role_rank, q->role_world, r, world);
    CHECK(strcmp(q->role, e->role) == 0,
          "rank %ld: ROLE_NAME '%s', expected "
          "'%s'",
          r, q->role, e->role);
    CHECK(q->restart == 0, "rank %ld: TORCHELASTIC_RESTART_COUNT %ld", r,
          q->restart);
    CHECK(q->max_restarts == e->max_restarts,
          "rank %ld: TORCHELASTIC_MAX_RESTARTS %ld, expected %ld", r,
          q->max_restarts, e->max_restarts);
    CHECK(strcmp(q->agent_store, "False") == 0,
          "rank %ld: TORCHELASTIC_USE_AGENT_STORE '%s', expected 'False' "
          "(rank 0 hosts its own TCPStore)",
          r, q->agent_store);
    CHECK(strcmp(q->omp, e->omp) == 0,
          "rank %ld: OMP_NUM_THREADS '%s', expected '%s'", r, q->omp, e->omp);
    CHECK(q->master_addr[0] != '\0' && strcmp(q->master_addr, "UNSET") != 0,
          "rank %ld: MASTER_ADDR unset", r);
    CHECK(q->master_port > 0 && q->master_port <= 65535,
          "rank %ld: MASTER_PORT %ld", r, q->master_port);
    if (e->master_addr != NULL)
      CHECK(strcmp(q->master_addr, e->master_addr) == 0,
            "rank %ld: MASTER_ADDR '%s', expected '%s'", r, q->master_addr,
            e->master_addr);
    if (e->master_port != 0)
      CHECK(q->master_port == e->master_port,
            "rank %ld: MASTER_PORT %ld, expected %ld", r, q->master_port,
            e->master_port);
    CHECK(strcmp(q->run_id, "UNSET") != 0 && q->run_id[0] != '\0',
          "rank %ld: TORCHELASTIC_RUN_ID unset", r);
    if (e->run_id != NULL)
      CHECK(strcmp(q->run_id, e->run_id) == 0,
            "rank %ld: TORCHELASTIC_RUN_ID '%s', expected '%s'", r, q->run_id,
            e->run_id);
    CHECK(q->gen >= 1, "rank %ld: DDPRUN_GENERATION %ld", r, q->gen);
    CHECK(q->node_rank == q->group_rank,
          "rank %ld: DDPRUN_NODE_RANK %ld but GROUP_RANK %ld", r, q->node_rank,
          q->group_rank);
    CHECK(q->nnodes == e->nnodes, "rank %ld: DDPRUN_NNODES %ld, expected %ld",
          r, q->nnodes, e->nnodes);
    CHECK(strcmp(q->endpoint, "UNSET") != 0,
          "rank %ld: DDPRUN_RDZV_ENDPOINT unset", r);
    CHECK(strcmp(q->bootstrap, "UNSET") != 0,
          "rank %ld: DDPRUN_BOOTSTRAP "
          "unset",
          r);
    CHECK(strcmp(q->error_file, "UNSET") != 0,
          "rank %ld: DDPRUN_ERROR_FILE unset", r);
    CHECK(strcmp(q->error_file, q->torch_error_file) == 0,
          "rank %ld: DDPRUN_ERROR_FILE '%s' but TORCHELASTIC_ERROR_FILE '%s'",
          r, q->error_file, q->torch_error_file);
    if (r == 0) {
      r0 = q;
      CHECK(q->port_free == 1,
            "rank 0: MASTER_PORT %ld cannot be bound (as TCPStore binds it) "
            "when the workers start",
            q->master_port);
    }
  }
  for (long r = 0; r < world; r++)
    CHECK(seen[r], "no worker has RANK %ld", r);
  for (long g = 0; g < e->nnodes; g++)
    CHECK(group_seen[g], "no node has GROUP_RANK %ld", g);

  /* What the whole job shares. */
  for (size_t i = 0; i < n; i++) {
    const dr_lp_t *q = &p[i];
    CHECK(strcmp(q->master_addr, r0->master_addr) == 0 &&
              q->master_port == r0->master_port,
          "rank %ld: MASTER %s:%ld, rank 0 has %s:%ld", q->rank, q->master_addr,
          q->master_port, r0->master_addr, r0->master_port);
    CHECK(strcmp(q->run_id, r0->run_id) == 0,
          "rank %ld: TORCHELASTIC_RUN_ID '%s', rank 0 has '%s'", q->rank,
          q->run_id, r0->run_id);
    CHECK(q->gen == r0->gen, "rank %ld: DDPRUN_GENERATION %ld, rank 0 has %ld",
          q->rank, q->gen, r0->gen);
    CHECK(strcmp(q->bootstrap, r0->bootstrap) == 0,
          "rank %ld: DDPRUN_BOOTSTRAP differs from rank 0's", q->rank);
    CHECK(strcmp(q->endpoint, r0->endpoint) == 0,
          "rank %ld: DDPRUN_RDZV_ENDPOINT '%s', rank 0 has '%s'", q->rank,
          q->endpoint, r0->endpoint);
    for (size_t j = 0; j < i; j++)
      CHECK(strcmp(q->error_file, p[j].error_file) != 0,
            "ranks %ld and %ld share the error file %s", q->rank, p[j].rank,
            q->error_file);
  }
}
