/* The bootstrap's shared state. pg_boot.c meets the other ranks through
 * the store and orders the ring; pg_net.c opens the sockets and connects
 * this rank's two links. Internal to worker/comm. */
#ifndef DR_PG_BOOT_H
#define DR_PG_BOOT_H

#include <netinet/in.h>
#include <stdint.h>

#include "client.h"
#include "pg_internal.h"

#define DR_BOOT_TOKEN_BYTES 16

/* One rank's store entry. */
typedef struct {
  char host[160];            /* host identity */
  char ip[INET6_ADDRSTRLEN]; /* where it listens */
  uint16_t port;
  uint8_t token[DR_BOOT_TOKEN_BYTES]; /* a connection to it must show this */
  int pid;
} dr_boot_entry_t;

typedef struct {
  dr_pg_t *pg;
  const dr_pg_config_t *cfg;
  uint64_t deadline; /* CLOCK_MONOTONIC ns */
  uint64_t inst;     /* the group's number in this process */
  char *err;
  size_t err_len;
  dr_client_t *client;
  int lfd;
  dr_boot_entry_t me, left, right;
  dr_boot_entry_t *all; /* by rank, when the ring is sorted by host */
  char shm_name[DR_SHM_NAME_MAX + 1];
  int shm_named; /* shm_name exists in /dev/shm and is ours to unlink */
} dr_boot_t;

/* Writes the message into b->err and returns code. */
int dr__boot_fail(dr_boot_t *b, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Milliseconds left until b->deadline (0 when passed). */
int dr__boot_remaining_ms(const dr_boot_t *b);

/* Listens on port 0 at the local address of the store connection; fills
 * b->lfd, b->me.ip and b->me.port. */
int dr__boot_listen(dr_boot_t *b);

/* Connects the control connection to the right neighbour, offers it the
 * data path, accepts the left neighbour's and answers its offer, then
 * opens TCP data connections where shared memory is not used. Fills
 * pg->send and pg->recv. */
int dr__boot_link_up(dr_boot_t *b);

/* Removes this rank's ring name from /dev/shm if it is still there. */
void dr__boot_unlink_shm(dr_boot_t *b);

#endif /* DR_PG_BOOT_H */
