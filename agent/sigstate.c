/* What a process does with a signal, from /proc/PID/status. */
#include "sigstate.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dr_sig_default_ends(int sig) {
  switch (sig) {
  case SIGCHLD: case SIGCONT: case SIGURG: case SIGWINCH: /* ignored */
  case SIGSTOP: case SIGTSTP: case SIGTTIN: case SIGTTOU: /* stop */
  case SIGKILL: /* cannot be handled: nothing to wait for */
    return 0;
  default:
    return sig > 0 && sig < 64;
  }
}

/* The 64-bit mask of a "Name:\t%016x" line of /proc/PID/status. */
static int status_mask(const char *text, const char *name, uint64_t *mask) {
  size_t n = strlen(name);
  for (const char *p = text; p != NULL && *p != '\0';) {
    if (strncmp(p, name, n) == 0 && p[n] == ':') {
      char *end;
      errno = 0;
      unsigned long long v = strtoull(p + n + 1, &end, 16);
      if (errno != 0 || end == p + n + 1)
        return -EINVAL;
      *mask = v;
      return 0;
    }
    p = strchr(p, '\n');
    if (p != NULL)
      p++;
  }
  return -EINVAL;
}

int dr_proc_status_sig_ready(const char *text, int sig) {
  if (sig < 1 || sig > 64)
    return -EINVAL;
  uint64_t cgt, ign, blk, bit = 1ull << (sig - 1);
  if (status_mask(text, "SigCgt", &cgt) != 0 ||
      status_mask(text, "SigIgn", &ign) != 0 ||
      status_mask(text, "SigBlk", &blk) != 0)
    return -EINVAL;
  if ((cgt | ign) & bit)
    return DR_SIG_HANDLED;
  return (blk & bit) ? DR_SIG_BLOCKED : DR_SIG_DEFAULT;
}

int dr_proc_sig_ready(pid_t pid, int sig) {
  char path[64], text[4096];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return -errno;
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  return dr_proc_status_sig_ready(text, sig);
}
