/* The checkpoint directory: its names, the listing of its checkpoints,
 * the search for the newest valid one, and pruning (old checkpoints and
 * the temporary files of dead writers). */
#include "ckpt_internal.h"
#include "grow.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME_LEN 19 /* "ckpt-" + 10 digits + ".bin" */

int dr_ckpt_path(char *buf, size_t n, const char *dir, uint64_t step) {
  int k = snprintf(buf, n, "%s/ckpt-%010" PRIu64 ".bin", dir, step);
  return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

/* The step of a checkpoint's name; with tmp, of a temporary file's name
 * (ckpt-DDDDDDDDDD.bin.tmp.PID), whose pid goes to *pid. */
static int parse_name(const char *name, int tmp, uint64_t *step, long *pid) {
  if (strncmp(name, "ckpt-", 5) != 0)
    return 0;
  uint64_t s = 0;
  for (int i = 5; i < 15; i++) {
    if (name[i] < '0' || name[i] > '9')
      return 0;
    s = s * 10 + (uint64_t)(name[i] - '0');
  }
  if (strncmp(name + 15, ".bin", 4) != 0)
    return 0;
  *step = s;
  if (!tmp)
    return name[NAME_LEN] == '\0';
  const char *p = name + NAME_LEN;
  if (strncmp(p, DR__CKPT_TMP_TAG, strlen(DR__CKPT_TMP_TAG)) != 0)
    return 0;
  p += strlen(DR__CKPT_TMP_TAG);
  char *end;
  errno = 0;
  long v = strtol(p, &end, 10);
  if (end == p || *end != '\0' || errno != 0)
    return 0;
  *pid = v;
  return 1;
}

static int cmp_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* 1 when the entry e of d is a regular file, or a symbolic link to one. */
static int is_file(DIR *d, const struct dirent *e) {
  if (e->d_type == DT_REG)
    return 1;
  if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN)
    return 0;
  struct stat st;
  return fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode);
}

/* The steps of dir's checkpoint names, newest first: of every entry so
 * named, or with files_only of the regular files alone. */
static int list_steps(const char *dir, int files_only, uint64_t **steps,
                      size_t *n) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (d == NULL)
    return errno == ENOENT ? 0 : -errno;
  size_t cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t step;
    if (!parse_name(e->d_name, 0, &step, NULL) ||
        (files_only && !is_file(d, e)))
      continue;
    uint64_t *grown = dr_grow(*steps, &cap, *n + 1, sizeof(uint64_t), 16);
    if (grown == NULL) {
      rc = -ENOMEM;
      break;
    }
    *steps = grown;
    (*steps)[(*n)++] = step;
  }
  closedir(d);
  if (rc != 0) {
    free(*steps);
    *steps = NULL;
    *n = 0;
    return rc;
  }
  if (*n > 0)
    qsort(*steps, *n, sizeof(uint64_t), cmp_desc);
  return 0;
}

int dr_ckpt_list(const char *dir, uint64_t **steps, size_t *n) {
  return list_steps(dir, 1, steps, n);
}

/* An entry named like a checkpoint, as dr_ckpt_find_latest sees it. */
typedef struct {
  uint64_t named; /* the step of its name */
  uint64_t step;  /* the step of its header, when rc is 0 */
  int rc;         /* of reading its header */
  int reported;
} cand_t;

/* The readable headers first, newest step first and, of two with the
 * same step, the one whose name agrees; then the others by name. */
static int cand_cmp(const void *a, const void *b) {
  const cand_t *x = a, *y = b;
  if ((x->rc == 0) != (y->rc == 0))
    return x->rc == 0 ? -1 : 1;
  if (x->rc == 0 && x->step != y->step)
    return x->step < y->step ? 1 : -1;
  if (x->rc == 0 && (x->named == x->step) != (y->named == y->step))
    return x->named == x->step ? -1 : 1;
  return x->named < y->named ? 1 : x->named > y->named ? -1 : 0;
}

