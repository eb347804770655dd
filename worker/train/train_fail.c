/* The failures that every part of train shares: a collective that failed,
 * an allocation that failed, and a rank that stops because rank 0 failed.
 * Each prints one line on stderr and returns its exit code.
 *
 * A rank that stops because rank 0 failed must not reach ddprun first:
 * its code (8, an echo) would be taken for the job's failure, or the
 * agent, stopping the node's workers on the first exit it sees, would
 * kill rank 0 before rank 0 could report the root cause. So it leaves
 * only when its agent stops it: the agent does so at once after it has
 * seen rank 0's exit on this node, or when the rendezvous server, which
 * has rank 0's report from another node, orders it. SIGTERM is caught
 * from before rank 0's verdict arrives (dr_train_hold_stop), so that a
 * stop that comes the moment rank 0 exits ends the wait instead of the
 * process, and the rank exits 8 as it said it would. */
#include "train.h"
#include "mono.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* How long a rank that stops because rank 0 failed waits for its agent's
 * SIGTERM: that takes milliseconds under ddprun; without an agent the
 * rank leaves after this. */
#define PEER_WAIT_MS 5000

int dr_train_comm_failed(dr_run_t *r, const char *what, int rc,
                         const char *msg) {
  fprintf(stderr, "train: rank %u: %s failed: %s (exit %d)\n", r->rank, what,
          msg[0] != '\0' ? msg : "collective failed", DR_TRAIN_ETIMEOUT);
  (void)rc;
  return DR_TRAIN_ETIMEOUT;
}

int dr_train_nomem(dr_run_t *r, const char *what) {
  fprintf(stderr, "train: rank %u: out of memory allocating %s (exit %d: "
          "out of memory)\n", r->rank, what, DR_TRAIN_ENOMEM);
  return DR_TRAIN_ENOMEM;
}

/* The pipe SIGTERM's handler writes a byte into while a stop is held;
 * made once and kept for the life of the process, so that a handler
 * running on another thread never writes to a closed descriptor. */
static int stop_pipe[2] = {-1, -1};
static volatile sig_atomic_t stop_held, stop_seen;

static void on_stop(int sig) {
  (void)sig;
  int saved = errno;
  stop_seen = 1;
  ssize_t k = write(stop_pipe[1], "", 1);
  (void)k; /* a full pipe already says it */
  errno = saved;
}

void dr_train_hold_stop(void) {
  if (stop_held)
    return;
  if (stop_pipe[0] < 0 && pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    stop_pipe[0] = stop_pipe[1] = -1;
    return; /* SIGTERM keeps its default action */
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, NULL) == 0)
    stop_held = 1;
}

void dr_train_release_stop(void) {
  if (!stop_held)
    return;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  stop_held = 0;
  /* A stop that came while it was held takes effect now, as it would
   * have then. */
  if (stop_seen)
    raise(SIGTERM);
}

/* Until SIGTERM (held) or PEER_WAIT_MS. */
static void wait_for_stop(void) {
  uint64_t until = dr_mono_us() + (uint64_t)PEER_WAIT_MS * 1000u;
  while (!stop_seen) {
    uint64_t now = dr_mono_us();
    if (now >= until)
      break;
    struct pollfd p = {.fd = stop_pipe[0], .events = POLLIN};
    int k = poll(&p, 1, (int)((until - now + 999u) / 1000u));
    if (k < 0 && errno != EINTR)
      break;
  }
}

int dr_train_peer_failed(dr_run_t *r, const char *why) {
  dr_train_hold_stop();
  fprintf(stderr, "train: rank %u: %s; stopping (exit %d: another rank "
          "failed)\n", r->rank, why, DR_TRAIN_EPEER);
  if (stop_held) {
    wait_for_stop();
    /* On its way out with its own code: a second SIGTERM would only take
     * that code away. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    stop_held = 0;
  }
  return DR_TRAIN_EPEER;
}
