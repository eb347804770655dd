/* The checkpoint peers on loopback (agent/ckpt_peer.h): a push and a
 * fetch of a file and of a directory, byte for byte; a peer that already
 * holds the name; the job's run id and secret; a sender of garbage, of a
 * wrong checksum, of a path that leaves its directory or of too few
 * bytes, dropped with nothing visible in DIR; a holder that sends a bad
 * copy, refused; a silent peer, ended by the deadline and by the stop
 * descriptor. Each test has two fresh directories (A serves, B is the
 * client's) under TMPDIR. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_io.h"
#include "ckpt_peer.h"
#include "ckpt_store.h"
#include "errors.h"
#include "wire.h"

static const uint8_t secret[] = "s3cret-of-the-job";

typedef struct {
  char root[256], dir_a[300], dir_b[300];
  dr_ckpt_store_t *a, *b;
  int stop_fd;
  dr_ckpt_ctx_t srv_ctx, cli_ctx;
  dr_ckpt_srv_t *srv;
  uint16_t port;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  const char *t = getenv("TMPDIR");
  snprintf(f->root, sizeof(f->root), "%s/test_ckpt_peer.XXXXXX",
           t != NULL && t[0] != '\0' ? t : "/tmp");
  if (mkdtemp(f->root) == NULL)
    return -1;
  snprintf(f->dir_a, sizeof(f->dir_a), "%s/a", f->root);
  snprintf(f->dir_b, sizeof(f->dir_b), "%s/b", f->root);
  char err[256];
  if (dr_ckpt_store_open(f->dir_a, 3, &f->a, err, sizeof(err)) != 0 ||
      dr_ckpt_store_open(f->dir_b, 3, &f->b, err, sizeof(err)) != 0)
    return -1;
  f->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  dr_ckpt_ctx_t c = {f->a, "job7", "node-a", NULL, 0, f->stop_fd, 5000};
  f->srv_ctx = c;
  c.store = f->b;
  c.host = "node-b";
  f->cli_ctx = c;
  *state = f;
  return 0;
}

static void start(fx_t *f) {
  assert_int_equal(dr_ckpt_srv_start(&f->srv_ctx, 0, &f->srv), 0);
  f->port = dr_ckpt_srv_port(f->srv);
  assert_true(f->port > 0);
  dr_ckpt_srv_set_node_rank(f->srv, 5);
}

static int teardown(void **state) {
  fx_t *f = *state;
  uint64_t one = 1;
  assert_int_equal(write(f->stop_fd, &one, sizeof(one)), sizeof(one));
  dr_ckpt_srv_stop(&f->srv);
  close(f->stop_fd);
  dr_ckpt_store_close(&f->a);
  dr_ckpt_store_close(&f->b);
  assert_int_equal(dr_ckpt_rm_at(AT_FDCWD, f->root), 0);
  free(f);
  return 0;
}

/* A file of n pseudo-random bytes (seeded) at dir/rel. */
static void put_file(const char *dir, const char *rel, size_t n,
                     unsigned seed) {
  char p[1024];
  snprintf(p, sizeof(p), "%s/%s", dir, rel);
  FILE *fp = fopen(p, "wb");
  assert_non_null(fp);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    fputc((int)(x >> 24), fp);
  }
  assert_int_equal(fclose(fp), 0);
}

static void put_dir(const char *dir, const char *rel) {
  char p[1024];
  snprintf(p, sizeof(p), "%s/%s", dir, rel);
  assert_int_equal(mkdir(p, 0700), 0);
}

/* Whether two trees hold the same names and bytes (links are not
 * copied: the left side's are skipped). */
static int same_tree(const char *x, const char *y) {
  char cmd[2200];
  snprintf(cmd, sizeof(cmd), "diff -r --no-dereference '%s' '%s' | "
           "grep -v '^Only in %s.*: link$' | grep -q .", x, y, x);
  return system(cmd) != 0; /* grep found a difference: status 0 */
}

