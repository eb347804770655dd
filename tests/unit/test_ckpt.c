/* Checkpoint files: the round trip, the documented layout, version-1
 * files still read, rejection of every flipped byte and every truncation
 * (of both versions), the choice of the newest valid file (by the step
 * its header records; a directory or FIFO so named passed over), keep-K
 * pruning, temporary files, failures of the writer (a storage that
 * refuses leaves the older files as they were) and the kinds of
 * failures.
 *
 * One file, past the few hundred lines of the rule: the project keeps one
 * cmocka executable per module, and these are the tests of one module,
 * worker/ckpt (ckpt.h), on one fixture of checkpoint files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"

#define N_PARAM 23 /* floats, in three spans */
#define N_OPTIM 46

typedef struct {
  char dir[64];
  char path[256];
  float params[N_PARAM];
  float optim[N_OPTIM];
  dr_ckpt_span_t spans[4];
  dr_ckpt_header_t h;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  snprintf(f->dir, sizeof(f->dir), "/tmp/test_ckpt.XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  for (int i = 0; i < N_PARAM; i++)
    f->params[i] = (float)i * 0.25f - 3.0f;
  for (int i = 0; i < N_OPTIM; i++)
    f->optim[i] = 1.0f / (float)(i + 1);
  f->params[3] = -0.0f;
  /* Three parameter tensors, an empty one, then the optimizer state. */
  f->spans[0] = (dr_ckpt_span_t){f->params, 10};
  f->spans[1] = (dr_ckpt_span_t){f->params + 10, 0};
  f->spans[2] = (dr_ckpt_span_t){f->params + 10, N_PARAM - 10};
  f->spans[3] = (dr_ckpt_span_t){f->optim, N_OPTIM};
  dr_ckpt_header_t *h = &f->h;
  h->rng_version = DR_CKPT_RNG_XOSHIRO;
  h->step = 10;
  h->total_steps = 20;
  h->steps_per_epoch = 64;
  h->epoch = 0;
  h->epoch_pos = 10;
  h->seed = 0x0123456789abcdefull;
  h->train_samples = 2048;
  h->global_batch = 32;
  h->optimizer = 1;
  h->layers = 2;
  h->width = 64;
  h->input_dim = 16;
  h->classes = 4;
  h->param_elems = N_PARAM;
  h->optim_elems = N_OPTIM;
  h->warmup_steps = 7;
  h->lr = 0.003;
  h->min_lr_frac = 0.1;
  h->momentum = 0.9;
  h->weight_decay = 1e-4;
  h->beta1 = 0.9;
  h->beta2 = 0.999;
  h->eps = 1e-8;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
  assert_int_equal(system(cmd), 0);
  free(f);
  return 0;
}

/* Writes the fixture's checkpoint at step; its path lands in f->path. */
static void write_at(fx_t *f, uint64_t step) {
  char err[512] = "";
  f->h.step = step;
  f->h.epoch = step / f->h.steps_per_epoch;
  f->h.epoch_pos = step % f->h.steps_per_epoch;
  int rc = dr_ckpt_write(f->dir, &f->h, f->spans, 4, NULL, NULL, f->path,
                         sizeof(f->path), err, sizeof(err));
  if (rc != 0)
    fail_msg("dr_ckpt_write: %s", err);
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  fseek(fp, 0, SEEK_END);
  *n = (size_t)ftell(fp);
  fseek(fp, 0, SEEK_SET);
  uint8_t *b = malloc(*n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, *n, fp), *n);
  fclose(fp);
  return b;
}

static void spit(const char *path, const uint8_t *b, size_t n) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(b, 1, n, fp), n);
  assert_int_equal(fclose(fp), 0);
}

static void put_le(uint8_t *b, uint64_t v, int n_bytes) {
  for (int i = 0; i < n_bytes; i++)
    b[i] = (uint8_t)(v >> (8 * i));
}

/* The fixture's checkpoint at step in the version-1 layout, which this
 * code no longer writes: built here byte by byte, as the writer of
 * version 1 laid it out. Its path lands in f->path. */
static void write_v1_at(fx_t *f, uint64_t step) {
  const dr_ckpt_header_t *h = &f->h;
  size_t n = 160 + 4 * (N_PARAM + N_OPTIM);
  uint8_t *b = calloc(1, n);
  assert_non_null(b);
  memcpy(b + 160, f->params, 4 * N_PARAM); /* the tests run little-endian */
  memcpy(b + 160 + 4 * N_PARAM, f->optim, 4 * N_OPTIM);
  memcpy(b, "DDPRCKPT", 8);
  put_le(b + 8, 1, 4);
  put_le(b + 12, 160, 4);
  put_le(b + 16, 4 * (N_PARAM + N_OPTIM), 8);
  put_le(b + 24, dr_ckpt_crc32(0, b + 160, n - 160), 4);
  put_le(b + 28, h->rng_version, 4);
  put_le(b + 32, step, 8);
  put_le(b + 40, h->total_steps, 8);
  put_le(b + 48, step / h->steps_per_epoch, 8);
  put_le(b + 56, step % h->steps_per_epoch, 8);
  put_le(b + 64, h->steps_per_epoch, 8);
  put_le(b + 72, h->seed, 8);
  put_le(b + 80, h->train_samples, 8);
  put_le(b + 88, h->global_batch, 8);
  put_le(b + 96, h->optimizer, 4);
  put_le(b + 100, h->layers, 4);
  put_le(b + 104, h->width, 4);
  put_le(b + 108, h->input_dim, 4);
  put_le(b + 112, h->classes, 4);
  put_le(b + 116, h->context, 4);
  put_le(b + 120, h->embed_dim, 4);
  put_le(b + 128, N_PARAM, 8);
  put_le(b + 136, N_OPTIM, 8);
  put_le(b + 156, dr_ckpt_crc32(0, b, 156), 4);
  assert_int_equal(dr_ckpt_path(f->path, sizeof(f->path), f->dir, step), 0);
  spit(f->path, b, n);
  free(b);
}

