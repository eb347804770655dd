/* Worker output forwarding: whole prefixed lines, atomic batches, long
 * lines cut, the tail ring, destination errors, the prefix template.
 *
 * One file, past the few hundred lines of the rule: the project keeps one
 * cmocka executable per module, and these are the tests of one module,
 * agent/logfwd.h, with the capture helpers they all share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "logfwd.h"

/* ---- helpers ---------------------------------------------------------- */

typedef struct {
  char *p;
  size_t len, cap;
} buf_t;

static void buf_add(buf_t *b, const void *s, size_t n) {
  if (n > SIZE_MAX / 2) abort(); /* a negative length cast by a caller */
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    b->p = realloc(b->p, cap);
    assert_non_null(b->p);
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void buf_free(buf_t *b) {
  free(b->p);
  memset(b, 0, sizeof(*b));
}

/* The text logfwd should produce for input: every line prefixed, the last
 * one newline-terminated even when the input is not. */
static void expect_prefixed(buf_t *out, const char *prefix, const char *in,
                            size_t n) {
  size_t i = 0;
  while (i < n) {
    const char *nl = memchr(in + i, '\n', n - i);
    size_t len = nl ? (size_t)(nl - (in + i)) : n - i;
    buf_add(out, prefix, strlen(prefix));
    buf_add(out, in + i, len);
    buf_add(out, "\n", 1);
    i += len + 1;
  }
}

static int memfd(void) {
  int fd = memfd_create("logfwd", 0);
  assert_true(fd >= 0);
  return fd;
}

/* Everything written to fd so far (and rewinds it to empty). */
static void memfd_take(int fd, buf_t *out) {
  off_t end = lseek(fd, 0, SEEK_END);
  assert_true(end >= 0);
  char chunk[65536];
  off_t off = 0;
  while (off < end) {
    ssize_t r = pread(fd, chunk, sizeof(chunk), off);
    assert_true(r > 0);
    buf_add(out, chunk, (size_t)r);
    off += r;
  }
  assert_int_equal(ftruncate(fd, 0), 0);
  assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
}

/* A SOCK_SEQPACKET pair keeps write() boundaries: each message the reader
 * gets is one write() of logfwd. */
typedef struct {
  int wfd, rfd;
  pthread_t thr;
  buf_t data;
  size_t n_msgs, max_msg;
  int not_whole;   /* a message that does not end with a newline */
  int big_multi;   /* a message over DR_LOGFWD_ATOMIC with two lines */
} capture_t;

static void *capture_main(void *arg) {
  capture_t *c = arg;
  size_t cap = 2 * DR_LOGFWD_MAX_LINE;
  char *msg = malloc(cap);
  for (;;) {
    ssize_t r = recv(c->rfd, msg, cap, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    size_t n = (size_t)r;
    c->n_msgs++;
    if (n > c->max_msg) c->max_msg = n;
    if (msg[n - 1] != '\n') c->not_whole = 1;
    if (n > DR_LOGFWD_ATOMIC && memchr(msg, '\n', n - 1) != NULL)
      c->big_multi = 1;
    buf_add(&c->data, msg, n);
  }
  free(msg);
  return NULL;
}

static void capture_start(capture_t *c) {
  memset(c, 0, sizeof(*c));
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  int sz = 1 << 20;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  c->wfd = sv[0];
  c->rfd = sv[1];
  assert_int_equal(pthread_create(&c->thr, NULL, capture_main, c), 0);
}

static void capture_stop(capture_t *c) {
  close(c->wfd);
  assert_int_equal(pthread_join(c->thr, NULL), 0);
  close(c->rfd);
  assert_int_equal(c->not_whole, 0);
  assert_int_equal(c->big_multi, 0);
}

static dr_logfwd_t *fwd(int console, int file, const char *prefix) {
  dr_logfwd_opts_t o = {.console_fd = console, .file_fd = file,
                        .prefix = prefix};
  dr_logfwd_t *f = dr_logfwd_new(&o);
  assert_non_null(f);
  return f;
}

/* ---- tests ------------------------------------------------------------ */

/* Every way of cutting the input into three feeds gives the same output. */
static void test_split_every_boundary(void **state) {
  static const char in[] = "hello\nworld\n\nx\nlast, no newline";
  size_t n = sizeof(in) - 1;
  buf_t want = {0};
  expect_prefixed(&want, "[rank5]:", in, n);
  int fd = memfd();
  for (size_t i = 0; i <= n; i++) {
    for (size_t j = i; j <= n; j++) {
      dr_logfwd_t *f = fwd(-1, fd, "[rank5]:");
      dr_logfwd_feed(f, in, i);
      dr_logfwd_feed(f, in + i, j - i);
      dr_logfwd_feed(f, in + j, n - j);
      dr_logfwd_flush(f);
      dr_logfwd_free(&f);
      assert_null(f);
      buf_t got = {0};
      memfd_take(fd, &got);
      assert_int_equal(got.len, want.len);
      assert_memory_equal(got.p, want.p, want.len);
      buf_free(&got);
    }
  }
  /* Byte by byte, too. */
  dr_logfwd_t *f = fwd(-1, fd, "[rank5]:");
  for (size_t i = 0; i < n; i++) dr_logfwd_feed(f, in + i, 1);
  dr_logfwd_flush(f);
  dr_logfwd_free(&f);
  buf_t got = {0};
  memfd_take(fd, &got);
  assert_string_equal(got.p, want.p);
  buf_free(&got);
  buf_free(&want);
  close(fd);
}

static void test_lines_written_at_once(void **state) {
  int fd = memfd();
  dr_logfwd_t *f = fwd(-1, fd, "P:");
  buf_t got = {0};
  dr_logfwd_feed(f, "a\n\n\nb\nparti", 11);
  memfd_take(fd, &got);
  /* Complete lines are out before feed returns; the partial one waits. */
  assert_string_equal(got.p, "P:a\nP:\nP:\nP:b\n");
  buf_free(&got);
  dr_logfwd_feed(f, "al", 2);
  memfd_take(fd, &got);
  assert_null(got.p);
  dr_logfwd_feed(f, "\n", 1);
  memfd_take(fd, &got);
  assert_string_equal(got.p, "P:partial\n");
  buf_free(&got);
  /* Nothing pending: flush writes nothing. */
  dr_logfwd_flush(f);
  memfd_take(fd, &got);
  assert_null(got.p);
  dr_logfwd_feed(f, "end", 3);
  dr_logfwd_flush(f);
  dr_logfwd_flush(f);
  memfd_take(fd, &got);
  assert_string_equal(got.p, "P:end\n");
  buf_free(&got);
  dr_logfwd_free(&f);
  close(fd);
}

static void test_empty_prefix_and_lines(void **state) {
  int fd = memfd();
  dr_logfwd_t *f = fwd(-1, fd, "");
  dr_logfwd_feed(f, "\n\nx\n", 4);
  dr_logfwd_flush(f);
  buf_t got = {0};
  memfd_take(fd, &got);
  assert_string_equal(got.p, "\n\nx\n");
  buf_free(&got);
  dr_logfwd_free(&f);
  f = fwd(-1, fd, NULL);
  dr_logfwd_feed(f, "y", 1);
  dr_logfwd_flush(f);
  memfd_take(fd, &got);
  assert_string_equal(got.p, "y\n");
  buf_free(&got);
  dr_logfwd_free(&f);
  dr_logfwd_free(&f); /* NULL is fine */
  close(fd);
}

/* 200 KiB without a newline: pieces of DR_LOGFWD_MAX_LINE, each prefixed
 * and alone in its write; the payloads put back together are the input. */
static void test_long_line(void **state) {
  size_t n = 200 * 1024;
  char *line = malloc(n + 1);
  for (size_t i = 0; i < n; i++) line[i] = (char)('a' + (i * 7) % 26);
  line[n] = '\n';
  capture_t c;
  capture_start(&c);
  dr_logfwd_t *f = fwd(c.wfd, -1, "[rank1]:");
  dr_logfwd_feed(f, "short\n", 6);
  for (size_t i = 0; i < n + 1; i += 7777)
    dr_logfwd_feed(f, line + i, n + 1 - i < 7777 ? n + 1 - i : 7777);
  dr_logfwd_feed(f, "after\n", 6);
  dr_logfwd_flush(f);
  dr_logfwd_free(&f);
  capture_stop(&c);

  assert_int_equal(c.max_msg, 8 + DR_LOGFWD_MAX_LINE + 1);
  /* short, 3 full pieces, the 8 KiB rest, after. */
  assert_int_equal(c.n_msgs, 6);
  char *p = c.data.p, *end = c.data.p + c.data.len;
  assert_memory_equal(p, "[rank1]:short\n", 14);
  p += 14;
  size_t got = 0;
  int pieces = 0;
  while (got < n) {
    assert_memory_equal(p, "[rank1]:", 8);
    p += 8;
    char *nl = memchr(p, '\n', (size_t)(end - p));
    assert_non_null(nl);
    size_t len = (size_t)(nl - p);
    assert_true(len <= DR_LOGFWD_MAX_LINE);
    assert_memory_equal(p, line + got, len);
    got += len;
    p = nl + 1;
    pieces++;
  }
  assert_int_equal(got, n);
  assert_int_equal(pieces, 4);
  assert_int_equal(end - p, 14);
  assert_memory_equal(p, "[rank1]:after\n", 14);
  buf_free(&c.data);

  /* A line of exactly DR_LOGFWD_MAX_LINE is not cut, even when its
   * newline comes in a later feed. */
  capture_start(&c);
  f = fwd(c.wfd, -1, "");
  dr_logfwd_feed(f, line, DR_LOGFWD_MAX_LINE);
  dr_logfwd_feed(f, "\n", 1);
  dr_logfwd_free(&f);
  capture_stop(&c);
  assert_int_equal(c.n_msgs, 1);
  assert_int_equal(c.data.len, DR_LOGFWD_MAX_LINE + 1);
  buf_free(&c.data);
  free(line);
}

/* 10,000 lines of 0..300 bytes in uneven feeds: each write holds whole
 * lines, at most DR_LOGFWD_ATOMIC bytes, and is nearly full. */
static void test_batches(void **state) {
  buf_t in = {0};
  char line[400];
  unsigned seed = 12345;
  for (int i = 0; i < 10000; i++) {
    seed = seed * 1103515245u + 12345u;
    size_t len = (seed >> 16) % 301;
    int k = snprintf(line, sizeof(line), "%d:", i);
    for (size_t j = (size_t)k; j < len; j++) line[j] = (char)('A' + j % 26);
    if ((size_t)k > len) len = (size_t)k;
    line[len] = '\n';
    buf_add(&in, line, len + 1);
  }
  buf_t want = {0};
  expect_prefixed(&want, "[rank12]:", in.p, in.len);
  capture_t c;
  capture_start(&c);
  dr_logfwd_t *f = fwd(c.wfd, -1, "[rank12]:");
  size_t feeds = 0;
  for (size_t i = 0; i < in.len; feeds++) {
    size_t chunk = 65536 - 1000 * (feeds % 7);
    if (chunk > in.len - i) chunk = in.len - i;
    dr_logfwd_feed(f, in.p + i, chunk);
    i += chunk;
  }
  dr_logfwd_flush(f);
  dr_logfwd_free(&f);
  capture_stop(&c);
  assert_true(c.max_msg <= DR_LOGFWD_ATOMIC);
  assert_int_equal(c.data.len, want.len);
  assert_memory_equal(c.data.p, want.p, want.len);
  /* A batch goes out only when the next line (at most 310 bytes) would
   * not fit, or at the end of a feed. */
  size_t bound = want.len / (DR_LOGFWD_ATOMIC - 310) + feeds + 1;
  assert_true(c.n_msgs <= bound);
  buf_free(&c.data);
  buf_free(&want);
  buf_free(&in);
}

static void test_tail(void **state) {
  dr_logfwd_t *f = fwd(-1, -1, "[rank0]:");
  char out[8192];
  assert_int_equal(dr_logfwd_tail(f, out, sizeof(out)), 0);
  assert_string_equal(out, "");
  char line[64];
  for (int i = 0; i < 30; i++) {
    int k = snprintf(line, sizeof(line), "line %d\n", i);
    dr_logfwd_feed(f, line, (size_t)k);
  }
  buf_t want = {0};
  for (int i = 10; i < 30; i++) {
    int k = snprintf(line, sizeof(line), i == 10 ? "line %d" : "\nline %d",
                     i);
    buf_add(&want, line, (size_t)k);
  }
  size_t n = dr_logfwd_tail(f, out, sizeof(out));
  assert_int_equal(n, want.len);
  assert_string_equal(out, want.p);
  buf_free(&want);

  /* A pending partial line is the newest; the oldest drops out. */
  dr_logfwd_feed(f, "partial", 7);
  dr_logfwd_tail(f, out, sizeof(out));
  assert_non_null(strstr(out, "line 28\nline 29\npartial"));
  assert_memory_equal(out, "line 11\n", 8);

  /* Too small a buffer: the newest lines that fit. */
  n = dr_logfwd_tail(f, out, 17);
  assert_string_equal(out, "line 29\npartial");
  assert_int_equal(n, 15);
  n = dr_logfwd_tail(f, out, 5);
  assert_string_equal(out, "part");
  assert_int_equal(dr_logfwd_tail(f, out, 1), 0);
  assert_string_equal(out, "");
  assert_int_equal(dr_logfwd_tail(f, out, 0), 0);
  dr_logfwd_flush(f);
  dr_logfwd_tail(f, out, sizeof(out));
  assert_non_null(strstr(out, "line 29\npartial"));
  assert_int_equal(strstr(out, "partial")[7], '\0');

  /* A long line is kept shortened, marked with "...". */
  char big[2000];
  memset(big, 'z', sizeof(big));
  big[sizeof(big) - 1] = '\n';
  dr_logfwd_feed(f, big, sizeof(big));
  n = dr_logfwd_tail(f, out, sizeof(out));
  char *last = strrchr(out, '\n') + 1;
  assert_int_equal(strlen(last), DR_LOGFWD_TAIL_LINE_MAX + 3);
  assert_string_equal(last + DR_LOGFWD_TAIL_LINE_MAX, "...");
  dr_logfwd_free(&f);
}

/* No destination at all: lines still reach the tail. */
static void test_no_destinations(void **state) {
  dr_logfwd_t *f = fwd(-1, -1, "[rank3]:");
  dr_logfwd_feed(f, "one\ntwo\nthr", 11);
  dr_logfwd_flush(f);
  char out[256];
  dr_logfwd_tail(f, out, sizeof(out));
  assert_string_equal(out, "one\ntwo\nthr");
  int ce = 1, fe = 1;
  dr_logfwd_errors(f, &ce, &fe);
  assert_int_equal(ce, 0);
  assert_int_equal(fe, 0);
  dr_logfwd_free(&f);
}

/* The console reader goes away: the console is disabled with EPIPE, the
 * file keeps every line. */
static void test_epipe_console(void **state) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  int fd = memfd();
  dr_logfwd_t *f = fwd(p[1], fd, "[rank2]:");
  dr_logfwd_feed(f, "before\n", 7);
  char got1[64] = {0};
  assert_int_equal(read(p[0], got1, sizeof(got1)), 15);
  assert_string_equal(got1, "[rank2]:before\n");
  close(p[0]);
  buf_t want = {0};
  expect_prefixed(&want, "[rank2]:", "before\n", 7);
  char line[64];
  for (int i = 0; i < 1000; i++) {
    int k = snprintf(line, sizeof(line), "after %d\n", i);
    dr_logfwd_feed(f, line, (size_t)k);
    expect_prefixed(&want, "[rank2]:", line, (size_t)k);
  }
  dr_logfwd_flush(f);
  int ce = 0, fe = 1;
  dr_logfwd_errors(f, &ce, &fe);
  assert_int_equal(ce, -EPIPE);
  assert_int_equal(fe, 0);
  buf_t got = {0};
  memfd_take(fd, &got);
  assert_string_equal(got.p, want.p);
  buf_free(&got);
  buf_free(&want);
  dr_logfwd_errors(f, NULL, NULL);
  dr_logfwd_free(&f);
  close(p[1]);
  close(fd);
}

/* A file that cannot be written (a read-only descriptor) is disabled; the
 * console keeps working. */
static void test_bad_file(void **state) {
  int fd = memfd();
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  int ro = open(path, O_RDONLY);
  assert_true(ro >= 0);
  int cons = memfd();
  dr_logfwd_t *f = fwd(cons, ro, "");
  dr_logfwd_feed(f, "a\nb\n", 4);
  int ce = 1, fe = 0;
  dr_logfwd_errors(f, &ce, &fe);
  assert_int_equal(ce, 0);
  assert_int_equal(fe, -EBADF);
  buf_t got = {0};
  memfd_take(cons, &got);
  assert_string_equal(got.p, "a\nb\n");
  buf_free(&got);
  dr_logfwd_free(&f);
  close(ro);
  close(fd);
  close(cons);
}

/* ---- short writes, EAGAIN and EINTR --------------------------------- */

typedef struct {
  int rfd;
  buf_t data;
} drain_t;

static void *drain_main(void *arg) {
  drain_t *d = arg;
  char chunk[512];
  for (;;) {
    ssize_t r = read(d->rfd, chunk, sizeof(chunk));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    buf_add(&d->data, chunk, (size_t)r);
  }
  return NULL;
}

static void on_alarm(int sig) { (void)sig; }

/* A one-page pipe read in small chunks: writes of long lines come back
 * short; a non-blocking pipe answers EAGAIN; a timer signal without
 * SA_RESTART interrupts blocking writes. The reader gets every byte. */
static void slow_reader_run(int nonblocking, int interrupt) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  fcntl(p[1], F_SETPIPE_SZ, 4096);
  if (nonblocking)
    assert_int_equal(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
  struct sigaction sa, old;
  struct itimerval it = {{0, 200}, {0, 200}}, off = {{0, 0}, {0, 0}};
  if (interrupt) {
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm; /* no SA_RESTART */
    sigaction(SIGALRM, &sa, &old);
    setitimer(ITIMER_REAL, &it, NULL);
  }
  drain_t d = {.rfd = p[0]};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, drain_main, &d), 0);

  buf_t in = {0};
  char line[300];
  for (int i = 0; i < 2000; i++) {
    int k = snprintf(line, sizeof(line), "line %d %0*d\n", i, i % 250, 0);
    buf_add(&in, line, (size_t)k);
  }
  size_t big = 60 * 1024; /* over one atomic write, under a cut */
  char *b = malloc(big);
  memset(b, 'q', big);
  buf_add(&in, b, big);
  buf_add(&in, "\ntail\n", 6);
  free(b);
  buf_t want = {0};
  expect_prefixed(&want, "[rank9]:", in.p, in.len);

  dr_logfwd_t *f = fwd(p[1], -1, "[rank9]:");
  for (size_t i = 0; i < in.len; i += 3000)
    dr_logfwd_feed(f, in.p + i, in.len - i < 3000 ? in.len - i : 3000);
  dr_logfwd_flush(f);
  int ce = 1;
  dr_logfwd_errors(f, &ce, NULL);
  assert_int_equal(ce, 0);
  dr_logfwd_free(&f);
  if (interrupt) {
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old, NULL);
  }
  close(p[1]);
  assert_int_equal(pthread_join(t, NULL), 0);
  close(p[0]);
  assert_int_equal(d.data.len, want.len);
  assert_memory_equal(d.data.p, want.p, want.len);
  buf_free(&d.data);
  buf_free(&want);
  buf_free(&in);
}

