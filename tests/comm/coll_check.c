/* coll_check: a worker, launched by ddprun, that checks the process
 * group's collectives exactly.
 *
 * For each length: all-reduce SUM and AVG of small integers (distinct per
 * rank and index, so every partial sum is exact in fp32 and the result is
 * known), broadcast from every root, all-gather, barrier. Each result is
 * compared bit for bit with the expected one, guard bytes around every
 * buffer must stay untouched, and a CRC of every rank's results is
 * all-gathered and compared, so all ranks hold identical bits. Several
 * collectives are queued before the first wait: each must see the result
 * of the one before, and their timestamps must show them run one after
 * the other.
 *
 * Then the narrow types and MAX: fp16 and bf16 sums of small integers
 * (exact in both: every partial sum stays below 256), fp32 MAX, and an
 * fp16 sum of values that round on every add, whose bits must be the same
 * on every rank.
 *
 * Fault modes: --kill-rank R makes rank R SIGKILL itself once the first
 * large all-reduce is under way (a thread of its own watches for the
 * start, which is on the waiting thread itself where the group runs its
 * collectives inline); --hang-rank R makes it stop itself (SIGSTOP);
 * --extra-rank R makes it issue an extra 4-byte all-reduce before the
 * third large one (collectives out of step: every rank must fail at once). The
 * other ranks loop on all-reduces until one fails, print the error and
 * exit 4; they ignore SIGTERM meanwhile, so their exit code is their own
 * finding and not their agent's stop order. --absent-rank R makes
 * rank R exit 0 without joining the group: the others' bootstrap must
 * time out (exit 4) naming it.
 *
 * Exit codes: 0 all good; 1 a wrong result; 2 usage; 3 the group could
 * not be built; 4 a collective failed (timeout, peer lost, out of step).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "half.h"
#include "pg.h"

#define GUARD 64
#define GUARD_BYTE 0xA5

static uint32_t g_rank, g_world;
static unsigned long g_checks;

static uint64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint32_t crc_table[256];
static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}
static uint32_t crc32_update(uint32_t crc, const void *p, size_t n) {
  const uint8_t *b = p;
  crc = ~crc;
  for (size_t i = 0; i < n; i++)
    crc = crc_table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

/* A collective failed: the process group's codes become exit 4. */
static int comm_exit(int rc, const char *what, const char *err) {
  fprintf(stderr, "coll_check: rank %u: %s failed at t=%" PRIu64 "us: %s "
          "[%s]\n", g_rank, what, mono_us(), err, dr_strerror(rc));
  return rc == DR_PG_ETIMEOUT || rc == DR_PG_EPEER || rc == DR_PG_EBROKEN ||
                 rc == DR_PG_EMISMATCH
             ? 4
             : 3;
}

static int wrong(const char *what, size_t n, size_t i, double got,
                 double want) {
  fprintf(stderr, "coll_check: rank %u: %s (n=%zu): element %zu is %.9g, "
          "expected %.9g\n", g_rank, what, n, i, got, want);
  return 1;
}

/* Buffers with guard bytes before and after. */
static uint8_t *guarded(size_t n_bytes) {
  uint8_t *p = malloc(n_bytes + 2 * GUARD);
  if (p == NULL) {
    fprintf(stderr, "coll_check: out of memory\n");
    exit(3);
  }
  memset(p, GUARD_BYTE, GUARD);
  memset(p + GUARD + n_bytes, GUARD_BYTE, GUARD);
  return p + GUARD;
}
static int guards_ok(const uint8_t *p, size_t n_bytes, const char *what) {
  for (size_t i = 0; i < GUARD; i++)
    if (p[-1 - (long)i] != GUARD_BYTE || p[n_bytes + i] != GUARD_BYTE) {
      fprintf(stderr, "coll_check: rank %u: %s (%zu bytes) wrote outside "
              "its buffer\n", g_rank, what, n_bytes);
      return 0;
    }
  return 1;
}
static void unguard(uint8_t *p) {
  if (p != NULL)
    free(p - GUARD);
}

/* Small integers, distinct per rank and index: |sum| < 2^24 for any
 * world size here, so every order of summation is exact. */