/* The fixture's checkpoint at step in the given format version. */
static void write_version_at(fx_t *f, int version, uint64_t step) {
  if (version == 1)
    write_v1_at(f, step);
  else
    write_at(f, step);
}

static int exists(const char *dir, const char *name) {
  char p[256];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

static void test_crc32(void **state) {
  (void)state;
  assert_int_equal(dr_ckpt_crc32(0, "123456789", 9), 0xCBF43926u);
  assert_int_equal(dr_ckpt_crc32(0, "", 0), 0);
  /* Streaming in pieces of every size gives the one-shot value. */
  uint8_t buf[100];
  for (int i = 0; i < 100; i++)
    buf[i] = (uint8_t)(i * 37 + 11);
  uint32_t whole = dr_ckpt_crc32(0, buf, sizeof(buf));
  for (size_t cut = 0; cut <= sizeof(buf); cut++) {
    uint32_t c = dr_ckpt_crc32(0, buf, cut);
    assert_int_equal(dr_ckpt_crc32(c, buf + cut, sizeof(buf) - cut), whole);
  }
}

static void test_round_trip(void **state) {
  fx_t *f = *state;
  write_at(f, 10);
  char want[256];
  assert_int_equal(dr_ckpt_path(want, sizeof(want), f->dir, 10), 0);
  assert_string_equal(f->path, want);
  assert_non_null(strstr(f->path, "/ckpt-0000000010.bin"));

  float params[N_PARAM], optim[N_OPTIM];
  memset(params, 0xAA, sizeof(params));
  memset(optim, 0xAA, sizeof(optim));
  /* Spans cut differently from the writer's: only the order counts. */
  dr_ckpt_span_t in[3] = {{params, 5}, {params + 5, N_PARAM - 5},
                          {optim, N_OPTIM}};
  dr_ckpt_header_t h;
  char err[512] = "";
  assert_int_equal(dr_ckpt_read(f->path, &h, in, 3, err, sizeof(err)), 0);
  assert_memory_equal(params, f->params, sizeof(params));
  assert_memory_equal(optim, f->optim, sizeof(optim));
  assert_int_equal(h.version, DR_CKPT_VERSION);
  assert_int_equal(h.rng_version, DR_CKPT_RNG_XOSHIRO);
  assert_int_equal(h.step, 10);
  assert_int_equal(h.total_steps, 20);
  assert_int_equal(h.epoch, 0);
  assert_int_equal(h.epoch_pos, 10);
  assert_int_equal(h.steps_per_epoch, 64);
  assert_int_equal(h.seed, 0x0123456789abcdefull);
  assert_int_equal(h.train_samples, 2048);
  assert_int_equal(h.global_batch, 32);
  assert_int_equal(h.optimizer, 1);
  assert_int_equal(h.layers, 2);
  assert_int_equal(h.width, 64);
  assert_int_equal(h.input_dim, 16);
  assert_int_equal(h.classes, 4);
  assert_int_equal(h.context, 0);
  assert_int_equal(h.embed_dim, 0);
  assert_int_equal(h.param_elems, N_PARAM);
  assert_int_equal(h.optim_elems, N_OPTIM);
  assert_int_equal(h.payload_bytes, 4 * (N_PARAM + N_OPTIM));
  assert_int_equal(h.header_bytes, DR_CKPT_HEADER_BYTES);
  /* The schedule and hyper-parameters, exactly. */
  assert_int_equal(h.has_schedule, 1);
  assert_int_equal(h.warmup_steps, 7);
  assert_true(h.lr == 0.003);
  assert_true(h.min_lr_frac == 0.1);
  assert_true(h.momentum == 0.9);
  assert_true(h.weight_decay == 1e-4);
  assert_true(h.beta1 == 0.9);
  assert_true(h.beta2 == 0.999);
  assert_true(h.eps == 1e-8);

  dr_ckpt_header_t v;
  assert_int_equal(dr_ckpt_verify(f->path, &v, err, sizeof(err)), 0);
  assert_int_equal(v.payload_crc32, h.payload_crc32);
  assert_int_equal(dr_ckpt_read_header(f->path, &v, err, sizeof(err)), 0);
  assert_int_equal(v.step, 10);
}

static void assert_le(const uint8_t *b, uint64_t v, int n_bytes) {
  uint8_t want[8];
  put_le(want, v, n_bytes);
  assert_memory_equal(b, want, n_bytes);
}
static void assert_f64(const uint8_t *b, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  assert_le(b, u, 8);
}

/* The layout documented in ckpt.h and docs/checkpoint-format.md, byte for
 * byte. */
static void test_layout(void **state) {
  fx_t *f = *state;
  f->h.context = 32;   /* not a meaningful model: every field distinct */
  f->h.embed_dim = 16;
  f->h.grad_compress = 3;
  f->h.powersgd_rank = 0x1234;
  f->h.powersgd_no_ef = 1;
  f->h.powersgd_start = 0x0a0b0c0d0eull;
  f->h.loss_scale_mode = 2;
  f->h.loss_scale = 32768.0;
  f->h.ls_good = 0x777;
  f->h.ls_skipped = 0x33;
  write_at(f, 0x0102030405ull);
  size_t n;
  uint8_t *b = slurp(f->path, &n);
  assert_int_equal(DR_CKPT_HEADER_BYTES, 256);
  assert_int_equal(n, 256 + 4 * (N_PARAM + N_OPTIM));
  assert_memory_equal(b, "DDPRCKPT", 8);
  assert_le(b + 8, 3, 4);                          /* version */
  assert_le(b + 12, 256, 4);                       /* header size */
  assert_le(b + 16, 4 * (N_PARAM + N_OPTIM), 8);   /* payload size */
  assert_le(b + 24, dr_ckpt_crc32(0, b + 256, n - 256), 4);
  assert_le(b + 28, DR_CKPT_RNG_XOSHIRO, 4);
  assert_le(b + 32, 0x0102030405ull, 8);           /* step */
  assert_le(b + 40, 20, 8);                        /* total steps */
  assert_le(b + 48, 0x0102030405ull / 64, 8);      /* epoch */
  assert_le(b + 56, 0x0102030405ull % 64, 8);      /* position */
  assert_le(b + 64, 64, 8);                        /* steps per epoch */
  assert_le(b + 72, 0x0123456789abcdefull, 8);     /* seed */
  assert_le(b + 80, 2048, 8);                      /* training samples */
  assert_le(b + 88, 32, 8);                        /* global batch */
  assert_le(b + 96, 1, 4);                         /* optimizer */
  assert_le(b + 100, 2, 4);                        /* layers */
  assert_le(b + 104, 64, 4);                       /* width */
  assert_le(b + 108, 16, 4);                       /* input dim */
  assert_le(b + 112, 4, 4);                        /* classes */
  assert_le(b + 116, 32, 4);                       /* context */
  assert_le(b + 120, 16, 4);                       /* embed dim */
  assert_le(b + 124, 3 | 1 << 8 | 0x1234u << 16, 4); /* compression */
  assert_le(b + 128, N_PARAM, 8);
  assert_le(b + 136, N_OPTIM, 8);
  assert_le(b + 144, 0, 8);                        /* compression floats */
  assert_le(b + 152, 0x0a0b0c0d0eull, 8);          /* PowerSGD start */
  assert_le(b + 160, 7, 8);                        /* warmup steps */
  assert_f64(b + 168, 0.003);                      /* lr */
  assert_f64(b + 176, 0.1);                        /* min lr fraction */
  assert_f64(b + 184, 0.9);                        /* momentum */
  assert_f64(b + 192, 1e-4);                       /* weight decay */
  assert_f64(b + 200, 0.9);                        /* beta1 */
  assert_f64(b + 208, 0.999);                      /* beta2 */
  assert_f64(b + 216, 1e-8);                       /* eps */
  assert_f64(b + 224, 32768.0);                    /* loss scale */
  assert_le(b + 232, 0x777, 8);                    /* clean steps */
  assert_le(b + 240, 0x33, 8);                     /* skipped steps */
  assert_le(b + 248, 2, 4);                        /* loss-scale mode */
  assert_le(b + 252, dr_ckpt_crc32(0, b, 252), 4);
  dr_ckpt_header_t h;
  char err[512];
  assert_int_equal(dr_ckpt_read_header(f->path, &h, err, sizeof(err)), 0);
  assert_int_equal(h.grad_compress, 3);
  assert_int_equal(h.powersgd_rank, 0x1234);
  assert_int_equal(h.powersgd_no_ef, 1);
  assert_int_equal(h.powersgd_start, 0x0a0b0c0d0eull);
  assert_int_equal(h.loss_scale_mode, 2);
  assert_true(h.loss_scale == 32768.0);
  assert_int_equal(h.ls_good, 0x777);
  assert_int_equal(h.ls_skipped, 0x33);
  /* The payload: fp32 little-endian, parameters first. */
  float first;
  memcpy(&first, b + 256, 4);
  assert_true(first == f->params[0]);
  float opt0;
  memcpy(&opt0, b + 256 + 4 * N_PARAM, 4);
  assert_true(opt0 == f->optim[0]);
  free(b);
}

/* A version-1 file, as version 1 wrote it, reads as it did: every field,
 * the payload, and no schedule. */
static void test_v1_still_read(void **state) {
  fx_t *f = *state;
  write_v1_at(f, 10);
  float params[N_PARAM], optim[N_OPTIM];
  dr_ckpt_span_t in[2] = {{params, N_PARAM}, {optim, N_OPTIM}};
  dr_ckpt_header_t h;
  char err[512] = "";
  int rc = dr_ckpt_read(f->path, &h, in, 2, err, sizeof(err));
  if (rc != 0)
    fail_msg("dr_ckpt_read of a version-1 file: %s", err);
  assert_memory_equal(params, f->params, sizeof(params));
  assert_memory_equal(optim, f->optim, sizeof(optim));
  assert_int_equal(h.version, 1);
  assert_int_equal(h.header_bytes, 160);
  assert_int_equal(h.has_schedule, 0);
  assert_true(h.lr == 0.0 && h.warmup_steps == 0 && h.eps == 0.0);
  assert_int_equal(h.step, 10);
  assert_int_equal(h.epoch_pos, 10);
  assert_int_equal(h.seed, 0x0123456789abcdefull);
  assert_int_equal(h.global_batch, 32);
  assert_int_equal(h.width, 64);
  assert_int_equal(h.param_elems, N_PARAM);
  assert_int_equal(h.optim_elems, N_OPTIM);
  assert_int_equal(h.payload_bytes, 4 * (N_PARAM + N_OPTIM));
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)), 0);
  /* Among version-2 files it is listed and chosen by its step alone. */
  write_at(f, 5);
  char path[256];
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path), NULL,
                                       NULL), 1);
  assert_int_equal(h.step, 10);
  assert_int_equal(h.version, 1);
}

