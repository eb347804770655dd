/* A named shared-memory segment: see shm_seg.h. */
#include "shm_seg.h"

#include "shm_name.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int note(const char **what, const char *call, int rc) {
  if (what != NULL)
    *what = call;
  return rc;
}

/* Maps n_bytes of fd (closed here either way) into seg. */
static int map_fd(int fd, size_t n_bytes, dr_shm_seg_t *seg,
                  const char **what) {
  void *map = mmap(NULL, n_bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
  int saved = errno;
  close(fd);
  if (map == MAP_FAILED)
    return note(what, "mmap", -saved);
  seg->base = map;
  return 0;
}

int dr_shm_seg_create(const char *name, size_t n_bytes, dr_shm_seg_t *seg,
                      const char **what) {
  seg->base = NULL;
  seg->n_bytes = n_bytes;
  if (n_bytes == 0)
    return note(what, "dr_shm_seg_create", -EINVAL);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return note(what, "shm_open", -errno);
  int rc = posix_fallocate(fd, 0, (off_t)n_bytes);
  if (rc != 0) {
    close(fd);
    rc = note(what, "posix_fallocate", -rc);
  } else {
    rc = map_fd(fd, n_bytes, seg, what);
  }
  if (rc != 0)
    shm_unlink(name);
  return rc;
}

typedef struct {
  size_t n_bytes;
  dr_shm_seg_t *seg;
  const char **what;
} named_t;

static int create_cb(const char *name, void *arg) {
  named_t *t = arg;
  return dr_shm_seg_create(name, t->n_bytes, t->seg, t->what);
}

int dr_shm_seg_create_named(char *name, size_t n, const char *tag,
                            size_t n_bytes, dr_shm_seg_t *seg, int *taken,
                            const char **what) {
  named_t t = {n_bytes, seg, what};
  seg->base = NULL;
  seg->n_bytes = n_bytes;
  note(what, "the segment's name", 0);
  return dr_shm_create(name, n, tag, create_cb, &t, taken);
}

int dr_shm_seg_open(const char *name, size_t min_bytes, size_t max_bytes,
                    dr_shm_seg_t *seg, const char **what) {
  seg->base = NULL;
  seg->n_bytes = 0;
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    return note(what, "shm_open", -errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return note(what, "fstat", -e);
  }
  seg->n_bytes = (size_t)st.st_size;
  /* Checked before mmap, which refuses an empty segment with EINVAL. */
  if (seg->n_bytes < min_bytes || seg->n_bytes > max_bytes || min_bytes == 0) {
    close(fd);
    return note(what, "the segment's size", -EPROTO);
  }
  return map_fd(fd, seg->n_bytes, seg, what);
}

int dr_shm_seg_unlink(const char *name) {
  return shm_unlink(name) == 0 ? 0 : -errno;
}

void dr_shm_seg_close(dr_shm_seg_t *seg) {
  if (seg->base != NULL)
    munmap(seg->base, seg->n_bytes);
  seg->base = NULL;
}
