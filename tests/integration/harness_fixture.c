/* The harness' cmocka fixture: a private directory, the server, and the
 * clients, raw connections and threads a test starts, all released at
 * teardown on every path. See harness.h. */
#include "harness.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int dr_h_setup(void **state) {
  dr_h_fixture_t *fx = calloc(1, sizeof(*fx));
  if (fx == NULL)
    return -1;
  const char *tmp = getenv("TMPDIR");
  snprintf(fx->dir, sizeof(fx->dir), "%s/ddprun-itest-XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(fx->dir) == NULL) {
    fprintf(stderr, "harness: mkdtemp(%s) failed (%s)\n", fx->dir,
            strerror(errno));
    free(fx);
    return -1;
  }
  dr_buf_init(&fx->buf);
  pthread_mutex_init(&fx->lock, NULL);
  pthread_cond_init(&fx->cond, NULL);
  /* Writes to a connection the server closed must fail, not kill us. */
  signal(SIGPIPE, SIG_IGN);
  *state = fx;
  return 0;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d != NULL) {
    struct dirent *e;
    char path[600];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

int dr_h_teardown(void **state) {
  dr_h_fixture_t *fx = *state;
  int rc = 0;
  /* Stopping the server first ends every wait a thread may be in. */
  if (fx->srv != NULL && !fx->passed)
    dr_h_log_dump(fx->log_path, 60);
  if (dr_h_server_stop(&fx->srv, 3000) != 0)
    rc = -1;
  dr_h_join_threads(fx);
  for (size_t i = 0; i < fx->n_joins; i++) {
    if (fx->joins[i]->rc == 0)
      dr_assignment_free(&fx->joins[i]->a);
    free(fx->joins[i]);
  }
  for (size_t i = 0; i < fx->n_clients; i++)
    dr_client_close(&fx->clients[i]);
  for (size_t i = 0; i < fx->n_raws; i++) {
    dr_h_raw_close(fx->raws[i]);
    free(fx->raws[i]);
  }
  dr_buf_free(&fx->buf);
  remove_dir(fx->dir);
  pthread_cond_destroy(&fx->cond);
  pthread_mutex_destroy(&fx->lock);
  free(fx);
  *state = NULL;
  return rc;
}

void dr_h_start(dr_h_fixture_t *fx, const char *const *args,
                const char *const *env) {
  assert_null(fx->srv);
  int rc = dr_h_server_start(fx->dir, args, env, &fx->srv);
  if (rc != 0)
    fail_msg("starting ddprun-rdzv failed: %s", dr_err_name(rc));
  snprintf(fx->log_path, sizeof(fx->log_path), "%s",
           dr_h_server_log_path(fx->srv));
}

const char *dr_h_write_file(dr_h_fixture_t *fx, const char *name,
                            const char *content) {
  static char path[600];
  snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  size_t n = strlen(content);
  assert_int_equal(write(fd, content, n), (ssize_t)n);
  close(fd);
  return path;
}

static dr_client_t *open_owned(dr_h_fixture_t *fx, const char *host,
                               const char *secret) {
  assert_non_null(fx->srv);
  assert_true(fx->n_clients < DR_H_MAX_CLIENTS);
  dr_client_t *c = NULL;
  char err[512];
  int rc = dr_h_client_open(fx->srv, NULL, host, secret,
                            secret != NULL ? strlen(secret) : 0, &c, err,
                            sizeof(err));
  if (rc != 0)
    fail_msg("dr_client_open(host %s) failed: %s (%s)", host, dr_err_name(rc),
             err);
  fx->clients[fx->n_clients++] = c;
  return c;
}

dr_client_t *dr_h_open(dr_h_fixture_t *fx, const char *host) {
  return open_owned(fx, host, NULL);
}

dr_client_t *dr_h_open_secret(dr_h_fixture_t *fx, const char *host,
                              const char *secret) {
  return open_owned(fx, host, secret);
}

void dr_h_close(dr_h_fixture_t *fx, dr_client_t **c) {
  for (size_t i = 0; i < fx->n_clients; i++) {
    if (fx->clients[i] == *c) {
      dr_client_close(&fx->clients[i]);
      break;
    }
  }
  *c = NULL;
}

dr_h_raw_t *dr_h_raw(dr_h_fixture_t *fx) {
  assert_non_null(fx->srv);
  assert_true(fx->n_raws < DR_H_MAX_RAW);
  dr_h_raw_t *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  r->fd = -1;
  fx->raws[fx->n_raws++] = r;
  int rc = dr_h_raw_connect(r, dr_h_server_port(fx->srv));
  if (rc != 0)
    fail_msg("connect() to %s:%u failed (%s)", DR_H_ADDR,
             (unsigned)dr_h_server_port(fx->srv), strerror(-rc));
  return r;
}

int dr_h_thread(dr_h_fixture_t *fx, void *(*fn)(void *), void *arg) {
  if (fx->n_threads >= DR_H_MAX_THREADS)
    return -EAGAIN;
  int rc = pthread_create(&fx->threads[fx->n_threads], NULL, fn, arg);
  if (rc != 0)
    return -rc;
  fx->n_threads++;
  return 0;
}

void dr_h_join_threads(dr_h_fixture_t *fx) {
  for (; fx->n_joined < fx->n_threads; fx->n_joined++)
    pthread_join(fx->threads[fx->n_joined], NULL);
}

typedef struct {
  dr_h_fixture_t *fx;
  dr_h_join_t *jt;
} join_arg_t;

static void *join_main(void *arg) {
  join_arg_t ja = *(join_arg_t *)arg;
  free(arg);
  dr_h_join_t *jt = ja.jt;
  jt->t_sent = dr_h_now_ms();
  int rc = dr_client_join(jt->c, &jt->j, jt->wait_ms, &jt->a);
  jt->t_done = dr_h_now_ms();
  if (rc != 0)
    snprintf(jt->errmsg, sizeof(jt->errmsg), "%s", dr_client_errmsg(jt->c));
  pthread_mutex_lock(&ja.fx->lock);
  jt->rc = rc;
  jt->done = 1;
  pthread_cond_broadcast(&ja.fx->cond);
  pthread_mutex_unlock(&ja.fx->lock);
  return NULL;
}

dr_h_join_t *dr_h_join_async(dr_h_fixture_t *fx, dr_client_t *c,
                             const dr_join_t *j, int wait_ms) {
  assert_true(fx->n_joins < DR_H_MAX_THREADS);
  dr_h_join_t *jt = calloc(1, sizeof(*jt));
  assert_non_null(jt);
  jt->c = c;
  jt->j = *j;
  jt->wait_ms = wait_ms;
  jt->rc = -EINPROGRESS;
  fx->joins[fx->n_joins++] = jt;
  join_arg_t *ja = malloc(sizeof(*ja));
  assert_non_null(ja);
  ja->fx = fx;
  ja->jt = jt;
  int rc = dr_h_thread(fx, join_main, ja);
  if (rc != 0) {
    free(ja);
    jt->rc = rc;
    jt->done = 1;
    fail_msg("pthread_create() failed (%s)", strerror(-rc));
  }
  return jt;
}

dr_h_join_t *dr_h_join_wait_any(dr_h_fixture_t *fx, dr_h_join_t *const *jts,
                                size_t n, int timeout_ms) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  dr_h_join_t *found = NULL;
  pthread_mutex_lock(&fx->lock);
  for (;;) {
    for (size_t i = 0; i < n && found == NULL; i++)
      if (jts[i]->done)
        found = jts[i];
    if (found != NULL ||
        pthread_cond_timedwait(&fx->cond, &fx->lock, &dl) == ETIMEDOUT)
      break;
  }
  for (size_t i = 0; i < n && found == NULL; i++)
    if (jts[i]->done)
      found = jts[i];
  pthread_mutex_unlock(&fx->lock);
  return found;
}