static void flipped_byte_rejected(fx_t *f, int version) {
  write_version_at(f, version, 10);
  size_t hb = version == 1 ? 160 : DR_CKPT_HEADER_BYTES;
  size_t n;
  uint8_t *orig = slurp(f->path, &n);
  uint8_t *b = malloc(n);
  assert_non_null(b);
  char err[512];
  for (size_t i = 0; i < n; i++) {
    for (int mask = 1; mask < 256; mask <<= 3) {
      memcpy(b, orig, n);
      b[i] ^= (uint8_t)mask;
      spit(f->path, b, n);
      dr_ckpt_header_t h;
      err[0] = '\0';
      int rc = dr_ckpt_verify(f->path, &h, err, sizeof(err));
      if (rc == 0)
        fail_msg("version %d: a flip of byte %zu (mask 0x%02x) was accepted",
                 version, i, mask);
      assert_true(err[0] != '\0');
      if (i >= hb)
        assert_int_equal(rc, DR_CKPT_ECRC);
      else if (i < 8)
        assert_int_equal(rc, DR_CKPT_EMAGIC);
      float p[N_PARAM], o[N_OPTIM];
      dr_ckpt_span_t in[2] = {{p, N_PARAM}, {o, N_OPTIM}};
      assert_int_not_equal(dr_ckpt_read(f->path, &h, in, 2, err, sizeof(err)),
                           0);
    }
  }
  spit(f->path, orig, n);
  dr_ckpt_header_t h;
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)), 0);
  free(b);
  free(orig);
}

