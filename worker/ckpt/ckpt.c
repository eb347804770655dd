/* Checkpoint files: encoding, the atomic write, verification, reading and
 * pruning. The layout is documented in ckpt.h. */
#include "ckpt.h"

#include "fs.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "DDPRCKPT"
/* The header CRC sits in the last 4 bytes of the header and covers the
 * bytes before it. */
#define HDR_CRC_OFF (DR_CKPT_HEADER_BYTES - 4)
#define V1_HDR_CRC_OFF (DR_CKPT_V1_HEADER_BYTES - 4)
#define CHUNK_BYTES (1u << 16)
#define NAME_LEN 19 /* "ckpt-" + 10 digits + ".bin" */
#define TMP_TAG ".tmp."

dr_ckpt_fail_kind_t dr_ckpt_fail_kind(int code) {
  switch (-code) {
  case ENOSPC:
  case EDQUOT:
  case EFBIG:
  case EROFS:
  case EACCES:
  case EPERM:
  case EIO:
    return DR_CKPT_FAIL_STORAGE;
  case ENOMEM:
    return DR_CKPT_FAIL_NOMEM;
  default:
    return DR_CKPT_FAIL_OTHER;
  }
}

static int fail(char *err, size_t n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t n, int code, const char *fmt, ...) {
  if (err != NULL && n > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* ---- CRC-32, slice-by-8 ------------------------------------------------ */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^
                        crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t dr_ckpt_crc32(uint32_t crc, const void *buf, size_t n) {
  pthread_once(&crc_once, crc_init);
  const uint8_t *p = buf;
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t a = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                      (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    c = crc_table[7][a & 0xff] ^ crc_table[6][(a >> 8) & 0xff] ^
        crc_table[5][(a >> 16) & 0xff] ^ crc_table[4][a >> 24] ^
        crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
        crc_table[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n-- > 0)
    c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

/* ---- header encoding ---------------------------------------------------- */

static void put32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *b, uint64_t v) {
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *b) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= (uint32_t)b[i] << (8 * i);
  return v;
}
static uint64_t get64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)b[i] << (8 * i);
  return v;
}

/* Reals travel as the bits of an IEEE-754 binary64. */
static void putf64(uint8_t *b, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof(u));
  put64(b, u);
}
static double getf64(const uint8_t *b) {
  uint64_t u = get64(b);
  double v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

uint64_t dr_ckpt_floats(const dr_ckpt_header_t *h) {
  return h->param_elems + h->optim_elems + h->comm_elems;
}

/* Always the current version. */
static void encode(const dr_ckpt_header_t *h, uint8_t *b) {
  memset(b, 0, DR_CKPT_HEADER_BYTES);
  memcpy(b, MAGIC, 8);
  put32(b + 8, DR_CKPT_VERSION);
  put32(b + 12, DR_CKPT_HEADER_BYTES);
  put64(b + 16, h->payload_bytes);
  put32(b + 24, h->payload_crc32);
  put32(b + 28, h->rng_version);
  put64(b + 32, h->step);
  put64(b + 40, h->total_steps);
  put64(b + 48, h->epoch);
  put64(b + 56, h->epoch_pos);
  put64(b + 64, h->steps_per_epoch);
  put64(b + 72, h->seed);
  put64(b + 80, h->train_samples);
  put64(b + 88, h->global_batch);
  put32(b + 96, h->optimizer);
  put32(b + 100, h->layers);
  put32(b + 104, h->width);
  put32(b + 108, h->input_dim);
  put32(b + 112, h->classes);
  put32(b + 116, h->context);
  put32(b + 120, h->embed_dim);
  put64(b + 128, h->param_elems);
  put64(b + 136, h->optim_elems);
  put64(b + 160, h->warmup_steps);
  putf64(b + 168, h->lr);
  putf64(b + 176, h->min_lr_frac);
  putf64(b + 184, h->momentum);
  putf64(b + 192, h->weight_decay);
  putf64(b + 200, h->beta1);
  putf64(b + 208, h->beta2);
  putf64(b + 216, h->eps);
  put32(b + 124, (h->grad_compress & 0xffu) |
                     (h->powersgd_no_ef ? 1u : 0u) << 8 |
                     (h->powersgd_rank & 0xffffu) << 16);
  put64(b + 144, h->comm_elems);
  put64(b + 152, h->powersgd_start);
  putf64(b + 224, h->loss_scale);
  put64(b + 232, h->ls_good);
  put64(b + 240, h->ls_skipped);
  put32(b + 248, h->loss_scale_mode);
  put32(b + HDR_CRC_OFF, dr_ckpt_crc32(0, b, HDR_CRC_OFF));
}

static int all_zero(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i] != 0)
      return 0;
  return 1;
}

