/* train's fault injection for tests: each variable parsed once. See
 * fault_inject.h. */
#include "fault_inject.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const dr_fault_var_t vars[] = {
    {"DDPRUN_CKPT_TEST_DELAY_MS", "MS[@STEP]",
     "rank 0's checkpoint writer thread holds each finished temporary "
     "checkpoint file MS ms before its rename (with @STEP only the "
     "checkpoints of step STEP and later), so that a test can kill the "
     "writer in mid-checkpoint; the steps go on meanwhile, up to the next "
     "checkpoint, which waits for it"},
    {"DDPRUN_CKPT_TEST_KILL_AT", "STEP[:RANK]",
     "the worker (every rank, or RANK) SIGKILLs itself once STEP steps are "
     "done, after that step's checkpoint (every rank first waits until the "
     "checkpoint being written, if any, is renamed into place), on the "
     "job's first attempt only (TORCHELASTIC_RESTART_COUNT unset or 0), so "
     "that the restarted group runs on"},
    {"DDPRUN_PLAN_TEST_SCALE", "X",
     "with --bucket-cap-mb auto, rank 0's prediction of the step time of "
     "its choice is multiplied by X (X > 0), so that the run drifts from it "
     "and re-plans"},
    {"DDPRUN_DATA_TEST_DELAY_MS", "MS:RANK",
     "rank RANK sleeps MS ms in its batch loading of every micro-batch (a "
     "slow input pipeline on one rank: ddprun diagnose names it); "
     "announced on stderr once"},
    {"DDPRUN_MEM_TEST_RANK0_MIB", "N",
     "rank 0 allocates N MiB, writes every page and frees it before the "
     "first step (announced on stderr), so that its peak resident memory "
     "lies N MiB above the other ranks' and the final report names it"},
    {"DDPRUN_COLL_TEST_EXTRA", "RANK@STEP",
     "rank RANK issues an extra all-reduce of one float as it begins step "
     "STEP (the first step is 1), before that step's gradients', on the "
     "job's first attempt only (TORCHELASTIC_RESTART_COUNT unset or 0): "
     "collectives out of step, which the CPU backend's ranks name at once "
     "(exit 4); on a GPU an extra NCCL all-reduce, after which the ranks "
     "wait until --comm-timeout and each reports its last collectives; "
     "announced on stderr"},
    {"DDPRUN_SPIN_TEST", "RANK@STEP",
     "rank RANK busy-loops on the CPU forever as it begins step STEP, on "
     "the job's first attempt only: a rank that is busy but makes no "
     "progress while its peers wait for it in a collective; announced on "
     "stderr"},
    {"DDPRUN_OVERFLOW_TEST", "RANK@STEP[:N]",
     "rank RANK's gradient holds an infinity (its first bucket's first "
     "element, before the overflow checks and the compression) at step "
     "STEP and the N - 1 steps after it (default N = 1), on every attempt: "
     "with --loss-scale, every rank skips those steps and halves its scale "
     "(dynamic); announced on stderr"},
    {"DDPRUN_OVERFLOW_TEST_SUM", "STEP",
     "at step STEP every rank's first gradient element becomes 60000 x the "
     "world size: after the pre-division by the world size 60000, finite in "
     "fp16, but the fp16 sum of two of them overflows (--grad-compress "
     "fp16): an overflow only the reduced result shows"},
    {"DDPRUN_SMOKE_TEST_BREAK", "ckpt",
     "with --smoke, rank 0 flips the lowest bit of the first weight it "
     "reads back from the checkpoint, before comparing it with the weights "
     "written, so that the checkpoint check fails (exit 1); announced on "
     "stderr"},
    {"DDPRUN_SHM_TEST_TAKEN", "N",
     "the first N names that each creation of a shared-memory segment (a "
     "ring of the CPU backend, the shared weights) tries are taken: created "
     "empty just before, as another local user's would be, so that it "
     "tries new names (proto/os/shm_name.h; said in one line)"},
    {"DDPRUN_SHM_TEST_KILL", "TAG[:RANK]",
     "the worker (every rank, or RANK) SIGKILLs itself right after it "
     "created a shared-memory segment whose tag begins with TAG (ring, "
     "ring0to1, weights), before any other rank knows its name, on the "
     "job's first attempt only; announced on stderr. The agent removes what "
     "it leaves in /dev/shm"},
};