static void test_flipped_byte_rejected(void **state) {
  flipped_byte_rejected(*state, DR_CKPT_VERSION);
  flipped_byte_rejected(*state, 1);
}

static void truncated_rejected(fx_t *f, int version) {
  write_version_at(f, version, 10);
  size_t n;
  uint8_t *orig = slurp(f->path, &n);
  char err[512];
  dr_ckpt_header_t h;
  for (size_t len = 0; len < n; len++) {
    spit(f->path, orig, len);
    int rc = dr_ckpt_verify(f->path, &h, err, sizeof(err));
    if (rc == 0)
      fail_msg("version %d: a file cut to %zu of %zu bytes was accepted",
               version, len, n);
    assert_int_equal(rc, DR_CKPT_ESIZE);
    assert_int_equal(dr_ckpt_read_header(f->path, &h, err, sizeof(err)),
                     DR_CKPT_ESIZE);
  }
  /* A byte too many is as wrong as one too few. */
  uint8_t *longer = malloc(n + 1);
  assert_non_null(longer);
  memcpy(longer, orig, n);
  longer[n] = 0;
  spit(f->path, longer, n + 1);
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)),
                   DR_CKPT_ESIZE);
  free(longer);
  free(orig);
}

static void test_truncated_rejected(void **state) {
  truncated_rejected(*state, DR_CKPT_VERSION);
  truncated_rejected(*state, 1);
}

/* Sets the version and header size of a current file's bytes and makes
 * its header CRC match again. */
static void set_version(uint8_t *b, uint32_t version, uint32_t hb) {
  put_le(b + 8, version, 4);
  put_le(b + 12, hb, 4);
  put_le(b + 252, dr_ckpt_crc32(0, b, 252), 4);
}

static void test_other_versions_rejected(void **state) {
  fx_t *f = *state;
  write_at(f, 10);
  size_t n;
  uint8_t *b = slurp(f->path, &n);
  char err[512];
  dr_ckpt_header_t h;
  /* Version 4, with a header CRC that matches: refused by version. */
  set_version(b, 4, 256);
  spit(f->path, b, n);
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)),
                   DR_CKPT_EVERSION);
  assert_non_null(strstr(err, "version 4"));
  /* Version 3: an unknown flag bit of the compression byte. */
  set_version(b, 3, 256);
  b[125] = 2;
  put_le(b + 252, dr_ckpt_crc32(0, b, 252), 4);
  spit(f->path, b, n);
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)),
                   DR_CKPT_EHEADER);
  b[125] = 0;
  /* A version with the other version's header size. */
  set_version(b, 2, 160);
  spit(f->path, b, n);
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)),
                   DR_CKPT_EVERSION);
  set_version(b, 1, 256);
  spit(f->path, b, n);
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)),
                   DR_CKPT_EVERSION);
  /* A payload size that disagrees with the counts, CRC recomputed. */
  set_version(b, 2, 256);
  b[16] ^= 4;
  put_le(b + 252, dr_ckpt_crc32(0, b, 252), 4);
  spit(f->path, b, n);
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)),
                   DR_CKPT_EHEADER);
  /* A reserved byte set, CRC recomputed. */
  b[16] ^= 4;
  b[230] = 1;
  put_le(b + 252, dr_ckpt_crc32(0, b, 252), 4);
  spit(f->path, b, n);
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)),
                   DR_CKPT_EHEADER);
  free(b);
  spit(f->path, (const uint8_t *)"", 0);
  assert_int_equal(dr_ckpt_verify(f->path, &h, err, sizeof(err)),
                   DR_CKPT_ESIZE);
  assert_int_equal(dr_ckpt_verify("/nonexistent/ckpt", &h, err, sizeof(err)),
                   -ENOENT);
}

