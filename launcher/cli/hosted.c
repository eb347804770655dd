/* The rendezvous server in ddprun's process (hosted.h). */
#include "hosted.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void server_thread(void *arg) {
  dr_hosted_t *h = arg;
  h->rc = dr_server_start(&h->loop, &h->cfg, &h->srv, h->err, sizeof(h->err));
  if (h->rc == 0) {
    h->port = dr_server_port(h->srv);
    h->metrics_port = dr_server_metrics_port(h->srv);
  }
  uv_sem_post(&h->started);
  uv_run(&h->loop, UV_RUN_DEFAULT);
}

int dr_hosted_start(dr_hosted_t *h) {
  uv_loop_init(&h->loop);
  uv_sem_init(&h->started, 0);
  if (uv_thread_create(&h->thread, server_thread, h) != 0) {
    snprintf(h->err, sizeof(h->err), "cannot start the server thread");
    return -EAGAIN;
  }
  uv_sem_wait(&h->started);
  if (h->rc != 0) {
    uv_thread_join(&h->thread);
    uv_loop_close(&h->loop);
  }
  return h->rc;
}

void dr_hosted_stop(dr_hosted_t *h) {
  dr_server_request_stop(h->srv);
  uv_thread_join(&h->thread);
  uv_loop_close(&h->loop);
}

int dr_hosted_takeover(void *arg, const dr_agent_takeover_t *t) {
  dr_hosted_t *h = arg;
  dr_rdzv_takeover_t x;
  memset(&x, 0, sizeof(x));
  x.term = t->term;
  x.gen = t->gen;
  x.restarts_used = t->restarts_used;
  x.nnodes = t->nnodes;
  x.world = t->world;
  memcpy(x.token, t->token, sizeof(x.token));
  x.hosts = NULL; /* unknown: a RESUME's host is not checked against them */
  x.lost_node = t->lost_node;
  x.lost_host = t->lost_host;
  x.self_host = t->self_host;
  return dr_server_takeover(h->srv, &x);
}