/* The header size of a known format version, or 0. */
static uint32_t known_header_bytes(uint32_t version) {
  return version == 1                 ? DR_CKPT_V1_HEADER_BYTES
         : version == 2 || version == DR_CKPT_VERSION ? DR_CKPT_HEADER_BYTES
                                      : 0;
}

/* Checks the magic and the (version, header size) pair of the first 16
 * bytes of a file; *hb receives the header size. */
static int check_prefix(const uint8_t *b, const char *path, uint32_t *hb,
                        char *err, size_t n) {
  if (memcmp(b, MAGIC, 8) != 0)
    return fail(err, n, DR_CKPT_EMAGIC, "%s: no \"" MAGIC "\" magic", path);
  uint32_t version = get32(b + 8);
  *hb = get32(b + 12);
  if (known_header_bytes(version) == 0 || *hb != known_header_bytes(version))
    return fail(err, n, DR_CKPT_EVERSION,
                "%s: format version %" PRIu32 " with a %" PRIu32 "-byte "
                "header; this reader knows version 1 (%d bytes), 2 and %d "
                "(%d bytes)", path, version, *hb, DR_CKPT_V1_HEADER_BYTES,
                DR_CKPT_VERSION, DR_CKPT_HEADER_BYTES);
  return 0;
}

/* Checks and decodes a whole header (check_prefix passed: b holds the
 * header size it found). */
static int decode(const uint8_t *b, const char *path, dr_ckpt_header_t *h,
                  char *err, size_t n) {
  uint32_t version = get32(b + 8);
  int v1 = version == 1;
  size_t crc_off = v1 ? V1_HDR_CRC_OFF : HDR_CRC_OFF;
  uint32_t want = get32(b + crc_off);
  uint32_t got = dr_ckpt_crc32(0, b, crc_off);
  if (want != got)
    return fail(err, n, DR_CKPT_EHEADER, "%s: header CRC-32 is 0x%08" PRIx32
                ", the header says 0x%08" PRIx32, path, got, want);
  int v3 = version >= 3;
  if ((!v3 && !all_zero(b + 124, 4)) ||
      (!v3 && !all_zero(b + 144, v1 ? 12 : 16)) ||
      (version == 2 && !all_zero(b + 224, 28)) ||
      (v3 && (get32(b + 124) & 0xfe00u) != 0))
    return fail(err, n, DR_CKPT_EHEADER, "%s: reserved header bytes are "
                "not zero", path);
  memset(h, 0, sizeof(*h));
  h->version = version;
  h->header_bytes = get32(b + 12);
  h->payload_bytes = get64(b + 16);
  h->payload_crc32 = get32(b + 24);
  h->rng_version = get32(b + 28);
  h->step = get64(b + 32);
  h->total_steps = get64(b + 40);
  h->epoch = get64(b + 48);
  h->epoch_pos = get64(b + 56);
  h->steps_per_epoch = get64(b + 64);
  h->seed = get64(b + 72);
  h->train_samples = get64(b + 80);
  h->global_batch = get64(b + 88);
  h->optimizer = get32(b + 96);
  h->layers = get32(b + 100);
  h->width = get32(b + 104);
  h->input_dim = get32(b + 108);
  h->classes = get32(b + 112);
  h->context = get32(b + 116);
  h->embed_dim = get32(b + 120);
  h->param_elems = get64(b + 128);
  h->optim_elems = get64(b + 136);
  if (!v1) {
    h->has_schedule = 1;
    h->warmup_steps = get64(b + 160);
    h->lr = getf64(b + 168);
    h->min_lr_frac = getf64(b + 176);
    h->momentum = getf64(b + 184);
    h->weight_decay = getf64(b + 192);
    h->beta1 = getf64(b + 200);
    h->beta2 = getf64(b + 208);
    h->eps = getf64(b + 216);
  }
  if (v3) {
    uint32_t gc = get32(b + 124);
    h->grad_compress = gc & 0xffu;
    h->powersgd_no_ef = (gc >> 8) & 1u;
    h->powersgd_rank = gc >> 16;
    h->comm_elems = get64(b + 144);
    h->powersgd_start = get64(b + 152);
    h->loss_scale = getf64(b + 224);
    h->ls_good = get64(b + 232);
    h->ls_skipped = get64(b + 240);
    h->loss_scale_mode = get32(b + 248);
  }
  /* Every declared length is checked before it is trusted. */
  const uint64_t max_elems = (UINT64_MAX - DR_CKPT_HEADER_BYTES) / 8;
  if (h->param_elems > max_elems || h->optim_elems > max_elems ||
      h->comm_elems > max_elems ||
      h->payload_bytes != 4 * dr_ckpt_floats(h))
    return fail(err, n, DR_CKPT_EHEADER, "%s: payload of %" PRIu64 " bytes "
                "for %" PRIu64 " + %" PRIu64 " + %" PRIu64 " floats", path,
                h->payload_bytes, h->param_elems, h->optim_elems,
                h->comm_elems);
  return 0;
}