static void test_read_shape_mismatch(void **state) {
  fx_t *f = *state;
  write_at(f, 10);
  float p[N_PARAM + N_OPTIM + 1];
  memset(p, 0, sizeof(p));
  dr_ckpt_span_t in = {p, N_PARAM + N_OPTIM + 1};
  dr_ckpt_header_t h;
  char err[512];
  assert_int_equal(dr_ckpt_read(f->path, &h, &in, 1, err, sizeof(err)),
                   DR_CKPT_ESHAPE);
  /* Nothing was written to the buffers before the refusal. */
  for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
    assert_true(p[i] == 0.0f);
  in.n_elems = N_PARAM + N_OPTIM;
  assert_int_equal(dr_ckpt_read(f->path, &h, &in, 1, err, sizeof(err)), 0);
}

static int skipped;
static char skipped_path[256];
static int skipped_code;
static void on_skip(void *arg, const char *path, int code, const char *why) {
  assert_ptr_equal(arg, &skipped);
  assert_true(why[0] != '\0');
  skipped++;
  skipped_code = code;
  snprintf(skipped_path, sizeof(skipped_path), "%s", path);
}

static void test_newest_valid_chosen(void **state) {
  fx_t *f = *state;
  dr_ckpt_header_t h;
  char path[256];
  skipped = 0;
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path),
                                       on_skip, &skipped), 0);
  char missing[128];
  snprintf(missing, sizeof(missing), "%s/absent", f->dir);
  assert_int_equal(dr_ckpt_find_latest(missing, &h, path, sizeof(path),
                                       on_skip, &skipped), 0);
  assert_int_equal(skipped, 0);

  write_at(f, 5);
  write_at(f, 10);
  write_at(f, 15);
  /* Newest: a flipped payload byte. */
  size_t n;
  uint8_t *b = slurp(f->path, &n);
  b[n - 1] ^= 0x40;
  spit(f->path, b, n);
  free(b);
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path),
                                       on_skip, &skipped), 1);
  assert_int_equal(h.step, 10);
  assert_non_null(strstr(path, "ckpt-0000000010.bin"));
  assert_int_equal(skipped, 1);
  assert_int_equal(skipped_code, DR_CKPT_ECRC);
  assert_non_null(strstr(skipped_path, "ckpt-0000000015.bin"));

  /* Then also the next one truncated: the oldest is used. */
  char p10[256];
  assert_int_equal(dr_ckpt_path(p10, sizeof(p10), f->dir, 10), 0);
  assert_int_equal(truncate(p10, 100), 0);
  skipped = 0;
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path),
                                       on_skip, &skipped), 1);
  assert_int_equal(h.step, 5);
  assert_int_equal(skipped, 2);
  assert_int_equal(skipped_code, DR_CKPT_ESIZE);

  char p5[256];
  assert_int_equal(dr_ckpt_path(p5, sizeof(p5), f->dir, 5), 0);
  assert_int_equal(truncate(p5, 0), 0);
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path), NULL,
                                       NULL), 0);
}

static void test_list_and_temp_ignored(void **state) {
  fx_t *f = *state;
  write_at(f, 7);
  write_at(f, 300);
  write_at(f, 20);
  static const char *junk[] = {
      "ckpt-0000000400.bin.tmp.999999", /* a killed writer's */
      "ckpt-0000000500.bin.tmp.1",
      "ckpt-400.bin",
      "ckpt-0000000400.binx",
      "ckpt-000000040a.bin",
      "ckpt-00000004000.bin",
      "notes.txt"};
  for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", f->dir, junk[i]);
    spit(p, (const uint8_t *)"DDPRCKPT", 8);
  }
  char own[256];
  snprintf(own, sizeof(own), "%s/ckpt-0000000600.bin.tmp.%ld", f->dir,
           (long)getpid());
  spit(own, (const uint8_t *)"x", 1);

  uint64_t *steps;
  size_t n;
  assert_int_equal(dr_ckpt_list(f->dir, &steps, &n), 0);
  assert_int_equal(n, 3);
  assert_int_equal(steps[0], 300);
  assert_int_equal(steps[1], 20);
  assert_int_equal(steps[2], 7);
  free(steps);

  dr_ckpt_header_t h;
  char path[256];
  skipped = 0;
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path),
                                       on_skip, &skipped), 1);
  assert_int_equal(h.step, 300);
  assert_int_equal(skipped, 0);

  /* Only other writers' temporary files go; nothing else is touched. */
  char err[512];
  assert_int_equal(dr_ckpt_remove_temp(f->dir, err, sizeof(err)), 2);
  assert_false(exists(f->dir, "ckpt-0000000400.bin.tmp.999999"));
  assert_false(exists(f->dir, "ckpt-0000000500.bin.tmp.1"));
  assert_int_equal(access(own, F_OK), 0);
  for (size_t i = 2; i < sizeof(junk) / sizeof(junk[0]); i++)
    assert_true(exists(f->dir, junk[i]));
  assert_int_equal(dr_ckpt_remove_temp(f->dir, err, sizeof(err)), 0);
}

