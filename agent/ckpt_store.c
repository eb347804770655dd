/* The agent's checkpoint directory: set-up and lock, the inventory, the
 * copies that peers send, retention (ckpt_store.h). */
#include "ckpt_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ckpt_index.h"
#include "errors.h"
#include "grow.h"
#include "wire.h"

#define META ".ddprun"
#define INCOMING "incoming"
/* Names this store renamed into DIR that the watch has not seen yet. */
#define EXPECT_MAX 32

struct dr_ckpt_store {
  pthread_mutex_t mu;
  char *dir;
  int dirfd, metafd, infd, lockfd;
  uint32_t keep;
  dr_ckpt_index_t idx;
  char expect[EXPECT_MAX][DR_CKPT_NAME_MAX + 1];
  size_t n_expect;
  unsigned seq;
};

int dr_ckpt_mkdirs(const char *path) {
  char p[4096];
  if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
    return -ENAMETOOLONG;
  for (char *s = p + 1;; s++) {
    char c = *s;
    if (c != '/' && c != '\0')
      continue;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
      return -errno;
    *s = c;
    if (c == '\0')
      break;
  }
  return 0;
}

static int open_dir_at(int at, const char *name) {
  int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}

/* Depth-first; each level holds one open directory, at most RM_DEPTH. */
#define RM_DEPTH 64
static int rm_tree(int dirfd, const char *name, int depth) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? 0 : -errno;
  if (!S_ISDIR(st.st_mode))
    return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
  if (depth >= RM_DEPTH)
    return -ELOOP;
  int fd = open_dir_at(dirfd, name);
  if (fd < 0)
    return fd;
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    int e = -errno;
    close(fd);
    return e;
  }
  int rc = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    int r = rm_tree(fd, de->d_name, depth + 1);
    if (r != 0 && rc == 0)
      rc = r;
  }
  closedir(d);
  if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT &&
      rc == 0)
    rc = -errno;
  return rc;
}

int dr_ckpt_rm_at(int dirfd, const char *name) {
  return rm_tree(dirfd, name, 0);
}

