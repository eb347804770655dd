/* The reducer at world 2: the rebuild after the first step when a
 * parameter is marked twice, and when one rank's observation of the ready
 * order is incomplete. Both ranks must end with the same buckets, exact
 * averaged gradients and views inside the bucket memory, and neither may
 * wait for the other in a collective it never makes.
 *
 * The two ranks are two threads of this process, each with its own model
 * and reducer, over a stand-in process group defined here: its collectives
 * meet by call order, each within a deadline, and fail (where the real
 * group would wait out its timeout) when the ranks make different calls.
 * The threads never call cmocka; they report through their rank_t. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "reducer.h"

#define WORLD 2
#define N_PARAMS 6
#define ELEMS 10                              /* per parameter */
#define CAP (2 * ELEMS * sizeof(float))       /* two parameters a bucket */
#define N_STEPS 3
#define WAIT_S 5    /* the stand-in's collective timeout */
#define ALARM_S 25  /* the whole test, should the stand-in itself hang */

/* ---- stand-ins: the model ----------------------------------------------- */

struct dr_model {
  size_t n;
  dr_param_t p[N_PARAMS];
};

size_t dr_model_n_params(const dr_model_t *m) { return m->n; }
dr_param_t *dr_model_param(dr_model_t *m, size_t i) { return &m->p[i]; }

/* ---- stand-ins: the process group --------------------------------------- */

typedef enum { OP_ALLREDUCE, OP_BROADCAST } op_t;
static const char *const op_name[] = {"allreduce", "broadcast"};

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC */
  uint64_t round;    /* collectives completed */
  uint32_t arrived;
  /* By round parity: a rank reads its round's status before the next round
   * can complete, since that one needs this rank too. */
  int status[2];
  int broken; /* a collective failed: every later one fails at once */
  op_t op[WORLD];
  void *buf[WORLD];
  size_t n_bytes[WORLD];
  uint32_t root[WORLD];
  char why[200];
} group_t;

struct dr_pg {
  uint32_t rank;
  group_t *g;
};

/* Runs the round once every rank has arrived; with g->mu held. */
static int group_run(group_t *g) {
  for (uint32_t k = 1; k < WORLD; k++)
    if (g->op[k] != g->op[0] || g->n_bytes[k] != g->n_bytes[0] ||
        g->root[k] != g->root[0]) {
      snprintf(g->why, sizeof(g->why), "collectives out of step: rank 0 in "
               "%s of %zu bytes, rank %u in %s of %zu bytes",
               op_name[g->op[0]], g->n_bytes[0], k, op_name[g->op[k]],
               g->n_bytes[k]);
      return DR_PG_ETIMEOUT;
    }
  if (g->op[0] == OP_BROADCAST) {
    for (uint32_t k = 0; k < WORLD; k++)
      if (k != g->root[0])
        memcpy(g->buf[k], g->buf[g->root[0]], g->n_bytes[0]);
    return 0;
  }
  /* AVG, summed in rank order: every rank gets the same bits. */
  for (size_t i = 0; i < g->n_bytes[0] / sizeof(float); i++) {
    float sum = 0;
    for (uint32_t k = 0; k < WORLD; k++)
      sum += ((float *)g->buf[k])[i];
    for (uint32_t k = 0; k < WORLD; k++)
      ((float *)g->buf[k])[i] = sum / WORLD;
  }
  return 0;
}

static int group_call(dr_pg_t *pg, op_t op, void *buf, size_t n_bytes,
                      uint32_t root) {
  group_t *g = pg->g;
  pthread_mutex_lock(&g->mu);
  if (g->broken) {
    pthread_mutex_unlock(&g->mu);
    return DR_PG_EBROKEN;
  }
  uint64_t round = g->round;
  g->op[pg->rank] = op;
  g->buf[pg->rank] = buf;
  g->n_bytes[pg->rank] = n_bytes;
  g->root[pg->rank] = root;
  if (++g->arrived == WORLD) {
    int st = group_run(g);
    g->status[round & 1] = st;
    g->broken = st != 0;
    g->arrived = 0;
    g->round++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return st;
  }
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  dl.tv_sec += WAIT_S;
  int rc = 0;
  while (g->round == round && !g->broken && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&g->cv, &g->mu, &dl);
  int st;
  if (g->round != round) {
    st = g->status[round & 1];
  } else if (g->broken) {
    st = DR_PG_EBROKEN;
  } else {
    snprintf(g->why, sizeof(g->why), "rank %u: %s of %zu bytes: no peer "
             "within %d s", pg->rank, op_name[op], n_bytes, WAIT_S);
    g->broken = 1;
    pthread_cond_broadcast(&g->cv);
    st = DR_PG_ETIMEOUT;
  }
  pthread_mutex_unlock(&g->mu);
  return st;
}

uint32_t dr_pg_rank(const dr_pg_t *pg) { return pg->rank; }
uint32_t dr_pg_world(const dr_pg_t *pg) { (void)pg; return WORLD; }

