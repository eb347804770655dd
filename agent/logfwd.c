/* Worker output forwarding: line splitting, prefixing, batching into
 * atomic writes, and the tail ring for failure summaries. */
#include "logfwd.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "mono.h"

/* How long a non-blocking destination may stay full before it is given
 * up (the agent's loop must not stall on a stopped terminal forever). */
#define DR__LOGFWD_STALL_MS 10000

enum { DEST_CONSOLE, DEST_FILE, DEST_N };

typedef struct {
  uint32_t len;      /* bytes kept in text */
  uint8_t cut;       /* the line was longer than text */
  char text[DR_LOGFWD_TAIL_LINE_MAX];
} tail_line_t;

struct dr_logfwd {
  int fd[DEST_N];      /* -1: none given, or disabled after an error */
  int err[DEST_N];     /* -errno that disabled the destination */
  char *prefix;
  size_t prefix_len;
  /* The incomplete last line, without prefix; never more than
   * DR_LOGFWD_MAX_LINE bytes (a full one is cut before it grows). */
  char *part;
  size_t part_len, part_cap;
  /* Whole prefixed lines waiting for one write(); at most
   * DR_LOGFWD_ATOMIC bytes. */
  char out[DR_LOGFWD_ATOMIC];
  size_t out_len;
  /* Ring of the last lines: tail_next is where the next one goes. */
  tail_line_t tail[DR_LOGFWD_TAIL_LINES];
  unsigned tail_next, tail_count;
};

dr_logfwd_t *dr_logfwd_new(const dr_logfwd_opts_t *o) {
  dr_logfwd_t *f = calloc(1, sizeof(*f));
  if (f == NULL) return NULL;
  const char *p = o->prefix != NULL ? o->prefix : "";
  f->prefix_len = strlen(p);
  f->prefix = malloc(f->prefix_len + 1);
  if (f->prefix == NULL) {
    free(f);
    return NULL;
  }
  memcpy(f->prefix, p, f->prefix_len + 1);
  f->fd[DEST_CONSOLE] = o->console_fd >= 0 ? o->console_fd : -1;
  f->fd[DEST_FILE] = o->file_fd >= 0 ? o->file_fd : -1;
  return f;
}

void dr_logfwd_free(dr_logfwd_t **pf) {
  if (pf == NULL || *pf == NULL) return;
  dr_logfwd_t *f = *pf;
  free(f->prefix);
  free(f->part);
  free(f);
  *pf = NULL;
}

void dr_logfwd_errors(const dr_logfwd_t *f, int *console_err,
                      int *file_err) {
  if (console_err != NULL) *console_err = f->err[DEST_CONSOLE];
  if (file_err != NULL) *file_err = f->err[DEST_FILE];
}

/* Writes all of iov[0..cnt) to fd (iov is consumed). 0 or -errno. */
static int write_all(int fd, struct iovec *iov, int cnt) {
  int64_t deadline = -1;
  while (cnt > 0) {
    if (iov->iov_len == 0) {
      iov++;
      cnt--;
      continue;
    }
    ssize_t w = cnt == 1 ? write(fd, iov->iov_base, iov->iov_len)
                         : writev(fd, iov, cnt);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
      int64_t now = (int64_t)dr_mono_ms();
      if (deadline < 0) deadline = now + DR__LOGFWD_STALL_MS;
      if (now >= deadline) return -EAGAIN;
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      int r = poll(&p, 1, (int)(deadline - now));
      if (r < 0 && errno != EINTR) return -errno;
      continue;
    }
    if (w == 0) return -EIO; /* no progress and no error: do not spin */
    deadline = -1;
    size_t done = (size_t)w;
    while (cnt > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      iov++;
      cnt--;
    }
    if (cnt > 0) {
      iov->iov_base = (char *)iov->iov_base + done;
      iov->iov_len -= done;
    }
  }
  return 0;
}

/* One write of the same bytes to every working destination. */
static void write_dests(dr_logfwd_t *f, const struct iovec *iov, int cnt) {
  for (int d = 0; d < DEST_N; d++) {
    if (f->fd[d] < 0) continue;
    struct iovec v[4];
    memcpy(v, iov, (size_t)cnt * sizeof(*iov));
    int r = write_all(f->fd[d], v, cnt);
    if (r < 0) {
      f->err[d] = r;
      f->fd[d] = -1;
    }
  }
}

static void out_flush(dr_logfwd_t *f) {
  if (f->out_len == 0) return;
  struct iovec v = {.iov_base = f->out, .iov_len = f->out_len};
  write_dests(f, &v, 1);
  f->out_len = 0;
}