/* ---- I/O helpers -------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t n) {
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

static int host_is_le(void) {
  const uint16_t one = 1;
  uint8_t b;
  memcpy(&b, &one, 1);
  return b == 1;
}

static void swap32(void *buf, size_t n_elems) {
  uint8_t *p = buf;
  for (size_t i = 0; i < n_elems; i++, p += 4) {
    uint8_t t = p[0];
    p[0] = p[3];
    p[3] = t;
    t = p[1];
    p[1] = p[2];
    p[2] = t;
  }
}

/* The message of a failed dr_open_regular() of path. */
static int not_a_file(char *err, size_t n, const char *path, int rc) {
  if (rc == -EISDIR)
    return fail(err, n, rc, "%s is a directory, not a checkpoint file", path);
  if (rc == DR_ENOTREG)
    return fail(err, n, rc, "%s is not a regular file (a FIFO, device or "
                "socket), not a checkpoint", path);
  return fail(err, n, rc, "open() of %s failed (%s)", path, strerror(-rc));
}

int dr_ckpt_path(char *buf, size_t n, const char *dir, uint64_t step) {
  int k = snprintf(buf, n, "%s/ckpt-%010" PRIu64 ".bin", dir, step);
  return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

/* ---- writing ------------------------------------------------------------ */

/* buf holds CHUNK_BYTES. */
static int write_payload(int fd, const dr_ckpt_span_t *spans, size_t n_spans,
                         uint8_t *buf, uint32_t *crc) {
  static_assert(sizeof(float) == 4, "fp32 payload");
  int le = host_is_le(), rc = 0;
  uint32_t c = 0;
  for (size_t s = 0; s < n_spans && rc == 0; s++) {
    const float *p = spans[s].p;
    size_t left = spans[s].n_elems;
    while (left > 0 && rc == 0) {
      size_t k = left < CHUNK_BYTES / 4 ? left : CHUNK_BYTES / 4;
      memcpy(buf, p, k * 4);
      if (!le)
        swap32(buf, k);
      c = dr_ckpt_crc32(c, buf, k * 4);
      rc = write_all(fd, buf, k * 4);
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
    return fail(err, n, DR_CKPT_ESHAPE, "checkpoint of step %" PRIu64 ": "
                "%" PRIu64 " floats given for %" PRIu64 " + %" PRIu64
                " + %" PRIu64, h->step, total, h->param_elems,
                h->optim_elems, h->comm_elems);
  char final[4096], tmp[4200];
  if (dr_ckpt_path(final, sizeof(final), dir, h->step) != 0)
    return fail(err, n, -ENAMETOOLONG, "checkpoint directory name too long: "
                "%s", dir);
  snprintf(tmp, sizeof(tmp), "%s" TMP_TAG "%ld", final, (long)getpid());
  /* The name taken by what is not a file (a directory, a FIFO): not a
   * checkpoint, so not this writer's to replace (and rename() could not
   * replace a directory). */
  struct stat st;
  if (lstat(final, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    return not_a_file(err, n, final,
                      S_ISDIR(st.st_mode) ? -EISDIR : DR_ENOTREG);

  /* Before the file exists: nothing to clean up when it fails. */
  uint8_t *buf = malloc(CHUNK_BYTES);
  if (buf == NULL)
    return fail(err, n, -ENOMEM, "out of memory for the %u KiB buffer of "
                "the checkpoint %s", CHUNK_BYTES / 1024, final);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    free(buf);
    return fail(err, n, -e, "open() of %s failed while writing a "
                "checkpoint (%s)", tmp, strerror(e));
  }
  uint8_t hdr[DR_CKPT_HEADER_BYTES];
  memset(hdr, 0, sizeof(hdr));
  const char *what = "write()";
  dr_ckpt_header_t full = *h;
  int rc = write_all(fd, hdr, sizeof(hdr));
  if (rc == 0)
    rc = write_payload(fd, spans, n_spans, buf, &full.payload_crc32);
  free(buf);
  if (rc == 0) {
    /* The header last: a file cut short by a crash never carries a header
     * that would describe it as complete. */
    full.payload_bytes = 4 * total;
    encode(&full, hdr);
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
    return fail(err, n, rc, "%s of %s failed while writing a checkpoint "
                "(%s)", what, tmp, dr_strerror(rc));
  }
  if (before_commit != NULL)
    before_commit(arg, tmp);
  if (rename(tmp, final) != 0) {
    rc = -errno;
    unlink(tmp);
    return fail(err, n, rc, "rename() of %s to %s failed (%s)", tmp, final,
                strerror(-rc));
  }
  if (path != NULL && path_len > 0)
    snprintf(path, path_len, "%s", final);
  rc = fsync_dir(dir);
  if (rc != 0)
    return fail(err, n, rc, "fsync() of the directory %s failed after "
                "writing %s (%s)", dir, final, strerror(-rc));
  return 0;
}

/* ---- reading ------------------------------------------------------------ */

/* Opens path (never blocking: a FIFO named like a checkpoint is refused,
 * not waited on) and checks its header and size; returns the fd (>= 0),
 * positioned at the payload, or a code. */
static int open_checked(const char *path, dr_ckpt_header_t *h, char *err,
                        size_t n) {
  int fd = dr_open_regular(path);
  if (fd < 0)
    return not_a_file(err, n, path, fd);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int rc = -errno;
    close(fd);
    return fail(err, n, rc, "fstat() of %s failed (%s)", path, strerror(-rc));
  }
  /* The version-1 header is the shortest: read it, then the rest of a
   * longer one once the prefix says how long. */
  uint8_t hdr[DR_CKPT_HEADER_BYTES];
  uint32_t hb = 0;
  int rc = 0;
  if ((uint64_t)st.st_size < DR_CKPT_V1_HEADER_BYTES)
    rc = fail(err, n, DR_CKPT_ESIZE, "%s: %lld bytes, shorter than a "
              "header", path, (long long)st.st_size);
  else if ((rc = read_all(fd, hdr, DR_CKPT_V1_HEADER_BYTES)) != 0)
    rc = fail(err, n, rc, "read() of %s failed (%s)", path,
              dr_strerror(rc));
  else if ((rc = check_prefix(hdr, path, &hb, err, n)) != 0)
    ;
  else if ((uint64_t)st.st_size < hb)
    rc = fail(err, n, DR_CKPT_ESIZE, "%s: %lld bytes, shorter than its "
              "%" PRIu32 "-byte header", path, (long long)st.st_size, hb);
  else if (hb > DR_CKPT_V1_HEADER_BYTES &&
           (rc = read_all(fd, hdr + DR_CKPT_V1_HEADER_BYTES,
                          hb - DR_CKPT_V1_HEADER_BYTES)) != 0)
    rc = fail(err, n, rc, "read() of %s failed (%s)", path,
              dr_strerror(rc));
  else if ((rc = decode(hdr, path, h, err, n)) != 0)
    ;
  else if ((uint64_t)st.st_size != hb + h->payload_bytes)
    rc = fail(err, n, DR_CKPT_ESIZE, "%s: %lld bytes, the header declares "
              "%" PRIu32 " + %" PRIu64, path, (long long)st.st_size, hb,
              h->payload_bytes);
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
    scratch = malloc(CHUNK_BYTES);
    if (scratch == NULL)
      return fail(err, n, -ENOMEM, "out of memory for the %u KiB buffer "
                  "that verifies %s", CHUNK_BYTES / 1024, path);
    whole.p = NULL;
    whole.n_elems = (size_t)dr_ckpt_floats(h);
    spans = &whole;
    n_spans = 1;
  }
  int le = host_is_le(), rc = 0;
  uint32_t c = 0;
  for (size_t s = 0; s < n_spans && rc == 0; s++) {
    uint8_t *p = (uint8_t *)spans[s].p;
    size_t left = spans[s].n_elems;
    while (left > 0 && rc == 0) {
      size_t k = left < CHUNK_BYTES / 4 ? left : CHUNK_BYTES / 4;
      uint8_t *dst = scratch != NULL ? scratch : p;
      rc = read_all(fd, dst, k * 4);
      if (rc != 0)
        break;
      c = dr_ckpt_crc32(c, dst, k * 4);
      if (!le && scratch == NULL)
        swap32(dst, k);
      if (scratch == NULL)
        p += k * 4;
      left -= k;
    }
  }
  free(scratch);
  if (rc != 0)
    return fail(err, n, rc, "read() of %s failed (%s)", path,
                dr_strerror(rc));
  if (c != h->payload_crc32)
    return fail(err, n, DR_CKPT_ECRC, "%s: payload CRC-32 is 0x%08" PRIx32
                ", the header says 0x%08" PRIx32, path, c, h->payload_crc32);
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
    rc = fail(err, n, DR_CKPT_ESHAPE, "%s holds %" PRIu64 " + %" PRIu64
              " + %" PRIu64 " floats; the buffers take %" PRIu64, path,
              h->param_elems, h->optim_elems, h->comm_elems, total);
  else
    rc = read_payload(fd, path, h, spans, n_spans, err, n);
  close(fd);
  return rc;
}

/* ---- the directory ------------------------------------------------------ */

/* The step of a checkpoint's name; with tmp, of a temporary file's name
 * (ckpt-DDDDDDDDDD.bin.tmp.PID), whose pid goes to *pid. */
static int parse_name(const char *name, int tmp, uint64_t *step, long *pid) {
  if (strncmp(name, "ckpt-", 5) != 0)
    return 0;
  uint64_t s = 0;
  for (int i = 5; i < 15; i++) {
    if (name[i] < '0' || name[i] > '9')
      return 0;
    s = s * 10 + (uint64_t)(name[i] - '0');
  }
  if (strncmp(name + 15, ".bin", 4) != 0)
    return 0;
  *step = s;
  if (!tmp)
    return name[NAME_LEN] == '\0';
  const char *p = name + NAME_LEN;
  if (strncmp(p, TMP_TAG, strlen(TMP_TAG)) != 0)
    return 0;
  p += strlen(TMP_TAG);
  char *end;
  errno = 0;
  long v = strtol(p, &end, 10);
  if (end == p || *end != '\0' || errno != 0)
    return 0;
  *pid = v;
  return 1;
}

static int cmp_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* 1 when the entry e of d is a regular file, or a symbolic link to one. */
static int is_file(DIR *d, const struct dirent *e) {
  if (e->d_type == DT_REG)
    return 1;
  if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN)
    return 0;
  struct stat st;
  return fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode);
}

