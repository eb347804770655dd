/* The node's environment summary (node_env.h): GPUs and which each local
 * rank gets, NUMA, the NCCL library, InfiniBand/RoCE, the variables. */
#include "node_env.h"

#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

#define GPUS_MAX 64
#define NUMA_MAX 64

typedef struct {
  char busid[32];
  char model[96];
  int numa; /* -1: unknown */
} gpu_t;

static int cmp_gpu(const void *a, const void *b) {
  return strcmp(((const gpu_t *)a)->busid, ((const gpu_t *)b)->busid);
}

/* The NVIDIA GPUs in PCI bus order (the order of nvidia-smi and of the
 * bindings' numbers). */
static int read_gpus(const char *root, gpu_t *g, int max) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/proc/driver/nvidia/gpus", root);
  DIR *d = opendir(dir);
  if (d == NULL)
    return 0;
  int n = 0;
  for (struct dirent *e; n < max && (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || len >= sizeof(g[n].busid))
      continue;
    memcpy(g[n].busid, e->d_name, len + 1);
    snprintf(g[n].model, sizeof(g[n].model), "unknown model");
    g[n].numa = -1;
    char p[PATH_MAX], info[4096];
    snprintf(p, sizeof(p), "/proc/driver/nvidia/gpus/%s/information",
             e->d_name);
    if (dr_read_text(root, p, info, sizeof(info)) > 0) {
      char *m = strstr(info, "Model:");
      if (m != NULL) {
        m += 6 + strspn(m + 6, " \t");
        snprintf(g[n].model, sizeof(g[n].model), "%.*s",
                 (int)strcspn(m, "\n"), m);
      }
    }
    char numa[32];
    snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/numa_node", e->d_name);
    if (dr_read_text(root, p, numa, sizeof(numa)) > 0)
      g[n].numa = atoi(numa);
    n++;
  }
  closedir(d);
  qsort(g, (size_t)n, sizeof(*g), cmp_gpu);
  return n;
}

/* "550.54.15" from /proc/driver/nvidia/version, or "". */
static void read_driver(const char *root, char *out, size_t n) {
  char v[1024];
  out[0] = '\0';
  if (dr_read_text(root, "/proc/driver/nvidia/version", v, sizeof(v)) <= 0)
    return;
  char *k = strstr(v, "Kernel Module");
  if (k == NULL)
    return;
  k += 13 + strspn(k + 13, " \t");
  snprintf(out, n, "%.*s", (int)strcspn(k, " \t\n"), k);
}

/* The NUMA nodes' CPUs; the count (0: no NUMA information). */
static int read_numa(const char *root, cpu_set_t *nodes, int max) {
  int n = 0;
  for (int i = 0; i < max; i++) {
    char p[96], list[4096];
    snprintf(p, sizeof(p), "/sys/devices/system/node/node%d/cpulist", i);
    if (dr_read_text(root, p, list, sizeof(list)) < 0)
      break;
    if (dr_cpuset_parse(list, &nodes[i]) != 0)
      CPU_ZERO(&nodes[i]);
    n = i + 1;
  }
  return n;
}

/* "NUMA 0" / "NUMA 0,1" for a CPU set, or "" without NUMA information. */
static void numa_of(const cpu_set_t *cpus, const cpu_set_t *nodes, int n,
                    char *out, size_t len) {
  size_t o = 0;
  out[0] = '\0';
  for (int i = 0; i < n && o < len; i++) {
    cpu_set_t x;
    CPU_AND(&x, cpus, &nodes[i]);
    if (CPU_COUNT(&x) > 0)
      o += (size_t)snprintf(out + o, len - o, "%s%d", o ? "," : "NUMA ", i);
  }
}

/* The GPU a binding names by number ("3"): its index in PCI order, or
 * -1 (a UUID, or no such GPU). */
static int gpu_index(const char *dev, int n) {
  char *end;
  long i = strtol(dev, &end, 10);
  return end != dev && *end == '\0' && i >= 0 && i < n ? (int)i : -1;
}