/* The entries of dir (not counting .ddprun), and of its incoming/. */
static int count_entries(const char *dir, const char *sub) {
  char p[1024];
  snprintf(p, sizeof(p), "%s%s", dir, sub);
  DIR *d = opendir(p);
  assert_non_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
         strcmp(de->d_name, ".ddprun") != 0;
  closedir(d);
  return n;
}

static void expect_nothing_in_a(const fx_t *f) {
  assert_int_equal(count_entries(f->dir_a, ""), 0);
  assert_int_equal(count_entries(f->dir_a, "/.ddprun/incoming"), 0);
}

/* ---- pushes and fetches ------------------------------------------------- */

static void test_push_file(void **state) {
  fx_t *f = *state;
  start(f);
  /* Three chunks and a bit: DATA frames of 1 MiB and a short last one. */
  put_file(f->dir_b, "ckpt-0000000010.bin", 3 * DR_CKPT_CHUNK + 777, 1);
  dr_ckpt_moved_t mv;
  char why[512];
  assert_int_equal(dr_ckpt_push(&f->cli_ctx, "127.0.0.1", f->port,
                                "ckpt-0000000010.bin", 2, NULL, &mv, why,
                                sizeof(why)),
                   0);
  assert_false(mv.had_it);
  assert_int_equal(mv.bytes, 3 * DR_CKPT_CHUNK + 777);
  char x[700], y[700];
  snprintf(x, sizeof(x), "%s/ckpt-0000000010.bin", f->dir_b);
  snprintf(y, sizeof(y), "%s/ckpt-0000000010.bin", f->dir_a);
  assert_true(same_tree(x, y));
  assert_int_equal(dr_ckpt_store_origin(f->a, "ckpt-0000000010.bin"), 2);
  assert_int_equal(dr_ckpt_store_newest(f->a), 10);
  /* Again: the peer holds it, and says so before any byte moves. */
  assert_int_equal(dr_ckpt_push(&f->cli_ctx, "::1", f->port,
                                "ckpt-0000000010.bin", 2, NULL, &mv, why,
                                sizeof(why)) == 0 ||
                       dr_ckpt_push(&f->cli_ctx, "127.0.0.1", f->port,
                                    "ckpt-0000000010.bin", 2, NULL, &mv,
                                    why, sizeof(why)) == 0,
                   1);
  assert_true(mv.had_it);
  /* An empty checkpoint is one too; paced, it still arrives. */
  put_file(f->dir_b, "step_11.pt", 0, 2);
  dr_tbucket_t pace;
  dr_tbucket_init(&pace, 1u << 30, 1u << 20, 0);
  assert_int_equal(dr_ckpt_push(&f->cli_ctx, "127.0.0.1", f->port,
                                "step_11.pt", 2, &pace, &mv, why,
                                sizeof(why)),
                   0);
  assert_int_equal(dr_ckpt_store_newest(f->a), 11);
}

static void test_push_dir(void **state) {
  fx_t *f = *state;
  start(f);
  put_dir(f->dir_b, "epoch3-step190");
  put_dir(f->dir_b, "epoch3-step190/shards");
  put_dir(f->dir_b, "epoch3-step190/shards/empty");
  put_dir(f->dir_b, "epoch3-step190/.meta");
  put_file(f->dir_b, "epoch3-step190/model.pt", 1500000, 3);
  put_file(f->dir_b, "epoch3-step190/shards/rank0.pt", 70000, 4);
  put_file(f->dir_b, "epoch3-step190/shards/rank1.pt", 0, 5);
  put_file(f->dir_b, "epoch3-step190/.meta/done", 3, 6);
  char p[700];
  snprintf(p, sizeof(p), "%s/epoch3-step190/link", f->dir_b);
  assert_int_equal(symlink("/etc/passwd", p), 0);
  dr_ckpt_moved_t mv;
  char why[512];
  assert_int_equal(dr_ckpt_push(&f->cli_ctx, "127.0.0.1", f->port,
                                "epoch3-step190", 0, NULL, &mv, why,
                                sizeof(why)),
                   0);
  assert_int_equal(mv.bytes, 1500000 + 70000 + 3);
  char x[700], y[700];
  snprintf(x, sizeof(x), "%s/epoch3-step190", f->dir_b);
  snprintf(y, sizeof(y), "%s/epoch3-step190", f->dir_a);
  assert_true(same_tree(x, y));
  snprintf(p, sizeof(p), "%s/epoch3-step190/link", f->dir_a);
  struct stat st;
  assert_int_not_equal(lstat(p, &st), 0);
  assert_int_equal(dr_ckpt_store_newest(f->a), 190);
}

