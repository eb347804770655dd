#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dr_trace {
  FILE *f;
  uint32_t rank;
  int first;
};

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

int dr_trace_open(const char *path, uint32_t rank, uint32_t world,
                  dr_trace_t **out, char *used, size_t used_len) {
  char p[4096];
  path_for(path, rank, world, p, sizeof(p));
  if (used != NULL)
    snprintf(used, used_len, "%s", p);
  dr_trace_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return -ENOMEM;
  t->f = fopen(p, "w");
  if (t->f == NULL) {
    int e = -errno;
    free(t);
    return e;
  }
  t->rank = rank;
  t->first = 1;
  fprintf(t->f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  static const char *names[2] = {"compute", "communication"};
  for (int tid = 0; tid < 2; tid++) {
    fprintf(t->f,
            "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%d,"
            "\"args\":{\"name\":\"%s\"}}",
            t->first ? "" : ",\n", rank, tid, names[tid]);
    t->first = 0;
  }
  fprintf(t->f, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,"
                "\"args\":{\"name\":\"rank %u\"}}",
          rank, rank);
  *out = t;
  return 0;
}

void dr_trace_span(dr_trace_t *t, int tid, const char *name, uint64_t t0_us,
                   uint64_t t1_us) {
  if (t == NULL)
    return;
  char esc[128];
  size_t o = 0;
  for (const char *s = name; *s != '\0' && o + 2 < sizeof(esc); s++) {
    if (*s == '"' || *s == '\\')
      esc[o++] = '\\';
    esc[o++] = (*s >= 0x20) ? *s : '?';
  }
  esc[o] = '\0';
  fprintf(t->f,
          ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%u,\"tid\":%d,"
          "\"ts\":%llu,\"dur\":%llu}",
          esc, t->rank, tid, (unsigned long long)t0_us,
          (unsigned long long)(t1_us >= t0_us ? t1_us - t0_us : 0));
}

int dr_trace_close(dr_trace_t **tp) {
  dr_trace_t *t = *tp;
  *tp = NULL;
  if (t == NULL)
    return 0;
  fprintf(t->f, "\n]}\n");
  int rc = ferror(t->f) ? -EIO : 0;
  if (fclose(t->f) != 0 && rc == 0)
    rc = -errno;
  free(t);
  return rc;
}
