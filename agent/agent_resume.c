/* Resuming after a reconnection: RESUME for the generation the workers
 * run; once the server takes this node back, the reports it may have lost
 * with its connection (failures, this node's success) are sent again. A
 * server that cannot take it back answers with a refusal that restarts
 * the group (agent_orders.c). */
#include "agent_internal.h"

#include "log.h"

#include <string.h>

#include "events.h"

void dr__agent_send_resume(dr_agent_t *ag) {
  dr_resume_t q;
  memset(&q, 0, sizeof(q));
  q.run_id = dr_str(ag->o->rdzv_id);
  q.host = dr_str(ag->cfg->hostname);
  q.gen = ag->asg.gen;
  q.node_rank = ag->asg.node_rank;
  q.nnodes = ag->asg.nnodes;
  q.world_size = ag->asg.world_size;
  q.nproc = ag->nproc;
  q.restart_count = ag->asg.restart_count;
  memcpy(q.resume_token, ag->asg.resume_token, sizeof(q.resume_token));
  q.term = ag->asg.term;
  if (dr_arz_resume(ag->arz, &q) == 0)
    ag->resume_pending = 1;
}

/* The server took this node back: what it may have missed follows. */
void dr__agent_on_resumed(dr_agent_t *ag) {
  ag->resume_pending = 0;
  dr__failover_settled(ag);
  double away = (uv_now(&ag->loop) - ag->lost_ms) / 1000.0;
  DR_SAY(DR_LOG_INFO, "back in generation %llu as node %u after %.1f s "
          "without the rendezvous server; the workers kept running",
          (unsigned long long)ag->asg.gen, ag->asg.node_rank, away);
  dr_events_emit(ag->events, "resumed", ",\"gen\":%llu,\"away_ms\":%llu",
                 (unsigned long long)ag->asg.gen,
                 (unsigned long long)(uv_now(&ag->loop) - ag->lost_ms));
  for (size_t i = 0; i < ag->n_fails; i++)
    dr__agent_report_failure(ag, &ag->fails[i]);
  ag->ranks_sent_ms = 0; /* the workers again, at the next heartbeat */
  if (ag->state == DR_AG_WAITING && ag->n_fails == 0 && ag->n_alive == 0) {
    dr_buf_t b;
    dr_buf_init(&b);
    dr_enc_success(&b, 0, ag->asg.gen);
    dr__agent_send(ag, &b);
  }
}