static void put_ib(FILE *f, const dr_node_env_in_t *in) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/sys/class/infiniband", in->root);
  DIR *d = opendir(dir);
  int n = 0, active = 0;
  fprintf(f, "env: InfiniBand/RoCE:");
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.')
      continue;
    for (int port = 1; port <= 4; port++) {
      char p[PATH_MAX], state[64], rate[64], layer[64];
      snprintf(p, sizeof(p), "/sys/class/infiniband/%s/ports/%d/state",
               e->d_name, port);
      if (dr_read_text(in->root, p, state, sizeof(state)) < 0)
        break;
      snprintf(p, sizeof(p), "/sys/class/infiniband/%s/ports/%d/rate",
               e->d_name, port);
      if (dr_read_text(in->root, p, rate, sizeof(rate)) < 0)
        snprintf(rate, sizeof(rate), "rate unknown");
      snprintf(p, sizeof(p), "/sys/class/infiniband/%s/ports/%d/link_layer",
               e->d_name, port);
      if (dr_read_text(in->root, p, layer, sizeof(layer)) < 0)
        snprintf(layer, sizeof(layer), "InfiniBand");
      /* state reads "4: ACTIVE" */
      const char *st = strchr(state, ':') != NULL ? strchr(state, ':') + 2
                                                  : state;
      active += strcmp(st, "ACTIVE") == 0;
      fprintf(f, "%s %s port %d %s, %s, %s", n ? ";" : "", e->d_name, port,
              st, rate, strcmp(layer, "Ethernet") == 0 ? "RoCE" : layer);
      n++;
    }
  }
  if (d != NULL)
    closedir(d);
  if (n == 0) {
    fprintf(f, " none; NCCL uses TCP sockets between nodes\n");
    return;
  }
  const char *dis = dr__env_get(in->envp, "NCCL_IB_DISABLE");
  const char *net = dr__env_get(in->envp, "NCCL_NET");
  if (dis != NULL && strcmp(dis, "1") == 0)
    fprintf(f, "; NCCL will not use them (NCCL_IB_DISABLE=1)\n");
  else if (net != NULL && strcasecmp(net, "IB") != 0)
    fprintf(f, "; NCCL will not use them (NCCL_NET=%s)\n", net);
  else if (active == 0)
    fprintf(f, "; none is ACTIVE: NCCL will use TCP sockets\n");
  else
    fprintf(f, "; NCCL will use them%s%s%s\n",
            dr__env_get(in->envp, "NCCL_IB_HCA") != NULL ? " (NCCL_IB_HCA=" : "",
            dr__env_get(in->envp, "NCCL_IB_HCA") != NULL
                ? dr__env_get(in->envp, "NCCL_IB_HCA") : "",
            dr__env_get(in->envp, "NCCL_IB_HCA") != NULL ? ")" : "");
}

static int is_listed_var(const char *kv) {
  static const char *const pre[] = {"NCCL_", "TORCH_", "PYTORCH_",
                                    "GLOO_", "CUDA_VISIBLE_DEVICES=",
                                    "CUDA_DEVICE_ORDER=", "OMP_NUM_THREADS="};
  for (size_t i = 0; i < sizeof(pre) / sizeof(pre[0]); i++)
    if (strncmp(kv, pre[i], strlen(pre[i])) == 0)
      return 1;
  return 0;
}

static void put_vars(FILE *f, const dr_node_env_in_t *in) {
  int n = 0;
  fprintf(f, "env: NCCL and torch variables:");
  for (size_t i = 0; in->envp != NULL && in->envp[i] != NULL; i++)
    if (is_listed_var(in->envp[i]))
      fprintf(f, " %s", in->envp[i]), n++;
  fprintf(f, "%s\n", n ? "" : " none set");
}

