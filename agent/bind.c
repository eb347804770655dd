/* Worker placement: counting GPUs and CPUs, planning each local rank's
 * CPU share and GPU (cpulists: cpulist.c). */
#include "bind.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bind_internal.h"
#include "errors.h"
#include "fs.h"

#define GPU_DIR "/proc/driver/nvidia/gpus"
#define ENTRY_MAX 64 /* sizeof(dr_binding_t.gpu) */
_Static_assert(ENTRY_MAX == sizeof(((dr_binding_t *)0)->gpu),
               "a GPU entry must fit dr_binding_t.gpu");
#define BUSID_MAX 32 /* "0000:3b:00.0" and room to spare */

static char g_root[PATH_MAX - 64];
static int g_have_cpus;
static cpu_set_t g_cpus;

int dr__bind_set_root(const char *root) {
  if (root == NULL) root = "";
  if (strlen(root) >= sizeof(g_root)) return -ENAMETOOLONG;
  strcpy(g_root, root);
  return 0;
}

void dr__bind_set_cpus(const cpu_set_t *set) {
  g_have_cpus = set != NULL;
  if (set != NULL) g_cpus = *set;
}

static void set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_len, const char *fmt, ...) {
  if (err == NULL || err_len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
}

/* ---- reading /proc and /sys ------------------------------------------ */

static int cmp_busid(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

/* The PCI bus ids of the NVIDIA GPUs, sorted ("0000:3b:00.0", ...), which
 * is the order of nvidia-smi and of CUDA_DEVICE_ORDER=PCI_BUS_ID. Count
 * (0 when the driver is not there), -errno; *out is malloc'ed (free it)
 * when the count is positive. */
static int nvidia_busids(char (**out)[BUSID_MAX]) {
  *out = NULL;
  char full[PATH_MAX];
  snprintf(full, sizeof(full), "%s" GPU_DIR, g_root);
  DIR *d = opendir(full);
  if (d == NULL) return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
  char(*ids)[BUSID_MAX] = NULL;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || strlen(e->d_name) >= BUSID_MAX) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      void *p = realloc(ids, (size_t)cap * BUSID_MAX);
      if (p == NULL) {
        free(ids);
        closedir(d);
        return -ENOMEM;
      }
      ids = p;
    }
    strcpy(ids[n++], e->d_name);
  }
  closedir(d);
  if (n == 0) {
    free(ids);
    return 0;
  }
  qsort(ids, (size_t)n, BUSID_MAX, cmp_busid);
  *out = ids;
  return n;
}

/* ---- CUDA_VISIBLE_DEVICES -------------------------------------------- */

/* Walks the entries of a CUDA_VISIBLE_DEVICES value as CUDA reads it:
 * comma-separated, blanks around an entry ignored, and the list ends at
 * the first empty entry or one starting with '-' ("-1" hides every GPU).
 * Calls fn for each; returns the count, or fn's first non-zero return. */
static int cvd_walk(const char *v, int (*fn)(const char *s, size_t len,
                                             void *arg),
                    void *arg) {
  int n = 0;
  while (v != NULL) {
    const char *comma = strchr(v, ',');
    const char *end = comma != NULL ? comma : v + strlen(v);
    const char *s = v;
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    const char *t = end;
    while (t > s && (t[-1] == ' ' || t[-1] == '\t')) t--;
    if (t == s || *s == '-') break;
    if (fn != NULL) {
      int r = fn(s, (size_t)(t - s), arg);
      if (r != 0) return r;
    }
    n++;
    v = comma != NULL ? comma + 1 : NULL;
  }
  return n;
}

typedef struct {
  char (*ent)[ENTRY_MAX];
  int n;
} entries_t;

static int cvd_store(const char *s, size_t len, void *arg) {
  entries_t *e = arg;
  if (len >= ENTRY_MAX) return DR_EBADARG;
  memcpy(e->ent[e->n], s, len);
  e->ent[e->n][len] = '\0';
  e->n++;
  return 0;
}

/* The visible GPUs' entries, as the workers would name them: the
 * CUDA_VISIBLE_DEVICES entries, else "0".."n-1". Count or DR_EBADARG (a
 * reason in err); *out malloc'ed when the count is positive. */
