#include "exit_codes.h"

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