static struct {
  long delay_ms;        /* DELAY_MS: 0 = off */
  uint64_t delay_from;  /* ... only for steps from this one */
  int kill;             /* KILL_AT set, on the first attempt */
  uint64_t kill_at;
  int kill_one;         /* ... only on kill_rank */
  unsigned long kill_rank;
  double plan_scale;    /* PLAN_TEST_SCALE: 0 = off */
  unsigned long mem_mib; /* MEM_TEST_RANK0_MIB: 0 = off */
  long data_ms;         /* DATA_TEST_DELAY_MS: 0 = off */
  unsigned long data_rank;
  int extra;            /* COLL_TEST_EXTRA set, on the first attempt */
  unsigned long extra_rank;
  uint64_t extra_step;  /* ... at this step index (STEP - 1) */
  int spin;             /* SPIN_TEST set, on the first attempt */
  unsigned long spin_rank;
  uint64_t spin_step;
  int ovf;              /* OVERFLOW_TEST set */
  unsigned long ovf_rank;
  uint64_t ovf_step, ovf_count;
  int ovf_sum;          /* OVERFLOW_TEST_SUM set */
  uint64_t ovf_sum_step;
  char smoke_break[16]; /* SMOKE_TEST_BREAK: "" = off */
} g;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* "RANK@STEP", both decimal, STEP >= 1: 0 with the step's index (STEP -
 * 1), else -1. */
static int parse_rank_at_step(const char *s, unsigned long *rank,
                              uint64_t *index) {
  char *end = NULL;
  if (s == NULL || s[0] < '0' || s[0] > '9')
    return -1;
  *rank = strtoul(s, &end, 10);
  if (*end != '@' || end[1] < '0' || end[1] > '9')
    return -1;
  unsigned long long step = strtoull(end + 1, &end, 10);
  if (*end != '\0' || step == 0)
    return -1;
  *index = step - 1;
  return 0;
}

static void load(void) {
  char *end = NULL;
  const char *s = getenv("DDPRUN_CKPT_TEST_DELAY_MS");
  if (s != NULL && (g.delay_ms = strtol(s, &end, 10)) > 0) {
    if (*end == '@')
      g.delay_from = strtoull(end + 1, NULL, 10);
  } else {
    g.delay_ms = 0;
  }

  s = getenv("DDPRUN_CKPT_TEST_KILL_AT");
  const char *restarts = getenv("TORCHELASTIC_RESTART_COUNT");
  int first_attempt = restarts == NULL || strtoul(restarts, NULL, 10) == 0;
  if (s != NULL && s[0] != '\0' && first_attempt) {
    g.kill = 1;
    g.kill_at = strtoull(s, &end, 10);
    if (*end == ':') {
      g.kill_one = 1;
      g.kill_rank = strtoul(end + 1, NULL, 10);
    }
  }

  if (first_attempt) {
    g.extra = parse_rank_at_step(getenv("DDPRUN_COLL_TEST_EXTRA"),
                                 &g.extra_rank, &g.extra_step) == 0;
    g.spin = parse_rank_at_step(getenv("DDPRUN_SPIN_TEST"), &g.spin_rank,
                                &g.spin_step) == 0;
  }

  s = getenv("DDPRUN_OVERFLOW_TEST");
  if (s != NULL) {
    char at[64];
    snprintf(at, sizeof(at), "%s", s);
    char *colon = strchr(at, ':');
    g.ovf_count = 1;
    if (colon != NULL) {
      *colon = '\0';
      g.ovf_count = strtoull(colon + 1, NULL, 10);
    }
    g.ovf = g.ovf_count > 0 &&
            parse_rank_at_step(at, &g.ovf_rank, &g.ovf_step) == 0;
  }
  s = getenv("DDPRUN_OVERFLOW_TEST_SUM");
  if (s != NULL && s[0] >= '1' && s[0] <= '9') {
    g.ovf_sum = 1;
    g.ovf_sum_step = strtoull(s, NULL, 10) - 1;
  }

  s = getenv("DDPRUN_SMOKE_TEST_BREAK");
  if (s != NULL && strlen(s) < sizeof(g.smoke_break))
    memcpy(g.smoke_break, s, strlen(s) + 1);

  s = getenv("DDPRUN_PLAN_TEST_SCALE");
  if (s != NULL && atof(s) > 0)
    g.plan_scale = atof(s);

  s = getenv("DDPRUN_DATA_TEST_DELAY_MS");
  if (s != NULL && (g.data_ms = strtol(s, &end, 10)) > 0 && *end == ':' &&
      end[1] >= '0' && end[1] <= '9')
    g.data_rank = strtoul(end + 1, NULL, 10);
  else
    g.data_ms = 0;

  s = getenv("DDPRUN_MEM_TEST_RANK0_MIB");
  if (s != NULL && s[0] >= '0' && s[0] <= '9') {
    unsigned long mib = strtoul(s, &end, 10);
    if (*end == '\0' && mib <= (1ul << 20)) /* up to 1 TiB */
      g.mem_mib = mib;
  }
}