static void test_fetch(void **state) {
  fx_t *f = *state;
  start(f);
  put_file(f->dir_a, "ckpt-0000000020.bin", 2 * DR_CKPT_CHUNK, 7);
  put_file(f->dir_a, "ckpt-0000000030.bin", 10, 8);
  dr_ckpt_moved_t mv;
  char why[512];
  assert_int_equal(dr_ckpt_fetch(&f->cli_ctx, "127.0.0.1", f->port, 20, &mv,
                                 why, sizeof(why)),
                   0);
  assert_string_equal(mv.name, "ckpt-0000000020.bin");
  assert_int_equal(mv.bytes, 2 * DR_CKPT_CHUNK);
  char x[700], y[700];
  snprintf(x, sizeof(x), "%s/ckpt-0000000020.bin", f->dir_a);
  snprintf(y, sizeof(y), "%s/ckpt-0000000020.bin", f->dir_b);
  assert_true(same_tree(x, y));
  /* The holder's own checkpoint comes with its node rank as origin. */
  assert_int_equal(dr_ckpt_store_origin(f->b, "ckpt-0000000020.bin"), 5);
  assert_int_equal(dr_ckpt_fetch(&f->cli_ctx, "127.0.0.1", f->port, 25, &mv,
                                 why, sizeof(why)),
                   DR_ENOTFOUND);
}

/* ---- who may ------------------------------------------------------------- */

static void test_run_id_and_secret(void **state) {
  fx_t *f = *state;
  f->srv_ctx.secret = secret;
  f->srv_ctx.secret_len = sizeof(secret) - 1;
  start(f);
  put_file(f->dir_b, "ckpt-0000000010.bin", 1000, 9);
  dr_ckpt_moved_t mv;
  char why[512];
  /* No secret: refused. */
  assert_int_equal(dr_ckpt_push(&f->cli_ctx, "127.0.0.1", f->port,
                                "ckpt-0000000010.bin", 1, NULL, &mv, why,
                                sizeof(why)),
                   DR_ENOAUTH);
  /* A wrong one: refused, with the server's words. */
  dr_ckpt_ctx_t wrong = f->cli_ctx;
  wrong.secret = (const uint8_t *)"guess";
  wrong.secret_len = 5;
  assert_int_equal(dr_ckpt_push(&wrong, "127.0.0.1", f->port,
                                "ckpt-0000000010.bin", 1, NULL, &mv, why,
                                sizeof(why)),
                   DR_EAUTH);
  assert_non_null(strstr(why, "wrong shared secret"));
  expect_nothing_in_a(f);
  /* Another job's run id, with the right secret: refused. */
  dr_ckpt_ctx_t other = f->cli_ctx;
  other.secret = secret;
  other.secret_len = sizeof(secret) - 1;
  other.run_id = "job8";
  assert_int_equal(dr_ckpt_push(&other, "127.0.0.1", f->port,
                                "ckpt-0000000010.bin", 1, NULL, &mv, why,
                                sizeof(why)),
                   DR_ERUNID);
  assert_int_equal(dr_ckpt_fetch(&other, "127.0.0.1", f->port, 10, &mv, why,
                                 sizeof(why)),
                   DR_ERUNID);
  expect_nothing_in_a(f);
  /* The right secret and run id. */
  other.run_id = "job7";
  assert_int_equal(dr_ckpt_push(&other, "127.0.0.1", f->port,
                                "ckpt-0000000010.bin", 1, NULL, &mv, why,
                                sizeof(why)),
                   0);
  assert_int_equal(dr_ckpt_store_newest(f->a), 10);
}

