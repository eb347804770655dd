/* Writing a checkpoint with an atomic commit: a temporary file, the
 * payload then the header, fsync, rename to the final name, fsync of the
 * directory. The layout is documented in ckpt.h. */
#include "ckpt_internal.h"

#include "errors.h"
#include "fs.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* buf holds DR__CKPT_CHUNK_BYTES. A chunk at a time, so that the bytes
 * the CRC has just read are still in cache for the write; a big-endian
 * host swaps them in buf, a little-endian one writes the floats as they
 * are (no copy). */
static int write_payload(int fd, const dr_ckpt_span_t *spans, size_t n_spans,
                         uint8_t *buf, uint32_t *crc) {
  static_assert(sizeof(float) == 4, "fp32 payload");
  int le = dr__ckpt_host_is_le(), rc = 0;
  uint32_t c = 0;
  for (size_t s = 0; s < n_spans && rc == 0; s++) {
    const float *p = spans[s].p;
    size_t left = spans[s].n_elems;
    while (left > 0 && rc == 0) {
      size_t k = left < DR__CKPT_CHUNK_ELEMS ? left : DR__CKPT_CHUNK_ELEMS;
      const void *out = p;
      if (!le) {
        memcpy(buf, p, k * 4);
        dr__ckpt_swap32(buf, k);
        out = buf;
      }
      c = dr_ckpt_crc32(c, out, k * 4);
      rc = dr_write_all(fd, out, k * 4);
      p += k;
      left -= k;
    }
  }
  *crc = c;
  return rc;
}

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  int rc = fsync(fd) == 0 ? 0 : -errno;
  close(fd);
  return rc;
}

int dr_ckpt_write(const char *dir, const dr_ckpt_header_t *h,
                  const dr_ckpt_span_t *spans, size_t n_spans,
                  dr_ckpt_before_commit_fn before_commit, void *arg,
                  char *path, size_t path_len, char *err, size_t n) {
  uint64_t total = 0;
  for (size_t s = 0; s < n_spans; s++)
    total += spans[s].n_elems;
  const uint64_t max_elems = (UINT64_MAX - DR_CKPT_HEADER_BYTES) / 8;
  if (h->param_elems > max_elems || h->optim_elems > max_elems ||
      h->comm_elems > max_elems || total != dr_ckpt_floats(h))
    return dr__ckpt_fail(err, n, DR_CKPT_ESHAPE, "checkpoint of step %" PRIu64
                         ": %" PRIu64 " floats given for %" PRIu64 " + %"
                         PRIu64 " + %" PRIu64, h->step, total, h->param_elems,
                         h->optim_elems, h->comm_elems);
  char final[4096], tmp[4200];
  if (dr_ckpt_path(final, sizeof(final), dir, h->step) != 0)
    return dr__ckpt_fail(err, n, -ENAMETOOLONG, "checkpoint directory name "
                         "too long: %s", dir);
  snprintf(tmp, sizeof(tmp), "%s" DR__CKPT_TMP_TAG "%ld", final,
           (long)getpid());
  /* The name taken by what is not a file (a directory, a FIFO): not a
   * checkpoint, so not this writer's to replace (and rename() could not
   * replace a directory). */
  struct stat st;
  if (lstat(final, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    return dr__ckpt_not_a_file(err, n, final,
                               S_ISDIR(st.st_mode) ? -EISDIR : DR_ENOTREG);

  /* Before the file exists: nothing to clean up when it fails. */
  uint8_t *buf = malloc(DR__CKPT_CHUNK_BYTES);
  if (buf == NULL)
    return dr__ckpt_fail(err, n, -ENOMEM, "out of memory for the %u KiB "
                         "buffer of the checkpoint %s",
                         DR__CKPT_CHUNK_BYTES / 1024, final);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    free(buf);
    return dr__ckpt_fail(err, n, -e, "open() of %s failed while writing a "
                         "checkpoint (%s)", tmp, strerror(e));
  }
  uint8_t hdr[DR_CKPT_HEADER_BYTES];
  memset(hdr, 0, sizeof(hdr));
  const char *what = "write()";
  dr_ckpt_header_t full = *h;
  int rc = dr_write_all(fd, hdr, sizeof(hdr));
  if (rc == 0)
    rc = write_payload(fd, spans, n_spans, buf, &full.payload_crc32);
  free(buf);
  if (rc == 0) {
    /* The header last: a file cut short by a crash never carries a header
     * that would describe it as complete. */
    full.payload_bytes = 4 * total;
    dr__ckpt_encode(&full, hdr);
    what = "pwrite()";
    ssize_t k = pwrite(fd, hdr, sizeof(hdr), 0);
    rc = k == (ssize_t)sizeof(hdr) ? 0 : k < 0 ? -errno : -EIO;
  }
  if (rc == 0) {
    what = "fsync()";
    rc = fsync(fd) == 0 ? 0 : -errno;
  }
  if (close(fd) != 0 && rc == 0) {
    what = "close()";
    rc = -errno;
  }
  if (rc != 0) {
    unlink(tmp);
    return dr__ckpt_fail(err, n, rc, "%s of %s failed while writing a "
                         "checkpoint (%s)", what, tmp, dr_strerror(rc));
  }
  if (before_commit != NULL)
    before_commit(arg, tmp);
  if (rename(tmp, final) != 0) {
    rc = -errno;
    unlink(tmp);
    return dr__ckpt_fail(err, n, rc, "rename() of %s to %s failed (%s)", tmp,
                         final, strerror(-rc));
  }
  if (path != NULL && path_len > 0)
    snprintf(path, path_len, "%s", final);
  rc = fsync_dir(dir);
  if (rc != 0)
    return dr__ckpt_fail(err, n, rc, "fsync() of the directory %s failed after "
                         "writing %s (%s)", dir, final, strerror(-rc));
  return 0;
}
