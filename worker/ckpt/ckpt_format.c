/* The checkpoint format: the header's encoding and decoding, with every
 * check a header must pass, and the CRC-32 of header and payload. The
 * layout is documented in ckpt.h. */
#include "ckpt_internal.h"

#include <inttypes.h>
#include <libdeflate.h>
#include <string.h>

#define MAGIC "DDPRCKPT"
/* The header CRC sits in the last 4 bytes of the header and covers the
 * bytes before it. */
#define HDR_CRC_OFF (DR_CKPT_HEADER_BYTES - 4)
#define V1_HDR_CRC_OFF (DR_CKPT_V1_HEADER_BYTES - 4)

/* ---- CRC-32 ------------------------------------------------------------ */

/* libdeflate's, which folds with carry-less multiplies where the CPU has
 * them: about 12 GB/s here against 2.5 GB/s for a table, and the
 * checksum is what the background writer spends most of its CPU on. */
uint32_t dr_ckpt_crc32(uint32_t crc, const void *buf, size_t n) {
  return libdeflate_crc32(crc, buf, n);
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
void dr__ckpt_encode(const dr_ckpt_header_t *h, uint8_t *b) {
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

int dr__ckpt_check_prefix(const uint8_t *b, const char *path, uint32_t *hb,
                          char *err, size_t n) {
  if (memcmp(b, MAGIC, 8) != 0)
    return dr__ckpt_fail(err, n, DR_CKPT_EMAGIC, "%s: no \"" MAGIC "\" magic",
                         path);
  uint32_t version = get32(b + 8);
  *hb = get32(b + 12);
  if (known_header_bytes(version) == 0 || *hb != known_header_bytes(version))
    return dr__ckpt_fail(err, n, DR_CKPT_EVERSION,
                         "%s: format version %" PRIu32 " with a %" PRIu32
                         "-byte header; this reader knows version 1 (%d "
                         "bytes), 2 and %d (%d bytes)", path, version, *hb,
                         DR_CKPT_V1_HEADER_BYTES, DR_CKPT_VERSION,
                         DR_CKPT_HEADER_BYTES);
  return 0;
}

int dr__ckpt_decode(const uint8_t *b, const char *path, dr_ckpt_header_t *h,
                    char *err, size_t n) {
  uint32_t version = get32(b + 8);
  int v1 = version == 1;
  size_t crc_off = v1 ? V1_HDR_CRC_OFF : HDR_CRC_OFF;
  uint32_t want = get32(b + crc_off);
  uint32_t got = dr_ckpt_crc32(0, b, crc_off);
  if (want != got)
    return dr__ckpt_fail(err, n, DR_CKPT_EHEADER, "%s: header CRC-32 is "
                         "0x%08" PRIx32 ", the header says 0x%08" PRIx32, path,
                         got, want);
  int v3 = version >= 3;
  if ((!v3 && !all_zero(b + 124, 4)) ||
      (!v3 && !all_zero(b + 144, v1 ? 12 : 16)) ||
      (version == 2 && !all_zero(b + 224, 28)) ||
      (v3 && (get32(b + 124) & 0xfe00u) != 0))
    return dr__ckpt_fail(err, n, DR_CKPT_EHEADER, "%s: reserved header "
                         "bytes are not zero", path);
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
    return dr__ckpt_fail(err, n, DR_CKPT_EHEADER, "%s: payload of %" PRIu64
                         " bytes for %" PRIu64 " + %" PRIu64 " + %" PRIu64
                         " floats", path, h->payload_bytes, h->param_elems,
                         h->optim_elems, h->comm_elems);
  return 0;
}
