/* A fake rendezvous server that misbehaves, for the tests of what
 * `ddprun status` makes of a server it cannot trust, and to measure it.
 *
 *   hostile_rdzv flood SECS    answers HELLO (no secret), then, once the
 *                              client's request came, pushes RESTART frames
 *                              without pause instead of answering, until
 *                              the client hangs up or SECS pass
 *   hostile_rdzv refuse SECS   answers HELLO with an ERROR (a run id
 *                              refused) whose message carries control
 *                              bytes and a newline
 *   hostile_rdzv records SECS  answers STATUS with a JOB_STATUS of a job
 *                              that is done, whose reason, where line and
 *                              stack texts carry control bytes, and whose
 *                              last stack text ends the frame with neither
 *                              a newline nor a NUL; the frame is larger
 *                              than the client's first receive buffer, so
 *                              the buffer ends where the frame does
 *
 * It binds 127.0.0.1 port 0, prints the port on stdout and closes stdout
 * (the caller reads one line: no guessed port, no wait for readiness), then
 * serves one connection at a time until SECS pass, and exits 0; 1 with a
 * line on stderr when it cannot listen. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "wire.h"

static int64_t deadline_ms;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until the program's end; 0 when ready. */
static int wait_fd(int fd, short events) {
  for (;;) {
    int64_t left = deadline_ms - now_ms();
    if (left <= 0)
      return -1;
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int n = poll(&p, 1, (int)left);
    if (n > 0)
      return 0;
    if (n < 0 && errno != EINTR)
      return -1;
  }
}