/* Completes at once (*w stays NULL): the reducer then waits for nothing. */
int dr_pg_allreduce(dr_pg_t *pg, float *buf, size_t n, dr_pg_op_t op,
                    dr_work_t **w) {
  *w = NULL;
  if (op != DR_PG_AVG)
    return DR_EBADARG;
  return group_call(pg, OP_ALLREDUCE, buf, n * sizeof(float), 0);
}

int dr_pg_broadcast_sync(dr_pg_t *pg, void *buf, size_t n, uint32_t root,
                         char *err, size_t len) {
  int rc = group_call(pg, OP_BROADCAST, buf, n, root);
  if (rc != 0) {
    pthread_mutex_lock(&pg->g->mu);
    snprintf(err, len, "%s", pg->g->why);
    pthread_mutex_unlock(&pg->g->mu);
  }
  return rc;
}

int dr_work_wait_keep(dr_work_t *w, char *err, size_t len) {
  (void)w, (void)err, (void)len;
  return 0;
}
void dr_work_free(dr_work_t **w) { *w = NULL; }
uint64_t dr_work_start_us(const dr_work_t *w) { (void)w; return 0; }
uint64_t dr_work_end_us(const dr_work_t *w) { (void)w; return 0; }

/* ---- the ranks ---------------------------------------------------------- */

/* The marks of one backward pass, in order; a parameter may repeat, or be
 * missing. */
typedef struct {
  size_t param[2 * N_PARAMS];
  size_t n;
} pass_t;

typedef struct {
  pass_t pass[WORLD][N_STEPS];
} scenario_t;

typedef struct {
  uint32_t rank;
  group_t *g;
  const scenario_t *sc;
  size_t order[N_PARAMS]; /* the buckets' fill order after the last step */
  size_t n_buckets;
  char failure[400];
} rank_t;

/* Rank r's gradient of element e of param p at step s; the average of the
 * ranks' is exact in fp32 (2x + 0.5). */
static float grad(uint32_t r, size_t s, size_t p, size_t e) {
  return (float)(2 * (s * 1000 + p * ELEMS + e) + r);
}

static int marks(const pass_t *ps, size_t p) {
  for (size_t j = 0; j < ps->n; j++)
    if (ps->param[j] == p)
      return 1;
  return 0;
}

/* Records the first failure of rank k. */
static void rank_fail(rank_t *k, const char *fmt, ...) {
  if (k->failure[0] != '\0')
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(k->failure, sizeof(k->failure), fmt, ap);
  va_end(ap);
}

/* One step as train takes it: each gradient written through its view,
 * then marked. -1 when the step could not be taken (the group is broken
 * then); a wrong result is recorded, and the next steps still run. */
static int rank_step(rank_t *k, dr_reducer_t *r, dr_model_t *m, size_t s) {
  char err[256] = "";
  if (dr_reducer_begin(r, 1, err, sizeof(err)) != 0) {
    rank_fail(k, "step %zu: begin: %s", s, err);
    return -1;
  }
  const pass_t *ps = &k->sc->pass[k->rank][s];
  int written[N_PARAMS] = {0};
  for (size_t j = 0; j < ps->n; j++) {
    size_t p = ps->param[j];
    if (!written[p])
      for (size_t e = 0; e < ELEMS; e++)
        m->p[p].g[e] = grad(k->rank, s, p, e);
    written[p] = 1;
    dr_reducer_mark_ready(r, p);
  }
  dr_reducer_end_backward(r);
  if (dr_reducer_wait(r, err, sizeof(err)) != 0) {
    rank_fail(k, "step %zu: wait: %s", s, err);
    return -1;
  }
  for (size_t p = 0; p < N_PARAMS; p++) {
    int everywhere = 1;
    for (uint32_t q = 0; q < WORLD; q++)
      everywhere &= marks(&k->sc->pass[q][s], p);
    for (size_t e = 0; e < ELEMS && everywhere; e++) {
      float want = grad(0, s, p, e) + 0.5f, got = m->p[p].g[e];
      if (got != want) {
        rank_fail(k, "step %zu: param %zu[%zu] is %g after the all-reduce, "
                  "not %g", s, p, e, got, want);
        break;
      }
    }
  }
  /* The views tile the bucket memory in fill order. */
  const size_t *order = dr_reducer_order(r);
  for (size_t i = 0; i + 1 < N_PARAMS; i++)
    if (m->p[order[i + 1]].g != m->p[order[i]].g + ELEMS) {
      rank_fail(k, "step %zu: param %zu's view does not follow param %zu's",
                s, order[i + 1], order[i]);
      break;
    }
  return 0;
}

