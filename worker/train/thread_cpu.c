/* Per-thread CPU time, run-queue wait and context switches. See
 * thread_cpu.h. */
#include "thread_cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"

pid_t dr_thread_cpu_tid(void) { return (pid_t)syscall(SYS_gettid); }

/* A small /proc file whole into buf, NUL-terminated: 0 or -errno. */
static int slurp(const char *path, char *buf, size_t cap) {
  int n = dr_read_text("", path, buf, cap);
  return n < 0 ? n : 0;
}

/* A decimal at *p, skipping leading blanks; advances *p. */
static int take_u64(const char **p, uint64_t *v) {
  const char *s = *p;
  while (*s == ' ' || *s == '\t')
    s++;
  if (*s < '0' || *s > '9')
    return -EINVAL;
  uint64_t x = 0;
  for (; *s >= '0' && *s <= '9'; s++)
    x = x * 10 + (uint64_t)(*s - '0');
  *v = x;
  *p = s;
  return 0;
}

int dr__thread_cpu_parse_schedstat(const char *text, dr_thread_cpu_t *out) {
  uint64_t run, wait, slices;
  const char *p = text;
  if (take_u64(&p, &run) != 0 || take_u64(&p, &wait) != 0 ||
      take_u64(&p, &slices) != 0)
    return -EINVAL;
  out->cpu_ns = run;
  out->wait_ns = wait;
  out->slices = slices;
  return 0;
}

/* The value of "key:\t123" at the start of a line of text. */
static int status_field(const char *text, const char *key, uint64_t *v) {
  size_t kl = strlen(key);
  for (const char *line = text; line != NULL && *line != '\0';) {
    if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
      const char *p = line + kl + 1;
      return take_u64(&p, v);
    }
    line = strchr(line, '\n');
    if (line != NULL)
      line++;
  }
  return -EINVAL;
}

int dr__thread_cpu_parse_status(const char *text, dr_thread_cpu_t *out) {
  uint64_t vol, invol;
  if (status_field(text, "voluntary_ctxt_switches", &vol) != 0 ||
      status_field(text, "nonvoluntary_ctxt_switches", &invol) != 0)
    return -EINVAL;
  out->vol_cs = vol;
  out->invol_cs = invol;
  return 0;
}

int dr__thread_cpu_parse_stat(const char *text, uint64_t *ticks) {
  /* The command name may hold spaces and parentheses: fields count from
   * the last ')'. utime and stime are fields 14 and 15 (the state, field
   * 3, comes first after it). */
  const char *p = strrchr(text, ')');
  if (p == NULL)
    return -EINVAL;
  p++;
  for (int field = 3; field < 14; field++) {
    while (*p == ' ')
      p++;
    if (*p == '\0')
      return -EINVAL;
    while (*p != ' ' && *p != '\0')
      p++;
  }
  uint64_t ut, st;
  if (take_u64(&p, &ut) != 0 || take_u64(&p, &st) != 0)
    return -EINVAL;
  *ticks = ut + st;
  return 0;
}

/* Reports the first failure only. */
static int note(int rc, int first, char *why, size_t why_len,
                const char *path, const char *what) {
  if (first != 0)
    return first;
  if (why != NULL && why_len > 0)
    snprintf(why, why_len, "cannot %s %s (%s): %s not measured",
             rc == -EINVAL ? "parse" : "read", path,
             rc == -EINVAL ? "unexpected format" : strerror(-rc), what);
  return rc;
}

int dr_thread_cpu_self(dr_thread_cpu_t *out, char *why, size_t why_len) {
  memset(out, 0, sizeof(*out));
  if (why != NULL && why_len > 0)
    why[0] = '\0';
  int first = 0;
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
    out->cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    out->have |= DR_TCPU_CPU;
  } else {
    first = note(-errno, first, why, why_len, "CLOCK_THREAD_CPUTIME_ID",
                 "CPU time");
  }
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) == 0) {
    out->vol_cs = (uint64_t)ru.ru_nvcsw;
    out->invol_cs = (uint64_t)ru.ru_nivcsw;
    out->have |= DR_TCPU_CS;
  } else {
    first = note(-errno, first, why, why_len, "getrusage(RUSAGE_THREAD)",
                 "context switches");
  }
  static const char path[] = "/proc/thread-self/schedstat";
  char buf[128];
  dr_thread_cpu_t s;
  int rc = slurp(path, buf, sizeof(buf));
  if (rc == 0)
    rc = dr__thread_cpu_parse_schedstat(buf, &s);
  if (rc == 0) {
    out->wait_ns = s.wait_ns;
    out->slices = s.slices;
    out->have |= DR_TCPU_WAIT;
  } else {
    first = note(rc, first, why, why_len, path, "run-queue wait");
  }
  return first;
}

int dr_thread_cpu_of(pid_t tid, dr_thread_cpu_t *out, char *why,
                     size_t why_len) {
  memset(out, 0, sizeof(*out));
  if (why != NULL && why_len > 0)
    why[0] = '\0';
  int first = 0;
  char path[64], buf[8192];
  snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
  int rc = slurp(path, buf, sizeof(buf));
  if (rc == 0)
    rc = dr__thread_cpu_parse_schedstat(buf, out);
  if (rc == 0) {
    out->have |= DR_TCPU_CPU | DR_TCPU_WAIT;
  } else {
    first = note(rc, first, why, why_len, path, "run-queue wait");
    if (rc == -ENOENT && access("/proc/self/task", F_OK) == 0 &&
        snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid) > 0 &&
        access(path, F_OK) != 0) {
      /* The thread is gone, not the file: nothing else to read. */
      if (why != NULL && why_len > 0)
        snprintf(why, why_len, "no thread %d in this process", (int)tid);
      return -ENOENT;
    }
    uint64_t ticks;
    long hz = sysconf(_SC_CLK_TCK);
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
    rc = slurp(path, buf, sizeof(buf));
    if (rc == 0)
      rc = dr__thread_cpu_parse_stat(buf, &ticks);
    if (rc == 0 && hz > 0) {
      out->cpu_ns = ticks * (1000000000u / (uint64_t)hz);
      out->have |= DR_TCPU_CPU | DR_TCPU_COARSE;
    }
  }
  snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
  rc = slurp(path, buf, sizeof(buf));
  if (rc == 0)
    rc = dr__thread_cpu_parse_status(buf, out);
  if (rc == 0)
    out->have |= DR_TCPU_CS;
  else
    first = note(rc, first, why, why_len, path, "context switches");
  return first;
}

static uint64_t up(uint64_t b, uint64_t a) { return b > a ? b - a : 0; }

void dr_thread_cpu_sub(const dr_thread_cpu_t *b, const dr_thread_cpu_t *a,
                       dr_thread_cpu_t *d) {
  d->cpu_ns = up(b->cpu_ns, a->cpu_ns);
  d->wait_ns = up(b->wait_ns, a->wait_ns);
  d->slices = up(b->slices, a->slices);
  d->vol_cs = up(b->vol_cs, a->vol_cs);
  d->invol_cs = up(b->invol_cs, a->invol_cs);
  d->have = b->have & a->have;
}