int dr_ckpt_store_open(const char *dir, uint32_t keep, dr_ckpt_store_t **out,
                       char *err, size_t err_len) {
  *out = NULL;
  dr_ckpt_store_t *s = calloc(1, sizeof(*s));
  if (s == NULL || (s->dir = strdup(dir)) == NULL) {
    free(s);
    snprintf(err, err_len, "out of memory");
    return -ENOMEM;
  }
  s->dirfd = s->metafd = s->infd = s->lockfd = -1;
  s->keep = keep > 0 ? keep : 1;
  pthread_mutex_init(&s->mu, NULL);
  const char *what = "create";
  int rc = dr_ckpt_mkdirs(dir);
  if (rc == 0 && (rc = s->dirfd = open_dir_at(AT_FDCWD, dir)) >= 0)
    rc = 0;
  if (rc == 0) {
    what = "write in";
    if (mkdirat(s->dirfd, META, 0700) != 0 && errno != EEXIST)
      rc = -errno;
  }
  if (rc == 0 && (rc = s->metafd = open_dir_at(s->dirfd, META)) >= 0)
    rc = 0;
  if (rc == 0) {
    s->lockfd = openat(s->metafd, "lock",
                       O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    rc = s->lockfd < 0 ? -errno : 0;
  }
  if (rc == 0 && flock(s->lockfd, LOCK_EX | LOCK_NB) != 0) {
    rc = -errno;
    if (rc == -EWOULDBLOCK) {
      snprintf(err, err_len, "--ckpt-dir %s is in use by another ddprun on "
               "this host; give each its own", dir);
      goto fail;
    }
  }
  if (rc == 0) {
    dr_ckpt_rm_at(s->metafd, INCOMING); /* a killed agent's partial copies */
    if (mkdirat(s->metafd, INCOMING, 0700) != 0)
      rc = -errno;
  }
  if (rc == 0 && (rc = s->infd = open_dir_at(s->metafd, INCOMING)) >= 0)
    rc = 0;
  if (rc != 0) {
    snprintf(err, err_len, "cannot %s --ckpt-dir %s (%s)", what, dir,
             dr_strerror(rc));
    goto fail;
  }
  if ((rc = dr_ckpt_index_load(&s->idx, s->metafd)) != 0) {
    snprintf(err, err_len, "cannot read %s/" META "/origins (%s)", dir,
             dr_strerror(rc));
    goto fail;
  }
  *out = s;
  return 0;
fail:
  dr_ckpt_store_close(&s);
  return rc;
}

void dr_ckpt_store_close(dr_ckpt_store_t **sp) {
  dr_ckpt_store_t *s = *sp;
  if (s == NULL)
    return;
  int fds[] = {s->infd, s->lockfd, s->metafd, s->dirfd};
  for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
    if (fds[i] >= 0)
      close(fds[i]); /* the lock goes with its descriptor */
  dr_ckpt_index_free(&s->idx);
  pthread_mutex_destroy(&s->mu);
  free(s->dir);
  free(s);
  *sp = NULL;
}

const char *dr_ckpt_store_dir(const dr_ckpt_store_t *s) { return s->dir; }

static int newest_first(const void *a, const void *b) {
  const dr_ckpt_item_t *x = a, *y = b;
  if (x->step != y->step)
    return x->step > y->step ? -1 : 1;
  return strcmp(x->name, y->name);
}

int dr_ckpt_list_at(int dirfd, dr_ckpt_item_t **items, size_t *n) {
  *items = NULL;
  *n = 0;
  int fd = open_dir_at(dirfd, ".");
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (d == NULL) {
    int e = fd < 0 ? fd : -errno;
    if (fd >= 0)
      close(fd);
    return e;
  }
  dr_ckpt_item_t *a = NULL;
  size_t cap = 0, k = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    uint64_t step;
    struct stat st;
    if (!dr_ckpt_name_step(de->d_name, &step) ||
        strlen(de->d_name) > DR_CKPT_NAME_MAX ||
        fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)))
      continue;
    dr_ckpt_item_t *g = dr_grow(a, &cap, k + 1, sizeof(*a), 16);
    if (g == NULL) {
      free(a);
      closedir(d);
      return -ENOMEM;
    }
    a = g;
    snprintf(a[k].name, sizeof(a[k].name), "%s", de->d_name);
    a[k].step = step;
    a[k].is_dir = S_ISDIR(st.st_mode);
    a[k].origin = DR_CKPT_LOCAL;
    k++;
  }
  closedir(d);
  if (k > 1)
    qsort(a, k, sizeof(*a), newest_first);
  *items = a;
  *n = k;
  return 0;
}

/* The inventory, under the lock, with each checkpoint's origin. */
static int list_locked(dr_ckpt_store_t *s, dr_ckpt_item_t **items,
                       size_t *n) {
  int rc = dr_ckpt_list_at(s->dirfd, items, n);
  for (size_t i = 0; rc == 0 && i < *n; i++)
    (*items)[i].origin = dr_ckpt_index_get(&s->idx, (*items)[i].name);
  return rc;
}

