/* A standby server takes the job over, asked from another thread (the
 * agent of its ddprun, which has lost the job's server): the seed is
 * copied, handed to the server's loop through a uv_async_t, applied to the
 * core there (dr_rdzv_takeover), and the caller waits until it has been,
 * so that the RESUME it sends next finds the server serving. */
#include "server_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef struct {
  dr_rdzv_takeover_t t;
  char **hosts;      /* t.nnodes, NULL where unknown */
  char *lost_host, *self_host;
  uv_sem_t done;
  int rc;
} request_t;

static void on_takeover_async(uv_async_t *a) {
  dr_server_t *s = a->data;
  request_t *q = atomic_exchange(&s->takeover_req, NULL);
  if (q == NULL)
    return;
  q->rc = s->closing ? -ECANCELED
                     : dr_rdzv_takeover(&s->rdzv, &q->t, dr__now_ms(s));
  if (q->rc == 0 && s->later_metrics_host != NULL && s->metrics == NULL) {
    /* The job's metrics follow its server (a standby starts none). */
    char err[256];
    dr_server_config_t c = s->cfg;
    c.metrics_host = s->later_metrics_host;
    if (dr__metrics_start(s, &c, err, sizeof(err)) != 0)
      DR_WARN("no metrics from the server that took the job over: %s", err);
    else
      DR_INFO("serving metrics on port %u (/metrics, /healthz)",
              dr__metrics_port(s->metrics));
  }
  if (!s->closing)
    dr__rdzv_drain(s);
  uv_sem_post(&q->done);
}

static void on_closed(uv_handle_t *h) { dr__server_handle_closed(h->data); }

void dr__takeover_init(dr_server_t *s) {
  uv_async_init(s->loop, &s->takeover_async, on_takeover_async);
  s->takeover_async.data = s;
  atomic_store(&s->takeover_req, NULL);
  s->n_handles_open++;
}

void dr__takeover_close(dr_server_t *s) {
  request_t *q = atomic_exchange(&s->takeover_req, NULL);
  if (q != NULL) {
    q->rc = -ECANCELED;
    uv_sem_post(&q->done);
  }
  uv_close((uv_handle_t *)&s->takeover_async, on_closed);
}

static void request_free(request_t *q) {
  if (q->hosts != NULL)
    for (uint32_t i = 0; i < q->t.nnodes; i++)
      free(q->hosts[i]);
  free(q->hosts);
  free(q->lost_host);
  free(q->self_host);
  free(q);
}

int dr_server_takeover(dr_server_t *s, const dr_rdzv_takeover_t *t) {
  request_t *q = calloc(1, sizeof(*q));
  if (q == NULL)
    return -ENOMEM;
  q->t = *t;
  q->hosts = calloc(t->nnodes > 0 ? t->nnodes : 1, sizeof(*q->hosts));
  q->lost_host = strdup(t->lost_host != NULL ? t->lost_host : "?");
  q->self_host = strdup(t->self_host != NULL ? t->self_host : "?");
  int rc = q->hosts == NULL || q->lost_host == NULL || q->self_host == NULL
               ? -ENOMEM
               : 0;
  for (uint32_t i = 0; rc == 0 && t->hosts != NULL && i < t->nnodes; i++)
    if (t->hosts[i] != NULL && t->hosts[i][0] != '\0' &&
        (q->hosts[i] = strdup(t->hosts[i])) == NULL)
      rc = -ENOMEM;
  if (rc != 0) {
    request_free(q);
    return rc;
  }
  q->t.hosts = (const char *const *)q->hosts;
  q->t.lost_host = q->lost_host;
  q->t.self_host = q->self_host;
  uv_sem_init(&q->done, 0);
  request_t *none = NULL;
  if (!atomic_compare_exchange_strong(&s->takeover_req, (void **)&none, q)) {
    uv_sem_destroy(&q->done);
    request_free(q);
    return -EBUSY;
  }
  uv_async_send(&s->takeover_async);
  uv_sem_wait(&q->done);
  rc = q->rc;
  uv_sem_destroy(&q->done);
  request_free(q);
  return rc;
}
