/* The Chrome trace writer. See trace.h. */
#include "trace.h"
#include "grow.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Kept in memory up to this before a write of its own. */
#define FLUSH_BYTES (64u * 1024u)

static const char TAIL[] = "\n]}\n";

struct dr_trace {
  int fd;
  uint32_t rank;
  int64_t base_us;   /* realtime - monotonic, at open */
  off_t off;         /* where the next bytes go: the closing starts here */
  char *buf;         /* events not written yet, then room for TAIL */
  size_t len, cap;
  int err;           /* the first failure; nothing is written after it */
  int host_named;    /* DR_TRACE_HOST's thread_name is in the file */
};

static uint64_t clock_us(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Realtime minus monotonic: the monotonic reading between two realtime
 * ones, against their midpoint. */
static int64_t realtime_base_us(void) {
  uint64_t r0 = clock_us(CLOCK_REALTIME);
  uint64_t m = clock_us(CLOCK_MONOTONIC);
  uint64_t r1 = clock_us(CLOCK_REALTIME);
  return (int64_t)(r0 + (r1 - r0) / 2) - (int64_t)m;
}

static void path_for(const char *path, uint32_t rank, uint32_t world,
                     char *out, size_t n) {
  const char *tok = strstr(path, "{rank}");
  if (tok != NULL) {
    snprintf(out, n, "%.*s%u%s", (int)(tok - path), path, rank, tok + 6);
    return;
  }
  if (world <= 1) {
    snprintf(out, n, "%s", path);
    return;
  }
  const char *slash = strrchr(path, '/');
  const char *dot = strrchr(path, '.');
  if (dot == NULL || (slash != NULL && dot < slash))
    snprintf(out, n, "%s.rank%u", path, rank);
  else
    snprintf(out, n, "%.*s.rank%u%s", (int)(dot - path), path, rank, dot);
}

/* Room for n more bytes and TAIL. */
static int reserve(dr_trace_t *t, size_t n) {
  char *p = dr_grow(t->buf, &t->cap, t->len + n + sizeof(TAIL), 1, 4096);
  if (p == NULL)
    return -ENOMEM;
  t->buf = p;
  return 0;
}

static void put(dr_trace_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(dr_trace_t *t, const char *fmt, ...) {
  if (t->err != 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (k < 0) {
    t->err = -EINVAL;
    return;
  }
  int rc = reserve(t, (size_t)k + 1);
  if (rc != 0) {
    t->err = rc;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  t->len += (size_t)k;
}

static int write_all(int fd, const char *p, size_t n, off_t off) {
  while (n > 0) {
    ssize_t k = pwrite(fd, p, n, off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -errno;
    if (k == 0)
      return -EIO;
    p += k;
    n -= (size_t)k;
    off += k;
  }
  return 0;
}

int dr_trace_flush(dr_trace_t *t) {
  if (t == NULL)
    return 0;
  if (t->err != 0 || t->len == 0)
    return t->err;
  /* The events and the closing in one write, over the last closing. */
  memcpy(t->buf + t->len, TAIL, sizeof(TAIL) - 1);
  int rc = write_all(t->fd, t->buf, t->len + sizeof(TAIL) - 1, t->off);
  if (rc != 0) {
    t->err = rc;
    return rc;
  }
  t->off += (off_t)t->len;
  t->len = 0;
  return 0;
}

static void maybe_flush(dr_trace_t *t) {
  if (t->len >= FLUSH_BYTES)
    dr_trace_flush(t);
}

int64_t dr_trace_file_us(const dr_trace_t *t, uint64_t mono_us) {
  return (int64_t)mono_us + t->base_us;
}

/* JSON string body of s: '"' and '\\' escaped, control bytes as '?'. */
static void escape(const char *s, char *out, size_t n) {
  size_t o = 0;
  for (; *s != '\0' && o + 2 < n; s++) {
    if (*s == '"' || *s == '\\')
      out[o++] = '\\';
    out[o++] = (unsigned char)*s >= 0x20 ? *s : '?';
  }
  out[o] = '\0';
}

int dr_trace_open(const char *path, const dr_trace_meta_t *meta,
                  dr_trace_t **out, char *used, size_t used_len) {
  char p[4096];
  path_for(path, meta->rank, meta->world, p, sizeof(p));
  if (used != NULL)
    snprintf(used, used_len, "%s", p);
  dr_trace_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return -ENOMEM;
  t->fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (t->fd < 0) {
    int e = -errno;
    free(t);
    return e;
  }
  t->rank = meta->rank;
  t->base_us = realtime_base_us();
  char source[64], backend[64];
  escape(meta->source != NULL ? meta->source : "", source, sizeof(source));
  escape(meta->backend != NULL ? meta->backend : "", backend,
         sizeof(backend));
  put(t, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"ddprun\":{"
         "\"source\":\"%s\",\"rank\":%" PRIu32 ",\"world\":%" PRIu32
         ",\"backend\":\"%s\"",
      source, meta->rank, meta->world, backend);
  if (meta->has_clock_offset)
    put(t, ",\"clock_offset_us\":%" PRId64, meta->clock_offset_us);
  put(t, "}},\"traceEvents\":[\n");
  static const char *names[2] = {"compute", "communication"};
  for (int tid = 0; tid < 2; tid++)
    put(t, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%" PRIu32
           ",\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
        tid == 0 ? "" : ",\n", t->rank, tid, names[tid]);
  put(t, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%" PRIu32
         ",\"args\":{\"name\":\"rank %" PRIu32 "\"}}",
      t->rank, t->rank);
  int rc = dr_trace_flush(t);
  if (rc != 0) {
    close(t->fd);
    free(t->buf);
    free(t);
    return rc;
  }
  *out = t;
  return 0;
}

/* The event's common part, without its closing brace. */
static void begin_event(dr_trace_t *t, int tid, const char *name,
                        uint64_t t0_us, uint64_t t1_us) {
  if (tid == DR_TRACE_HOST && !t->host_named) {
    put(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%" PRIu32
           ",\"tid\":%d,\"args\":{\"name\":\"host\"}}",
        t->rank, tid);
    t->host_named = 1;
  }
  char esc[128];
  escape(name, esc, sizeof(esc));
  put(t, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%" PRIu32 ",\"tid\":%d,"
         "\"ts\":%" PRId64 ",\"dur\":%" PRIu64,
      esc, t->rank, tid, dr_trace_file_us(t, t0_us),
      t1_us >= t0_us ? t1_us - t0_us : 0);
}

void dr_trace_span(dr_trace_t *t, int tid, const char *name, uint64_t t0_us,
                   uint64_t t1_us) {
  if (t == NULL)
    return;
  begin_event(t, tid, name, t0_us, t1_us);
  put(t, "}");
  maybe_flush(t);
}

void dr_trace_allreduce(dr_trace_t *t, size_t bucket, uint64_t n_bytes,
                        uint64_t ready_us, uint64_t t0_us, uint64_t t1_us) {
  if (t == NULL)
    return;
  char name[64];
  snprintf(name, sizeof(name), "allreduce bucket %zu (%.2f MiB)", bucket,
           (double)n_bytes / 1048576.0);
  begin_event(t, DR_TRACE_COMM, name, t0_us, t1_us);
  put(t, ",\"args\":{\"bucket\":%zu,\"bytes\":%" PRIu64, bucket, n_bytes);
  if (ready_us != 0)
    put(t, ",\"ready_us\":%" PRId64, dr_trace_file_us(t, ready_us));
  put(t, "}}");
  maybe_flush(t);
}

void dr_trace_counter(dr_trace_t *t, const char *name, uint64_t ts_us,
                      const char *const *keys, const double *vals,
                      size_t n) {
  if (t == NULL)
    return;
  char esc[128];
  escape(name, esc, sizeof(esc));
  put(t, ",\n{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%" PRIu32
         ",\"ts\":%" PRId64 ",\"args\":{",
      esc, t->rank, dr_trace_file_us(t, ts_us));
  for (size_t i = 0; i < n; i++) {
    char k[64];
    escape(keys[i], k, sizeof(k));
    /* JSON has no NaN or infinity. */
    double v = vals[i] == vals[i] && vals[i] < 1e300 && vals[i] > -1e300
                   ? vals[i]
                   : 0.0;
    put(t, "%s\"%s\":%.10g", i > 0 ? "," : "", k, v);
  }
  put(t, "}}");
  maybe_flush(t);
}

int dr_trace_close(dr_trace_t **tp) {
  dr_trace_t *t = *tp;
  *tp = NULL;
  if (t == NULL)
    return 0;
  int rc = dr_trace_flush(t);
  if (close(t->fd) != 0 && rc == 0)
    rc = -errno;
  free(t->buf);
  free(t);
  return rc;
}

int dr_trace_parse_offset(const char *s, int64_t *out) {
  if (s == NULL)
    return -EINVAL;
  const char *d = s + (s[0] == '-' || s[0] == '+');
  if (*d == '\0')
    return -EINVAL;
  for (const char *c = d; *c != '\0'; c++)
    if (*c < '0' || *c > '9')
      return -EINVAL;
  errno = 0;
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == NULL || *end != '\0')
    return -EINVAL;
  *out = (int64_t)v;
  return 0;
}
