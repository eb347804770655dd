/* See signals.h. */
#include "signals.h"

#include <pthread.h>
#include <string.h>

void dr_signals_stop_set(sigset_t *set) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
                             SIGUSR2};
  sigemptyset(set);
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
    sigaddset(set, sigs[i]);
}

void dr_signals_block(const sigset_t *set) {
  pthread_sigmask(SIG_BLOCK, set, NULL);
}

void dr_signals_unblock(const sigset_t *set) {
  pthread_sigmask(SIG_UNBLOCK, set, NULL);
}

void dr_signals_ignore(const sigset_t *set) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_IGN;
  sigemptyset(&sa.sa_mask);
  for (int s = 1; s < NSIG; s++)
    if (sigismember(set, s) == 1 && s != SIGKILL && s != SIGSTOP)
      sigaction(s, &sa, NULL);
}