static int visible_entries(char (**out)[ENTRY_MAX], char *err,
                           size_t err_len) {
  *out = NULL;
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  int n;
  char(*busids)[BUSID_MAX] = NULL;
  if (cvd != NULL) {
    n = cvd_walk(cvd, NULL, NULL);
  } else {
    n = nvidia_busids(&busids);
    free(busids);
    if (n < 0) n = 0;
  }
  if (n <= 0) return 0;
  entries_t e = {.ent = malloc((size_t)n * ENTRY_MAX), .n = 0};
  if (e.ent == NULL) {
    set_err(err, err_len, "out of memory listing GPUs");
    return DR_EBADARG;
  }
  if (cvd != NULL) {
    if (cvd_walk(cvd, cvd_store, &e) < 0) {
      set_err(err, err_len,
              "CUDA_VISIBLE_DEVICES has an entry of %d bytes or more",
              ENTRY_MAX);
      free(e.ent);
      return DR_EBADARG;
    }
  } else {
    for (int i = 0; i < n; i++) snprintf(e.ent[i], ENTRY_MAX, "%d", i);
  }
  *out = e.ent;
  return n;
}

int dr_bind_count_gpus(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd != NULL) return cvd_walk(cvd, NULL, NULL);
  char(*busids)[BUSID_MAX] = NULL;
  int n = nvidia_busids(&busids);
  free(busids);
  return n > 0 ? n : 0;
}

/* ---- CPUs ---------------------------------------------------------- */

static void allowed_cpus(cpu_set_t *set) {
  if (g_have_cpus) {
    *set = g_cpus;
    return;
  }
  CPU_ZERO(set);
  if (sched_getaffinity(0, sizeof(*set), set) == 0 && CPU_COUNT(set) > 0)
    return;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  for (long i = 0; i < n && i < CPU_SETSIZE; i++) CPU_SET((int)i, set);
}

int dr_bind_count_cpus(void) {
  cpu_set_t set;
  allowed_cpus(&set);
  return CPU_COUNT(&set);
}

int dr_bind_nproc(const dr_bind_opts_t *o, uint32_t *nproc, char *err,
                  size_t err_len) {
  int n;
  switch (o->nproc_kind) {
  case DR_NPROC_NUMBER:
    if (o->nproc_per_node == 0 || o->nproc_per_node > DR_MAX_LOCAL) {
      set_err(err, err_len, "--nproc-per-node %u: must be 1 to %d",
              o->nproc_per_node, DR_MAX_LOCAL);
      return DR_EBADARG;
    }
    *nproc = o->nproc_per_node;
    return 0;
  case DR_NPROC_AUTO:
    n = dr_bind_count_gpus();
    if (n == 0) n = dr_bind_count_cpus();
    break;
  case DR_NPROC_CPU:
    n = dr_bind_count_cpus();
    break;
  case DR_NPROC_GPU:
    n = dr_bind_count_gpus();
    if (n == 0) {
      const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
      if (cvd != NULL)
        set_err(err, err_len,
                "--nproc-per-node gpu: no GPU visible "
                "(CUDA_VISIBLE_DEVICES='%.64s')",
                cvd);
      else
        set_err(err, err_len,
                "--nproc-per-node gpu: no GPU visible "
                "(no NVIDIA devices under " GPU_DIR ")");
      return DR_EBADARG;
    }
    break;
  default:
    set_err(err, err_len, "--nproc-per-node: unknown kind %d",
            (int)o->nproc_kind);
    return DR_EBADARG;
  }
  if (n < 1) n = 1;
  /* More local workers than the agent supports on a very large host: cap
   * rather than refuse, as the count is only a default. */
  if (n > DR_MAX_LOCAL) n = DR_MAX_LOCAL;
  *nproc = (uint32_t)n;
  return 0;
}

/* ---- planning -------------------------------------------------------- */

/* Gives ranks[0..k) equal contiguous shares of set, the remainder to the
 * first ones; more ranks than CPUs share them round-robin, one CPU each. */
static void split_equal(const cpu_set_t *set, const uint32_t *ranks, int k,
                        dr_binding_t *out) {
  int cpus[CPU_SETSIZE];
  int m = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, set)) cpus[m++] = c;
  if (m == 0 || k == 0) return;
  int base = m / k, rem = m % k;
  for (int j = 0; j < k; j++) {
    dr_binding_t *b = &out[ranks != NULL ? ranks[j] : (uint32_t)j];
    b->have_cpus = 1;
    CPU_ZERO(&b->cpus);
    if (k > m) {
      CPU_SET(cpus[j % m], &b->cpus);
      continue;
    }
    int start = j * base + (j < rem ? j : rem);
    int cnt = base + (j < rem);
    for (int i = 0; i < cnt; i++) CPU_SET(cpus[start + i], &b->cpus);
  }
}

/* The bus id of a visible GPU's entry: an index into the sorted bus ids,
 * or a "GPU-<uuid>" (a prefix is enough, as for CUDA) matched against the
 * driver's information files. 0, or -1 when unknown (MIG instances). */