/* The steps of dir's checkpoint names, newest first: of every entry so
 * named, or with files_only of the regular files alone. */
static int list_steps(const char *dir, int files_only, uint64_t **steps,
                      size_t *n) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (d == NULL)
    return errno == ENOENT ? 0 : -errno;
  size_t cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t step;
    if (!parse_name(e->d_name, 0, &step, NULL) ||
        (files_only && !is_file(d, e)))
      continue;
    if (*n == cap) {
      size_t want = cap ? 2 * cap : 16;
      uint64_t *grown = realloc(*steps, want * sizeof(uint64_t));
      if (grown == NULL) {
        rc = -ENOMEM;
        break;
      }
      *steps = grown;
      cap = want;
    }
    (*steps)[(*n)++] = step;
  }
  closedir(d);
  if (rc != 0) {
    free(*steps);
    *steps = NULL;
    *n = 0;
    return rc;
  }
  if (*n > 0)
    qsort(*steps, *n, sizeof(uint64_t), cmp_desc);
  return 0;
}

int dr_ckpt_list(const char *dir, uint64_t **steps, size_t *n) {
  return list_steps(dir, 1, steps, n);
}

/* An entry named like a checkpoint, as dr_ckpt_find_latest sees it. */
typedef struct {
  uint64_t named; /* the step of its name */
  uint64_t step;  /* the step of its header, when rc is 0 */
  int rc;         /* of reading its header */
  int reported;
} cand_t;

