/* The rendezvous outlives its host: when the server has been unreachable
 * for the heartbeat timeout, the agent walks the places the rendezvous may
 * be, in order: the lost server, then the successors its last ASSIGN named
 * (nodes by node rank whose agents hold a standby server). A place that
 * does not answer is passed; a standby that answers (DR_ESTANDBY) is alive
 * and passed too, but it is the rightful successor, so no later node takes
 * over in that cycle. When the walk reaches this node and every place
 * before it in the cycle was unreachable, this node's standby takes the
 * job over as the next term (dr_agent_config_t.takeover), and the agent
 * RESUMEs into it over loopback, as every other agent does over the
 * network. The server's rules (rdzv_core_term.c) keep two servers from
 * acting at once. A job whose generation has no successors (one or two
 * nodes, or a standalone server) reconnects as before. */
#include "agent_internal.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "events.h"

/* Places of the walk: 0 the lost server, then the successors. */
static unsigned n_places(const dr_agent_t *ag) {
  return 1u + (unsigned)ag->asg.n_successors;
}

static int is_self(const dr_agent_t *ag, unsigned i) {
  return i > 0 && ag->asg.successors[i - 1].node_rank == ag->asg.node_rank;
}

/* The place i as host and port. */
static void place(const dr_agent_t *ag, unsigned i, char *host, size_t cap,
                  uint16_t *port) {
  if (i == 0) {
    char tmp[sizeof(ag->moved_from)];
    memcpy(tmp, ag->moved_from, sizeof(tmp));
    char *colon = strrchr(tmp, ':');
    *port = 0;
    if (colon != NULL) {
      *colon = '\0';
      *port = (uint16_t)strtoul(colon + 1, NULL, 10);
    }
    snprintf(host, cap, "%.*s", (int)(cap - 1), tmp);
  } else if (is_self(ag, i)) {
    /* By the address the others know this node by, not loopback: the
     * server gives it to every node (master address, checkpoint peer). */
    snprintf(host, cap, "%s", ag->asg.successors[i - 1].addr);
    *port = ag->cfg->standby_port;
  } else {
    const dr_peer_t *p = &ag->asg.successors[i - 1];
    snprintf(host, cap, "%s", p->addr);
    *port = (uint16_t)p->port;
  }
}

static int can_walk(const dr_agent_t *ag) {
  return ag->have_asg && ag->asg.nnodes >= 3 && ag->asg.n_successors > 0;
}

/* This node's standby takes the job over: 0, or the reason it cannot. */
static int take_over(dr_agent_t *ag) {
  if (ag->cfg->takeover == NULL || ag->cfg->standby_port == 0)
    return -1;
  dr_agent_takeover_t t;
  memset(&t, 0, sizeof(t));
  uint64_t term = ag->asg.term > ag->term_seen ? ag->asg.term : ag->term_seen;
  t.term = term + 1;
  t.gen = ag->asg.gen;
  t.restarts_used = ag->asg.restart_count;
  t.nnodes = ag->asg.nnodes;
  t.world = ag->asg.world_size;
  memcpy(t.token, ag->asg.resume_token, sizeof(t.token));
  t.lost_node = ag->asg.server_node;
  char lost[DR_HOST_MAX + 16];
  snprintf(lost, sizeof(lost), "%s", ag->moved_from);
  char *colon = strrchr(lost, ':');
  if (colon != NULL)
    *colon = '\0';
  t.lost_host = lost;
  t.self_host = ag->cfg->hostname;
  int rc = ag->cfg->takeover(ag->cfg->takeover_arg, &t);
  if (rc != 0) {
    DR_SAY(DR_LOG_ERROR, "this node's standby rendezvous server could not "
            "take the job over (%s)", dr_strerror(rc));
    return rc;
  }
  ag->took_over = 1;
  ag->term_seen = t.term;
  DR_SAY(DR_LOG_WARN, "the rendezvous server %s is lost; this node ('%s') "
          "serves the job now (term %llu, generation %llu, restarts used %u "
          "of %u)", ag->moved_from, ag->cfg->hostname,
          (unsigned long long)t.term, (unsigned long long)t.gen,
          t.restarts_used, ag->asg.max_restarts);
  char esc[600];
  dr_events_emit(ag->events, "takeover", ",\"term\":%llu,\"gen\":%llu,"
                 "\"from\":\"%s\"", (unsigned long long)t.term,
                 (unsigned long long)t.gen,
                 dr_json_escape(ag->moved_from, esc, sizeof(esc)));
  return 0;
}

/* On to the next place of the walk; its address into srv_host and
 * srv_port. */
static void advance(dr_agent_t *ag) {
  unsigned n = n_places(ag);
  for (unsigned tries = 0; tries < 2 * n; tries++) {
    ag->walk_i++;
    if (ag->walk_i >= n) { /* a new cycle: everyone may have come back */
      ag->walk_i = 0;
      ag->walk_dead = 0;
    }
    unsigned i = ag->walk_i;
    if (is_self(ag, i) && !ag->took_over) {
      /* Only when every place before this node did not answer. */
      uint32_t before = (1u << i) - 1u;
      if ((ag->walk_dead & before) != before || take_over(ag) != 0)
        continue;
    }
    place(ag, i, ag->srv_host, sizeof(ag->srv_host), &ag->srv_port);
    if (ag->srv_port == 0)
      continue;
    DR_SAY(DR_LOG_DEBUG, "looking for the rendezvous: trying %s %s:%u",
            i == 0 ? "the lost server" : "a successor", ag->srv_host,
            ag->srv_port);
    return;
  }
}

