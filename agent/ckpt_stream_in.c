/* Receiving a checkpoint: every frame checked against what its CKPT_PUT
 * and its entries declared, written under DIR/.ddprun/incoming with
 * openat() and O_NOFOLLOW only, renamed into DIR once the checksum
 * matches (ckpt_stream.h). */
#include "ckpt_stream.h"

#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"

/* One copy being received. */
typedef struct {
  dr_ckpt_conn_t *c;
  const dr_ckpt_put_t *put;
  int tmpfd;     /* incoming/<tmp> */
  int rootfd;    /* a directory checkpoint's top, under tmpfd */
  int fd;        /* the file being written, or -1 */
  uint64_t left; /* its bytes still to come */
  uint64_t sum;  /* the bytes declared so far, at most put->total_bytes */
  uint32_t n_entries;
  crypto_generichash_state h;
  char *why;
  size_t why_len;
} rx_t;

static int fail(rx_t *x, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(rx_t *x, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->why, x->why_len, fmt, ap);
  va_end(ap);
  return code;
}

/* The current file is whole: synced and closed. */
static int end_file(rx_t *x) {
  if (x->fd < 0)
    return 0;
  int rc = fsync(x->fd) == 0 ? 0 : -errno;
  close(x->fd);
  x->fd = -1;
  return rc;
}

/* The directory that will hold path's last component, opened component
 * by component without following a link; *last points into path. */