static void test_slow_reader_nonblocking(void **state) {
  slow_reader_run(1, 0);
}

static void test_slow_reader_interrupted(void **state) {
  slow_reader_run(0, 1);
}

static void test_prefix_render(void **state) {
  char out[64];
  assert_int_equal(dr_log_prefix_render(NULL, 5, 1, "r", "h", out, 64), 0);
  assert_string_equal(out, "[rank5]:");
  assert_int_equal(dr_log_prefix_render("", 12, 1, NULL, NULL, out, 64), 0);
  assert_string_equal(out, "[rank12]:");
  assert_int_equal(dr_log_prefix_render("[${role_name}${rank}|${local_rank}@"
                                        "${host}]: ",
                                        7, 3, "trainer", "node1", out, 64),
                   0);
  assert_string_equal(out, "[trainer7|3@node1]: ");
  assert_int_equal(dr_log_prefix_render("${rank}${rank}", 4, 0, NULL, NULL,
                                        out, 64),
                   0);
  assert_string_equal(out, "44");
  /* A '$' without '{', a '}' alone: copied. */
  assert_int_equal(dr_log_prefix_render("$x $}{ ${host}$", 0, 0, NULL, NULL,
                                        out, 64),
                   0);
  assert_string_equal(out, "$x $}{ $");
  assert_int_equal(dr_log_prefix_render("no vars", 0, 0, NULL, NULL, out, 64),
                   0);
  assert_string_equal(out, "no vars");

  const char *bad[] = {"${x}", "[${rank}${nope}]", "${", "${rank",
                       "${}", "${RANK}", "${ rank}", NULL};
  for (int i = 0; bad[i] != NULL; i++) {
    strcpy(out, "junk");
    assert_int_equal(dr_log_prefix_render(bad[i], 0, 0, "r", "h", out, 64),
                     DR_EBADARG);
    assert_string_equal(out, "");
  }
  /* Output that does not fit, by one byte. */
  assert_int_equal(dr_log_prefix_render("${host}", 0, 0, NULL, "abcd", out, 5),
                   0);
  assert_string_equal(out, "abcd");
  assert_int_equal(dr_log_prefix_render("${host}", 0, 0, NULL, "abcde", out,
                                        5),
                   DR_EBADARG);
  assert_int_equal(dr_log_prefix_render(NULL, 100, 0, NULL, NULL, out, 10),
                   DR_EBADARG);
  assert_string_equal(out, "");
  assert_int_equal(dr_log_prefix_render(NULL, 100, 0, NULL, NULL, out, 11),
                   0);
  assert_int_equal(dr_log_prefix_render("x", 0, 0, NULL, NULL, out, 0),
                   DR_EBADARG);
}

