/* Reading checkpoints: opening one without blocking, checking its header
 * and size, and streaming its payload through its CRC, into the caller's
 * spans or (to verify) through a scratch buffer. */
#include "ckpt_internal.h"

#include "errors.h"
#include "fs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads exactly n bytes: 0, DR_CKPT_ESIZE at an early end, or -errno. */
static int read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -errno;
    if (k == 0)
      return DR_CKPT_ESIZE;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Opens path (never blocking: a FIFO named like a checkpoint is refused,
 * not waited on) and checks its header and size; returns the fd (>= 0),
 * positioned at the payload, or a code. */
static int open_checked(const char *path, dr_ckpt_header_t *h, char *err,
                        size_t n) {
  int fd = dr_open_regular(path);
  if (fd < 0)
    return dr__ckpt_not_a_file(err, n, path, fd);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int rc = -errno;
    close(fd);
    return dr__ckpt_fail(err, n, rc, "fstat() of %s failed (%s)", path,
                         strerror(-rc));
  }
  /* The version-1 header is the shortest: read it, then the rest of a
   * longer one once the prefix says how long. */
  uint8_t hdr[DR_CKPT_HEADER_BYTES];
  uint32_t hb = 0;
  int rc = 0;
  if ((uint64_t)st.st_size < DR_CKPT_V1_HEADER_BYTES)
    rc = dr__ckpt_fail(err, n, DR_CKPT_ESIZE, "%s: %lld bytes, shorter than a "
                       "header", path, (long long)st.st_size);
  else if ((rc = read_all(fd, hdr, DR_CKPT_V1_HEADER_BYTES)) != 0)
    rc = dr__ckpt_fail(err, n, rc, "read() of %s failed (%s)", path,
                       dr_strerror(rc));
  else if ((rc = dr__ckpt_check_prefix(hdr, path, &hb, err, n)) != 0)
    ;
  else if ((uint64_t)st.st_size < hb)
    rc = dr__ckpt_fail(err, n, DR_CKPT_ESIZE, "%s: %lld bytes, shorter than "
                       "its %" PRIu32 "-byte header", path,
                       (long long)st.st_size, hb);
  else if (hb > DR_CKPT_V1_HEADER_BYTES &&
           (rc = read_all(fd, hdr + DR_CKPT_V1_HEADER_BYTES,
                          hb - DR_CKPT_V1_HEADER_BYTES)) != 0)
    rc = dr__ckpt_fail(err, n, rc, "read() of %s failed (%s)", path,
                       dr_strerror(rc));
  else if ((rc = dr__ckpt_decode(hdr, path, h, err, n)) != 0)
    ;
  else if ((uint64_t)st.st_size != hb + h->payload_bytes)
    rc = dr__ckpt_fail(err, n, DR_CKPT_ESIZE, "%s: %lld bytes, the header "
                       "declares %" PRIu32 " + %" PRIu64, path,
                       (long long)st.st_size, hb, h->payload_bytes);
  if (rc != 0) {
    close(fd);
    return rc;
  }
  return fd;
}

int dr_ckpt_read_header(const char *path, dr_ckpt_header_t *h, char *err,
                        size_t n) {
  int fd = open_checked(path, h, err, n);
  if (fd < 0)
    return fd;
  close(fd);
  return 0;
}

/* Reads the payload from fd into spans, or through a scratch buffer when
 * spans is NULL; checks its CRC. */
static int read_payload(int fd, const char *path, const dr_ckpt_header_t *h,
                        const dr_ckpt_span_t *spans, size_t n_spans,
                        char *err, size_t n) {
  uint8_t *scratch = NULL;
  dr_ckpt_span_t whole;
  if (spans == NULL) {
    scratch = malloc(DR__CKPT_CHUNK_BYTES);
    if (scratch == NULL)
      return dr__ckpt_fail(err, n, -ENOMEM, "out of memory for the %u KiB "
                           "buffer that verifies %s",
                           DR__CKPT_CHUNK_BYTES / 1024, path);
    whole.p = NULL;
    whole.n_elems = (size_t)dr_ckpt_floats(h);
    spans = &whole;
    n_spans = 1;
  }
  int le = dr__ckpt_host_is_le(), rc = 0;
  uint32_t c = 0;
  for (size_t s = 0; s < n_spans && rc == 0; s++) {
    uint8_t *p = (uint8_t *)spans[s].p;
    size_t left = spans[s].n_elems;
    while (left > 0 && rc == 0) {
      size_t k = left < DR__CKPT_CHUNK_ELEMS ? left : DR__CKPT_CHUNK_ELEMS;
      uint8_t *dst = scratch != NULL ? scratch : p;
      rc = read_all(fd, dst, k * 4);
      if (rc != 0)
        break;
      c = dr_ckpt_crc32(c, dst, k * 4);
      if (!le && scratch == NULL)
        dr__ckpt_swap32(dst, k);
      if (scratch == NULL)
        p += k * 4;
      left -= k;
    }
  }
  free(scratch);
  if (rc != 0)
    return dr__ckpt_fail(err, n, rc, "read() of %s failed (%s)", path,
                         dr_strerror(rc));
  if (c != h->payload_crc32)
    return dr__ckpt_fail(err, n, DR_CKPT_ECRC, "%s: payload CRC-32 is "
                         "0x%08" PRIx32 ", the header says 0x%08" PRIx32, path,
                         c, h->payload_crc32);
  return 0;
}

int dr_ckpt_verify(const char *path, dr_ckpt_header_t *h, char *err,
                   size_t n) {
  int fd = open_checked(path, h, err, n);
  if (fd < 0)
    return fd;
  int rc = read_payload(fd, path, h, NULL, 0, err, n);
  close(fd);
  return rc;
}

int dr_ckpt_read(const char *path, dr_ckpt_header_t *h,
                 const dr_ckpt_span_t *spans, size_t n_spans, char *err,
                 size_t n) {
  int fd = open_checked(path, h, err, n);
  if (fd < 0)
    return fd;
  uint64_t total = 0;
  for (size_t s = 0; s < n_spans; s++)
    total += spans[s].n_elems;
  int rc;
  if (total != dr_ckpt_floats(h))
    rc = dr__ckpt_fail(err, n, DR_CKPT_ESHAPE, "%s holds %" PRIu64 " + %" PRIu64
                       " + %" PRIu64 " floats; the buffers take %" PRIu64, path,
                       h->param_elems, h->optim_elems, h->comm_elems, total);
  else
    rc = read_payload(fd, path, h, spans, n_spans, err, n);
  close(fd);
  return rc;
}