static int entry_busid(const char *entry, char (*busids)[BUSID_MAX],
                       int nbus, const char **busid) {
  if (entry[0] >= '0' && entry[0] <= '9') {
    char *end;
    long i = strtol(entry, &end, 10);
    if (*end != '\0' || i < 0 || i >= nbus) return -1;
    *busid = busids[i];
    return 0;
  }
  if (strncmp(entry, "GPU-", 4) != 0) return -1;
  for (int i = 0; i < nbus; i++) {
    char path[PATH_MAX], info[4096];
    snprintf(path, sizeof(path), GPU_DIR "/%s/information", busids[i]);
    if (dr_read_text(g_root, path, info, sizeof(info)) < 0) continue;
    const char *u = strstr(info, "GPU UUID:");
    if (u == NULL) continue;
    u += strlen("GPU UUID:");
    while (*u == ' ' || *u == '\t') u++;
    if (strncmp(u, entry, strlen(entry)) == 0) {
      *busid = busids[i];
      return 0;
    }
  }
  return -1;
}

/* CPUs near each rank's GPU, when the driver and sysfs say so for every
 * rank: rank i is taken to use visible GPU i when there are enough GPUs
 * (cuda:LOCAL_RANK), else GPU i * ngpu / nproc (consecutive ranks share a
 * GPU). Ranks whose GPUs have the same near set share it equally; CPUs
 * near no used GPU stay unused. 0, or -1 to fall back to plain shares. */
static int plan_numa(char (*ent)[ENTRY_MAX], int ngpu, uint32_t nproc,
                     const cpu_set_t *allowed, dr_binding_t *out) {
  if (ngpu <= 0) return -1;
  char(*busids)[BUSID_MAX] = NULL;
  int nbus = nvidia_busids(&busids);
  int rc = -1;
  cpu_set_t *near = malloc((size_t)ngpu * sizeof(*near));
  int *group = malloc((size_t)ngpu * sizeof(*group));
  int *used = calloc((size_t)ngpu, sizeof(*used));
  uint32_t *ranks = malloc(nproc * sizeof(*ranks));
  if (nbus <= 0 || near == NULL || group == NULL || used == NULL ||
      ranks == NULL)
    goto out;
  for (uint32_t i = 0; i < nproc; i++)
    used[nproc <= (uint32_t)ngpu ? i : i * (uint32_t)ngpu / nproc] = 1;
  for (int g = 0; g < ngpu; g++) {
    if (!used[g]) continue;
    const char *busid;
    char path[PATH_MAX], list[8192];
    if (entry_busid(ent[g], busids, nbus, &busid) < 0) goto out;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/local_cpulist",
             busid);
    if (dr_read_text(g_root, path, list, sizeof(list)) <= 0) goto out;
    if (dr_cpuset_parse(list, &near[g]) != 0) goto out;
    CPU_AND(&near[g], &near[g], allowed);
    /* GPUs with the same near CPUs form one group, named by the first. */
    group[g] = g;
    for (int h = 0; h < g; h++)
      if (used[h] && group[h] == h && CPU_EQUAL(&near[h], &near[g])) {
        group[g] = h;
        break;
      }
  }
  /* Partly overlapping near sets (odd firmware) are made disjoint in
   * group order; a group left with nothing means the hints are useless. */
  cpu_set_t claimed;
  CPU_ZERO(&claimed);
  for (int g = 0; g < ngpu; g++) {
    if (!used[g] || group[g] != g) continue;
    cpu_set_t mine, overlap;
    CPU_AND(&overlap, &near[g], &claimed);
    CPU_XOR(&mine, &near[g], &overlap);
    if (CPU_COUNT(&mine) == 0) goto out;
    near[g] = mine;
    CPU_OR(&claimed, &claimed, &mine);
  }
  for (int g = 0; g < ngpu; g++) {
    if (!used[g] || group[g] != g) continue;
    int k = 0;
    for (uint32_t i = 0; i < nproc; i++) {
      int gi = (int)(nproc <= (uint32_t)ngpu ? i
                                              : i * (uint32_t)ngpu / nproc);
      if (group[gi] == g) ranks[k++] = i;
    }
    split_equal(&near[g], ranks, k, out);
  }
  rc = 0;
out:
  free(busids);
  free(near);
  free(group);
  free(used);
  free(ranks);
  return rc;
}