/* ---- concurrency: N instances, one pipe ------------------------------ */

#define N_WRITERS 4
#define N_LINES 10000

typedef struct {
  int rank;
  int wfd;
} writer_t;

/* Line i of a rank: its payload repeats the rank and i, so a line
 * mixed with another rank's cannot pass the check. Lengths vary. */
static int make_line(char *out, int rank, int i) {
  int k = sprintf(out, "r%d i%d ", rank, i);
  int len = k + (i * 37 + rank * 11) % 120;
  for (int j = k; j < len; j++) out[j] = (char)('a' + (rank + i + j) % 26);
  out[len++] = '\n';
  return len;
}

static void *writer_main(void *arg) {
  writer_t *w = arg;
  char prefix[32];
  snprintf(prefix, sizeof(prefix), "[rank%d]:", w->rank);
  dr_logfwd_opts_t o = {.console_fd = w->wfd, .file_fd = -1,
                        .prefix = prefix};
  dr_logfwd_t *f = dr_logfwd_new(&o);
  if (f == NULL) return (void *)1;
  /* Feeds of 1000 bytes cut lines at arbitrary points, as pipe reads do. */
  char *all = malloc((size_t)N_LINES * 200);
  size_t n = 0;
  for (int i = 0; i < N_LINES; i++) n += (size_t)make_line(all + n, w->rank, i);
  for (size_t i = 0; i < n; i += 1000)
    dr_logfwd_feed(f, all + i, n - i < 1000 ? n - i : 1000);
  dr_logfwd_flush(f);
  dr_logfwd_free(&f);
  free(all);
  return NULL;
}

