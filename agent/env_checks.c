/* The checks of the node's environment (node_env.h): settings that would
 * become a hang or a crash once the workers run, said now. A setting that
 * cannot work is fatal (the agent exits 2 before any worker starts); one
 * that is only slow, or may fail, is a warning. */
#include "node_env.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

/* Each local rank is assumed to need this much of /dev/shm: PyTorch's
 * DataLoader workers hand every batch over through it, and NCCL's
 * shared-memory transport maps a few MiB per pair of local ranks. Docker's
 * default of 64 MiB is the classic "bus error" in a DataLoader. */
#define SHM_PER_RANK (256ull << 20)

static void add(dr_node_env_t *out, dr_env_level_t level, const char *fmt,
                ...) __attribute__((format(printf, 3, 4)));
static void add(dr_node_env_t *out, dr_env_level_t level, const char *fmt,
                ...) {
  if (out->n_findings == DR_ENV_FINDINGS_MAX)
    return;
  dr_env_finding_t *f = &out->findings[out->n_findings++];
  f->level = level;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->text, sizeof(f->text), fmt, ap);
  va_end(ap);
  if (level == DR_ENV_FATAL)
    out->fatal = 1;
}

int dr__ifname_match(const char *list, const char *name) {
  int exclude = list[0] == '^';
  list += exclude;
  int exact = list[0] == '=';
  list += exact;
  int hit = 0;
  while (*list != '\0' && !hit) {
    size_t n = strcspn(list, ",");
    if (n > 0)
      hit = exact ? strlen(name) == n && strncmp(name, list, n) == 0
                  : strncmp(name, list, n) == 0;
    list += n + (list[n] == ',');
  }
  return exclude ? !hit : hit;
}

/* VAR names interfaces (NCCL's syntax, or GLOO's exact names) of which
 * none is up here: the first collective would wait forever. */
static void check_ifname(const dr_node_env_in_t *in, const char *var,
                         int gloo, dr_node_env_t *out) {
  const char *v = dr__env_get(in->envp, var);
  if (v == NULL || v[0] == '\0')
    return;
  char up[256];
  size_t o = 0;
  up[0] = '\0';
  for (size_t i = 0; i < in->n_ifs; i++) {
    if (!in->ifs[i].up)
      continue;
    int hit;
    if (gloo) {
      /* GLOO: a comma-separated list of exact names. */
      hit = 0;
      for (const char *s = v; *s != '\0';) {
        size_t n = strcspn(s, ",");
        hit |= n == strlen(in->ifs[i].name) &&
               strncmp(s, in->ifs[i].name, n) == 0;
        s += n + (s[n] == ',');
      }
    } else {
      hit = dr__ifname_match(v, in->ifs[i].name);
    }
    if (hit)
      return;
    if (o < sizeof(up))
      o += (size_t)snprintf(up + o, sizeof(up) - o, "%s%s", o ? ", " : "",
                            in->ifs[i].name);
  }
  add(out, DR_ENV_FATAL,
      "%s=%s names no interface that is up on this node (up: %s); the "
      "workers' first collective would wait forever: set it to one of "
      "those, or unset it", var, v, up[0] ? up : "none");
}

/* Two local ranks on one GPU: NCCL refuses it ("Duplicate GPU detected"). */
static void check_gpus(const dr_node_env_in_t *in, int n_gpus,
                       dr_node_env_t *out) {
  for (uint32_t a = 0; a < in->nproc; a++) {
    if (!in->bind[a].have_gpu)
      continue;
    for (uint32_t b = a + 1; b < in->nproc; b++)
      if (in->bind[b].have_gpu &&
          strcmp(in->bind[a].gpu, in->bind[b].gpu) == 0) {
        add(out, DR_ENV_FATAL,
            "local ranks %u and %u are both given GPU %s (CUDA_VISIBLE_"
            "DEVICES lists it twice); NCCL refuses two ranks on one GPU: "
            "list each GPU once, or run fewer ranks per node", a, b,
            in->bind[a].gpu);
        return;
      }
  }
  if (n_gpus > 0 && in->nproc > (uint32_t)n_gpus && !in->bind[0].have_gpu)
    add(out, DR_ENV_WARN,
        "%u local ranks and %d GPUs: a program that uses GPU LOCAL_RANK "
        "fails on local ranks %d and above; run --nproc-per-node %d (or "
        "gpu), or mean to share GPUs", in->nproc, n_gpus, n_gpus, n_gpus);
}

/* OMP_NUM_THREADS x ranks above the CPUs: every rank's threads compete. */
static void check_omp(const dr_node_env_in_t *in, dr_node_env_t *out) {
  const char *v = dr__env_get(in->envp, "OMP_NUM_THREADS");
  if (v == NULL) /* ddprun sets 1 when more than one rank runs */
    return;
  char *end;
  long omp = strtol(v, &end, 10);
  if (end == v || omp <= 0)
    return;
  if (in->nproc > 0 && in->bind[0].have_cpus) {
    int share = CPU_COUNT(&in->bind[0].cpus);
    if (omp > share)
      add(out, DR_ENV_WARN,
          "OMP_NUM_THREADS=%ld but local rank 0 is bound to %d CPUs: its "
          "threads take turns; set OMP_NUM_THREADS=%d", omp, share, share);
    return;
  }
  long total = omp * (long)in->nproc, cpus = in->n_cpus;
  if (cpus > 0 && total > cpus)
    add(out, DR_ENV_WARN,
        "OMP_NUM_THREADS=%ld x %u local ranks = %ld threads on %ld CPUs: "
        "oversubscribed, every step slower; set OMP_NUM_THREADS=%ld",
        omp, in->nproc, total, cpus, cpus / in->nproc > 0
                                         ? cpus / (long)in->nproc : 1);
}

static void check_shm(const dr_node_env_in_t *in, dr_node_env_t *out) {
  char p[512];
  snprintf(p, sizeof(p), "%s/dev/shm", in->root);
  struct statvfs s;
  if (statvfs(p, &s) != 0) {
    add(out, DR_ENV_WARN,
        "no /dev/shm here: PyTorch's DataLoader workers and NCCL's shared-"
        "memory transport need it; mount a tmpfs there");
    return;
  }
  unsigned long long size = (unsigned long long)s.f_blocks * s.f_frsize;
  unsigned long long avail = (unsigned long long)s.f_bavail * s.f_frsize;
  unsigned long long need = SHM_PER_RANK * in->nproc;
  if (size < need || avail < need)
    add(out, DR_ENV_WARN,
        "/dev/shm holds %llu MiB (%llu MiB free), under the %llu MiB %u local "
        "ranks may need: a DataLoader worker dies with \"bus error\" when it "
        "fills; give it more (docker run --shm-size=%lluG; Kubernetes: an "
        "emptyDir of medium Memory on /dev/shm)", size >> 20, avail >> 20,
        need >> 20, in->nproc, (need + (1ull << 30) - 1) >> 30);
}

void dr__node_env_check(const dr_node_env_in_t *in, int n_gpus,
                        dr_node_env_t *out) {
  check_ifname(in, "NCCL_SOCKET_IFNAME", 0, out);
  check_ifname(in, "GLOO_SOCKET_IFNAME", 1, out);
  check_gpus(in, n_gpus, out);
  check_omp(in, out);
  check_shm(in, out);
}