static int plan_list(const char *list, uint32_t nproc,
                     const cpu_set_t *allowed, dr_binding_t *out, char *err,
                     size_t err_len) {
  if (list == NULL || *list == '\0') {
    set_err(err, err_len, "--cpu-bind: empty CPU list");
    return DR_EBADARG;
  }
  uint32_t count = 1;
  for (const char *p = list; *p; p++) count += *p == ':';
  if (count != nproc) {
    set_err(err, err_len,
            "--cpu-bind '%.200s': %u CPU list%s for %u local rank%s", list,
            count, count == 1 ? "" : "s", nproc, nproc == 1 ? "" : "s");
    return DR_EBADARG;
  }
  const char *p = list;
  for (uint32_t i = 0; i < nproc; i++) {
    const char *colon = strchr(p, ':');
    size_t len = colon != NULL ? (size_t)(colon - p) : strlen(p);
    char one[4096];
    if (len >= sizeof(one)) {
      set_err(err, err_len, "--cpu-bind: the list of local rank %u is too long",
              i);
      return DR_EBADARG;
    }
    memcpy(one, p, len);
    one[len] = '\0';
    if (dr_cpuset_parse(one, &out[i].cpus) != 0) {
      set_err(err, err_len,
              "--cpu-bind: '%.200s' (local rank %u) is not a CPU list "
              "like 0-3,8",
              one, i);
      return DR_EBADARG;
    }
    cpu_set_t inside, outside;
    CPU_AND(&inside, &out[i].cpus, allowed);
    if (!CPU_EQUAL(&inside, &out[i].cpus)) {
      char a[256], b[256];
      CPU_XOR(&outside, &out[i].cpus, &inside);
      set_err(err, err_len,
              "--cpu-bind: local rank %u's CPUs %s are not in this "
              "process's allowed set %s",
              i, dr_cpuset_format(&outside, a, sizeof(a)),
              dr_cpuset_format(allowed, b, sizeof(b)));
      return DR_EBADARG;
    }
    out[i].have_cpus = 1;
    p += len + 1;
  }
  return 0;
}

int dr_bind_plan(const dr_bind_opts_t *o, uint32_t nproc, dr_binding_t *out,
                 char *err, size_t err_len) {
  if (nproc == 0) return 0;
  memset(out, 0, nproc * sizeof(*out));
  char(*ent)[ENTRY_MAX] = NULL;
  int ngpu = 0;
  if (o->gpu_bind == DR_GPU_BIND_ISOLATE || o->cpu_bind == DR_CPU_BIND_AUTO) {
    ngpu = visible_entries(&ent, err, err_len);
    if (ngpu < 0 && o->gpu_bind == DR_GPU_BIND_ISOLATE) return ngpu;
    if (ngpu < 0) ngpu = 0; /* auto CPU shares then ignore the GPUs */
  }
  int rc = 0;
  if (o->gpu_bind == DR_GPU_BIND_ISOLATE) {
    if ((uint32_t)ngpu < nproc) {
      const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
      char why[128];
      if (cvd != NULL)
        snprintf(why, sizeof(why), "CUDA_VISIBLE_DEVICES='%.64s'", cvd);
      else
        snprintf(why, sizeof(why),
                 "CUDA_VISIBLE_DEVICES unset; GPUs listed under " GPU_DIR);
      set_err(err, err_len,
              "--gpu-bind isolate: %u local rank%s but %d GPU%s visible (%s)",
              nproc, nproc == 1 ? "" : "s", ngpu, ngpu == 1 ? "" : "s", why);
      rc = DR_EBADARG;
      goto out;
    }
    for (uint32_t i = 0; i < nproc; i++) {
      out[i].have_gpu = 1;
      strcpy(out[i].gpu, ent[i]); /* shorter than ENTRY_MAX */
    }
  }
  cpu_set_t allowed;
  allowed_cpus(&allowed);
  switch (o->cpu_bind) {
  case DR_CPU_BIND_NONE:
    break;
  case DR_CPU_BIND_AUTO:
    if (plan_numa(ent, ngpu, nproc, &allowed, out) != 0) {
      for (uint32_t i = 0; i < nproc; i++) out[i].have_cpus = 0;
      split_equal(&allowed, NULL, (int)nproc, out);
    }
    break;
  case DR_CPU_BIND_LIST:
    rc = plan_list(o->cpu_list, nproc, &allowed, out, err, err_len);
    break;
  default:
    set_err(err, err_len, "--cpu-bind: unknown mode %d", (int)o->cpu_bind);
    rc = DR_EBADARG;
  }
out:
  free(ent);
  if (rc != 0) memset(out, 0, nproc * sizeof(*out));
  return rc;
}

char *dr_bind_describe(const dr_binding_t *b, char *out, size_t n) {
  if (out == NULL || n == 0) return out;
  char cpus[256];
  if (b->have_cpus)
    dr_cpuset_format(&b->cpus, cpus, sizeof(cpus));
  else
    strcpy(cpus, "all");
  snprintf(out, n, "cpus %s, gpu %s", cpus, b->have_gpu ? b->gpu : "all");
  return out;
}

int dr_bind_apply_child(const dr_binding_t *b) {
  if (!b->have_cpus) return 0;
  if (sched_setaffinity(0, sizeof(b->cpus), &b->cpus) != 0) return -errno;
  return 0;
}