static void test_concurrent_writers(void **state) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  writer_t w[N_WRITERS];
  pthread_t t[N_WRITERS];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < N_WRITERS; r++) {
    w[r].rank = r;
    w[r].wfd = p[1];
    assert_int_equal(pthread_create(&t[r], NULL, writer_main, &w[r]), 0);
  }
  /* Read until every writer is done and the pipe is drained. */
  buf_t got = {0};
  char chunk[65536];
  size_t lines = 0;
  while (lines < (size_t)N_WRITERS * N_LINES) {
    ssize_t r = read(p[0], chunk, sizeof(chunk));
    if (r < 0 && errno == EINTR) continue;
    assert_true(r > 0);
    buf_add(&got, chunk, (size_t)r);
    for (ssize_t i = 0; i < r; i++) lines += chunk[i] == '\n';
  }
  for (int r = 0; r < N_WRITERS; r++) {
    void *ret;
    assert_int_equal(pthread_join(t[r], &ret), 0);
    assert_null(ret);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  close(p[1]);
  assert_int_equal(read(p[0], chunk, sizeof(chunk)), 0);
  close(p[0]);

  int next[N_WRITERS] = {0};
  char want[256];
  char *s = got.p, *end = got.p + got.len;
  while (s < end) {
    char *nl = memchr(s, '\n', (size_t)(end - s));
    assert_non_null(nl);
    int rank = -1;
    assert_int_equal(sscanf(s, "[rank%d]:", &rank), 1);
    assert_true(rank >= 0 && rank < N_WRITERS);
    int k = snprintf(want, sizeof(want), "[rank%d]:", rank);
    int len = make_line(want + k, rank, next[rank]) + k;
    assert_int_equal(nl + 1 - s, len);
    assert_memory_equal(s, want, (size_t)len);
    next[rank]++;
    s = nl + 1;
  }
  for (int r = 0; r < N_WRITERS; r++) assert_int_equal(next[r], N_LINES);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
              (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  print_message("%d writers x %d lines through one pipe: %.1f ms\n",
                N_WRITERS, N_LINES, ms);
  buf_free(&got);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_every_boundary),
      cmocka_unit_test(test_lines_written_at_once),
      cmocka_unit_test(test_empty_prefix_and_lines),
      cmocka_unit_test(test_long_line),
      cmocka_unit_test(test_batches),
      cmocka_unit_test(test_tail),
      cmocka_unit_test(test_no_destinations),
      cmocka_unit_test(test_epipe_console),
      cmocka_unit_test(test_bad_file),
      cmocka_unit_test(test_slow_reader_nonblocking),
      cmocka_unit_test(test_slow_reader_interrupted),
      cmocka_unit_test(test_prefix_render),
      cmocka_unit_test(test_concurrent_writers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
