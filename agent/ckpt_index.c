/* The origin index of a checkpoint directory (ckpt_index.h). */
#include "ckpt_index.h"

#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_store.h"
#include "grow.h"

#define INDEX_FILE "origins"
#define INDEX_TMP "origins.tmp"
/* More than any index a peer can make: each origin keeps --ckpt-keep. */
#define INDEX_MAX_BYTES (16u << 20)

static int find(const dr_ckpt_index_t *x, const char *name) {
  for (size_t i = 0; i < x->n; i++)
    if (strcmp(x->e[i].name, name) == 0)
      return (int)i;
  return -1;
}

uint32_t dr_ckpt_index_get(const dr_ckpt_index_t *x, const char *name) {
  int i = find(x, name);
  return i >= 0 ? x->e[i].origin : DR_CKPT_LOCAL;
}

int dr_ckpt_index_set(dr_ckpt_index_t *x, const char *name, uint32_t origin) {
  if (strlen(name) > DR_CKPT_NAME_MAX)
    return -ENAMETOOLONG;
  int i = find(x, name);
  if (i < 0) {
    dr_ckpt_origin_t *e = dr_grow(x->e, &x->cap, x->n + 1, sizeof(*e), 16);
    if (e == NULL)
      return -ENOMEM;
    x->e = e;
    i = (int)x->n++;
    snprintf(x->e[i].name, sizeof(x->e[i].name), "%s", name);
  }
  x->e[i].origin = origin;
  return 0;
}

int dr_ckpt_index_drop(dr_ckpt_index_t *x, const char *name) {
  int i = find(x, name);
  if (i < 0)
    return 0;
  x->e[i] = x->e[--x->n];
  return 1;
}

void dr_ckpt_index_free(dr_ckpt_index_t *x) {
  free(x->e);
  memset(x, 0, sizeof(*x));
}

/* One line "<origin> <name>" of line[0..n), n without its newline. */
static int parse_line(dr_ckpt_index_t *x, const char *line, size_t n) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < n && line[i] >= '0' && line[i] <= '9' && v <= UINT32_MAX)
    v = v * 10 + (uint64_t)(line[i++] - '0');
  if (i == 0 || v >= DR_CKPT_LOCAL || i >= n || line[i] != ' ')
    return 0;
  i++;
  uint64_t step;
  if (!dr_ckpt_wire_name((const uint8_t *)line + i, n - i, &step))
    return 0;
  char name[DR_CKPT_NAME_MAX + 1];
  memcpy(name, line + i, n - i);
  name[n - i] = '\0';
  return dr_ckpt_index_set(x, name, (uint32_t)v);
}

int dr_ckpt_index_load(dr_ckpt_index_t *x, int metafd) {
  memset(x, 0, sizeof(*x));
  int fd = openat(metafd, INDEX_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return errno == ENOENT ? 0 : -errno;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = 0;
  for (;;) {
    char *b = dr_grow(buf, &cap, len + 4096, 1, 4096);
    if (b == NULL) {
      rc = -ENOMEM;
      goto out;
    }
    buf = b;
    ssize_t k = read(fd, buf + len, cap - len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      rc = -errno;
      goto out;
    }
    if (k == 0)
      break;
    len += (size_t)k;
    if (len > INDEX_MAX_BYTES) {
      rc = -EFBIG;
      goto out;
    }
  }
  for (size_t start = 0; start < len;) {
    const char *nl = memchr(buf + start, '\n', len - start);
    size_t end = nl != NULL ? (size_t)(nl - buf) : len;
    if ((rc = parse_line(x, buf + start, end - start)) < 0)
      goto out;
    rc = 0;
    start = end + 1;
  }
out:
  free(buf);
  close(fd);
  if (rc != 0)
    dr_ckpt_index_free(x);
  return rc;
}

int dr_ckpt_index_save(const dr_ckpt_index_t *x, int metafd) {
  int fd = openat(metafd, INDEX_TMP,
                  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                  0600);
  if (fd < 0)
    return -errno;
  int rc = 0;
  char line[DR_CKPT_NAME_MAX + 16];
  for (size_t i = 0; i < x->n && rc == 0; i++) {
    int k = snprintf(line, sizeof(line), "%u %s\n", x->e[i].origin,
                     x->e[i].name);
    rc = dr_write_all(fd, line, (size_t)k);
  }
  if (rc == 0 && fsync(fd) != 0)
    rc = -errno;
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  if (rc == 0 && renameat(metafd, INDEX_TMP, metafd, INDEX_FILE) != 0)
    rc = -errno;
  if (rc != 0)
    unlinkat(metafd, INDEX_TMP, 0);
  return rc;
}
