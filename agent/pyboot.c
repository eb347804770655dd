/* Writing the Python start-up hook's files (pyboot.h). */
#include "pyboot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "embedded.h"
#include "fs.h"

static int write_file(const char *dir, const dr_embedded_t *f) {
  char path[1100];
  if (snprintf(path, sizeof(path), "%s/%s", dir, f->name) >= (int)sizeof(path))
    return -ENAMETOOLONG;
  return dr_write_file(path, f->data, f->size);
}

int dr_pyboot_write(const char *root, char *dir, size_t n) {
  dir[0] = '\0';
  const char *on = getenv("DDPRUN_PYTHON_HOOKS");
  if (on != NULL && strcmp(on, "0") == 0)
    return 0;
  char d[1024];
  if (snprintf(d, sizeof(d), "%s/pyboot", root) >= (int)sizeof(d) ||
      strlen(d) >= n)
    return -ENAMETOOLONG;
  if (mkdir(d, 0755) != 0 && errno != EEXIST)
    return -errno;
  for (const dr_embedded_t *f = dr_embedded; f->name != NULL; f++) {
    int rc = write_file(d, f);
    if (rc != 0)
      return rc;
  }
  snprintf(dir, n, "%s", d);
  return 0;
}

int dr_pyboot_pythonpath(const char *dir, const char *old, char *out,
                         size_t n) {
  int k = old != NULL && old[0] != '\0'
              ? snprintf(out, n, "%s:%s", dir, old)
              : snprintf(out, n, "%s", dir);
  return k >= 0 && (size_t)k < n ? 0 : -ENAMETOOLONG;
}
