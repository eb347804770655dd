/* A trace's bytes (diag_read_internal.h): the file opened without blocking
 * (a FIFO or a device is refused, never waited on), read whole, and
 * inflated in one pass when it is gzip'd, every size held under the limit
 * before anything that large is allocated. */
#include "diag_read_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "errors.h"
#include "fs.h"

#define MIB(n) ((size_t)(n) >> 20)

/* What a refusal of a size says to do. */
static const char *raise_hint(size_t limit) {
  return limit < DR_DG_LIMIT_MAX ? "raise the limit with --max-trace-mib"
                                 : "the largest limit there is";
}

/* The limit as the refusals say it: "256 MiB", or bytes when it is not a
 * whole number of MiB (a test's). */
static const char *limit_str(size_t limit, char *buf, size_t len) {
  if (limit % ((size_t)1 << 20) == 0)
    snprintf(buf, len, "%zu MiB", MIB(limit));
  else
    snprintf(buf, len, "%zu bytes", limit);
  return buf;
}

size_t dr__dg_limit(size_t max_bytes) {
  if (max_bytes == 0)
    return DR_DG_LIMIT_DEFAULT;
  return max_bytes < DR_DG_LIMIT_MAX ? max_bytes : DR_DG_LIMIT_MAX;
}

static int is_gzip(const void *buf, size_t n) {
  const unsigned char *b = buf;
  return n >= 2 && b[0] == 0x1f && b[1] == 0x8b;
}

/* The first buffer for the inflated text: the size the last member's
 * trailer gives (ISIZE, the size mod 2^32 of that member alone: right for
 * the usual one-member file, only a hint otherwise), within [64 KiB,
 * limit]. A bomb may lie in it; the buffer then grows by doubling. */
static size_t first_cap(const unsigned char *buf, size_t n, size_t limit) {
  size_t cap = (size_t)64 << 10;
  if (n >= 18) {
    const unsigned char *t = buf + n - 4;
    size_t isize = (size_t)t[0] | (size_t)t[1] << 8 | (size_t)t[2] << 16 |
                   (size_t)t[3] << 24;
    if (isize + 1 > cap)
      cap = isize + 1;
  }
  return cap < limit ? cap : limit;
}

/* Inflates the gzip members in buf into one buffer of fewer than limit
 * bytes (plus its NUL). 0 with *out and *out_n, or -EINVAL/-EFBIG/-ENOMEM
 * with the reason in why. */
static int inflate_all(const unsigned char *buf, size_t n, size_t limit,
                       char **out, size_t *out_n, char *why, size_t wlen) {
  z_stream z;
  memset(&z, 0, sizeof(z));
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
    snprintf(why, wlen, "gzip: cannot start zlib");
    return -ENOMEM;
  }
  /* The text is at most limit - 1 bytes: cap - 1 of them fit in p. */
  size_t cap = first_cap(buf, n, limit), got = 0, in_off = 0;
  char *p = malloc(cap);
  int rc = p == NULL ? -ENOMEM : 0;
  if (rc != 0)
    snprintf(why, wlen, "out of memory");
  while (rc == 0) {
    if (got + 1 == cap && cap < limit) {
      size_t grown = cap > limit / 2 ? limit : cap * 2;
      char *q = realloc(p, grown);
      if (q == NULL) {
        snprintf(why, wlen, "out of memory (%zu MiB inflated)", MIB(got));
        rc = -ENOMEM;
        break;
      }
      p = q;
      cap = grown;
    }
    unsigned char probe;
    size_t room = cap - 1 - got;
    size_t in_left = n - in_off;
    z.next_in = (unsigned char *)(uintptr_t)(buf + in_off);
    z.avail_in = in_left > (1u << 30) ? (1u << 30) : (unsigned)in_left;
    /* Full at the limit: one byte more says the text reaches it. */
    z.next_out = room > 0 ? (unsigned char *)p + got : &probe;
    z.avail_out = room == 0 ? 1
                  : room > (1u << 30) ? (1u << 30)
                                      : (unsigned)room;
    unsigned avail_before = z.avail_out;
    int zr = inflate(&z, Z_NO_FLUSH);
    size_t produced = avail_before - z.avail_out;
    in_off = (size_t)(z.next_in - buf);
    if (room == 0 && produced > 0) {
      char ls[32];
      snprintf(why, wlen, "gzip: inflates to %s or more, the limit; "
               "refused (%s)", limit_str(limit, ls, sizeof(ls)),
               raise_hint(limit));
      rc = -EFBIG;
      break;
    }
    got += produced;
    if (zr == Z_STREAM_END) {
      if (in_off == n)
        break;
      if (!is_gzip(buf + in_off, n - in_off)) {
        snprintf(why, wlen, "gzip: data after the end of the stream");
        rc = -EINVAL;
        break;
      }
      inflateReset(&z); /* another member */
      continue;
    }
    if (zr == Z_MEM_ERROR) {
      snprintf(why, wlen, "out of memory");
      rc = -ENOMEM;
    } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
      snprintf(why, wlen, "gzip: corrupt data (%s)",
               z.msg != NULL ? z.msg : "zlib error");
      rc = -EINVAL;
    } else if (produced == 0 && z.avail_in == 0 && in_off == n) {
      snprintf(why, wlen, "gzip: truncated");
      rc = -EINVAL;
    }
  }
  inflateEnd(&z);
  if (rc == 0 && got == 0) {
    snprintf(why, wlen, "gzip: empty");
    rc = -EINVAL;
  }
  if (rc != 0) {
    free(p);
    return rc;
  }
  p[got] = '\0';
  *out = p;
  *out_n = got;
  return 0;
}