static int send_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    if (wait_fd(fd, POLLOUT) != 0)
      return -1;
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1; /* the client hung up */
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* One frame of the client's into buf (at most cap bytes); *m borrows it. */
static int read_frame(int fd, uint8_t *buf, size_t cap, dr_msg_t *m) {
  dr_decoder_t dec;
  dr_decoder_init(&dec, NULL);
  dec.authed = 1;
  size_t len = 0;
  for (;;) {
    size_t consumed, need;
    int err;
    dr_decode_status_t st = dr_decode(&dec, buf, len, m, &consumed, &need, &err);
    if (st == DR_DECODE_OK)
      return 0;
    if (st == DR_DECODE_ERROR || need > cap)
      return -1;
    if (wait_fd(fd, POLLIN) != 0)
      return -1;
    /* Only up to the frame's end: the next frame is read with it. */
    ssize_t r = recv(fd, buf + len, need - len, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    len += (size_t)r;
  }
}

static void flood(int fd, dr_buf_t *out) {
  /* One block of frames sent again and again: faster than the client can
   * take them apart, so that its socket never runs dry. */
  dr_buf_reset(out);
  for (int k = 0; k < 1024; k++)
    dr_enc_restart(out, 0, 2, 1, dr_str("rank 0 exited with code 1"));
  while (now_ms() < deadline_ms && send_all(fd, out->data, out->len) == 0)
    ;
}

/* flags: the STATUS's; with DR_STATUS_ENV the node's summary, with
 * control bytes, ends the frame instead of the last stack text. */
static void records(int fd, dr_buf_t *out, uint32_t req, uint64_t flags) {
  /* A stack as py-spy and the agent would write it, with control bytes in
   * its where line and its frames, and long enough to make the frame
   * twice the client's first 4 KiB buffer. */
  static char stack[8192];
  int o = snprintf(stack, sizeof(stack),
                   "py-spy 0.3.14, in a collective\n"
                   "where: all_reduce \x1b[5m at train.py:3\n"
                   "\n"
                   "Thread 42 (active): \"MainThread\"\n");
  while (o < (int)sizeof(stack) - 200)
    o += snprintf(stack + o, sizeof(stack) - (size_t)o,
                  "    all_reduce (torch/distributed.py:%d)\x1b]0;owned\x07\r\n",
                  o);
  dr_job_status_t js;
  memset(&js, 0, sizeof(js));
  js.gen = 3;
  js.state = DR_JS_DONE;
  js.max_restarts = 3;
  js.min_nodes = js.max_nodes = 1;
  js.exit_code = 1;
  js.reason = dr_str("rank 1 \x1b[2Jfailed\r\x1b[1A");
  js.elapsed_ms = 1500;
  dr_node_rec_t node = {0, 2, 0, DR_NS_SUCCEEDED, 100, 200,
                        dr_str("node\x1b[31m-a")};
  dr_rank_rec_t ranks[2] = {
      {0, 0, 0, 4242, DR_RS_EXITED, 0, 0, 10, 300, DR_NONE, DR_NONE,
       1ull << 30, DR_NO_U32, DR_NONE, DR_NO_U32, DR_NONE, DR_NONE},
      {1, 1, 0, 4243, DR_RS_EXITED, 1, 0, 9, 400, DR_NONE, DR_NONE,
       1ull << 30, DR_NO_U32, DR_NONE, DR_NO_U32, DR_NONE, DR_NONE}};
  /* The last record's text ends the frame: no newline, no NUL after it. */
  dr_stack_rec_t stacks[2] = {
      {0, 0, 4242, 0, {(const uint8_t *)stack, (uint32_t)o}},
      {1, 0, 4243, ESRCH, dr_str("pid 4243 is gone\x1b[2J; nothing to read")}};
  dr_env_rec_t env = {0, dr_str("env: GPUs: none\n"
                                 "env: NCCL and torch variables: "
                                 "NCCL_DEBUG=\x1b[2JINFO\r")};
  int with_env = (flags & DR_STATUS_ENV) != 0;
  dr_buf_reset(out);
  if (dr_enc_job_status(out, req, &js, &node, 1, ranks, 2, stacks, 2, &env,
                        with_env ? 1 : 0) == 0)
    send_all(fd, out->data, out->len);
}

/* HELLO, WELCOME (or the refusal), the client's request, then the mode's
 * answer. */
static void serve(int fd, const char *mode, dr_buf_t *out) {
  static uint8_t buf[65536];
  dr_msg_t m;
  if (read_frame(fd, buf, sizeof(buf), &m) != 0 || m.type != DR_MSG_HELLO)
    return;
  dr_buf_reset(out);
  if (strcmp(mode, "refuse") == 0) {
    if (dr_enc_error(out, m.req_id, DR_ERUNID,
                     dr_str("run id 'job' is not this job's\n"
                            "\x1b[2J('other')")) == 0)
      send_all(fd, out->data, out->len);
    return;
  }
  if (dr_enc_welcome(out, m.req_id, 0, dr_str(NULL), 0) != 0 ||
      send_all(fd, out->data, out->len) != 0)
    return;
  if (read_frame(fd, buf, sizeof(buf), &m) != 0)
    return;
  if (strcmp(mode, "flood") == 0) {
    flood(fd, out);
    return;
  }
  records(fd, out, m.req_id,
          m.type == DR_MSG_STATUS && m.n_fields > 0 ? m.f[0].u : 0);
  /* Until the client hangs up (or the program's end). */
  while (wait_fd(fd, POLLIN) == 0 && recv(fd, buf, sizeof(buf), 0) > 0)
    ;
}

int main(int argc, char **argv) {
  if (argc != 3 ||
      (strcmp(argv[1], "flood") != 0 && strcmp(argv[1], "refuse") != 0 &&
       strcmp(argv[1], "records") != 0)) {
    fprintf(stderr, "usage: hostile_rdzv flood|refuse|records SECS\n");
    return 2;
  }
  deadline_ms = now_ms() + 1000 * (int64_t)atoi(argv[2]);
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(lfd, 8) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &len) != 0) {
    fprintf(stderr, "hostile_rdzv: cannot listen on 127.0.0.1: %s\n",
            strerror(errno));
    return 1;
  }
  printf("%u\n", (unsigned)ntohs(a.sin_port));
  fclose(stdout);
  dr_buf_t out;
  dr_buf_init(&out);
  while (wait_fd(lfd, POLLIN) == 0) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
      continue;
    serve(fd, argv[1], &out);
    close(fd);
  }
  dr_buf_free(&out);
  close(lfd);
  return 0;
}
