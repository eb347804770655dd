/* A size as a sentence or a table gives it: "12.3 GiB", "245 MiB",
 * "12 KiB". One helper for the status table and the failure summary. */
#ifndef DR_SIZE_TEXT_H
#define DR_SIZE_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static inline const char *dr_size_text(uint64_t bytes, char *out, size_t n) {
  if (bytes >= (1ull << 30))
    snprintf(out, n, "%.1f GiB", (double)bytes / 1073741824.0);
  else if (bytes >= (1ull << 20))
    snprintf(out, n, "%.0f MiB", (double)bytes / 1048576.0);
  else
    snprintf(out, n, "%.0f KiB", (double)bytes / 1024.0);
  return out;
}

#endif /* DR_SIZE_TEXT_H */
