/* hangprobe: a worker for the hang tests. Every rank runs steps of
 * --step-ms (half of it busy, half asleep) and reports each to its agent
 * through the progress slot, as train does (not with --no-report). At step
 * --at, rank --rank gets stuck in the way --how says and every other rank
 * waits for it, blocked as in a collective whose peer never comes:
 *
 *   spin    busy-loops on the CPU
 *   sleep   sleeps (nanosleep)
 *   stop    stops itself (SIGSTOP)
 *
 * The stuck rank prints "stuck at step N (how) at T" (T: wall-clock
 * seconds) on stderr first. Nothing runs past --max-s (60 s by default):
 * a launcher that fails to stop it cannot leave it behind for long.
 *
 * With --for MS the stuck rank is only held up for MS (a long evaluation
 * when it spins), the others wait as long, then every rank goes on; with
 * --steps N every rank exits 0 after step N.
 *
 *   hangprobe --rank 3 --at 50 --how spin [--no-report] [--step-ms 10]
 *             [--for MS] [--steps N] [--max-s 60] [--marker STRING]
 * Exit codes: 0 after --steps, 64 a bad option, 70 past --max-s. */
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "progress.h"

static double wall(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_alarm(int sig) {
  (void)sig;
  _exit(70);
}

static volatile uint64_t sink;

/* Out of line whatever the build type: the spinning rank's stack must show
 * a frame of its own (busy_for), apart from its waiting peers' main, or an
 * optimised build would show both in main and the stacks could not tell
 * them apart. */
__attribute__((noinline, noclone)) static void busy_for(double secs) {
  double end = mono() + secs;
  while (mono() < end)
    for (int i = 0; i < 1000; i++)
      sink += (uint64_t)i * 2654435761u;
}

int main(int argc, char **argv) {
  long stuck_rank = -1, at = -1, step_ms = 10, max_s = 60, for_ms = -1;
  long steps = -1;
  const char *how = "spin";
  int report = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--no-report") == 0) {
      report = 0;
      continue;
    }
    if (v == NULL) {
      fprintf(stderr, "hangprobe: %s needs a value\n", a);
      return 64;
    }
    i++;
    if (strcmp(a, "--rank") == 0)
      stuck_rank = atol(v);
    else if (strcmp(a, "--at") == 0)
      at = atol(v);
    else if (strcmp(a, "--how") == 0)
      how = v;
    else if (strcmp(a, "--step-ms") == 0)
      step_ms = atol(v);
    else if (strcmp(a, "--max-s") == 0)
      max_s = atol(v);
    else if (strcmp(a, "--for") == 0)
      for_ms = atol(v);
    else if (strcmp(a, "--steps") == 0)
      steps = atol(v);
    else if (strcmp(a, "--marker") != 0) {
      fprintf(stderr, "hangprobe: unknown option %s\n", a);
      return 64;
    }
  }
  if (strcmp(how, "spin") != 0 && strcmp(how, "sleep") != 0 &&
      strcmp(how, "stop") != 0) {
    fprintf(stderr, "hangprobe: --how is spin, sleep or stop\n");
    return 64;
  }
  signal(SIGALRM, on_alarm);
  alarm((unsigned)max_s);
  const char *r = getenv("RANK");
  long rank = r != NULL ? atol(r) : 0;
  dr_progress_t *p = report ? dr_progress_attach_env() : NULL;
  for (long step = 0;; step++) {
    if (steps >= 0 && step == steps) {
      dr_progress_close(&p);
      return 0;
    }
    if (step == at) {
      if (rank != stuck_rank) {
        poll(NULL, 0, (int)for_ms); /* waits for a peer (that never comes) */
        continue;
      }
      fprintf(stderr, "hangprobe: rank %ld stuck at step %ld (%s) at %.3f\n",
              rank, step, how, wall());
      if (for_ms >= 0 && strcmp(how, "spin") == 0) {
        busy_for((double)for_ms / 1000.0);
        continue;
      }
      if (strcmp(how, "spin") == 0)
        for (;;)
          busy_for(1.0);
      if (strcmp(how, "stop") == 0)
        raise(SIGSTOP);
      for (;;)
        sleep(3600);
    }
    busy_for((double)step_ms / 2000.0);
    struct timespec ts = {0, step_ms * 500000L};
    nanosleep(&ts, NULL);
    dr_progress_report(p, (uint64_t)step + 1);
  }
}