static void put_gpus(FILE *f, const dr_node_env_in_t *in, const gpu_t *g,
                     int n_gpus, const cpu_set_t *numa, int n_numa) {
  char driver[64];
  read_driver(in->root, driver, sizeof(driver));
  if (n_gpus == 0) {
    fprintf(f, "env: GPUs: none (no /proc/driver/nvidia/gpus)\n");
  } else {
    fprintf(f, "env: GPUs: %d, driver %s:", n_gpus, driver[0] ? driver : "unknown");
    for (int i = 0; i < n_gpus; i++) {
      uint64_t mem = in->gpu_mem != NULL && (size_t)i < in->n_gpu_mem
                         ? in->gpu_mem[i] : 0;
      if (mem > 0)
        fprintf(f, "%s %d %s (%s, %.1f GiB)", i ? "," : "", i, g[i].model,
                g[i].busid, (double)mem / (double)(1ull << 30));
      else
        fprintf(f, "%s %d %s (%s)", i ? "," : "", i, g[i].model, g[i].busid);
    }
    fprintf(f, "\n");
  }
  cpu_set_t all;
  CPU_ZERO(&all);
  if (sched_getaffinity(0, sizeof(all), &all) != 0)
    CPU_ZERO(&all);
  for (uint32_t r = 0; r < in->nproc; r++) {
    const dr_binding_t *b = &in->bind[r];
    char cpus[256], nn[96];
    if (b->have_cpus)
      dr_cpuset_format(&b->cpus, cpus, sizeof(cpus));
    else
      snprintf(cpus, sizeof(cpus), "all");
    numa_of(b->have_cpus ? &b->cpus : &all, numa, n_numa, nn, sizeof(nn));
    fprintf(f, "binding: local rank %u: cpus %s%s%s%s, ", r, cpus, nn[0] ? " (" : "",
            nn, nn[0] ? ")" : "");
    if (!b->have_gpu) {
      fprintf(f, "gpu all (the program picks; usually GPU LOCAL_RANK)\n");
      continue;
    }
    int k = gpu_index(b->gpu, n_gpus);
    if (k < 0)
      fprintf(f, "gpu %s\n", b->gpu);
    else if (g[k].numa >= 0)
      fprintf(f, "gpu %s (%s, %s, NUMA %d)\n", b->gpu, g[k].model,
              g[k].busid, g[k].numa);
    else
      fprintf(f, "gpu %s (%s, %s)\n", b->gpu, g[k].model, g[k].busid);
  }
}

int dr_node_env_read(const dr_node_env_in_t *in0, dr_node_env_t *out) {
  memset(out, 0, sizeof(*out));
  dr_node_env_in_t in = *in0;
  if (in.root == NULL)
    in.root = "";
  gpu_t *g = calloc(GPUS_MAX, sizeof(*g));
  cpu_set_t *numa = calloc(NUMA_MAX, sizeof(*numa));
  size_t len = 0;
  FILE *f = g != NULL && numa != NULL ? open_memstream(&out->summary, &len)
                                      : NULL;
  if (f == NULL) {
    free(g);
    free(numa);
    return -ENOMEM;
  }
  int n_gpus = read_gpus(in.root, g, GPUS_MAX);
  int n_numa = read_numa(in.root, numa, NUMA_MAX);
  put_gpus(f, &in, g, n_gpus, numa, n_numa);
  char path[PATH_MAX], version[64];
  const char *where = NULL;
  if (dr__nccl_find(in.root, in.prog_argv, in.envp, path, sizeof(path),
                    version, sizeof(version), &where) == 0)
    fprintf(f, "env: NCCL: %s, version %s (from %s)\n", path,
            version[0] ? version : "unknown", where);
  else
    fprintf(f, "env: NCCL: no libnccl.so.2 (looked in %s); a CPU program needs "
            "none\n", path);
  put_ib(f, &in);
  put_vars(f, &in);
  int bad = fclose(f) != 0;
  free(g);
  free(numa);
  if (bad || out->summary == NULL) {
    free(out->summary);
    out->summary = NULL;
    return -ENOMEM;
  }
  dr__node_env_check(&in, n_gpus, out);
  return 0;
}

void dr_node_env_free(dr_node_env_t *e) {
  free(e->summary);
  e->summary = NULL;
}

size_t dr_node_env_ifs(dr_ifc_t *out, size_t max) {
  struct ifaddrs *ifa = NULL;
  size_t n = 0;
  if (getifaddrs(&ifa) != 0)
    return 0;
  for (struct ifaddrs *i = ifa; i != NULL; i = i->ifa_next) {
    int up = (i->ifa_flags & IFF_UP) != 0 && i->ifa_addr != NULL &&
             (i->ifa_addr->sa_family == AF_INET ||
              i->ifa_addr->sa_family == AF_INET6);
    size_t k = 0;
    while (k < n && strcmp(out[k].name, i->ifa_name) != 0)
      k++;
    if (k == n) {
      if (n == max)
        continue;
      snprintf(out[n].name, sizeof(out[n].name), "%s", i->ifa_name);
      out[n++].up = 0;
    }
    out[k].up |= up;
  }
  freeifaddrs(ifa);
  return n;
}
