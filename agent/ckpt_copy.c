/* A checkpoint copied between two directories of this host, file by file,
 * fsynced (ckpt_copy.h). */
#include "ckpt_copy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_rules.h"
#include "ckpt_store.h"
#include "errors.h"
#include "mono.h"

/* Bytes per read and write: the granularity of cancellation too. */
#define CHUNK (1u << 20)

/* One copy under way. */
typedef struct {
  const dr_ckpt_copy_io_t *io;
  uint8_t *buf; /* CHUNK bytes */
  uint64_t bytes;
  dr_copy_side_t side; /* of the failure */
  int made;            /* the top entry exists: the first one created */
} cp_t;

static int fail(cp_t *c, dr_copy_side_t side, int rc) {
  c->side = side;
  return rc;
}

/* A source entry that is gone was removed with its checkpoint. */
static int src_fail(cp_t *c, int e) {
  return fail(c, DR_COPY_SRC, e == ENOENT ? DR_ENOTFOUND : -e);
}

static int bounded(cp_t *c) {
  const dr_ckpt_copy_io_t *io = c->io;
  if (io == NULL)
    return 0;
  if (io->cancel != NULL && atomic_load(io->cancel))
    return fail(c, DR_COPY_DST, -ECANCELED);
  if (io->deadline_ms != 0 && dr_mono_ms() >= io->deadline_ms)
    return fail(c, DR_COPY_DST, -ETIMEDOUT);
  return 0;
}

static int copy_bytes(cp_t *c, int in, int out) {
  for (;;) {
    int rc = bounded(c);
    if (rc != 0)
      return rc;
    ssize_t k = read(in, c->buf, CHUNK);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return src_fail(c, errno);
    if (k == 0)
      return 0;
    for (ssize_t off = 0; off < k;) {
      ssize_t w = write(out, c->buf + off, (size_t)(k - off));
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0)
        return fail(c, DR_COPY_DST, -errno);
      off += w;
    }
    c->bytes += (uint64_t)k;
    if (c->io != NULL && c->io->on_chunk != NULL)
      c->io->on_chunk(c->io->arg);
  }
}

/* name under dir for reading: a regular file or a directory, never a
 * link, and never a wait on a FIFO put there since it was listed. */
static int open_src(cp_t *c, int dir, const char *name, int *is_dir) {
  int fd = openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return errno == ELOOP ? fail(c, DR_COPY_SRC, DR_ENOTREG)
                          : src_fail(c, errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
    close(fd);
    return fail(c, DR_COPY_SRC, DR_ENOTREG);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *is_dir = S_ISDIR(st.st_mode);
  return fd;
}

static int copy_file(cp_t *c, int in, int to_dir, const char *to_name) {
  int out = openat(to_dir, to_name,
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0)
    return fail(c, DR_COPY_DST, -errno);
  c->made = 1;
  int rc = copy_bytes(c, in, out);
  if (rc == 0 && fsync(out) != 0)
    rc = fail(c, DR_COPY_DST, -errno);
  if (close(out) != 0 && rc == 0)
    rc = fail(c, DR_COPY_DST, -errno);
  return rc;
}

static int copy_tree(cp_t *c, int in, int to_dir, const char *to_name,
                     int depth);

/* One entry of a directory being copied: files and directories, the rest
 * (links, FIFOs, sockets) left out. */
static int copy_entry(cp_t *c, int in, const char *name, int out,
                      int depth) {
  struct stat st;
  if (fstatat(in, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return src_fail(c, errno);
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return 0;
  if (depth + 1 > DR_CKPT_DEPTH_MAX)
    return fail(c, DR_COPY_SRC, DR_EBADARG);
  int is_dir = 0, fd = open_src(c, in, name, &is_dir);
  if (fd < 0)
    return fd;
  int rc = is_dir ? copy_tree(c, fd, out, name, depth + 1)
                  : copy_file(c, fd, out, name);
  close(fd);
  return rc;
}

/* The directory in (depth components below the checkpoint's top) as
 * to_dir/to_name, fsynced once everything in it is. */
static int copy_tree(cp_t *c, int in, int to_dir, const char *to_name,
                     int depth) {
  if (mkdirat(to_dir, to_name, 0700) != 0)
    return fail(c, DR_COPY_DST, -errno);
  c->made = 1;
  int out = openat(to_dir, to_name,
                   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (out < 0)
    return fail(c, DR_COPY_DST, -errno);
  /* readdir needs a descriptor of its own: in stays for openat. */
  int lfd = openat(in, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
  int rc = 0;
  if (d == NULL) {
    rc = src_fail(c, errno);
    if (lfd >= 0)
      close(lfd);
  }
  for (struct dirent *de; rc == 0;) {
    errno = 0;
    if ((de = readdir(d)) == NULL) {
      if (errno != 0)
        rc = src_fail(c, errno);
      break;
    }
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
      rc = copy_entry(c, in, de->d_name, out, depth);
  }
  if (d != NULL)
    closedir(d);
  if (rc == 0 && fsync(out) != 0)
    rc = fail(c, DR_COPY_DST, -errno);
  close(out);
  return rc;
}

int dr_ckpt_copy(int in, int is_dir, int to_dir, const char *to_name,
                 const dr_ckpt_copy_io_t *io, uint64_t *bytes,
                 dr_copy_side_t *side) {
  cp_t c = {io, malloc(CHUNK), 0, DR_COPY_SRC, 0};
  *bytes = 0;
  *side = DR_COPY_SRC;
  if (c.buf == NULL)
    return -ENOMEM;
  int rc = is_dir ? copy_tree(&c, in, to_dir, to_name, 0)
                  : copy_file(&c, in, to_dir, to_name);
  free(c.buf);
  if (rc != 0) {
    *side = c.side;
    /* What this call made goes; an entry that was there already is
     * someone else's. */
    if (c.made)
      dr_ckpt_rm_at(to_dir, to_name);
    return rc;
  }
  *bytes = c.bytes;
  return 0;
}
