#include "exit_codes.h"

#include <string.h>

#include <signal.h>
#include <stddef.h>

static const dr_exit_info_t table[] = {
#define DR__EXIT_ROW(name, code, policy, echo, brief, meaning)                \
  {code, #name, policy, echo, brief, meaning},
    DR_EXIT_MAP(DR__EXIT_ROW)
#undef DR__EXIT_ROW
};

const dr_exit_info_t *dr_exit_info(int code) {
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (table[i].code == code)
      return &table[i];
  return NULL;
}

const dr_exit_info_t *dr_exit_table(int *n) {
  *n = (int)(sizeof(table) / sizeof(table[0]));
  return table;
}

dr_exit_policy_t dr_exit_policy(int code, int signal) {
  if (signal != 0)
    return signal == SIGUSR1 ? DR_EXIT_STOP : DR_EXIT_RESTART;
  const dr_exit_info_t *e = dr_exit_info(code);
  return e != NULL ? e->policy : DR_EXIT_RESTART;
}

int dr_exit_is_echo(int code, int signal) {
  if (signal != 0)
    return 0;
  const dr_exit_info_t *e = dr_exit_info(code);
  return e != NULL && e->echo;
}

/* memmem on a length-bounded message. */
static int has(const char *msg, size_t len, const char *word) {
  size_t n = strlen(word);
  for (size_t i = 0; n <= len && i <= len - n; i++)
    if (memcmp(msg + i, word, n) == 0)
      return 1;
  return 0;
}

int dr_failure_is_echo(int code, int signal, const char *msg, size_t len) {
  if (dr_exit_is_echo(code, signal))
    return 1;
  if (signal != 0 || code == 0 || msg == NULL)
    return 0;
  static const char *const peer_gone[] = {
      "Connection closed by peer", "Connection reset by peer", "Broken pipe",
      "DistNetworkError", "remote process exited or there was a network error",
  };
  for (size_t i = 0; i < sizeof(peer_gone) / sizeof(peer_gone[0]); i++)
    if (has(msg, len, peer_gone[i]))
      return 1;
  return 0;
}