static void tail_add(dr_logfwd_t *f, const char *a, size_t alen,
                     const char *b, size_t blen) {
  tail_line_t *t = &f->tail[f->tail_next];
  size_t ka = alen < DR_LOGFWD_TAIL_LINE_MAX ? alen : DR_LOGFWD_TAIL_LINE_MAX;
  size_t kb = blen < DR_LOGFWD_TAIL_LINE_MAX - ka ? blen
                                                  : DR_LOGFWD_TAIL_LINE_MAX - ka;
  if (ka > 0) memcpy(t->text, a, ka); /* a is NULL before any partial */
  if (kb > 0) memcpy(t->text + ka, b, kb);
  t->len = (uint32_t)(ka + kb);
  t->cut = ka + kb < alen + blen;
  f->tail_next = (f->tail_next + 1) % DR_LOGFWD_TAIL_LINES;
  if (f->tail_count < DR_LOGFWD_TAIL_LINES) f->tail_count++;
}

/* Emits one line whose text is a followed by b (either may be empty). */
static void emit_line(dr_logfwd_t *f, const char *a, size_t alen,
                      const char *b, size_t blen) {
  tail_add(f, a, alen, b, blen);
  if (f->fd[DEST_CONSOLE] < 0 && f->fd[DEST_FILE] < 0) return;
  size_t total = f->prefix_len + alen + blen + 1;
  if (f->out_len + total > sizeof(f->out)) out_flush(f);
  if (total <= sizeof(f->out) - f->out_len) { /* out_flush empties it */
    size_t o = f->out_len;
    memcpy(f->out + o, f->prefix, f->prefix_len);
    o += f->prefix_len;
    if (alen > 0) memcpy(f->out + o, a, alen);
    o += alen;
    if (blen > 0) memcpy(f->out + o, b, blen);
    o += blen;
    memcpy(f->out + o, "\n", 1);
    f->out_len = o + 1;
    return;
  }
  /* Longer than one atomic write: alone, in one writev(), uncopied. */
  struct iovec v[4] = {
      {.iov_base = f->prefix, .iov_len = f->prefix_len},
      {.iov_base = (void *)a, .iov_len = alen},
      {.iov_base = (void *)b, .iov_len = blen},
      {.iov_base = "\n", .iov_len = 1},
  };
  write_dests(f, v, 4);
}

/* Makes room for need bytes of partial line; 0 or -ENOMEM. */
static int part_reserve(dr_logfwd_t *f, size_t need) {
  if (need <= f->part_cap) return 0;
  size_t cap = f->part_cap != 0 ? f->part_cap : 256;
  while (cap < need) cap *= 2;
  if (cap > DR_LOGFWD_MAX_LINE) cap = DR_LOGFWD_MAX_LINE;
  char *p = realloc(f->part, cap);
  if (p == NULL) return -ENOMEM;
  f->part = p;
  f->part_cap = cap;
  return 0;
}

void dr_logfwd_feed(dr_logfwd_t *f, const char *data, size_t n) {
  while (n > 0) {
    const char *nl = memchr(data, '\n', n);
    size_t seg = nl != NULL ? (size_t)(nl - data) : n;
    /* More than a full piece of this line is known: cut one off. After
     * this, part_len + seg <= DR_LOGFWD_MAX_LINE. */
    while (f->part_len + seg > DR_LOGFWD_MAX_LINE) {
      size_t take = DR_LOGFWD_MAX_LINE - f->part_len;
      emit_line(f, f->part, f->part_len, data, take);
      f->part_len = 0;
      data += take;
      n -= take;
      seg -= take;
    }
    if (nl != NULL) {
      emit_line(f, f->part, f->part_len, data, seg);
      f->part_len = 0;
      data += seg + 1;
      n -= seg + 1;
    } else {
      if (part_reserve(f, f->part_len + seg) < 0) {
        /* No memory to wait for the rest: write what there is as a cut
         * piece rather than lose it. */
        emit_line(f, f->part, f->part_len, data, seg);
        f->part_len = 0;
      } else {
        memcpy(f->part + f->part_len, data, seg);
        f->part_len += seg;
      }
      data += seg;
      n -= seg;
    }
  }
  out_flush(f);
}

void dr_logfwd_flush(dr_logfwd_t *f) {
  if (f->part_len > 0) {
    emit_line(f, f->part, f->part_len, "", 0);
    f->part_len = 0;
  }
  out_flush(f);
}

/* Appends what fits of s; returns the new length (out stays NUL-able:
 * at most cap - 1 bytes are used). */
