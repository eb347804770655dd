#include "fs.h"

#include "errors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int dr_open_regular(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return -errno;
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) != 0)
    rc = -errno;
  else if (S_ISDIR(st.st_mode))
    rc = -EISDIR;
  else if (!S_ISREG(st.st_mode))
    rc = DR_ENOTREG;
  else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    rc = -errno;
  if (rc != 0) {
    close(fd);
    return rc;
  }
  return fd;
}

int dr_write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -errno;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* 0 when p names an executable that is not a directory; else -errno. */
static int runnable(const char *p) {
  struct stat st;
  if (stat(p, &st) != 0)
    return -errno;
  if (S_ISDIR(st.st_mode))
    return -EACCES;
  return access(p, X_OK) == 0 ? 0 : -errno;
}

int dr_find_program(const char *name, const char *path, char *out,
                    size_t n) {
  if (name == NULL || name[0] == '\0')
    return -ENOENT;
  if (strchr(name, '/') != NULL) {
    if (snprintf(out, n, "%s", name) >= (int)n)
      return -ENAMETOOLONG;
    return runnable(out);
  }
  if (path == NULL || path[0] == '\0')
    path = "/usr/local/bin:/usr/bin:/bin";
  int err = -ENOENT;
  for (const char *p = path;;) {
    const char *colon = strchr(p, ':');
    int len = colon != NULL ? (int)(colon - p) : (int)strlen(p);
    int k = snprintf(out, n, "%.*s/%s", len > 0 ? len : 1, len > 0 ? p : ".",
                     name);
    if (k >= (int)n) {
      err = -ENAMETOOLONG;
    } else if (k > 0) {
      int rc = runnable(out);
      if (rc == 0)
        return 0;
      if (rc == -EACCES)
        err = rc;
    }
    if (colon == NULL)
      break;
    p = colon + 1;
  }
  out[0] = '\0';
  return err;
}

int dr_read_text(const char *root, const char *path, char *buf, size_t cap) {
  char full[4096];
  if (cap == 0)
    return -EINVAL;
  buf[0] = '\0';
  if (snprintf(full, sizeof(full), "%s%s", root, path) >= (int)sizeof(full))
    return -ENAMETOOLONG;
  int fd = open(full, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  size_t len = 0;
  while (len + 1 < cap) {
    ssize_t r = read(fd, buf + len, cap - 1 - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int e = -errno;
      close(fd);
      buf[0] = '\0';
      return e;
    }
    if (r == 0)
      break;
    len += (size_t)r;
  }
  close(fd);
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ' ||
                     buf[len - 1] == '\t'))
    len--;
  buf[len] = '\0';
  return (int)len;
}

int dr_write_file(const char *path, const void *data, size_t n) {
  char tmp[4200];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >=
      (int)sizeof(tmp))
    return -ENAMETOOLONG;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  int rc = dr_write_all(fd, data, n);
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  if (rc == 0 && rename(tmp, path) != 0)
    rc = -errno;
  if (rc != 0)
    unlink(tmp);
  return rc;
}
