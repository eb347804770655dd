/* nccl_id_check: a worker that only obtains its generation's NCCL unique
 * id the way train --device cuda does (rank 0 draws it, the store carries
 * it), and prints it:
 *   rank 1 of 3 generation 2 nccl-id 0a1b...
 * No GPU is needed. NCCL_ID_CHECK_FAIL_RANK=R makes rank R exit 1 after
 * printing, on the job's first attempt only (TORCHELASTIC_RESTART_COUNT
 * 0), so that a test sees the next generation's id. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_backend.h"
#include "pg.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  dr_pg_config_t cfg;
  char err[512] = "";
  if (dr_pg_config_from_env(&cfg, err, sizeof(err)) != 0) {
    fprintf(stderr, "nccl_id_check: %s\n", err);
    return 2;
  }
  cfg.timeout_ms = 30000;
  uint8_t id[DR_NCCL_ID_BYTES];
  int rc = dr_nccl_unique_id(&cfg, id, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, "nccl_id_check: rank %u: %s\n", cfg.rank, err);
    dr_pg_config_free(&cfg);
    return 3;
  }
  char hex[2 * DR_NCCL_ID_BYTES + 1];
  for (int i = 0; i < DR_NCCL_ID_BYTES; i++)
    snprintf(hex + 2 * i, 3, "%02x", id[i]);
  printf("rank %u of %u generation %" PRIu64 " nccl-id %s\n", cfg.rank,
         cfg.world, cfg.gen, hex);
  const char *f = getenv("NCCL_ID_CHECK_FAIL_RANK");
  const char *restarts = getenv("TORCHELASTIC_RESTART_COUNT");
  int first = restarts == NULL || strcmp(restarts, "0") == 0;
  unsigned rank = cfg.rank;
  dr_pg_config_free(&cfg);
  if (f != NULL && first && strtoul(f, NULL, 10) == rank)
    return 1;
  return 0;
}