/* ---- peers that break the protocol --------------------------------------- */

/* A raw connection to A through the handshake (no secret). */
static void raw_open(fx_t *f, dr_ckpt_conn_t *c) {
  assert_int_equal(dr_ckpt_connect("127.0.0.1", f->port, -1, 5000, c), 0);
  assert_int_equal(dr_enc_hello(&c->out, 1, dr_str("job7"), dr_str("x")), 0);
  assert_int_equal(dr_ckpt_send(c), 0);
  dr_msg_t m;
  assert_int_equal(dr_ckpt_recv(c, &m), 0);
  assert_int_equal(m.type, DR_MSG_WELCOME);
  c->dec.authed = 1;
}

/* The server's last word: an ERROR's code, then the end of the stream. */
static int raw_answer(dr_ckpt_conn_t *c) {
  dr_msg_t m;
  dr_error_t e;
  int rc = dr_ckpt_recv(c, &m);
  while (rc == 0 && m.type == DR_MSG_OK)
    rc = dr_ckpt_recv(c, &m);
  if (rc != 0)
    return rc;
  assert_int_equal(dr_msg_error(&m, &e), 0);
  int code = e.code;
  assert_int_equal(dr_ckpt_recv(c, &m), DR_ECLOSED);
  return code;
}

static void raw_put(dr_ckpt_conn_t *c, const char *name, uint32_t kind,
                    uint64_t total) {
  dr_ckpt_put_t p = {dr_str("job7"), dr_str(name), kind, total, 0, 1};
  dr_ckpt_name_step(name, &p.step);
  assert_int_equal(dr_enc_ckpt_put(&c->out, 1, &p), 0);
}

