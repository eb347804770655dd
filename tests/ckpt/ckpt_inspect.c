/* ckpt_inspect FILE...: verifies train checkpoints with ckpt.h alone and
 * prints each header as key=value pairs (a second line: the schedule). Exit 0 when every file verifies,
 * 1 otherwise (the reason on stderr). */
#include <inttypes.h>
#include <stdio.h>

#include "ckpt.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: ckpt_inspect FILE...\n");
    return 2;
  }
  int bad = 0;
  for (int i = 1; i < argc; i++) {
    dr_ckpt_header_t h;
    char err[4400] = "";
    int rc = dr_ckpt_verify(argv[i], &h, err, sizeof(err));
    if (rc != 0) {
      fprintf(stderr, "ckpt_inspect: %s\n", err[0] ? err
                                                   : dr_strerror(rc));
      bad = 1;
      continue;
    }
    printf("%s: version=%" PRIu32 " step=%" PRIu64 " total_steps=%" PRIu64
           " epoch=%" PRIu64 " position=%" PRIu64 " steps_per_epoch=%" PRIu64
           " seed=%" PRIu64 " train_samples=%" PRIu64 " global_batch=%" PRIu64
           " optimizer=%" PRIu32 " layers=%" PRIu32 " width=%" PRIu32
           " input_dim=%" PRIu32 " classes=%" PRIu32 " context=%" PRIu32
           " embed_dim=%" PRIu32 " param_elems=%" PRIu64 " optim_elems=%"
           PRIu64 " rng_version=%" PRIu32 " payload_crc32=0x%08" PRIx32 "\n",
           argv[i], h.version, h.step, h.total_steps, h.epoch, h.epoch_pos,
           h.steps_per_epoch, h.seed, h.train_samples, h.global_batch,
           h.optimizer, h.layers, h.width, h.input_dim, h.classes, h.context,
           h.embed_dim, h.param_elems, h.optim_elems, h.rng_version,
           h.payload_crc32);
    /* The schedule, in a version-2 file: each real as %.17g reads back
     * exactly. */
    if (h.has_schedule)
      printf("%s: warmup=%" PRIu64 " lr=%.17g min_lr_frac=%.17g "
             "momentum=%.17g weight_decay=%.17g beta1=%.17g beta2=%.17g "
             "eps=%.17g\n", argv[i], h.warmup_steps, h.lr, h.min_lr_frac,
             h.momentum, h.weight_decay, h.beta1, h.beta2, h.eps);
    else
      printf("%s: no schedule (format version %" PRIu32 ")\n", argv[i],
             h.version);
  }
  return bad;
}