int dr__dg_inflate_buf(const void *buf, size_t n, const char *name,
                       size_t max_bytes, char **out, size_t *out_n,
                       char *err, size_t errlen) {
  char why[200];
  *out = NULL;
  *out_n = 0;
  int rc = inflate_all(buf, n, dr__dg_limit(max_bytes), out, out_n, why,
                       sizeof(why));
  if (rc != 0)
    snprintf(err, errlen, "%s: %s", name, why);
  return rc;
}

static int read_all(int fd, char *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(fd, p + got, n - got > (1u << 30) ? (1u << 30) : n - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -errno;
    if (k == 0)
      return -EIO; /* shrank while read */
    got += (size_t)k;
  }
  return 0;
}

int dr__dg_load(const char *path, size_t max_bytes, char **out, size_t *n,
                char *err, size_t errlen) {
  size_t limit = dr__dg_limit(max_bytes);
  int fd = dr_open_regular(path);
  if (fd < 0) {
    if (fd == -EISDIR)
      snprintf(err, errlen, "%s: is a directory", path);
    else if (fd == DR_ENOTREG)
      snprintf(err, errlen, "%s: %s; refused (give a trace file)", path,
               dr_strerror(fd));
    else
      snprintf(err, errlen, "%s: cannot open (%s)", path, dr_strerror(fd));
    return fd;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot stat (%s)", path, strerror(e));
    close(fd);
    return -e;
  }
  size_t size = (size_t)st.st_size;
  if ((uint64_t)st.st_size >= limit) {
    char ls[32];
    snprintf(err, errlen, "%s: %s or more, the limit; refused (%s)", path,
             limit_str(limit, ls, sizeof(ls)), raise_hint(limit));
    close(fd);
    return -EFBIG;
  }
  if (size == 0) {
    snprintf(err, errlen, "%s: empty file", path);
    close(fd);
    return -EINVAL;
  }
  char *p = malloc(size + 1);
  if (p == NULL) {
    snprintf(err, errlen, "%s: out of memory (%zu MiB)", path, MIB(size));
    close(fd);
    return -ENOMEM;
  }
  int rc = read_all(fd, p, size);
  close(fd);
  if (rc != 0) {
    snprintf(err, errlen, "%s: read failed (%s)", path, strerror(-rc));
    free(p);
    return rc;
  }
  p[size] = '\0';
  if (is_gzip(p, size)) {
    /* The compressed bytes are freed once inflated: one copy of the text
     * at a time. */
    char *z;
    size_t zn;
    rc = dr__dg_inflate_buf(p, size, path, limit, &z, &zn, err, errlen);
    free(p);
    if (rc != 0)
      return rc;
    p = z;
    size = zn;
  }
  *out = p;
  *n = size;
  return 0;
}

int dr__dg_is_gzip(const void *buf, size_t n) {
  return is_gzip(buf, n);
}