static void *rank_main(void *arg) {
  rank_t *k = arg;
  struct dr_pg pg = {k->rank, k->g};
  dr_model_t m = {N_PARAMS, {{0}}};
  for (size_t i = 0; i < N_PARAMS; i++)
    m.p[i].n_elems = ELEMS;
  dr_reducer_config_t cfg = {CAP, CAP, 1, 1, NULL, NULL, NULL, NULL, NULL};
  dr_reducer_t *r = NULL;
  if (dr_reducer_new(&cfg, &m, &pg, &r) != 0) {
    rank_fail(k, "dr_reducer_new failed");
    return NULL;
  }
  for (size_t s = 0; s < N_STEPS; s++)
    if (rank_step(k, r, &m, s) != 0)
      break;
  memcpy(k->order, dr_reducer_order(r), sizeof(k->order));
  k->n_buckets = dr_reducer_n_buckets(r);
  dr_reducer_free(&r);
  return NULL;
}

/* Runs both ranks; each must finish clean with the fill order want. */
static void run_ranks(const scenario_t *sc, const size_t want[N_PARAMS]) {
  alarm(ALARM_S);
  group_t g;
  memset(&g, 0, sizeof(g));
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cv, &ca);
  pthread_condattr_destroy(&ca);
  rank_t k[WORLD];
  pthread_t t[WORLD];
  memset(k, 0, sizeof(k));
  for (uint32_t q = 0; q < WORLD; q++) {
    k[q].rank = q;
    k[q].g = &g;
    k[q].sc = sc;
    assert_int_equal(pthread_create(&t[q], NULL, rank_main, &k[q]), 0);
  }
  for (uint32_t q = 0; q < WORLD; q++)
    pthread_join(t[q], NULL);
  pthread_cond_destroy(&g.cv);
  pthread_mutex_destroy(&g.mu);
  alarm(0);
  int clean = 1;
  for (uint32_t q = 0; q < WORLD; q++)
    if (k[q].failure[0] != '\0') {
      print_error("rank %u: %s\n", q, k[q].failure);
      clean = 0;
    }
  assert_true(clean);
  for (uint32_t q = 0; q < WORLD; q++) {
    assert_int_equal(k[q].n_buckets, N_PARAMS / 2);
    for (size_t i = 0; i < N_PARAMS; i++)
      assert_int_equal(k[q].order[i], want[i]);
  }
}

/* Fills pass ps with the n marks that follow. */
static void pass_set(pass_t *ps, size_t n, const size_t *param) {
  ps->n = n;
  memcpy(ps->param, param, n * sizeof(size_t));
}

/* Every rank marks every parameter once in steps 1 and after. */
static void later_steps_full(scenario_t *sc) {
  static const size_t all[N_PARAMS] = {5, 4, 3, 2, 1, 0};
  for (uint32_t q = 0; q < WORLD; q++)
    for (size_t s = 1; s < N_STEPS; s++)
      pass_set(&sc->pass[q][s], N_PARAMS, all);
}

/* ---- tests -------------------------------------------------------------- */

/* A second mark, before its bucket is complete or after it launched, is
 * ignored: the rebuilt order (rank 0's first marks) holds every parameter
 * once, and no bucket launches before its gradients are written. */
static void test_marked_twice(void **state) {
  (void)state;
  scenario_t sc;
  memset(&sc, 0, sizeof(sc));
  /* Initial buckets {5,4} {3,2} {1,0}. Rank 0's second mark of 3 comes
   * before 2 is written, its second mark of 4 after {5,4} launched. */
  pass_set(&sc.pass[0][0], 8, (const size_t[]){4, 5, 3, 3, 2, 0, 1, 4});
  pass_set(&sc.pass[1][0], 8, (const size_t[]){5, 4, 2, 2, 3, 1, 0, 5});
  later_steps_full(&sc);
  static const size_t want[N_PARAMS] = {4, 5, 3, 2, 0, 1};
  run_ranks(&sc, want);
}

/* Rank 1 never marks param 4 in the first step: rank 0's complete order
 * still decides, and rank 1 rebuilds with it. */
static void test_incomplete_on_rank1(void **state) {
  (void)state;
  scenario_t sc;
  memset(&sc, 0, sizeof(sc));
  pass_set(&sc.pass[0][0], 6, (const size_t[]){0, 1, 2, 3, 4, 5});
  pass_set(&sc.pass[1][0], 5, (const size_t[]){0, 1, 2, 3, 5});
  later_steps_full(&sc);
  static const size_t want[N_PARAMS] = {0, 1, 2, 3, 4, 5};
  run_ranks(&sc, want);
}

/* Rank 0 never marks param 1 in the first step: every rank keeps the
 * initial plan, rank 1's complete order notwithstanding. */
static void test_incomplete_on_rank0(void **state) {
  (void)state;
  scenario_t sc;
  memset(&sc, 0, sizeof(sc));
  pass_set(&sc.pass[0][0], 5, (const size_t[]){0, 2, 3, 4, 5});
  pass_set(&sc.pass[1][0], 6, (const size_t[]){0, 1, 2, 3, 4, 5});
  later_steps_full(&sc);
  static const size_t want[N_PARAMS] = {5, 4, 3, 2, 1, 0};
  run_ranks(&sc, want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_marked_twice),
      cmocka_unit_test(test_incomplete_on_rank1),
      cmocka_unit_test(test_incomplete_on_rank0),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
