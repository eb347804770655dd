/* The rendezvous server hosted in ddprun's process, on a loop of its own
 * in a thread: the job's server where this node hosts it, or a standby
 * that takes the job over when the agent finds the server lost (the
 * rendezvous outlives its host; launcher/server/rdzv_core_term.c). */
#ifndef DR_HOSTED_H
#define DR_HOSTED_H

#include <stdint.h>
#include <uv.h>

#include "agent.h"
#include "server.h"

typedef struct {
  dr_server_config_t cfg;
  uv_loop_t loop;
  uv_thread_t thread;
  uv_sem_t started;
  dr_server_t *srv;
  int rc;
  char err[256];
  uint16_t port;
  uint16_t metrics_port; /* 0 when off */
} dr_hosted_t;

/* Starts the server of h->cfg (filled by the caller) and waits until it
 * listens: 0 (h->port set), or a negative code with h->err. */
int dr_hosted_start(dr_hosted_t *h);
/* Stops it and waits for its thread. */
void dr_hosted_stop(dr_hosted_t *h);

/* The agent's takeover (dr_agent_config_t.takeover), arg a started
 * standby dr_hosted_t: its server takes the job over. */
int dr_hosted_takeover(void *arg, const dr_agent_takeover_t *t);

#endif /* DR_HOSTED_H */
