/* Who runs the collectives: the communication thread, or the thread that
 * waits for them. See pg.h, dr_pg_config_t's schedule. */
#include "pg_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Threads each rank computes with: OpenBLAS's or OpenMP's setting. */
static long compute_threads(void) {
  const char *names[] = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"};
  for (size_t i = 0; i < 2; i++) {
    const char *v = getenv(names[i]);
    char *end;
    long n = v != NULL ? strtol(v, &end, 10) : 0;
    if (v != NULL && *v != '\0' && *end == '\0' && n > 0)
      return n;
  }
  return 1;
}

static long allowed_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return CPU_COUNT(&set);
  return sysconf(_SC_NPROCESSORS_ONLN);
}

void dr__pg_choose_schedule(dr_pg_t *pg, dr_pg_schedule_t want) {
  pg->inline_run = 0;
  pg->schedule_note[0] = '\0';
  if (pg->world == 1)
    return;
  int all_shm = pg->send.kind == DR_LINK_SHM && pg->recv.kind == DR_LINK_SHM;
  long cpus = allowed_cpus(), per = compute_threads();
  /* DDPRUN_CPUS: ddprun --cpu-bind gave this rank a set of its own; else
   * the host's ranks share the one this process has. */
  const char *bound = getenv("DDPRUN_CPUS");
  long sharing = bound != NULL && *bound != '\0' ? 1 : (long)pg->local_world;
  long busy = sharing * (per + 1);
  int full = cpus > 0 && busy > cpus;
  /* Every communication thread asks: ranks of other nodes may share these
   * CPUs too (containers, network namespaces), which no count here sees.
   * DR_PG_COMM_RT=0: never (to measure what it is worth). */
  const char *rt = getenv("DR_PG_COMM_RT");
  pg->comm_rt_wanted = !(rt != NULL && strcmp(rt, "0") == 0);
  pg->cpus_note_busy = busy;
  pg->cpus_note_cpus = cpus;
  if (want == DR_PG_SCHED_INLINE ||
      (want == DR_PG_SCHED_AUTO && all_shm && full)) {
    pg->comm_rt_wanted = 0;
    pg->inline_run = 1;
    if (want == DR_PG_SCHED_INLINE)
      snprintf(pg->schedule_note, sizeof(pg->schedule_note),
               "collectives on the waiting thread (asked for)");
    else
      snprintf(pg->schedule_note, sizeof(pg->schedule_note),
               "collectives on the waiting thread: %ld rank%s x %ld "
               "compute thread%s + a communication thread each fill the "
               "%ld CPU%s allowed", sharing, sharing == 1 ? "" : "s", per,
               per == 1 ? "" : "s", cpus, cpus == 1 ? "" : "s");
  }
}

void dr__pg_comm_priority(dr_pg_t *pg) {
  pg->comm_rt_rc = 0;
  if (!pg->comm_rt_wanted)
    return;
  struct sched_param sp = {.sched_priority = 1};
  int rc = pthread_setschedparam(pthread_self(), SCHED_RR, &sp);
  pg->comm_rt_rc = -rc;
}

void dr__pg_note_priority(dr_pg_t *pg) {
  if (!pg->comm_rt_wanted)
    return;
  if (pg->comm_rt_rc == 0)
    snprintf(pg->schedule_note, sizeof(pg->schedule_note),
             "the communication thread runs at real-time priority (SCHED_RR "
             "1): %ld busy thread%s here on %ld CPU%s, it never waits behind "
             "a compute thread", pg->cpus_note_busy,
             pg->cpus_note_busy == 1 ? "" : "s", pg->cpus_note_cpus,
             pg->cpus_note_cpus == 1 ? "" : "s");
  else if (pg->cpus_note_cpus > 0 &&
           pg->cpus_note_busy > pg->cpus_note_cpus)
    snprintf(pg->schedule_note, sizeof(pg->schedule_note),
             "%ld busy threads on %ld CPU%s: the communication thread could "
             "not take real-time priority (%s; it needs CAP_SYS_NICE or an "
             "RLIMIT_RTPRIO), so it may wait behind the compute threads",
             pg->cpus_note_busy, pg->cpus_note_cpus,
             pg->cpus_note_cpus == 1 ? "" : "s", strerror(-pg->comm_rt_rc));
}

int dr_pg_inline(const dr_pg_t *pg) { return pg->inline_run; }

int dr_pg_links_shm(const dr_pg_t *pg) {
  return pg->world == 1 ||
         (pg->send.kind == DR_LINK_SHM && pg->recv.kind == DR_LINK_SHM);
}

const char *dr_pg_schedule_note(const dr_pg_t *pg) {
  return pg->schedule_note;
}

/* Runs queued works in order, up to and including w (inline schedule).
 * Only the thread that submits and waits calls this, so the queue's
 * order is the submission order, as on the communication thread. */
void dr__pg_run_until(dr_pg_t *pg, dr_work_t *w) {
  while (!atomic_load(&w->done)) {
    pthread_mutex_lock(&pg->mu);
    dr_work_t *h = dr__pg_pop_locked(pg);
    pthread_mutex_unlock(&pg->mu);
    if (h == NULL)
      return; /* cannot happen: w is queued until it is done */
    dr__work_run(pg, h);
    dr__work_unref(h);
  }
}