int dr_ckpt_store_list(dr_ckpt_store_t *s, dr_ckpt_item_t **items,
                       size_t *n) {
  pthread_mutex_lock(&s->mu);
  int rc = list_locked(s, items, n);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

uint64_t dr_ckpt_store_newest(dr_ckpt_store_t *s) {
  dr_ckpt_item_t *a;
  size_t n;
  if (dr_ckpt_store_list(s, &a, &n) != 0)
    return DR_NONE;
  uint64_t step = n > 0 ? a[0].step : DR_NONE;
  free(a);
  return step;
}

int dr_ckpt_store_find_step(dr_ckpt_store_t *s, uint64_t step, char *name,
                            size_t n, uint32_t *origin) {
  dr_ckpt_item_t *a;
  size_t k;
  int rc = dr_ckpt_store_list(s, &a, &k);
  if (rc != 0)
    return rc;
  rc = DR_ENOTFOUND;
  for (size_t i = 0; i < k; i++) {
    if (a[i].step != step)
      continue;
    if (rc == 0 && a[i].origin != DR_CKPT_LOCAL)
      continue; /* a copy of this node's own is preferred */
    snprintf(name, n, "%s", a[i].name);
    *origin = a[i].origin;
    rc = 0;
  }
  free(a);
  return rc;
}

uint32_t dr_ckpt_store_origin(dr_ckpt_store_t *s, const char *name) {
  pthread_mutex_lock(&s->mu);
  uint32_t o = dr_ckpt_index_get(&s->idx, name);
  pthread_mutex_unlock(&s->mu);
  return o;
}

int dr_ckpt_store_claim(dr_ckpt_store_t *s, const char *name) {
  pthread_mutex_lock(&s->mu);
  int ours = 1;
  for (size_t i = 0; i < s->n_expect; i++) {
    if (strcmp(s->expect[i], name) != 0)
      continue;
    memmove(s->expect[i], s->expect[i + 1],
            (s->n_expect - i - 1) * sizeof(s->expect[0]));
    s->n_expect--;
    ours = 0;
    break;
  }
  /* The workers wrote this name over a copy a peer had sent. */
  if (ours && dr_ckpt_index_drop(&s->idx, name))
    dr_ckpt_index_save(&s->idx, s->metafd);
  pthread_mutex_unlock(&s->mu);
  return ours;
}

int dr_ckpt_store_incoming(dr_ckpt_store_t *s, char *tmp, size_t n,
                           int *dirfd) {
  pthread_mutex_lock(&s->mu);
  int rc = -EEXIST;
  for (int tries = 0; tries < 100 && rc == -EEXIST; tries++) {
    snprintf(tmp, n, "copy-%d-%u", (int)getpid(), s->seq++);
    rc = mkdirat(s->infd, tmp, 0700) == 0 ? 0 : -errno;
  }
  if (rc == 0 && (*dirfd = open_dir_at(s->infd, tmp)) < 0) {
    rc = *dirfd;
    unlinkat(s->infd, tmp, AT_REMOVEDIR);
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void dr_ckpt_store_discard(dr_ckpt_store_t *s, const char *tmp) {
  dr_ckpt_rm_at(s->infd, tmp);
}

static int retain_locked(dr_ckpt_store_t *s, uint64_t upto);

int dr_ckpt_rename_new(int from_dir, const char *from, int to_dir,
                       const char *to) {
  if (renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE) == 0)
    return 0;
  if (errno != EINVAL && errno != ENOSYS)
    return -errno;
  struct stat st;
  if (fstatat(to_dir, to, &st, AT_SYMLINK_NOFOLLOW) == 0)
    return -EEXIST;
  return renameat(from_dir, from, to_dir, to) == 0 ? 0 : -errno;
}

int dr_ckpt_store_commit(dr_ckpt_store_t *s, const char *tmp,
                         const char *name, uint32_t origin) {
  pthread_mutex_lock(&s->mu);
  int rc = 0, from = open_dir_at(s->infd, tmp);
  if (from < 0) {
    rc = from;
    goto out;
  }
  /* The index first: a reader that finds the name in DIR also finds its
   * origin. */
  uint32_t before = dr_ckpt_index_get(&s->idx, name);
  if (origin == DR_CKPT_LOCAL) {
    if (dr_ckpt_index_drop(&s->idx, name)) /* this node's own: no line */
      rc = dr_ckpt_index_save(&s->idx, s->metafd);
  } else if ((rc = dr_ckpt_index_set(&s->idx, name, origin)) == 0) {
    rc = dr_ckpt_index_save(&s->idx, s->metafd);
  }
  /* Only this store renames into DIR, under its lock, and the workers'
   * names are theirs to replace: where the file system lacks
   * RENAME_NOREPLACE, the look that stands in for it leaves no window. */
  if (rc == 0)
    rc = dr_ckpt_rename_new(from, name, s->dirfd, name);
  if (rc != 0) {
    /* What DIR already holds under that name keeps the origin it had. */
    if (before == DR_CKPT_LOCAL)
      dr_ckpt_index_drop(&s->idx, name);
    else
      dr_ckpt_index_set(&s->idx, name, before);
    dr_ckpt_index_save(&s->idx, s->metafd);
  } else {
    if (s->n_expect == EXPECT_MAX) /* the watch missed the oldest */
      memmove(s->expect[0], s->expect[1], --s->n_expect * sizeof(s->expect[0]));
    snprintf(s->expect[s->n_expect++], sizeof(s->expect[0]), "%s", name);
  }
  close(from);
out:
  dr_ckpt_rm_at(s->infd, tmp);
  uint64_t step;
  if (rc == 0)
    retain_locked(s, dr_ckpt_name_step(name, &step) == 1 ? step : UINT64_MAX);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* The newest `keep` of each origin up to step `upto` stay; what is later
 * than upto (a checkpoint of another run, one planted or damaged under a
 * later name) is neither removed nor counted, so that it never costs the
 * checkpoints the job can resume from. */
static int retain_locked(dr_ckpt_store_t *s, uint64_t upto) {
  dr_ckpt_item_t *a;
  size_t n;
  int rc = list_locked(s, &a, &n);
  if (rc != 0)
    return rc;
  int removed = 0, dropped = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    if (a[i].step > upto)
      continue;
    uint32_t seen = 0; /* newer ones of the same origin (a is newest first) */
    for (size_t j = 0; j < i; j++)
      seen += a[j].origin == a[i].origin && a[j].step <= upto;
    if (seen < s->keep)
      continue;
    int r = dr_ckpt_rm_at(s->dirfd, a[i].name);
    if (r != 0 && first == 0)
      first = r;
    if (r == 0)
      removed++;
    if (r == 0 && dr_ckpt_index_drop(&s->idx, a[i].name))
      dropped++;
  }
  /* Names the index holds that DIR no longer has (removed by hand, or by
   * the workers' own pruning) go too. */
  for (size_t i = 0; i < s->idx.n;) {
    int here = 0;
    for (size_t j = 0; j < n && !here; j++)
      here = strcmp(a[j].name, s->idx.e[i].name) == 0;
    if (here) {
      i++;
      continue;
    }
    s->idx.e[i] = s->idx.e[--s->idx.n];
    dropped++;
  }
  free(a);
  if (dropped > 0)
    dr_ckpt_index_save(&s->idx, s->metafd);
  return first != 0 ? first : removed;
}

int dr_ckpt_store_retain(dr_ckpt_store_t *s, uint64_t upto) {
  pthread_mutex_lock(&s->mu);
  int rc = retain_locked(s, upto);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int dr_ckpt_open_at(int dirfd, const char *name, int *fd, int *is_dir) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? DR_ENOTFOUND : -errno;
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return DR_ENOTFOUND;
  *is_dir = S_ISDIR(st.st_mode);
  *fd = openat(dirfd, name,
               O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
                   (*is_dir ? O_DIRECTORY : 0));
  if (*fd < 0)
    return errno == ENOENT ? DR_ENOTFOUND : -errno;
  /* Non-blocking only for the open: a FIFO put there since the stat
   * must not hold it. Reads of a regular file never block anyway. */
  fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK);
  if (fstat(*fd, &st) != 0 || (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
    close(*fd);
    return DR_ENOTFOUND;
  }
  return 0;
}

int dr_ckpt_store_open_item(dr_ckpt_store_t *s, const char *name, int *fd,
                            int *is_dir) {
  return dr_ckpt_open_at(s->dirfd, name, fd, is_dir);
}

int dr_ckpt_store_room(dr_ckpt_store_t *s, uint64_t *bytes) {
  struct statvfs v;
  if (fstatvfs(s->dirfd, &v) != 0)
    return -errno;
  *bytes = (uint64_t)v.f_bavail * v.f_frsize;
  return 0;
}