/* The readable headers first, newest step first and, of two with the
 * same step, the one whose name agrees; then the others by name. */
static int cand_cmp(const void *a, const void *b) {
  const cand_t *x = a, *y = b;
  if ((x->rc == 0) != (y->rc == 0))
    return x->rc == 0 ? -1 : 1;
  if (x->rc == 0 && x->step != y->step)
    return x->step < y->step ? 1 : -1;
  if (x->rc == 0 && (x->named == x->step) != (y->named == y->step))
    return x->named == x->step ? -1 : 1;
  return x->named < y->named ? 1 : x->named > y->named ? -1 : 0;
}

int dr_ckpt_find_latest(const char *dir, dr_ckpt_header_t *h, char *path,
                        size_t path_len, dr_ckpt_skip_fn skip, void *arg) {
  uint64_t *steps;
  size_t count;
  int rc = list_steps(dir, 0, &steps, &count);
  if (rc != 0)
    return rc;
  cand_t *c = count > 0 ? calloc(count, sizeof(*c)) : NULL;
  if (count > 0 && c == NULL) {
    free(steps);
    return -ENOMEM;
  }
  char p[4096], why[512];
  dr_ckpt_header_t fh;
  int found = 0;
  uint64_t best = 0;
  /* Every header first (a few hundred bytes each): a file's step is the
   * one it records, whatever its name says. */
  for (size_t i = 0; i < count && rc == 0; i++) {
    c[i].named = steps[i];
    if (dr_ckpt_path(p, sizeof(p), dir, steps[i]) != 0) {
      rc = -ENAMETOOLONG;
      break;
    }
    c[i].rc = dr_ckpt_read_header(p, &fh, NULL, 0);
    c[i].step = c[i].rc == 0 ? fh.step : 0;
  }
  free(steps);
  if (rc != 0)
    goto out;
  if (count > 0)
    qsort(c, count, sizeof(*c), cand_cmp);
  for (size_t i = 0; i < count && c[i].rc == 0 && !found; i++) {
    dr_ckpt_path(p, sizeof(p), dir, c[i].named);
    why[0] = '\0';
    int v = dr_ckpt_verify(p, h, why, sizeof(why));
    c[i].reported = 1;
    if (v == 0) {
      snprintf(path, path_len, "%s", p);
      found = 1;
      best = h->step;
    } else if (v != 0 && skip != NULL) {
      skip(arg, p, v, why);
    }
  }
  /* What its name claims to be newer than the choice, though it was not
   * tried: not a file, an unreadable header, or an older step inside. */
  for (size_t i = 0; i < count && skip != NULL; i++) {
    if (c[i].reported || (found && c[i].named <= best))
      continue;
    dr_ckpt_path(p, sizeof(p), dir, c[i].named);
    why[0] = '\0';
    int v = c[i].rc == 0 ? 0 : dr_ckpt_read_header(p, &fh, why, sizeof(why));
    if (v != 0) {
      skip(arg, p, v, why);
    } else if (c[i].rc == 0 && c[i].step != c[i].named) {
      snprintf(why, sizeof(why), "it holds the checkpoint of step %" PRIu64
               ", not of step %" PRIu64 " as its name says, and a newer "
               "one is here", c[i].step, c[i].named);
      skip(arg, p, DR_CKPT_ESTEP, why);
    }
  }
  rc = found;
out:
  free(c);
  return rc;
}

