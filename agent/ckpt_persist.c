/* The persist tier's copies: the newest checkpoint out to DIR2, DIR2's
 * retention, and a restore from DIR2 into an empty --ckpt-dir
 * (ckpt_persist.h). */
#include "ckpt_persist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "wire.h"

#define PARTIAL ".ddprun-partial."
/* The part of the host's name a partial copy's name holds. */
#define HOST_MAX 64

static atomic_uint partial_seq;

/* res->why: "<what> (<the code in words>)". where: a directory, or NULL. */
static int why(dr_persist_res_t *res, const char *what, const char *where,
               int rc) {
  snprintf(res->why, sizeof(res->why), "%s%s%s (%s)", what,
           where != NULL ? " " : "", where != NULL ? where : "",
           dr_strerror(rc));
  return rc;
}

/* DIR2, made when make is set and it is missing: the descriptor, or a
 * negative code with res->why. */
static int open_dir2(const char *dir2, int make, dr_persist_res_t *res) {
  int fd = open(dir2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && make) {
    int rc = dr_ckpt_mkdirs(dir2);
    if (rc != 0) {
      why(res, "cannot create the directory", NULL, rc);
      return rc;
    }
    fd = open(dir2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (fd < 0) {
    int rc = -errno;
    why(res, "cannot open the directory", NULL, rc);
    return rc;
  }
  return fd;
}

/* The checkpoints of DIR2, newest first (dr_ckpt_list_at): 0, or a
 * negative code with res->why and dir2fd closed. */
static int list_dir2(int dir2fd, dr_ckpt_item_t **a, size_t *n,
                     dr_persist_res_t *res) {
  int rc = dr_ckpt_list_at(dir2fd, a, n);
  if (rc != 0) {
    why(res, "cannot read the directory", NULL, rc);
    close(dir2fd);
  }
  return rc;
}

/* PARTIAL<host>.<pid>.<n> of this host whose pid has no process: what a
 * killed agent left. The pid of a live process (another agent on this
 * host, this one) keeps its own. */
static void remove_stale(int dir2fd, const char *host) {
  char mine[sizeof(PARTIAL) + HOST_MAX + 1];
  snprintf(mine, sizeof(mine), PARTIAL "%.*s.", HOST_MAX, host);
  size_t len = strlen(mine);
  int lfd = openat(dir2fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
  if (d == NULL) {
    if (lfd >= 0)
      close(lfd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, mine, len) != 0)
      continue;
    char *end;
    long pid = strtol(de->d_name + len, &end, 10);
    if (pid <= 0 || *end != '.' || pid == (long)getpid())
      continue;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
      dr_ckpt_rm_at(dir2fd, de->d_name);
  }
  closedir(d);
}

int dr_persist_retain(int dir2fd, uint32_t keep) {
  dr_ckpt_item_t *a;
  size_t n;
  int rc = dr_ckpt_list_at(dir2fd, &a, &n);
  if (rc != 0)
    return rc;
  int removed = 0, first = 0;
  for (size_t i = keep > 0 ? keep : 1; i < n; i++) {
    int r = dr_ckpt_rm_at(dir2fd, a[i].name);
    if (r == 0)
      removed++;
    else if (first == 0)
      first = r;
  }
  free(a);
  return first != 0 ? first : removed;
}

/* The copy of name (open at in) into dir2fd under a partial name, then
 * renamed: 0, 1 when DIR2 got that name from another writer meanwhile,
 * or a code with res->why. */
static int copy_in_place(int in, int is_dir, int dir2fd, const char *name,
                         const char *host, const dr_ckpt_copy_io_t *io,
                         const char *dir, dr_persist_res_t *res) {
  char tmp[sizeof(PARTIAL) + HOST_MAX + 32];
  snprintf(tmp, sizeof(tmp), PARTIAL "%.*s.%ld.%u", HOST_MAX, host,
           (long)getpid(), atomic_fetch_add(&partial_seq, 1));
  dr_copy_side_t side;
  int rc = dr_ckpt_copy(in, is_dir, dir2fd, tmp, io, &res->bytes, &side);
  if (rc == DR_EBADARG)
    snprintf(res->why, sizeof(res->why), "a directory checkpoint deeper "
             "than %d levels is not copied", DR_CKPT_DEPTH_MAX);
  else if (rc != 0 && side == DR_COPY_SRC)
    why(res, "cannot read the checkpoint in", dir, rc);
  else if (rc != 0)
    why(res, "cannot write there", NULL, rc);
  if (rc != 0)
    return rc;
  rc = dr_ckpt_rename_new(dir2fd, tmp, dir2fd, name);
  if (rc != 0) {
    dr_ckpt_rm_at(dir2fd, tmp);
    if (rc == -EEXIST)
      return 1;
    why(res, "cannot rename the copy there", NULL, rc);
    return rc;
  }
  /* The rename is the commit; this makes it last. */
  if (fsync(dir2fd) != 0) {
    rc = -errno;
    why(res, "cannot sync the directory", NULL, rc);
    return rc;
  }
  return 0;
}

int dr_persist_copy_out(dr_ckpt_store_t *s, const char *dir2, uint32_t keep,
                        const char *host, const dr_ckpt_copy_io_t *io,
                        dr_persist_res_t *res) {
  memset(res, 0, sizeof(*res));
  uint32_t origin;
  uint64_t step = dr_ckpt_store_newest(s);
  if (step == DR_NONE ||
      dr_ckpt_store_find_step(s, step, res->name, sizeof(res->name),
                              &origin) != 0)
    return 1;
  res->step = step;
  int dir2fd = open_dir2(dir2, 1, res);
  if (dir2fd < 0)
    return dir2fd;
  dr_ckpt_item_t *a;
  size_t n;
  int rc = list_dir2(dir2fd, &a, &n, res);
  if (rc != 0)
    return rc;
  int have = n > 0 && a[0].step >= step;
  free(a);
  if (have) {
    close(dir2fd);
    return 1;
  }
  remove_stale(dir2fd, host);
  int in, is_dir;
  rc = dr_ckpt_store_open_item(s, res->name, &in, &is_dir);
  if (rc == 0) {
    rc = copy_in_place(in, is_dir, dir2fd, res->name, host, io,
                       dr_ckpt_store_dir(s), res);
    close(in);
  } else if (rc != DR_ENOTFOUND) {
    why(res, "cannot read the checkpoint in", dr_ckpt_store_dir(s), rc);
  }
  if (rc == 0)
    dr_persist_retain(dir2fd, keep);
  close(dir2fd);
  return rc;
}

/* Checkpoint it of DIR2 into s: 0, or a code with res->why; *src set when
 * reading DIR2 failed (an older one may do). */
static int restore_one(int dir2fd, const dr_ckpt_item_t *it,
                       dr_ckpt_store_t *s, const dr_ckpt_copy_io_t *io,
                       dr_persist_res_t *res, int *src) {
  int in, is_dir, tfd;
  char tmp[64];
  *src = 1;
  int rc = dr_ckpt_open_at(dir2fd, it->name, &in, &is_dir);
  if (rc != 0) {
    snprintf(res->why, sizeof(res->why), "cannot open %s there (%s)",
             it->name, dr_strerror(rc));
    return rc;
  }
  *src = 0;
  if ((rc = dr_ckpt_store_incoming(s, tmp, sizeof(tmp), &tfd)) != 0) {
    close(in);
    why(res, "cannot write in", dr_ckpt_store_dir(s), rc);
    return rc;
  }
  dr_copy_side_t side;
  rc = dr_ckpt_copy(in, is_dir, tfd, it->name, io, &res->bytes, &side);
  close(in);
  close(tfd);
  if (rc != 0) {
    dr_ckpt_store_discard(s, tmp);
    *src = side == DR_COPY_SRC;
    if (*src)
      snprintf(res->why, sizeof(res->why), "cannot read %s there (%s)",
               it->name, dr_strerror(rc));
    else
      why(res, "cannot write in", dr_ckpt_store_dir(s), rc);
    return rc;
  }
  rc = dr_ckpt_store_commit(s, tmp, it->name, DR_CKPT_LOCAL);
  if (rc != 0)
    why(res, "cannot rename it into", dr_ckpt_store_dir(s), rc);
  return rc;
}

int dr_persist_restore(const char *dir2, dr_ckpt_store_t *s,
                       const dr_ckpt_copy_io_t *io, dr_persist_res_t *res) {
  memset(res, 0, sizeof(*res));
  if (dr_ckpt_store_newest(s) != DR_NONE)
    return 1;
  int dir2fd = open(dir2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir2fd < 0 && errno == ENOENT)
    return 1;
  if (dir2fd < 0)
    dir2fd = open_dir2(dir2, 0, res);
  if (dir2fd < 0)
    return dir2fd;
  dr_ckpt_item_t *a;
  size_t n;
  int rc = list_dir2(dir2fd, &a, &n, res);
  if (rc != 0)
    return rc;
  char first[sizeof(res->why)] = "";
  rc = 1;
  for (size_t i = 0; i < n && rc != 0; i++) {
    int src;
    res->bytes = 0;
    rc = restore_one(dir2fd, &a[i], s, io, res, &src);
    if (rc == 0) {
      snprintf(res->name, sizeof(res->name), "%s", a[i].name);
      res->step = a[i].step;
      snprintf(res->why, sizeof(res->why), "%s", first);
    } else if (first[0] == '\0') {
      snprintf(first, sizeof(first), "%s", res->why);
    }
    /* Only a checkpoint of DIR2 that cannot be read makes an older one
     * worth a try. */
    if (rc != 0 && (!src || rc == -ECANCELED || rc == -ETIMEDOUT))
      break;
  }
  if (rc != 0 && rc != 1)
    snprintf(res->why, sizeof(res->why), "%s", first);
  free(a);
  close(dir2fd);
  return rc;
}