/* What is named like a newer checkpoint but is not a file: a directory
 * and a FIFO are reported and passed over (a FIFO without a writer would
 * block an open() for reading forever), never listed, never pruned, and a
 * write does not replace them. */
static void test_not_files_skipped(void **state) {
  fx_t *f = *state;
  write_at(f, 5);
  write_at(f, 10);
  char d15[256], p20[256], p30[256];
  assert_int_equal(dr_ckpt_path(d15, sizeof(d15), f->dir, 15), 0);
  assert_int_equal(dr_ckpt_path(p20, sizeof(p20), f->dir, 20), 0);
  assert_int_equal(dr_ckpt_path(p30, sizeof(p30), f->dir, 30), 0);
  assert_int_equal(mkdir(d15, 0755), 0);
  assert_int_equal(mkfifo(p20, 0644), 0);
  /* A symbolic link to a checkpoint is one. */
  char p10[256];
  assert_int_equal(dr_ckpt_path(p10, sizeof(p10), f->dir, 10), 0);
  assert_int_equal(symlink(p10, p30), 0);

  dr_ckpt_header_t h;
  char path[256];
  skipped = 0;
  /* 30 holds step 10 too: the name that agrees wins the tie. */
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path),
                                       on_skip, &skipped), 1);
  assert_int_equal(h.step, 10);
  assert_non_null(strstr(path, "ckpt-0000000010.bin"));
  assert_int_equal(skipped, 3); /* 30 (of step 10), 20, 15 */
  assert_int_equal(unlink(p30), 0);
  skipped = 0;
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path),
                                       on_skip, &skipped), 1);
  assert_int_equal(h.step, 10);
  assert_int_equal(skipped, 2);
  assert_int_equal(skipped_code, -EISDIR); /* by name, newest first */
  assert_non_null(strstr(skipped_path, "ckpt-0000000015.bin"));

  char err[512] = "";
  assert_int_equal(dr_ckpt_verify(p20, &h, err, sizeof(err)), DR_ENOTREG);
  assert_non_null(strstr(err, "not a regular file"));
  assert_int_equal(dr_ckpt_verify(d15, &h, err, sizeof(err)), -EISDIR);
  assert_non_null(strstr(err, "is a directory"));

  uint64_t *steps;
  size_t n;
  assert_int_equal(dr_ckpt_list(f->dir, &steps, &n), 0);
  assert_int_equal(n, 2);
  assert_int_equal(steps[0], 10);
  free(steps);

  /* Neither is replaced: refused before anything is written. */
  f->h.step = 15;
  int rc = dr_ckpt_write(f->dir, &f->h, f->spans, 4, NULL, NULL, NULL, 0,
                         err, sizeof(err));
  assert_int_equal(rc, -EISDIR);
  assert_non_null(strstr(err, "ckpt-0000000015.bin is a directory"));
  f->h.step = 20;
  rc = dr_ckpt_write(f->dir, &f->h, f->spans, 4, NULL, NULL, NULL, 0, err,
                     sizeof(err));
  assert_int_equal(rc, DR_ENOTREG);
  struct stat st;
  assert_int_equal(lstat(p20, &st), 0);
  assert_true(S_ISFIFO(st.st_mode));
  assert_int_equal(dr_ckpt_remove_temp(f->dir, err, sizeof(err)), 0);
  write_at(f, 25);
  assert_int_equal(dr_ckpt_prune(f->dir, 25, 1, err, sizeof(err)), 2);
  assert_true(exists(f->dir, "ckpt-0000000015.bin"));
  assert_true(exists(f->dir, "ckpt-0000000020.bin"));
  assert_true(exists(f->dir, "ckpt-0000000025.bin"));
}

/* A file's step is the one its header records: a copy named for a far
 * later step neither wins over the newest checkpoint nor hides it, and a
 * newest checkpoint under an older name is still the newest. */
static void test_step_from_header(void **state) {
  fx_t *f = *state;
  write_at(f, 5);
  char p5[256];
  snprintf(p5, sizeof(p5), "%s", f->path);
  write_at(f, 10);
  char far[256], cmd[600];
  assert_int_equal(dr_ckpt_path(far, sizeof(far), f->dir, 9999999999ull), 0);
  snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", p5, far);
  assert_int_equal(system(cmd), 0);

  dr_ckpt_header_t h;
  char path[256];
  skipped = 0;
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path),
                                       on_skip, &skipped), 1);
  assert_int_equal(h.step, 10);
  assert_non_null(strstr(path, "ckpt-0000000010.bin"));
  assert_int_equal(skipped, 1);
  assert_int_equal(skipped_code, DR_CKPT_ESTEP);
  assert_non_null(strstr(skipped_path, "ckpt-9999999999.bin"));

  /* The newest under an old name: taken, at its own step. */
  write_at(f, 20);
  char p3[256];
  assert_int_equal(dr_ckpt_path(p3, sizeof(p3), f->dir, 3), 0);
  assert_int_equal(rename(f->path, p3), 0);
  skipped = 0;
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path),
                                       on_skip, &skipped), 1);
  assert_int_equal(h.step, 20);
  assert_non_null(strstr(path, "ckpt-0000000003.bin"));
  assert_int_equal(skipped, 1); /* the far one, of step 5 */

  /* Damaged newest by its header: reported, then the next by header. */
  size_t n;
  uint8_t *b = slurp(p3, &n);
  b[n - 1] ^= 1;
  spit(p3, b, n);
  free(b);
  skipped = 0;
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path),
                                       on_skip, &skipped), 1);
  assert_int_equal(h.step, 10);
  assert_int_equal(skipped, 2);
}