static int open_parent(rx_t *x, char *path, char **last) {
  int at = x->rootfd;
  char *p = path;
  for (char *slash; (slash = strchr(p, '/')) != NULL; p = slash + 1) {
    *slash = '\0';
    int fd = openat(at, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    *slash = '/';
    if (at != x->rootfd)
      close(at);
    if (fd < 0)
      return -e;
    at = fd;
  }
  *last = p;
  return at;
}

static int on_entry(rx_t *x, const dr_msg_t *m) {
  dr_ckpt_entry_t e;
  char path[DR_CKPT_DEPTH_MAX * (DR_CKPT_NAME_MAX + 1) + 1];
  if (x->put->kind != DR_CKPT_DIR || x->left != 0 ||
      dr_msg_ckpt_entry(m, &e) != 0)
    return fail(x, DR_ESEQUENCE, "%s", "an entry out of place");
  if (dr_ckpt_path_check(e.path.p, e.path.len, NULL) != 0 ||
      e.path.len >= sizeof(path))
    return fail(x, DR_EBADARG, "%s", "an entry's path is not allowed");
  if (++x->n_entries > DR_CKPT_ENTRIES_MAX)
    return fail(x, DR_EBADARG, "%s", "too many entries");
  if (e.n_bytes > x->put->total_bytes - x->sum)
    return fail(x, DR_EBADARG, "%s", "entries longer than declared");
  int rc = end_file(x);
  if (rc != 0)
    return fail(x, rc, "cannot write a file (%s)", dr_strerror(rc));
  memcpy(path, e.path.p, e.path.len);
  path[e.path.len] = '\0';
  uint8_t tail[10] = {0, (uint8_t)e.kind};
  for (int i = 0; i < 8; i++)
    tail[2 + i] = (uint8_t)(e.n_bytes >> (56 - 8 * i));
  crypto_generichash_update(&x->h, e.path.p, e.path.len);
  crypto_generichash_update(&x->h, tail, sizeof(tail));
  char *last = NULL;
  int at = open_parent(x, path, &last);
  if (at < 0)
    return fail(x, DR_EBADARG, "an entry's directory is missing (%s)",
                dr_strerror(at));
  if (e.kind == DR_CKPT_DIR) {
    rc = mkdirat(at, last, 0700) == 0 ? 0 : -errno;
  } else {
    x->fd = openat(at, last,
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   0600);
    rc = x->fd < 0 ? -errno : 0;
    x->left = e.n_bytes;
    x->sum += e.n_bytes;
  }
  if (at != x->rootfd)
    close(at);
  if (rc != 0)
    return fail(x, rc == -EEXIST ? DR_EBADARG : rc,
                "cannot create an entry (%s)", dr_strerror(rc));
  return 0;
}

static int on_data(rx_t *x, const dr_msg_t *m) {
  dr_bytes_t b;
  if (dr_msg_ckpt_data(m, &b) != 0 || x->fd < 0 || b.len > x->left)
    return fail(x, DR_EBADARG, "%s", "more bytes than declared");
  int rc = dr_write_all(x->fd, b.p, b.len);
  if (rc != 0)
    return fail(x, rc, "cannot write (%s)", dr_strerror(rc));
  crypto_generichash_update(&x->h, b.p, b.len);
  x->left -= b.len;
  return 0;
}

static int on_end(rx_t *x, const dr_msg_t *m) {
  dr_bytes_t sum;
  if (dr_msg_ckpt_end(m, &sum) != 0 || x->left != 0 ||
      x->sum != x->put->total_bytes)
    return fail(x, DR_EBADARG, "%s", "fewer bytes than declared");
  uint8_t mine[DR_CKPT_SUM_LEN];
  crypto_generichash_final(&x->h, mine, sizeof(mine));
  if (sodium_memcmp(mine, sum.p, sizeof(mine)) != 0)
    return fail(x, DR_ECHECKSUM, "%s", "checksum mismatch");
  int rc = end_file(x);
  if (rc == 0 && x->rootfd >= 0 && fsync(x->rootfd) != 0)
    rc = -errno;
  if (rc != 0)
    return fail(x, rc, "cannot write (%s)", dr_strerror(rc));
  return 1;
}

static int receive(rx_t *x, const char *name) {
  if (x->put->kind == DR_CKPT_FILE) {
    x->fd = openat(x->tmpfd, name,
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   0600);
    if (x->fd < 0) {
      int e = -errno;
      return fail(x, e, "cannot create the copy (%s)", dr_strerror(e));
    }
    x->left = x->sum = x->put->total_bytes;
  } else {
    if (mkdirat(x->tmpfd, name, 0700) != 0 ||
        (x->rootfd = openat(x->tmpfd, name, O_RDONLY | O_DIRECTORY |
                                                O_NOFOLLOW | O_CLOEXEC)) < 0) {
      int e = -errno;
      return fail(x, e, "cannot create the copy (%s)", dr_strerror(e));
    }
  }
  for (;;) {
    dr_msg_t m;
    int rc = dr_ckpt_recv(x->c, &m);
    if (rc != 0)
      return fail(x, rc, "the transfer broke off (%s)", dr_strerror(rc));
    switch (m.type) {
    case DR_MSG_CKPT_ENTRY:
      rc = on_entry(x, &m);
      break;
    case DR_MSG_CKPT_DATA:
      rc = on_data(x, &m);
      break;
    case DR_MSG_CKPT_END:
      rc = on_end(x, &m);
      if (rc == 1)
        return 0;
      break;
    default:
      rc = fail(x, DR_ESEQUENCE, "a %s frame in the middle of a checkpoint",
                dr_msg_name(m.type));
    }
    if (rc != 0)
      return rc;
  }
}

int dr_ckpt_stream_in(dr_ckpt_conn_t *c, dr_ckpt_store_t *s,
                      const dr_ckpt_put_t *put, const char *name, char *why,
                      size_t why_len) {
  rx_t x;
  memset(&x, 0, sizeof(x));
  x.c = c;
  x.put = put;
  x.fd = x.rootfd = -1;
  x.why = why;
  x.why_len = why_len;
  why[0] = '\0';
  crypto_generichash_init(&x.h, NULL, 0, DR_CKPT_SUM_LEN);
  char tmp[64];
  int rc = dr_ckpt_store_incoming(s, tmp, sizeof(tmp), &x.tmpfd);
  if (rc != 0)
    return fail(&x, rc, "cannot make room for the copy (%s)",
                dr_strerror(rc));
  rc = receive(&x, name);
  if (x.fd >= 0)
    close(x.fd);
  if (x.rootfd >= 0)
    close(x.rootfd);
  close(x.tmpfd);
  if (rc != 0) {
    dr_ckpt_store_discard(s, tmp);
    return rc;
  }
  rc = dr_ckpt_store_commit(s, tmp, name, put->origin);
  if (rc != 0)
    fail(&x, rc, "cannot rename the copy into place (%s)", dr_strerror(rc));
  return rc;
}