static void test_garbage_dropped(void **state) {
  fx_t *f = *state;
  start(f);
  dr_ckpt_conn_t c;
  /* Not a frame at all. */
  assert_int_equal(dr_ckpt_connect("127.0.0.1", f->port, -1, 5000, &c), 0);
  assert_int_equal(dr_buf_append(&c.out, "GET / HTTP/1.0\r\n\r\n", 18), 0);
  assert_int_equal(dr_ckpt_send(&c), 0);
  assert_int_equal(raw_answer(&c), DR_EMAGIC);
  dr_ckpt_conn_close(&c);
  /* A checkpoint whose checksum is wrong. */
  raw_open(f, &c);
  raw_put(&c, "ckpt-0000000010.bin", DR_CKPT_FILE, 5);
  dr_ckpt_send(&c);
  assert_int_equal(dr_enc_ckpt_data(&c.out, 1, dr_str("hello")), 0);
  uint8_t sum[DR_CKPT_SUM_LEN] = {1, 2, 3};
  dr_bytes_t sb = {sum, sizeof(sum)};
  assert_int_equal(dr_enc_ckpt_end(&c.out, 1, sb), 0);
  assert_int_equal(dr_ckpt_send(&c), 0);
  assert_int_equal(raw_answer(&c), DR_ECHECKSUM);
  dr_ckpt_conn_close(&c);
  expect_nothing_in_a(f);
  /* More bytes than declared. */
  raw_open(f, &c);
  raw_put(&c, "ckpt-0000000010.bin", DR_CKPT_FILE, 3);
  assert_int_equal(dr_enc_ckpt_data(&c.out, 1, dr_str("hello")), 0);
  dr_ckpt_send(&c);
  assert_int_equal(raw_answer(&c), DR_EBADARG);
  dr_ckpt_conn_close(&c);
  /* A directory whose entry climbs out of it, and one that starts at the
   * root. */
  static const char *const evil[] = {"../escaped", "/tmp/escaped",
                                     "a/../../escaped"};
  for (size_t i = 0; i < sizeof(evil) / sizeof(evil[0]); i++) {
    raw_open(f, &c);
    raw_put(&c, "step_7", DR_CKPT_DIR, 4);
    dr_ckpt_entry_t e = {dr_str(evil[i]), DR_CKPT_FILE, 4};
    assert_int_equal(dr_enc_ckpt_entry(&c.out, 1, &e), 0);
    assert_int_equal(dr_enc_ckpt_data(&c.out, 1, dr_str("evil")), 0);
    dr_ckpt_send(&c);
    assert_int_equal(raw_answer(&c), DR_EBADARG);
    dr_ckpt_conn_close(&c);
  }
  char p[700];
  struct stat st;
  snprintf(p, sizeof(p), "%s/escaped", f->root);
  assert_int_not_equal(lstat(p, &st), 0);
  /* A name that is not a checkpoint's, or holds a path. */
  static const char *const names[] = {"../ckpt-1.bin", ".hidden-1",
                                      "latest", "ckpt-1.bin.tmp"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    raw_open(f, &c);
    raw_put(&c, names[i], DR_CKPT_FILE, 0);
    dr_ckpt_send(&c);
    assert_int_equal(raw_answer(&c), DR_EBADARG);
    dr_ckpt_conn_close(&c);
  }
  /* A sender killed halfway: the stream ends early. */
  raw_open(f, &c);
  raw_put(&c, "ckpt-0000000012.bin", DR_CKPT_FILE, 10);
  assert_int_equal(dr_enc_ckpt_data(&c.out, 1, dr_str("half")), 0);
  dr_ckpt_send(&c);
  dr_msg_t m;
  assert_int_equal(dr_ckpt_recv(&c, &m), 0);
  assert_int_equal(m.type, DR_MSG_OK); /* the go-ahead */
  dr_ckpt_conn_close(&c);
  /* The server has dropped the copy once a later request is served. */
  put_file(f->dir_b, "ckpt-0000000001.bin", 1, 1);
  dr_ckpt_moved_t mv;
  char why[512];
  assert_int_equal(dr_ckpt_push(&f->cli_ctx, "127.0.0.1", f->port,
                                "ckpt-0000000001.bin", 1, NULL, &mv, why,
                                sizeof(why)),
                   0);
  for (int i = 0; i < 500 &&
                  count_entries(f->dir_a, "/.ddprun/incoming") != 0;
       i++)
    usleep(10000); /* the dying connection's thread cleans up */
  assert_int_equal(count_entries(f->dir_a, ""), 1);
  assert_int_equal(count_entries(f->dir_a, "/.ddprun/incoming"), 0);
}

/* ---- holders that send a bad copy, or nothing ---------------------------- */

typedef struct {
  int lfd;
  uint16_t port;
  int mode; /* 0: a copy with a wrong checksum; 1: silence */
  pthread_t t;
} fake_t;

static void *fake_main(void *arg) {
  fake_t *k = arg;
  int fd = accept(k->lfd, NULL, NULL);
  if (fd < 0)
    return NULL;
  dr_ckpt_conn_t c;
  dr_ckpt_conn_init(&c, fd, -1, 5000);
  dr_msg_t m;
  if (k->mode == 1) {
    dr_ckpt_recv(&c, &m); /* the HELLO, never answered */
    dr_ckpt_recv(&c, &m); /* until the client gives up */
    dr_ckpt_conn_close(&c);
    return NULL;
  }
  dr_ckpt_recv(&c, &m);
  dr_bytes_t none = {NULL, 0};
  dr_enc_welcome(&c.out, m.req_id, 0, none, 1);
  dr_ckpt_send(&c);
  c.dec.authed = 1;
  dr_ckpt_recv(&c, &m);
  raw_put(&c, "ckpt-0000000020.bin", DR_CKPT_FILE, 5);
  dr_enc_ckpt_data(&c.out, 1, dr_str("hello"));
  uint8_t sum[DR_CKPT_SUM_LEN] = {9};
  dr_bytes_t sb = {sum, sizeof(sum)};
  dr_enc_ckpt_end(&c.out, 1, sb);
  dr_ckpt_send(&c);
  dr_ckpt_recv(&c, &m); /* until the client closes */
  dr_ckpt_conn_close(&c);
  return NULL;
}