static float input(uint32_t r, size_t i) {
  return (float)((int)((i * 31u + r * 17u) % 997u) - 498 + (int)r);
}
static uint8_t bcast_byte(uint32_t root, size_t i) {
  return (uint8_t)(i * 131u + root * 7u + 1u);
}
static uint8_t gather_byte(uint32_t r, size_t i) {
  return (uint8_t)(i * 29u + r * 101u + 3u);
}

/* All ranks must hold the same CRC of their results. */
static int same_everywhere(dr_pg_t *pg, uint32_t crc, const char *what,
                           int *exit_code) {
  uint32_t *all = calloc(g_world, sizeof(*all));
  char err[512];
  int rc = dr_pg_allgather_sync(pg, &crc, sizeof(crc), all, err, sizeof(err));
  if (rc != 0) {
    *exit_code = comm_exit(rc, "allgather of result CRCs", err);
    free(all);
    return 0;
  }
  for (uint32_t r = 0; r < g_world; r++)
    if (all[r] != crc) {
      fprintf(stderr, "coll_check: rank %u: %s: rank %u's results differ "
              "(crc %08x, here %08x)\n", g_rank, what, r, all[r], crc);
      free(all);
      *exit_code = 1;
      return 0;
    }
  free(all);
  g_checks++;
  return 1;
}

static int check_allreduce(dr_pg_t *pg, size_t n) {
  float *sum = (float *)(void *)guarded(n * sizeof(float));
  float *avg = (float *)(void *)guarded(n * sizeof(float));
  for (size_t i = 0; i < n; i++)
    sum[i] = avg[i] = input(g_rank, i);
  /* Queued together: FIFO on one thread, the barrier last. */
  dr_work_t *w[3];
  int rc = dr_pg_allreduce(pg, sum, n, DR_PG_SUM, &w[0]);
  if (rc == 0)
    rc = dr_pg_allreduce(pg, avg, n, DR_PG_AVG, &w[1]);
  if (rc == 0)
    rc = dr_pg_barrier(pg, &w[2]);
  if (rc != 0)
    return comm_exit(rc, "queueing an allreduce", dr_strerror(rc));
  const char *names[3] = {"allreduce SUM", "allreduce AVG", "barrier"};
  int code = 0;
  for (int k = 0; k < 3; k++) {
    char err[512];
    rc = dr_work_wait(&w[k], err, sizeof(err));
    if (rc != 0 && code == 0)
      code = comm_exit(rc, names[k], err);
  }
  if (code != 0)
    goto out;
  for (size_t i = 0; i < n; i++) {
    long s = 0;
    for (uint32_t r = 0; r < g_world; r++)
      s += (long)input(r, i);
    float want = (float)s, want_avg = (float)s / (float)g_world;
    if (memcmp(&sum[i], &want, 4) != 0) {
      code = wrong("allreduce SUM", n, i, sum[i], want);
      goto out;
    }
    if (memcmp(&avg[i], &want_avg, 4) != 0) {
      code = wrong("allreduce AVG", n, i, avg[i], want_avg);
      goto out;
    }
  }
  if (!guards_ok((uint8_t *)sum, n * 4, "allreduce SUM") ||
      !guards_ok((uint8_t *)avg, n * 4, "allreduce AVG")) {
    code = 1;
    goto out;
  }
  g_checks += 2;
  uint32_t crc = crc32_update(0, sum, n * 4);
  crc = crc32_update(crc, avg, n * 4);
  same_everywhere(pg, crc, "allreduce", &code);
out:
  unguard((uint8_t *)sum);
  unguard((uint8_t *)avg);
  return code;
}

/* Small integers 0 .. 15 per rank and index. */
static float small(uint32_t r, size_t i) {
  return (float)((i * 7u + r * 3u) % 16u);
}