static void test_prune_keeps_newest(void **state) {
  fx_t *f = *state;
  for (uint64_t s = 1; s <= 7; s++)
    write_at(f, s * 5);
  write_at(f, 100); /* after the run's step: not this run's history */
  char tmp[256];
  snprintf(tmp, sizeof(tmp), "%s/ckpt-0000000040.bin.tmp.999999", f->dir);
  spit(tmp, (const uint8_t *)"x", 1);
  spit(tmp, (const uint8_t *)"x", 1);
  char err[512];
  assert_int_equal(dr_ckpt_prune(f->dir, 35, 3, err, sizeof(err)), 4 + 1);
  uint64_t *steps;
  size_t n;
  assert_int_equal(dr_ckpt_list(f->dir, &steps, &n), 0);
  assert_int_equal(n, 4);
  assert_int_equal(steps[0], 100);
  assert_int_equal(steps[1], 35);
  assert_int_equal(steps[2], 30);
  assert_int_equal(steps[3], 25);
  free(steps);
  assert_false(exists(f->dir, "ckpt-0000000040.bin.tmp.999999"));
  /* keep 1 at the newest: only it stays among steps <= 35. */
  assert_int_equal(dr_ckpt_prune(f->dir, 35, 1, err, sizeof(err)), 2);
  assert_true(exists(f->dir, "ckpt-0000000035.bin"));
  assert_true(exists(f->dir, "ckpt-0000000100.bin"));
  assert_false(exists(f->dir, "ckpt-0000000030.bin"));
  /* Nothing to do is not an error; neither is a missing directory. */
  assert_int_equal(dr_ckpt_prune(f->dir, 35, 1, err, sizeof(err)), 0);
  assert_int_equal(dr_ckpt_prune("/nonexistent/dir", 35, 1, err,
                                 sizeof(err)), 0);
}

/* While the writer sits before its rename (where a crash may hit), the
 * directory still shows the previous checkpoint as the newest. */
typedef struct {
  fx_t *f;
  int called;
} commit_probe_t;

static void before_commit(void *arg, const char *tmp_path) {
  commit_probe_t *p = arg;
  p->called++;
  assert_int_equal(access(tmp_path, F_OK), 0);
  assert_non_null(strstr(tmp_path, "ckpt-0000000010.bin.tmp."));
  assert_false(exists(p->f->dir, "ckpt-0000000010.bin"));
  dr_ckpt_header_t h;
  char path[256];
  assert_int_equal(dr_ckpt_find_latest(p->f->dir, &h, path, sizeof(path),
                                       NULL, NULL), 1);
  assert_int_equal(h.step, 5);
  /* The finished temporary file would itself verify. */
  assert_int_equal(dr_ckpt_verify(tmp_path, &h, NULL, 0), 0);
}

static void test_commit_is_the_rename(void **state) {
  fx_t *f = *state;
  write_at(f, 5);
  commit_probe_t probe = {f, 0};
  f->h.step = 10;
  f->h.epoch_pos = 10;
  char err[512];
  assert_int_equal(dr_ckpt_write(f->dir, &f->h, f->spans, 4, before_commit,
                                 &probe, NULL, 0, err, sizeof(err)), 0);
  assert_int_equal(probe.called, 1);
  assert_true(exists(f->dir, "ckpt-0000000010.bin"));
  uint64_t *steps;
  size_t n;
  assert_int_equal(dr_ckpt_list(f->dir, &steps, &n), 0);
  assert_int_equal(n, 2);
  free(steps);
  /* No temporary file is left behind. */
  assert_int_equal(dr_ckpt_remove_temp(f->dir, err, sizeof(err)), 0);
  char own[256];
  snprintf(own, sizeof(own), "%s/ckpt-0000000010.bin.tmp.%ld", f->dir,
           (long)getpid());
  assert_int_not_equal(access(own, F_OK), 0);
}

static void test_write_failures(void **state) {
  fx_t *f = *state;
  char err[512] = "", missing[128];
  snprintf(missing, sizeof(missing), "%s/absent", f->dir);
  int rc = dr_ckpt_write(missing, &f->h, f->spans, 4, NULL, NULL, NULL, 0,
                         err, sizeof(err));
  assert_int_equal(rc, -ENOENT);
  assert_non_null(strstr(err, "open()"));
  assert_non_null(strstr(err, missing));

  /* Counts that do not add up: refused before any file exists. */
  f->h.optim_elems = N_OPTIM + 1;
  rc = dr_ckpt_write(f->dir, &f->h, f->spans, 4, NULL, NULL, NULL, 0, err,
                     sizeof(err));
  assert_int_equal(rc, DR_CKPT_ESHAPE);
  f->h.optim_elems = N_OPTIM;
  uint64_t *steps;
  size_t n;
  assert_int_equal(dr_ckpt_list(f->dir, &steps, &n), 0);
  assert_int_equal(n, 0);
  assert_int_equal(dr_ckpt_remove_temp(f->dir, err, sizeof(err)), 0);

  /* A read-only directory (unless we are root, who may write anyway). */
  if (geteuid() != 0) {
    assert_int_equal(chmod(f->dir, 0555), 0);
    rc = dr_ckpt_write(f->dir, &f->h, f->spans, 4, NULL, NULL, NULL, 0, err,
                       sizeof(err));
    assert_int_equal(rc, -EACCES);
    assert_int_equal(chmod(f->dir, 0755), 0);
  }
  /* A name that does not fit. */
  char path[16];
  assert_int_equal(dr_ckpt_path(path, sizeof(path), f->dir, 1),
                   -ENAMETOOLONG);
}

