/* The simulated agents of rdzv_scale: one simulator process drives its
 * share of the round's agents over real TCP connections (non-blocking,
 * epoll) through the real protocol: HELLO, WELCOME, JOIN, ASSIGN. At most
 * window of its connections wait for their WELCOME at a time; a refused or
 * timed-out connect() is retried with backoff. Every ASSIGN is checked
 * (nnodes, world size, first rank, one generation).
 */
#ifndef DR_RDZV_SIM_H
#define DR_RDZV_SIM_H

#include <stdint.h>

/* What every simulator of a round shares. */
typedef struct {
  uint32_t n_agents; /* in the round, over all simulators */
  uint32_t nproc;    /* workers per agent */
  uint32_t window;   /* connections started, not yet welcomed, at most */
  uint32_t env_bytes; /* of each JOIN's environment summary, as an agent
                         sends (ddprun status --env), at most
                         DR_ENV_SUMMARY_MAX */
} rdzv_sim_opts_t;

enum {
  RDZV_SIM_OK = 0,
  RDZV_SIM_TIMEOUT = 1,
  RDZV_SIM_ERROR = 2
};

#define RDZV_SIM_NO_RANK UINT32_MAX

/* Sent by each simulator to the parent, followed by n_agents node ranks
 * (uint32_t, RDZV_SIM_NO_RANK where none was assigned) in agent order. */
typedef struct {
  int32_t status;
  uint32_t n_agents;
  uint32_t n_started, n_connected, n_welcomed, n_assigned;
  uint64_t gen;
  int64_t first_connect_ns; /* 0: never connected */
  int64_t last_assign_ns;   /* 0: no ASSIGN */
  char msg[256];
} rdzv_sim_report_t;

/* The simulator process for agents lo..lo+n-1 of the server on
 * 127.0.0.1:port: waits for the go (EOF on go_fd), runs until every agent
 * has its ASSIGN, a failure, or deadline_ns, writes its report on rep_fd,
 * then holds its connections until EOF on quit_fd (an agent that leaves
 * could make the server open a new round). Returns its exit status: 0
 * when the report went out and said RDZV_SIM_OK, else 1. */
int rdzv_sim_main(const rdzv_sim_opts_t *o, uint16_t port, uint32_t lo,
                  uint32_t n, int64_t deadline_ns, int go_fd, int quit_fd,
                  int rep_fd);

#endif /* DR_RDZV_SIM_H */