static int check_typed(dr_pg_t *pg, size_t n) {
  uint16_t *h = (uint16_t *)(void *)guarded(n * 2);
  uint16_t *b = (uint16_t *)(void *)guarded(n * 2);
  uint16_t *rnd = (uint16_t *)(void *)guarded(n * 2);
  float *mx = (float *)(void *)guarded(n * 4);
  for (size_t i = 0; i < n; i++) {
    h[i] = dr_f32_to_f16(small(g_rank, i));
    b[i] = dr_f32_to_bf16(small(g_rank, i));
    rnd[i] = dr_f32_to_f16(0.1f * (float)(g_rank + 1) * (float)(i % 13u));
    mx[i] = input(g_rank, i);
  }
  dr_work_t *w[4];
  int rc = dr_pg_allreduce_typed(pg, h, n, DR_PG_F16, DR_PG_SUM, &w[0]);
  if (rc == 0)
    rc = dr_pg_allreduce_typed(pg, b, n, DR_PG_BF16, DR_PG_SUM, &w[1]);
  if (rc == 0)
    rc = dr_pg_allreduce_typed(pg, rnd, n, DR_PG_F16, DR_PG_SUM, &w[2]);
  if (rc == 0)
    rc = dr_pg_allreduce(pg, mx, n, DR_PG_MAX, &w[3]);
  if (rc != 0)
    return comm_exit(rc, "queueing a typed allreduce", dr_strerror(rc));
  const char *names[4] = {"allreduce fp16 SUM", "allreduce bf16 SUM",
                          "allreduce fp16 SUM (rounding)", "allreduce MAX"};
  int code = 0;
  for (int k = 0; k < 4; k++) {
    char err[512];
    rc = dr_work_wait(&w[k], err, sizeof(err));
    if (rc != 0 && code == 0)
      code = comm_exit(rc, names[k], err);
  }
  for (size_t i = 0; i < n && code == 0; i++) {
    float want = 0, want_max = input(0, i);
    for (uint32_t r = 0; r < g_world; r++) {
      want += small(r, i);
      if (input(r, i) > want_max)
        want_max = input(r, i);
    }
    if (dr_f16_to_f32(h[i]) != want)
      code = wrong(names[0], n, i, dr_f16_to_f32(h[i]), want);
    else if (dr_bf16_to_f32(b[i]) != want)
      code = wrong(names[1], n, i, dr_bf16_to_f32(b[i]), want);
    else if (memcmp(&mx[i], &want_max, 4) != 0)
      code = wrong(names[3], n, i, mx[i], want_max);
  }
  if (code == 0 && (!guards_ok((uint8_t *)h, n * 2, names[0]) ||
                    !guards_ok((uint8_t *)b, n * 2, names[1]) ||
                    !guards_ok((uint8_t *)rnd, n * 2, names[2]) ||
                    !guards_ok((uint8_t *)mx, n * 4, names[3])))
    code = 1;
  if (code == 0) {
    g_checks += 3;
    same_everywhere(pg, crc32_update(0, rnd, n * 2), names[2], &code);
  }
  unguard((uint8_t *)h);
  unguard((uint8_t *)b);
  unguard((uint8_t *)rnd);
  unguard((uint8_t *)mx);
  return code;
}

/* Queued all-reduces of one buffer: each must see the one before. */
static int check_chained(dr_pg_t *pg) {
  float x[64];
  for (int i = 0; i < 64; i++)
    x[i] = 1.0f;
  dr_work_t *w[3];
  int rc = 0;
  for (int k = 0; k < 3 && rc == 0; k++)
    rc = dr_pg_allreduce(pg, x, 64, DR_PG_SUM, &w[k]);
  if (rc != 0)
    return comm_exit(rc, "queueing", dr_strerror(rc));
  for (int k = 0; k < 3; k++) {
    char err[512];
    rc = dr_work_wait(&w[k], err, sizeof(err));
    if (rc != 0)
      return comm_exit(rc, "allreduce", err);
  }
  float want = (float)g_world * (float)g_world * (float)g_world;
  for (int i = 0; i < 64; i++)
    if (x[i] != want)
      return wrong("chained allreduces", 64, (size_t)i, x[i], want);
  g_checks++;
  return 0;
}

