#include "fs.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

int dr_mkdirs(const char *path) {
  char buf[4096];
  if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
    return -ENAMETOOLONG;
  for (char *p = buf + 1; *p != '\0'; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return -errno;
    *p = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST)
    return -errno;
  return 0;
}