/* A storage that refuses in the middle of a write (here a file size
 * limit, EFBIG, as a full disk refuses with ENOSPC): the error names the
 * call, the file and the reason, no temporary file stays, and the older
 * checkpoint is as it was and still loads. */
static void test_storage_refuses(void **state) {
  fx_t *f = *state;
  write_at(f, 5);
  char older[256];
  snprintf(older, sizeof(older), "%s", f->path);
  size_t n_before;
  uint8_t *before = slurp(older, &n_before);

  /* The file takes 256 + 4 x 69 = 532 bytes: it stops in its payload. */
  struct rlimit saved, small = {400, 400};
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
  small.rlim_max = saved.rlim_max;
  void (*old_xfsz)(int) = signal(SIGXFSZ, SIG_IGN); /* EFBIG, not death */
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  f->h.step = 10;
  f->h.epoch_pos = 10;
  char err[512] = "", path[256] = "";
  int rc = dr_ckpt_write(f->dir, &f->h, f->spans, 4, NULL, NULL, path,
                         sizeof(path), err, sizeof(err));
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, old_xfsz);

  assert_int_equal(rc, -EFBIG);
  assert_int_equal(dr_ckpt_fail_kind(rc), DR_CKPT_FAIL_STORAGE);
  assert_non_null(strstr(err, "write()"));
  assert_non_null(strstr(err, "ckpt-0000000010.bin.tmp."));
  assert_non_null(strstr(err, strerror(EFBIG)));
  assert_false(exists(f->dir, "ckpt-0000000010.bin"));
  assert_int_equal(dr_ckpt_remove_temp(f->dir, err, sizeof(err)), 0);
  char own[256];
  snprintf(own, sizeof(own), "%s/ckpt-0000000010.bin.tmp.%ld", f->dir,
           (long)getpid());
  assert_int_not_equal(access(own, F_OK), 0);

  size_t n_after;
  uint8_t *after = slurp(older, &n_after);
  assert_int_equal(n_after, n_before);
  assert_memory_equal(after, before, n_before);
  float params[N_PARAM], optim[N_OPTIM];
  dr_ckpt_span_t in[2] = {{params, N_PARAM}, {optim, N_OPTIM}};
  dr_ckpt_header_t h;
  assert_int_equal(dr_ckpt_find_latest(f->dir, &h, path, sizeof(path), NULL,
                                       NULL), 1);
  assert_string_equal(path, older);
  assert_int_equal(dr_ckpt_read(older, &h, in, 2, err, sizeof(err)), 0);
  assert_memory_equal(params, f->params, sizeof(params));
  assert_int_equal(h.step, 5);
  free(before);
  free(after);
}

static void test_fail_kind(void **state) {
  (void)state;
  static const int storage[] = {ENOSPC, EDQUOT, EFBIG, EROFS, EACCES, EPERM,
                                EIO};
  for (size_t i = 0; i < sizeof(storage) / sizeof(storage[0]); i++)
    assert_int_equal(dr_ckpt_fail_kind(-storage[i]), DR_CKPT_FAIL_STORAGE);
  assert_int_equal(dr_ckpt_fail_kind(-ENOMEM), DR_CKPT_FAIL_NOMEM);
  /* What a retry may get past, and the file's own faults. */
  static const int other[] = {0, -ENOENT, -ENOTDIR, -EINTR, -ESTALE,
                              -ENAMETOOLONG, DR_CKPT_EMAGIC, DR_CKPT_EVERSION,
                              DR_CKPT_EHEADER, DR_CKPT_ESIZE, DR_CKPT_ECRC,
                              DR_CKPT_ESHAPE};
  for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
    assert_int_equal(dr_ckpt_fail_kind(other[i]), DR_CKPT_FAIL_OTHER);
}

static void test_strerror(void **state) {
  (void)state;
  assert_non_null(strstr(dr_strerror(DR_CKPT_ECRC), "checksum"));
  assert_non_null(strstr(dr_strerror(DR_CKPT_ESIZE), "truncated"));
  assert_string_equal(dr_err_name(DR_CKPT_EMAGIC), "DR_CKPT_EMAGIC");
  assert_string_equal(dr_strerror(-ENOENT), strerror(ENOENT));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_crc32, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_layout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_v1_still_read, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flipped_byte_rejected, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_truncated_rejected, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_other_versions_rejected, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_read_shape_mismatch, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_newest_valid_chosen, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_list_and_temp_ignored, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_not_files_skipped, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_step_from_header, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_prune_keeps_newest, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_commit_is_the_rename, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_write_failures, setup, teardown),
      cmocka_unit_test_setup_teardown(test_storage_refuses, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fail_kind, setup, teardown),
      cmocka_unit_test_setup_teardown(test_strerror, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