/* Once per job: the server was in a node's ddprun, and the rendezvous
 * cannot move; the agent reconnects as before. */
static void say_no_move(dr_agent_t *ag) {
  if (ag->nomove_said || !ag->have_asg || ag->cfg->server_in_process ||
      ag->asg.server_node == DR_NO_RANK ||
      ag->asg.server_node == ag->asg.node_rank)
    return;
  ag->nomove_said = 1;
  if (ag->asg.nnodes < 3)
    DR_SAY(DR_LOG_WARN, "the rendezvous cannot move from %s:%u: a job of "
            "%u nodes has no majority without its server's node (a move "
            "needs 3 nodes or more); waiting for the server as before",
            ag->srv_host, ag->srv_port, ag->asg.nnodes);
  else
    DR_SAY(DR_LOG_WARN, "the rendezvous cannot move from %s:%u: no node of "
            "the job holds a standby server; waiting for the server as "
            "before", ag->srv_host, ag->srv_port);
}

int dr__failover_on_lost(dr_agent_t *ag, int code) {
  (void)code;
  if (!can_walk(ag) || ag->cfg->server_in_process) {
    say_no_move(ag);
    return 0;
  }
  uint64_t now = uv_now(&ag->loop);
  if (!ag->walking) {
    if (now < ag->heard_ms + ag->o->heartbeat_timeout_ms)
      return 0; /* the server may be back in a moment */
    ag->walking = 1;
    ag->walk_i = 0;
    ag->walk_dead = 0;
    ag->walk_since_ms = now;
    snprintf(ag->moved_from, sizeof(ag->moved_from), "%s:%u", ag->srv_host,
             ag->srv_port);
    char list[600] = "";
    size_t len = 0;
    for (size_t i = 0; i < ag->asg.n_successors && len < sizeof(list); i++)
      len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s:%u",
                              i > 0 ? ", " : "", ag->asg.successors[i].addr,
                              ag->asg.successors[i].port);
    DR_SAY(DR_LOG_WARN, "the rendezvous server %s has not answered for "
            "%.1f s; looking for its successor (%s)", ag->moved_from,
            (now - ag->heard_ms) / 1000.0, list);
  }
  if (ag->walk_i < 32)
    ag->walk_dead |= 1u << ag->walk_i;
  advance(ag);
  return 1;
}

uint32_t dr__failover_connect_ms(const dr_agent_t *ag, uint32_t dflt) {
  if (!can_walk(ag) || ag->cfg->server_in_process || !ag->reconnecting)
    return dflt;
  uint32_t hb = ag->o->heartbeat_timeout_ms < 200 ? 200
                                                  : ag->o->heartbeat_timeout_ms;
  if (ag->walking)
    return hb;
  uint64_t now = uv_now((uv_loop_t *)&ag->loop);
  uint64_t due = ag->heard_ms + ag->o->heartbeat_timeout_ms;
  return due > now + 100 ? (uint32_t)(due - now) : 100;
}

uint32_t dr__failover_user_timeout_ms(const dr_agent_t *ag, uint32_t dflt) {
  if (!can_walk(ag) || ag->cfg->server_in_process)
    return dflt;
  uint32_t t = 2 * ag->o->heartbeat_timeout_ms;
  return t < 1000 ? 1000 : t < dflt ? t : dflt;
}

int dr__failover_on_refused(dr_agent_t *ag, int code) {
  if (code != DR_ESTANDBY && code != DR_ESUPERSEDED)
    return 0;
  if (!can_walk(ag))
    return 0;
  if (!ag->walking) {
    ag->walking = 1;
    ag->walk_i = 0;
    ag->walk_dead = 0;
    ag->walk_since_ms = uv_now(&ag->loop);
    snprintf(ag->moved_from, sizeof(ag->moved_from), "%s:%u", ag->srv_host,
             ag->srv_port);
  }
  advance(ag); /* alive: not marked dead, so no later node takes over */
  return 1;
}

void dr__failover_settled(dr_agent_t *ag) {
  if (ag->have_asg && ag->asg.term > ag->term_seen)
    ag->term_seen = ag->asg.term;
  if (ag->arz != NULL) /* the bound follows what the ASSIGN allows */
    dr_arz_set_user_timeout(ag->arz, dr__agent_user_timeout_ms(ag));
  if (!ag->walking)
    return;
  ag->walking = 0;
  snprintf(ag->moved_line, sizeof(ag->moved_line), "the rendezvous moved "
           "from %s to %s:%u (%s lost)", ag->moved_from, ag->srv_host,
           ag->srv_port, ag->moved_from);
  DR_SAY(DR_LOG_WARN, "the rendezvous moved: this node talks to the server "
          "at %s:%u now (it looked for %.1f s)", ag->srv_host, ag->srv_port,
          (uv_now(&ag->loop) - ag->walk_since_ms) / 1000.0);
  char esc[600];
  dr_events_emit(ag->events, "rdzv_moved", ",\"to\":\"%s:%u\",\"from\":\"%s\"",
                 ag->srv_host, ag->srv_port,
                 dr_json_escape(ag->moved_from, esc, sizeof(esc)));
}