void dr_fault_init(void) { pthread_once(&g_once, load); }

long dr_fault_ckpt_delay_ms(uint64_t step) {
  dr_fault_init();
  return g.delay_ms > 0 && step >= g.delay_from ? g.delay_ms : 0;
}

int dr_fault_kill_due(uint32_t rank, uint64_t done) {
  dr_fault_init();
  return g.kill && g.kill_at == done && (!g.kill_one || g.kill_rank == rank);
}

int dr_fault_kill_step(uint64_t done) {
  dr_fault_init();
  return g.kill && g.kill_at == done;
}

double dr_fault_plan_scale(void) {
  dr_fault_init();
  return g.plan_scale;
}

void dr_fault_data_delay(uint32_t rank) {
  dr_fault_init();
  if (g.data_ms <= 0 || rank != g.data_rank)
    return;
  static int said;
  if (!said)
    fprintf(stderr, "train: rank %u: test hook: every batch takes %ld ms "
            "more to load (DDPRUN_DATA_TEST_DELAY_MS)\n", rank, g.data_ms);
  said = 1;
  struct timespec ts = {g.data_ms / 1000, (g.data_ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

void dr_fault_mem_touch(uint32_t rank) {
  dr_fault_init();
  if (g.mem_mib == 0 || rank != 0)
    return;
  size_t n_bytes = (size_t)g.mem_mib << 20;
  char *p = malloc(n_bytes);
  if (p == NULL) {
    fprintf(stderr, "train: rank 0: test hook: cannot allocate "
            "DDPRUN_MEM_TEST_RANK0_MIB=%lu MiB\n", g.mem_mib);
    return;
  }
  /* Volatile stores: the pages must really be touched, not optimised out
   * with an allocation that is never read. */
  volatile char *v = p;
  for (size_t i = 0; i < n_bytes; i += 4096)
    v[i] = 1;
  free(p);
  fprintf(stderr, "train: rank 0: test hook: touched %lu MiB "
          "(DDPRUN_MEM_TEST_RANK0_MIB)\n", g.mem_mib);
}

int dr_fault_coll_extra_due(uint32_t rank, uint64_t step) {
  dr_fault_init();
  if (!g.extra || rank != g.extra_rank || step != g.extra_step)
    return 0;
  fprintf(stderr, "train: rank %u: test hook: an extra all-reduce at the "
          "start of step %llu (DDPRUN_COLL_TEST_EXTRA)\n", rank,
          (unsigned long long)step + 1);
  return 1;
}

void dr_fault_spin(uint32_t rank, uint64_t step) {
  dr_fault_init();
  if (!g.spin || rank != g.spin_rank || step != g.spin_step)
    return;
  fprintf(stderr, "train: rank %u: test hook: spinning forever at the "
          "start of step %llu (DDPRUN_SPIN_TEST)\n", rank,
          (unsigned long long)step + 1);
  /* A volatile counter: the loop must burn the CPU, not be optimised
   * into an empty one (which the compiler may assume ends). */
  volatile uint64_t spins = 0;
  for (;;)
    spins++;
}

float dr_fault_overflow_value(uint32_t rank, uint32_t world, uint64_t step) {
  dr_fault_init();
  if (g.ovf && rank == g.ovf_rank && step >= g.ovf_step &&
      step - g.ovf_step < g.ovf_count) {
    fprintf(stderr, "train: rank %u: test hook: an infinity in this rank's "
            "gradient at step %llu (DDPRUN_OVERFLOW_TEST)\n", rank,
            (unsigned long long)step + 1);
    return INFINITY;
  }
  if (g.ovf_sum && step == g.ovf_sum_step) {
    fprintf(stderr, "train: rank %u: test hook: a gradient of %g, whose "
            "fp16 sum overflows, at step %llu (DDPRUN_OVERFLOW_TEST_SUM)\n",
            rank, 60000.0 * world, (unsigned long long)step + 1);
    return 60000.0f * (float)world;
  }
  return 0;
}

int dr_fault_smoke_break(const char *check) {
  dr_fault_init();
  return g.smoke_break[0] != '\0' && strcmp(g.smoke_break, check) == 0;
}

const dr_fault_var_t *dr_fault_vars(int *n) {
  *n = (int)(sizeof(vars) / sizeof(vars[0]));
  return vars;
}