int dr_ckpt_remove_temp(const char *dir, char *err, size_t n) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return errno == ENOENT ? 0 : fail(err, n, -errno, "opendir() of %s "
                                      "failed (%s)", dir, strerror(errno));
  int removed = 0, rc = 0;
  long self = (long)getpid();
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t step;
    long pid;
    if (!parse_name(e->d_name, 1, &step, &pid) || pid == self)
      continue;
    char p[4400];
    snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
    if (unlink(p) == 0)
      removed++;
    else if (errno != ENOENT && rc == 0)
      rc = fail(err, n, -errno, "unlink() of %s failed (%s)", p,
                strerror(errno));
  }
  closedir(d);
  return rc != 0 ? rc : removed;
}

int dr_ckpt_prune(const char *dir, uint64_t upto, uint32_t keep, char *err,
                  size_t n) {
  uint64_t *steps;
  size_t count;
  int rc = dr_ckpt_list(dir, &steps, &count);
  if (rc != 0)
    return fail(err, n, rc, "cannot list %s (%s)", dir, strerror(-rc));
  int removed = 0;
  uint32_t kept = 0;
  for (size_t i = 0; i < count; i++) {
    if (steps[i] > upto)
      continue;
    if (kept < keep) {
      kept++;
      continue;
    }
    char p[4096];
    if (dr_ckpt_path(p, sizeof(p), dir, steps[i]) != 0)
      continue;
    if (unlink(p) == 0)
      removed++;
    else if (errno != ENOENT && rc == 0)
      rc = fail(err, n, -errno, "unlink() of %s failed (%s)", p,
                strerror(errno));
  }
  free(steps);
  if (rc != 0)
    return rc;
  int t = dr_ckpt_remove_temp(dir, err, n);
  return t < 0 ? t : removed + t;
}