static size_t put(char *out, size_t len, size_t cap, const char *s,
                  size_t slen) {
  size_t room = cap - 1 - len;
  if (slen > room) slen = room;
  memcpy(out + len, s, slen);
  return len + slen;
}

size_t dr_logfwd_tail(const dr_logfwd_t *f, char *out, size_t n) {
  if (out == NULL || n == 0) return 0;
  /* The lines, oldest first: the ring, then the pending partial line. */
  const char *text[DR_LOGFWD_TAIL_LINES + 1];
  size_t len[DR_LOGFWD_TAIL_LINES + 1];
  int cut[DR_LOGFWD_TAIL_LINES + 1];
  unsigned k = 0;
  unsigned first = (f->tail_next + DR_LOGFWD_TAIL_LINES - f->tail_count) %
                   DR_LOGFWD_TAIL_LINES;
  for (unsigned i = 0; i < f->tail_count; i++) {
    const tail_line_t *t = &f->tail[(first + i) % DR_LOGFWD_TAIL_LINES];
    text[k] = t->text;
    len[k] = t->len;
    cut[k] = t->cut;
    k++;
  }
  if (f->part_len > 0) {
    text[k] = f->part;
    len[k] = f->part_len < DR_LOGFWD_TAIL_LINE_MAX ? f->part_len
                                                   : DR_LOGFWD_TAIL_LINE_MAX;
    cut[k] = f->part_len > len[k];
    k++;
  }
  /* A partial line makes DR_LOGFWD_TAIL_LINES + 1; keep the newest. */
  unsigned start = k > DR_LOGFWD_TAIL_LINES ? k - DR_LOGFWD_TAIL_LINES : 0;
  /* Leave out the oldest lines until the rest fits in n - 1 bytes. */
  size_t need = 0;
  for (unsigned i = start; i < k; i++)
    need += len[i] + (cut[i] ? 3 : 0) + (i > start);
  while (start + 1 < k && need > n - 1) {
    need -= len[start] + (cut[start] ? 3 : 0) + 1;
    start++;
  }
  size_t o = 0;
  for (unsigned i = start; i < k; i++) {
    if (i > start) o = put(out, o, n, "\n", 1);
    o = put(out, o, n, text[i], len[i]);
    if (cut[i]) o = put(out, o, n, "...", 3);
  }
  out[o] = '\0';
  return o;
}

/* Appends s to out[*o..n), keeping room for the NUL. 0 or -1. */
static int render_put(char *out, size_t n, size_t *o, const char *s,
                      size_t slen) {
  if (slen >= n - *o) return -1;
  memcpy(out + *o, s, slen);
  *o += slen;
  return 0;
}

int dr_log_prefix_render(const char *tmpl, int rank, int local_rank,
                         const char *role, const char *host, char *out,
                         size_t n) {
  if (out == NULL || n == 0) return DR_EBADARG;
  out[0] = '\0';
  if (tmpl == NULL || tmpl[0] == '\0') {
    int w = snprintf(out, n, "[rank%d]:", rank);
    if (w < 0 || (size_t)w >= n) {
      out[0] = '\0';
      return DR_EBADARG;
    }
    return 0;
  }
  size_t o = 0;
  const char *p = tmpl;
  while (*p != '\0') {
    const char *d = strstr(p, "${");
    size_t lit = d != NULL ? (size_t)(d - p) : strlen(p);
    if (render_put(out, n, &o, p, lit) < 0) goto bad;
    if (d == NULL) break;
    const char *name = d + 2;
    const char *end = strchr(name, '}');
    if (end == NULL) goto bad;
    size_t nlen = (size_t)(end - name);
    char num[16];
    const char *val;
    if (nlen == 4 && memcmp(name, "rank", 4) == 0) {
      snprintf(num, sizeof(num), "%d", rank);
      val = num;
    } else if (nlen == 10 && memcmp(name, "local_rank", 10) == 0) {
      snprintf(num, sizeof(num), "%d", local_rank);
      val = num;
    } else if (nlen == 9 && memcmp(name, "role_name", 9) == 0) {
      val = role != NULL ? role : "";
    } else if (nlen == 4 && memcmp(name, "host", 4) == 0) {
      val = host != NULL ? host : "";
    } else {
      goto bad;
    }
    if (render_put(out, n, &o, val, strlen(val)) < 0) goto bad;
    p = end + 1;
  }
  out[o] = '\0';
  return 0;
bad:
  out[0] = '\0';
  return DR_EBADARG;
}
