/* The one-line failure reports of the checked GPU calls. */
#include "gpu_check.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static uint32_t g_rank;
static char g_host[256] = "?";

void dr_gpu_check_identity(uint32_t rank, const char *host) {
  g_rank = rank;
  if (host != NULL)
    snprintf(g_host, sizeof(g_host), "%s", host);
  else if (gethostname(g_host, sizeof(g_host)) != 0)
    snprintf(g_host, sizeof(g_host), "?");
  g_host[sizeof(g_host) - 1] = '\0';
}

int dr__gpu_fail(int code, const char *file, int line, const char *call,
                 const char *what) {
  const char *base = strrchr(file, '/');
  fprintf(stderr, "train: rank %u (host %s, pid %d): %s:%d: %s failed: %s\n",
          g_rank, g_host, (int)getpid(), base != NULL ? base + 1 : file, line,
          call, what != NULL ? what : "unknown error");
  return code;
}
