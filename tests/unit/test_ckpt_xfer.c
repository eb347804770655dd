/* The transfer thread's queue (agent/ckpt_xfer.h) against a peer on
 * loopback: a push still queued when a newer checkpoint of its origin is
 * submitted is handed back superseded and never copied, so that a copy
 * slower than the checkpoints (a slow link, a low rate cap) moves the
 * newest next; another origin's push stays queued. The thread is held in
 * its first push by a peer that accepts and never answers, until the
 * others are queued: no timing decides the outcome. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "ckpt_io.h"
#include "ckpt_peer.h"
#include "ckpt_store.h"
#include "ckpt_xfer.h"

#define FILE_BYTES (2u << 20)

/* A listener on 127.0.0.1 that never answers; its port in *port. */
static int silent_listener(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
  assert_int_equal(listen(fd, 4), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  *port = ntohs(sa.sin_port);
  return fd;
}

typedef struct {
  int done;
  dr_xfer_job_t *jobs[8]; /* by submission order, once done */
  uint64_t ids[8];
  int n;
} seen_t;

static void on_done(void *arg, dr_xfer_job_t *j) {
  seen_t *s = arg;
  for (int i = 0; i < s->n; i++)
    if (s->ids[i] == j->id)
      s->jobs[i] = j;
  if (++s->done == s->n)
    uv_stop(uv_default_loop());
}

static void put_file(const char *dir, const char *name) {
  char p[600];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, FILE_BYTES), 0);
  close(fd);
}

static int exists(const char *dir, const char *name) {
  char p[600];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

static dr_xfer_job_t *push(const char *name, uint32_t origin, uint16_t port) {
  dr_xfer_job_t *j = calloc(1, sizeof(*j));
  assert_non_null(j);
  j->kind = DR_XFER_PUSH;
  snprintf(j->name, sizeof(j->name), "%s", name);
  j->origin = origin;
  snprintf(j->peers[0].addr, sizeof(j->peers[0].addr), "127.0.0.1");
  j->peers[0].port = port;
  j->peers[0].node_rank = 1;
  j->n_peers = 1;
  return j;
}

static void test_queued_push_superseded(void **state) {
  (void)state;
  char root[256], a[300], b[300], err[256];
  const char *t = getenv("TMPDIR");
  snprintf(root, sizeof(root), "%s/test_ckpt_xfer.XXXXXX",
           t != NULL && t[0] != '\0' ? t : "/tmp");
  assert_non_null(mkdtemp(root));
  snprintf(a, sizeof(a), "%s/a", root);
  snprintf(b, sizeof(b), "%s/b", root);
  dr_ckpt_store_t *sa, *sb;
  assert_int_equal(dr_ckpt_store_open(a, 8, &sa, err, sizeof(err)), 0);
  assert_int_equal(dr_ckpt_store_open(b, 8, &sb, err, sizeof(err)), 0);
  int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  assert_true(stop_fd >= 0);
  dr_ckpt_ctx_t srv_ctx = {sa, "job7", "node-a", NULL, 0, stop_fd, 5000};
  dr_ckpt_ctx_t cli_ctx = {sb, "job7", "node-b", NULL, 0, stop_fd, 5000};
  dr_ckpt_srv_t *srv;
  assert_int_equal(dr_ckpt_srv_start(&srv_ctx, 0, &srv), 0);
  uint16_t port = dr_ckpt_srv_port(srv);
  for (int st = 10; st <= 40; st += 10) {
    char name[64];
    snprintf(name, sizeof(name), "ckpt-%010d.bin", st);
    put_file(b, name);
  }

  uint16_t silent_port;
  int silent = silent_listener(&silent_port);
  seen_t s = {.n = 4};
  uv_loop_t *loop = uv_default_loop();
  dr_xfer_t *x;
  assert_int_equal(dr_xfer_start(loop, &cli_ctx, 0, on_done, &s, &x), 0);
  /* The first push, to the silent peer: once it has connected, the
   * thread is inside it. */
  s.ids[0] = dr_xfer_submit(x, push("ckpt-0000000010.bin", 0, silent_port));
  struct pollfd pfd = {.fd = silent, .events = POLLIN};
  assert_int_equal(poll(&pfd, 1, 10000), 1);
  int held = accept(silent, NULL, NULL);
  assert_true(held >= 0);
  s.ids[1] = dr_xfer_submit(x, push("ckpt-0000000020.bin", 0, port));
  /* Another origin's: not newer than node 0's, and kept. */
  s.ids[2] = dr_xfer_submit(x, push("ckpt-0000000040.bin", 3, port));
  s.ids[3] = dr_xfer_submit(x, push("ckpt-0000000030.bin", 0, port));
  close(held); /* the first push fails; the thread goes on */
  close(silent);
  uv_run(loop, UV_RUN_DEFAULT);
  assert_int_equal(s.done, 4);

  /* 10 was tried (and failed with its silent peer); 20, queued behind it
   * when 30 came, was handed back untried. */
  assert_false(s.jobs[0]->superseded);
  assert_true(s.jobs[0]->peers[0].rc != 0);
  assert_true(s.jobs[1]->superseded);
  assert_false(exists(a, "ckpt-0000000020.bin"));
  assert_false(s.jobs[2]->superseded);
  assert_int_equal(s.jobs[2]->peers[0].rc, 0);
  assert_true(exists(a, "ckpt-0000000040.bin"));
  assert_false(s.jobs[3]->superseded);
  assert_int_equal(s.jobs[3]->peers[0].rc, 0);
  assert_true(exists(a, "ckpt-0000000030.bin"));
  assert_false(exists(a, "ckpt-0000000010.bin"));

  for (int i = 0; i < 4; i++)
    free(s.jobs[i]);
  dr_xfer_stop(&x);
  uv_run(loop, UV_RUN_DEFAULT);
  uint64_t one = 1;
  assert_int_equal(write(stop_fd, &one, sizeof(one)), sizeof(one));
  dr_ckpt_srv_stop(&srv);
  close(stop_fd);
  dr_ckpt_store_close(&sa);
  dr_ckpt_store_close(&sb);
  assert_int_equal(dr_ckpt_rm_at(AT_FDCWD, root), 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_queued_push_superseded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