static int check_order(dr_pg_t *pg) {
  float x[16] = {0};
  dr_work_t *w[4];
  int rc = 0;
  for (int k = 0; k < 4 && rc == 0; k++)
    rc = dr_pg_allreduce(pg, x, 16, DR_PG_SUM, &w[k]);
  if (rc != 0)
    return comm_exit(rc, "queueing", dr_strerror(rc));
  /* Completion of the last implies completion of all before it. */
  char err[512];
  rc = dr_work_wait(&w[3], err, sizeof(err));
  if (rc != 0)
    return comm_exit(rc, "allreduce", err);
  uint64_t prev_end = 0;
  for (int k = 0; k < 3; k++) {
    if (!dr_work_done(w[k])) {
      fprintf(stderr, "coll_check: rank %u: work %d not done after a later "
              "one completed\n", g_rank, k);
      return 1;
    }
    uint64_t s = dr_work_start_us(w[k]), e = dr_work_end_us(w[k]);
    if (s == 0 || e < s || s < prev_end) {
      fprintf(stderr, "coll_check: rank %u: work %d ran %" PRIu64 "..%"
              PRIu64 "us, previous ended %" PRIu64 "us\n", g_rank, k, s, e,
              prev_end);
      return 1;
    }
    prev_end = e;
    rc = dr_work_wait(&w[k], err, sizeof(err));
    if (rc != 0)
      return comm_exit(rc, "allreduce", err);
  }
  g_checks++;
  return 0;
}

static int check_broadcast(dr_pg_t *pg, size_t n) {
  uint8_t *buf = guarded(n);
  int code = 0;
  uint32_t crc = 0;
  for (uint32_t root = 0; root < g_world && code == 0; root++) {
    for (size_t i = 0; i < n; i++)
      buf[i] = g_rank == root ? bcast_byte(root, i) : 0xEE;
    char err[512];
    int rc = dr_pg_broadcast_sync(pg, buf, n, root, err, sizeof(err));
    if (rc != 0) {
      code = comm_exit(rc, "broadcast", err);
      break;
    }
    for (size_t i = 0; i < n; i++)
      if (buf[i] != bcast_byte(root, i)) {
        fprintf(stderr, "coll_check: rank %u: broadcast from %u (n=%zu): "
                "byte %zu is %u, expected %u\n", g_rank, root, n, i, buf[i],
                bcast_byte(root, i));
        code = 1;
        break;
      }
    if (code == 0 && !guards_ok(buf, n, "broadcast"))
      code = 1;
    crc = crc32_update(crc, buf, n);
    g_checks++;
  }
  if (code == 0)
    same_everywhere(pg, crc, "broadcast", &code);
  unguard(buf);
  return code;
}

static int check_allgather(dr_pg_t *pg, size_t n) {
  uint8_t *in = guarded(n), *out = guarded(n * g_world);
  int code = 0;
  for (size_t i = 0; i < n; i++)
    in[i] = gather_byte(g_rank, i);
  memset(out, 0xEE, n * g_world);
  char err[512];
  int rc = dr_pg_allgather_sync(pg, in, n, out, err, sizeof(err));
  if (rc != 0) {
    code = comm_exit(rc, "allgather", err);
    goto out;
  }
  for (uint32_t r = 0; r < g_world; r++)
    for (size_t i = 0; i < n; i++)
      if (out[r * n + i] != gather_byte(r, i)) {
        fprintf(stderr, "coll_check: rank %u: allgather (n=%zu): rank %u's "
                "byte %zu is %u, expected %u\n", g_rank, n, r, i,
                out[r * n + i], gather_byte(r, i));
        code = 1;
        goto out;
      }
  if (!guards_ok(out, n * g_world, "allgather") ||
      !guards_ok(in, n, "allgather input")) {
    code = 1;
    goto out;
  }
  g_checks++;
  /* In place: this rank's block already sits in the output. */
  memset(out, 0xEE, n * g_world);
  memcpy(out + g_rank * n, in, n);
  rc = dr_pg_allgather_sync(pg, out + g_rank * n, n, out, err, sizeof(err));
  if (rc != 0) {
    code = comm_exit(rc, "allgather in place", err);
    goto out;
  }
  for (uint32_t r = 0; r < g_world; r++)
    for (size_t i = 0; i < n; i++)
      if (out[r * n + i] != gather_byte(r, i)) {
        fprintf(stderr, "coll_check: rank %u: allgather in place (n=%zu) "
                "differs at rank %u byte %zu\n", g_rank, n, r, i);
        code = 1;
        goto out;
      }
  g_checks++;
  same_everywhere(pg, crc32_update(0, out, n * g_world), "allgather", &code);
out:
  unguard(in);
  unguard(out);
  return code;
}