static void fake_start(fake_t *k, int mode) {
  k->mode = mode;
  k->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  assert_int_equal(bind(k->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(k->lfd, 4), 0);
  assert_int_equal(getsockname(k->lfd, (struct sockaddr *)&sa, &len), 0);
  k->port = ntohs(sa.sin_port);
  assert_int_equal(pthread_create(&k->t, NULL, fake_main, k), 0);
}

static void fake_stop(fake_t *k) {
  pthread_join(k->t, NULL);
  close(k->lfd);
}

static void test_bad_holder(void **state) {
  fx_t *f = *state;
  start(f);
  fake_t k;
  fake_start(&k, 0);
  dr_ckpt_moved_t mv;
  char why[512];
  assert_int_equal(dr_ckpt_fetch(&f->cli_ctx, "127.0.0.1", k.port, 20, &mv,
                                 why, sizeof(why)),
                   DR_ECHECKSUM);
  fake_stop(&k);
  assert_int_equal(count_entries(f->dir_b, ""), 0);
  assert_int_equal(count_entries(f->dir_b, "/.ddprun/incoming"), 0);
  /* The next holder has it. */
  put_file(f->dir_a, "ckpt-0000000020.bin", 5, 3);
  assert_int_equal(dr_ckpt_fetch(&f->cli_ctx, "127.0.0.1", f->port, 20, &mv,
                                 why, sizeof(why)),
                   0);
  assert_int_equal(dr_ckpt_store_newest(f->b), 20);
}

typedef struct {
  fx_t *f;
  uint16_t port;
  int rc;
} fetch_arg_t;

static void *fetch_main(void *arg) {
  fetch_arg_t *a = arg;
  dr_ckpt_moved_t mv;
  char why[512];
  a->rc = dr_ckpt_fetch(&a->f->cli_ctx, "127.0.0.1", a->port, 20, &mv, why,
                        sizeof(why));
  return NULL;
}

static void test_silent_holder(void **state) {
  fx_t *f = *state;
  fake_t k;
  /* The deadline: no progress for timeout_ms. */
  fake_start(&k, 1);
  f->cli_ctx.timeout_ms = 200;
  dr_ckpt_moved_t mv;
  char why[512];
  assert_int_equal(dr_ckpt_fetch(&f->cli_ctx, "127.0.0.1", k.port, 20, &mv,
                                 why, sizeof(why)),
                   -ETIMEDOUT);
  fake_stop(&k);
  /* The stop descriptor, long before the deadline. */
  fake_start(&k, 1);
  f->cli_ctx.timeout_ms = 600000;
  fetch_arg_t a = {f, k.port, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fetch_main, &a), 0);
  uint64_t one = 1;
  assert_int_equal(write(f->stop_fd, &one, sizeof(one)), sizeof(one));
  pthread_join(t, NULL);
  assert_int_equal(a.rc, -ECANCELED);
  fake_stop(&k);
  /* Nobody listens: refused. */
  f->cli_ctx.stop_fd = -1;
  assert_int_equal(dr_ckpt_fetch(&f->cli_ctx, "127.0.0.1", k.port, 20, &mv,
                                 why, sizeof(why)),
                   -ECONNREFUSED);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_push_file),       T(test_push_dir),
      T(test_fetch),           T(test_run_id_and_secret),
      T(test_garbage_dropped), T(test_bad_holder),
      T(test_silent_holder),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