int dr_ckpt_find_latest(const char *dir, dr_ckpt_header_t *h, char *path,
                        size_t path_len, dr_ckpt_skip_fn skip, void *arg) {
  uint64_t *steps;
  size_t count;
  int rc = list_steps(dir, 0, &steps, &count);
  if (rc != 0)
    return rc;
  cand_t *c = count > 0 ? calloc(count, sizeof(*c)) : NULL;
  if (count > 0 && c == NULL) {
    free(steps);
    return -ENOMEM;
  }
  char p[4096], why[512];
  dr_ckpt_header_t fh;
  int found = 0;
  uint64_t best = 0;
  /* Every header first (a few hundred bytes each): a file's step is the
   * one it records, whatever its name says. */
  for (size_t i = 0; i < count && rc == 0; i++) {
    c[i].named = steps[i];
    if (dr_ckpt_path(p, sizeof(p), dir, steps[i]) != 0) {
      rc = -ENAMETOOLONG;
      break;
    }
    c[i].rc = dr_ckpt_read_header(p, &fh, NULL, 0);
    c[i].step = c[i].rc == 0 ? fh.step : 0;
  }
  free(steps);
  if (rc != 0)
    goto out;
  if (count > 0)
    qsort(c, count, sizeof(*c), cand_cmp);
  for (size_t i = 0; i < count && c[i].rc == 0 && !found; i++) {
    dr_ckpt_path(p, sizeof(p), dir, c[i].named);
    why[0] = '\0';
    int v = dr_ckpt_verify(p, h, why, sizeof(why));
    c[i].reported = 1;
    if (v == 0) {
      snprintf(path, path_len, "%s", p);
      found = 1;
      best = h->step;
    } else if (v != 0 && skip != NULL) {
      skip(arg, p, v, why);
    }
  }
  /* What its name claims to be newer than the choice, though it was not
   * tried: not a file, an unreadable header, or an older step inside. */
  for (size_t i = 0; i < count && skip != NULL; i++) {
    if (c[i].reported || (found && c[i].named <= best))
      continue;
    dr_ckpt_path(p, sizeof(p), dir, c[i].named);
    why[0] = '\0';
    int v = c[i].rc == 0 ? 0 : dr_ckpt_read_header(p, &fh, why, sizeof(why));
    if (v != 0) {
      skip(arg, p, v, why);
    } else if (c[i].rc == 0 && c[i].step != c[i].named) {
      snprintf(why, sizeof(why), "it holds the checkpoint of step %" PRIu64
               ", not of step %" PRIu64 " as its name says, and a newer "
               "one is here", c[i].step, c[i].named);
      skip(arg, p, DR_CKPT_ESTEP, why);
    }
  }
  rc = found;
out:
  free(c);
  return rc;
}

int dr_ckpt_remove_temp(const char *dir, char *err, size_t n) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return errno == ENOENT ? 0
                           : dr__ckpt_fail(err, n, -errno, "opendir() of %s "
                                           "failed (%s)", dir, strerror(errno));
  int removed = 0, rc = 0;
  long self = (long)getpid();
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t step;
    long pid;
    if (!parse_name(e->d_name, 1, &step, &pid) || pid == self)
      continue;
    char p[4400];
    snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
    if (unlink(p) == 0)
      removed++;
    else if (errno != ENOENT && rc == 0)
      rc = dr__ckpt_fail(err, n, -errno, "unlink() of %s failed (%s)", p,
                         strerror(errno));
  }
  closedir(d);
  return rc != 0 ? rc : removed;
}

int dr_ckpt_prune(const char *dir, uint64_t upto, uint32_t keep, char *err,
                  size_t n) {
  uint64_t *steps;
  size_t count;
  int rc = dr_ckpt_list(dir, &steps, &count);
  if (rc != 0)
    return dr__ckpt_fail(err, n, rc, "cannot list %s (%s)", dir, strerror(-rc));
  int removed = 0;
  uint32_t kept = 0;
  for (size_t i = 0; i < count; i++) {
    if (steps[i] > upto)
      continue;
    if (kept < keep) {
      kept++;
      continue;
    }
    char p[4096];
    if (dr_ckpt_path(p, sizeof(p), dir, steps[i]) != 0)
      continue;
    if (unlink(p) == 0)
      removed++;
    else if (errno != ENOENT && rc == 0)
      rc = dr__ckpt_fail(err, n, -errno, "unlink() of %s failed (%s)", p,
                         strerror(errno));
  }
  free(steps);
  if (rc != 0)
    return rc;
  int t = dr_ckpt_remove_temp(dir, err, n);
  return t < 0 ? t : removed + t;
}