/* The faulting rank's watcher: once the collective has started (on the
 * communication thread, or on the waiting one when the group runs its
 * collectives inline), it kills or stops the whole process, inside the
 * collective whatever the schedule. */
typedef struct {
  dr_work_t *w;
  int sig;
} fault_arg_t;

static void *fault_when_started(void *p) {
  fault_arg_t *a = p;
  uint64_t until = mono_us() + 5000000u;
  while (dr_work_start_us(a->w) == 0 && mono_us() < until)
    ;
  fprintf(stderr, "coll_check: rank %u: %s itself at t=%" PRIu64 "us\n",
          g_rank, a->sig == SIGKILL ? "SIGKILL" : "SIGSTOP", mono_us());
  kill(getpid(), a->sig);
  return NULL;
}

/* The fault modes: loop on large all-reduces until one fails. */
static int fault_loop(dr_pg_t *pg, int kill_rank, int hang_rank,
                      int extra_rank) {
  signal(SIGTERM, SIG_IGN);
  size_t n = (size_t)16 << 20; /* 64 MiB: long enough to be caught inside */
  float *x = malloc(n * sizeof(float));
  if (x == NULL)
    return 3;
  for (size_t i = 0; i < n; i++)
    x[i] = 0.0f;
  /* A death or a stop comes in the first all-reduce: none runs before it
   * under the short timeout a hang is tested with (64 MiB can take longer
   * than that under a sanitizer on a loaded host). The extra all-reduce
   * comes third, after two that complete (#3 in the messages). */
  int fault_iter = extra_rank >= 0 ? 2 : 0;
  for (int iter = 0;; iter++) {
    dr_work_t *w;
    char err[512];
    if (iter == fault_iter && (int)g_rank == extra_rank) {
      float one = 1.0f;
      fprintf(stderr, "coll_check: rank %u: an extra allreduce at t=%" PRIu64
              "us\n", g_rank, mono_us());
      int rc = dr_pg_allreduce_sync(pg, &one, 1, DR_PG_SUM, err, sizeof(err));
      free(x);
      if (rc == 0) {
        fprintf(stderr, "coll_check: rank %u: the extra allreduce "
                "succeeded\n", g_rank);
        return 1;
      }
      return comm_exit(rc, "allreduce", err);
    }
    int rc = dr_pg_allreduce(pg, x, n, DR_PG_SUM, &w);
    if (rc != 0) {
      free(x);
      return comm_exit(rc, "queueing an allreduce", dr_strerror(rc));
    }
    int me_kill = (int)g_rank == kill_rank, me_hang = (int)g_rank == hang_rank;
    fault_arg_t fa = {w, me_kill ? SIGKILL : SIGSTOP};
    pthread_t watcher;
    int faulting = iter == fault_iter && (me_kill || me_hang);
    int watching = faulting &&
                   pthread_create(&watcher, NULL, fault_when_started, &fa) == 0;
    if (faulting && !watching) {
      free(x);
      fprintf(stderr, "coll_check: rank %u: pthread_create failed\n", g_rank);
      return 3;
    }
    /* w stays valid until the watcher is done with it. */
    rc = dr_work_wait_keep(w, err, sizeof(err));
    if (watching)
      pthread_join(watcher, NULL);
    dr_work_free(&w);
    if (rc != 0) {
      int code = comm_exit(rc, "allreduce", err);
      /* The group is broken now: nothing more may be queued. */
      int again = dr_pg_allreduce(pg, x, n, DR_PG_SUM, &w);
      free(x);
      if (again != DR_PG_EBROKEN || w != NULL) {
        fprintf(stderr, "coll_check: rank %u: a collective after the failure "
                "returned %d, not DR_PG_EBROKEN\n", g_rank, again);
        return 1;
      }
      return code;
    }
  }
}

