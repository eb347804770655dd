/* Peak resident memory. See peak_mem.h. */
#include "peak_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* VmHWM in bytes, or 0. */
static uint64_t vm_hwm(void) {
  FILE *f = fopen("/proc/self/status", "re");
  if (f == NULL)
    return 0;
  char line[256];
  uint64_t bytes = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "VmHWM:", 6) != 0)
      continue;
    char *end = NULL;
    unsigned long long kib = strtoull(line + 6, &end, 10);
    if (end != line + 6 && strstr(end, "kB") != NULL)
      bytes = (uint64_t)kib * 1024u;
    break;
  }
  fclose(f);
  return bytes;
}

uint64_t dr_peak_rss_bytes(void) {
  uint64_t b = vm_hwm();
  if (b > 0)
    return b;
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0 || ru.ru_maxrss <= 0)
    return 0;
  return (uint64_t)ru.ru_maxrss * 1024u; /* KiB on Linux */
}
