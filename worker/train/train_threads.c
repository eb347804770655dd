/* Per-step CPU figures of the compute and communication threads. See
 * train_threads.h. */
#include "train_threads.h"

#include "thread_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { COMPUTE = 0, COMM = 1, N_THREADS = 2 };

struct dr_train_threads {
  int comm_tid;                   /* 0: no communication thread */
  int primed;                     /* last holds the first mark's samples */
  uint64_t last_us;               /* the previous mark */
  dr_thread_cpu_t last[N_THREADS];
  dr_thread_cpu_t sum[N_THREADS]; /* over the intervals closed so far */
  unsigned have[N_THREADS];       /* what every interval measured */
  uint64_t n;                     /* intervals closed */
  uint64_t sample_ns;             /* spent sampling, all marks */
  int warned[N_THREADS];
};

static const char *const names[N_THREADS] = {"compute", "communication"};

/* One sample of thread k into *s; the first failure of each thread is
 * reported once. */
static void sample(dr_run_t *r, int k, dr_thread_cpu_t *s) {
  dr_train_threads_t *t = r->threads;
  char why[256];
  int rc = k == COMPUTE ? dr_thread_cpu_self(s, why, sizeof(why))
                        : dr_thread_cpu_of(t->comm_tid, s, why, sizeof(why));
  if (rc != 0 && !t->warned[k]) {
    t->warned[k] = 1;
    fprintf(stderr, "train: rank %u: %s thread: %s\n", r->rank, names[k],
            why);
  }
}

static uint64_t thread_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int dr_train_threads_open(dr_run_t *r) {
  if (r->c.trace == NULL && !r->c.thread_stats)
    return 0;
  dr_train_threads_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return dr_train_nomem(r, "the threads' CPU figures");
  r->threads = t;
  t->comm_tid = dr_pg_comm_tid(r->pg);
  t->have[COMPUTE] = t->have[COMM] = ~0u;
  return 0;
}

/* The interval's figures as the trace's counters, at t0_us. */
static void trace_interval(dr_run_t *r, uint64_t t0_us,
                           const dr_thread_cpu_t *d, int n_threads) {
  static const char *const keys[N_THREADS] = {"compute", "comm"};
  double v[N_THREADS];
  for (int k = 0; k < n_threads; k++)
    v[k] = d[k].cpu_ns / 1e6;
  dr_trace_counter(r->trace, "cpu ms", t0_us, keys, v, (size_t)n_threads);
  for (int k = 0; k < n_threads; k++)
    v[k] = d[k].wait_ns / 1e6;
  dr_trace_counter(r->trace, "run-queue wait ms", t0_us, keys, v,
                   (size_t)n_threads);
  for (int k = 0; k < n_threads; k++)
    v[k] = (double)d[k].vol_cs;
  dr_trace_counter(r->trace, "voluntary switches", t0_us, keys, v,
                   (size_t)n_threads);
  for (int k = 0; k < n_threads; k++)
    v[k] = (double)d[k].invol_cs;
  dr_trace_counter(r->trace, "involuntary switches", t0_us, keys, v,
                   (size_t)n_threads);
}

void dr_train_threads_mark(dr_run_t *r, uint64_t now_us) {
  dr_train_threads_t *t = r->threads;
  if (t == NULL)
    return;
  uint64_t c0 = thread_ns();
  int n_threads = t->comm_tid != 0 ? 2 : 1;
  dr_thread_cpu_t now[N_THREADS], d[N_THREADS];
  memset(d, 0, sizeof(d));
  memset(now, 0, sizeof(now));
  sample(r, COMPUTE, &now[COMPUTE]);
  if (n_threads > 1)
    sample(r, COMM, &now[COMM]);
  if (!t->primed) {
    /* The first step's start: no interval ends here. */
    memcpy(t->last, now, sizeof(now));
    t->primed = 1;
    t->last_us = now_us;
    t->sample_ns += thread_ns() - c0;
    return;
  }
  for (int k = 0; k < n_threads; k++) {
    dr_thread_cpu_sub(&now[k], &t->last[k], &d[k]);
    t->have[k] &= d[k].have;
    t->sum[k].cpu_ns += d[k].cpu_ns;
    t->sum[k].wait_ns += d[k].wait_ns;
    t->sum[k].slices += d[k].slices;
    t->sum[k].vol_cs += d[k].vol_cs;
    t->sum[k].invol_cs += d[k].invol_cs;
    t->last[k] = now[k];
  }
  trace_interval(r, t->last_us, d, n_threads);
  t->last_us = now_us;
  t->n++;
  t->sample_ns += thread_ns() - c0;
}

/* " KEY=mean" of one figure, or " KEY=-" when it was not measured. */
static size_t put_mean(char *buf, size_t n, size_t o, const char *key,
                       int have, double sum, double count, int decimals) {
  if (o >= n)
    return o;
  int k = have ? snprintf(buf + o, n - o, " %s=", key)
               : snprintf(buf + o, n - o, " %s=-", key);
  if (k > 0)
    o += (size_t)k;
  if (have && o < n &&
      (k = snprintf(buf + o, n - o, "%.*f", decimals, sum / count)) > 0)
    o += (size_t)k;
  return o;
}

const char *dr_train_threads_final(const dr_run_t *r, char *buf, size_t n) {
  const dr_train_threads_t *t = r->threads;
  buf[0] = '\0';
  if (t == NULL)
    return buf;
  double steps = t->n > 0 ? (double)t->n : 1.0;
  size_t o = 0;
  static const char *const pre[N_THREADS] = {"compute", "comm"};
  for (int k = 0; k < N_THREADS; k++) {
    /* No communication thread: nothing was spent there. */
    unsigned have = k == COMM && t->comm_tid == 0 ? ~0u : t->have[k];
    const dr_thread_cpu_t *s = &t->sum[k];
    char key[32];
    snprintf(key, sizeof(key), "%s_cpu_ms", pre[k]);
    o = put_mean(buf, n, o, key, have & DR_TCPU_CPU, s->cpu_ns / 1e6, steps,
                 3);
    snprintf(key, sizeof(key), "%s_wait_ms", pre[k]);
    o = put_mean(buf, n, o, key, have & DR_TCPU_WAIT, s->wait_ns / 1e6,
                 steps, 3);
    snprintf(key, sizeof(key), "%s_vol_cs", pre[k]);
    o = put_mean(buf, n, o, key, have & DR_TCPU_CS, (double)s->vol_cs, steps,
                 2);
    snprintf(key, sizeof(key), "%s_invol_cs", pre[k]);
    o = put_mean(buf, n, o, key, have & DR_TCPU_CS, (double)s->invol_cs,
                 steps, 2);
  }
  put_mean(buf, n, o, "thread_sample_us", 1, t->sample_ns / 1e3, steps,
           1);
  return buf;
}

void dr_train_threads_free(dr_run_t *r) {
  free(r->threads);
  r->threads = NULL;
}