static int parse_lengths(const char *s, size_t *out, int max) {
  int n = 0;
  char *end;
  while (*s && n < max) {
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s)
      return -1;
    out[n++] = (size_t)v;
    s = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0')
      return -1;
  }
  return n;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  setvbuf(stderr, NULL, _IOLBF, 0);
  crc_init();
  size_t lengths[16] = {0, 1, 7, ((size_t)1 << 20) + 3};
  int n_lengths = 4, rounds = 1, kill_rank = -1, hang_rank = -1;
  int absent_rank = -1, extra_rank = -1;
  long timeout_ms = 60000;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--lengths") == 0 && v != NULL) {
      n_lengths = parse_lengths(v, lengths, 16);
      if (n_lengths < 0)
        goto usage;
    } else if (strcmp(a, "--rounds") == 0 && v != NULL) {
      rounds = atoi(v);
    } else if (strcmp(a, "--timeout-ms") == 0 && v != NULL) {
      timeout_ms = atol(v);
    } else if (strcmp(a, "--kill-rank") == 0 && v != NULL) {
      kill_rank = atoi(v);
    } else if (strcmp(a, "--hang-rank") == 0 && v != NULL) {
      hang_rank = atoi(v);
    } else if (strcmp(a, "--extra-rank") == 0 && v != NULL) {
      extra_rank = atoi(v);
    } else if (strcmp(a, "--absent-rank") == 0 && v != NULL) {
      absent_rank = atoi(v);
    } else {
      goto usage;
    }
    i++;
  }
  if (rounds < 1 || timeout_ms <= 0)
    goto usage;

  dr_pg_config_t cfg;
  char err[512];
  int rc = dr_pg_config_from_env(&cfg, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, "coll_check: %s\n", err);
    return 2;
  }
  cfg.timeout_ms = (uint32_t)timeout_ms;
  g_rank = cfg.rank;
  g_world = cfg.world;
  if ((int)g_rank == absent_rank) {
    /* Never joins: the others' bootstrap must time out naming it. */
    printf("coll_check: rank %u stays away\n", g_rank);
    dr_pg_config_free(&cfg);
    return 0;
  }
  dr_pg_t *pg;
  rc = dr_pg_init(&cfg, &pg, err, sizeof(err));
  dr_pg_config_free(&cfg);
  if (rc != 0) {
    fprintf(stderr, "coll_check: rank %u: process group: %s\n", g_rank, err);
    return rc == DR_PG_ETIMEOUT || rc == DR_PG_EPEER ? 4 : 3;
  }
  printf("coll_check: rank %u of %u: %s\n", g_rank, g_world,
         dr_pg_describe(pg));
  int code = 0;
  if (kill_rank >= 0 || hang_rank >= 0 || extra_rank >= 0) {
    code = fault_loop(pg, kill_rank, hang_rank, extra_rank);
  } else {
    for (int r = 0; r < rounds && code == 0; r++) {
      for (int k = 0; k < n_lengths && code == 0; k++) {
        size_t n = lengths[k];
        code = check_allreduce(pg, n);
        if (code == 0)
          code = check_typed(pg, n);
        if (code == 0)
          code = check_broadcast(pg, n);
        if (code == 0)
          code = check_allgather(pg, n);
      }
      if (code == 0)
        code = check_order(pg);
      if (code == 0)
        code = check_chained(pg);
      if (code == 0) {
        rc = dr_pg_barrier_sync(pg, err, sizeof(err));
        if (rc != 0)
          code = comm_exit(rc, "barrier", err);
      }
    }
  }
  dr_pg_destroy(&pg);
  if (code == 0)
    printf("coll_check: rank %u of %u: ok, %lu checks\n", g_rank, g_world,
           g_checks);
  return code;
usage:
  fprintf(stderr, "usage: coll_check [--lengths N,N,...] [--rounds N] "
          "[--timeout-ms MS] [--kill-rank R | --hang-rank R | "
          "--extra-rank R | --absent-rank R]\n");
  return 2;
}
