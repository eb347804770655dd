/* gpu_train.h in a train built with CUDA: the GPU code lives in
 * libddprun_gpu.so (gpu_module.h), loaded on first use so that train
 * itself needs neither the CUDA libraries nor NCCL. The module is looked
 * for beside train (the build tree, a bundle's libexec/) and then in
 * DR_GPU_MODULE_RELDIR relative to train's directory (an install: a
 * wheel's site-packages/ddprun_gpu, a prefix's lib/ddprun). Its own
 * RUNPATH finds PyPI's nvidia-* packages in the same site-packages; then
 * the system's library path applies; when that fails too, cuBLAS and NCCL
 * are tried from $CUDA_HOME and /usr/local/cuda (lib64, lib), which the
 * system's path need not list.
 *
 * Without the module (or one of its libraries), train behaves as a build
 * without GPU code (gpu_train_none.c): --device auto is the CPU, --device
 * cuda is a configuration error that names what could not be loaded.
 * Loading happens once, from the main thread, before any other thread
 * exists (dr_gpu_train_resolve or --version). */
#include "gpu_train.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddprun_version.h"
#include "gpu_module.h"

#ifndef DR_GPU_MODULE_RELDIR
#error "DR_GPU_MODULE_RELDIR: the module's directory relative to train's"
#endif
#ifndef DR_GPU_NEEDED
#error "DR_GPU_NEEDED: the module's CUDA libraries, e.g. \"libnccl.so.2\""
#endif

static struct {
  int tried;
  const dr_gpu_module_t *mod; /* NULL: not loaded */
  char path[PATH_MAX + 256];  /* the module's file, "" when none was found */
  char why[2 * PATH_MAX + 512]; /* why it is not loaded */
} L;

/* The directory of this executable, without the trailing slash. */
static int exe_dir(char *dir, size_t len) {
  ssize_t n = readlink("/proc/self/exe", dir, len - 1);
  if (n <= 0)
    return -1;
  dir[n] = '\0';
  char *slash = strrchr(dir, '/');
  if (slash == NULL)
    return -1;
  *slash = '\0';
  return 0;
}

static int find_module(void) {
  char dir[PATH_MAX];
  if (exe_dir(dir, sizeof(dir)) != 0) {
    snprintf(L.why, sizeof(L.why), "cannot read /proc/self/exe");
    return -1;
  }
  char beside[PATH_MAX + 64], installed[PATH_MAX + 128];
  snprintf(beside, sizeof(beside), "%s/%s", dir, DR_GPU_MODULE_FILE);
  snprintf(installed, sizeof(installed), "%s/%s/%s", dir,
           DR_GPU_MODULE_RELDIR, DR_GPU_MODULE_FILE);
  const char *hit = access(beside, R_OK) == 0      ? beside
                    : access(installed, R_OK) == 0 ? installed
                                                   : NULL;
  if (hit == NULL) {
    snprintf(L.why, sizeof(L.why), "no %s beside train or in %s/%s",
             DR_GPU_MODULE_FILE, dir, DR_GPU_MODULE_RELDIR);
    return -1;
  }
  if (realpath(hit, L.path) == NULL)
    snprintf(L.path, sizeof(L.path), "%s", hit);
  return 0;
}

/* cuBLAS and NCCL from the CUDA installation, for a system whose library
 * path does not list it: once loaded by full path, the module's need of
 * each (by soname) is met. Libraries that do not help are unloaded. */
static void *try_cuda_dirs(void) {
  const char *home = getenv("CUDA_HOME");
  const char *bases[] = {home != NULL && home[0] != '\0' ? home : NULL,
                         "/usr/local/cuda"};
  for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
    for (int sub = 0; bases[b] != NULL && sub < 2; sub++) {
      void *pre[8];
      size_t n_pre = 0;
      char names[] = DR_GPU_NEEDED;
      for (char *save = NULL, *so = strtok_r(names, ":", &save);
           so != NULL && n_pre < 8; so = strtok_r(NULL, ":", &save)) {
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s/%s", bases[b], sub ? "lib" : "lib64",
                 so);
        void *h = access(p, R_OK) == 0 ? dlopen(p, RTLD_NOW | RTLD_LOCAL)
                                       : NULL;
        if (h != NULL)
          pre[n_pre++] = h;
      }
      void *m = n_pre > 0 ? dlopen(L.path, RTLD_NOW | RTLD_LOCAL) : NULL;
      if (m != NULL)
        return m; /* the preloaded libraries stay for the module */
      while (n_pre > 0)
        dlclose(pre[--n_pre]);
    }
  }
  return NULL;
}

static const dr_gpu_module_t *load(void) {
  if (L.tried)
    return L.mod;
  L.tried = 1;
  if (find_module() != 0)
    return NULL;
  void *h = dlopen(L.path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(L.why, sizeof(L.why), "%s", e != NULL ? e : "dlopen failed");
    if ((h = try_cuda_dirs()) == NULL)
      return NULL;
  }
  const dr_gpu_module_t *m = dlsym(h, DR_GPU_MODULE_SYMBOL);
  if (m == NULL) {
    snprintf(L.why, sizeof(L.why), "%s: no symbol %s", L.path,
             DR_GPU_MODULE_SYMBOL);
  } else if (m->abi != DR_GPU_MODULE_ABI ||
             m->run_bytes != sizeof(dr_run_t) ||
             m->rcfg_bytes != sizeof(dr_reducer_config_t) ||
             strcmp(m->version, DDPRUN_VERSION_LINE) != 0) {
    snprintf(L.why, sizeof(L.why),
             "%s was built for another train (ABI %u, %s; this train: ABI "
             "%d, %s)", L.path, m->abi, m->version, DR_GPU_MODULE_ABI,
             DDPRUN_VERSION_LINE);
  } else {
    L.mod = m;
    return m;
  }
  dlclose(h);
  return NULL;
}

void dr_gpu_train_describe(char *buf, size_t len) {
  if (load() != NULL) {
    char libs[2 * PATH_MAX + 256];
    L.mod->describe(libs, sizeof(libs));
    snprintf(buf, len, "GPU code: %s (%s)", L.path, libs);
  } else if (L.path[0] != '\0') {
    snprintf(buf, len, "GPU code: %s, not loadable: %s", L.path, L.why);
  } else {
    snprintf(buf, len, "GPU code: not found (%s)", L.why);
  }
}

/* A GPU this process could use, as the driver lists them. */
static int gpu_visible(void) {
  DIR *d = opendir("/proc/driver/nvidia/gpus");
  if (d == NULL)
    return 0;
  int any = 0;
  for (struct dirent *e; !any && (e = readdir(d)) != NULL;)
    any = e->d_name[0] != '.';
  closedir(d);
  return any;
}

int dr_gpu_train_resolve(dr_run_t *r) {
  const dr_train_config_t *c = &r->c;
  r->use_gpu = 0;
  if (strcmp(c->device, "cpu") != 0 && load() != NULL)
    return L.mod->resolve(r);
  if (strcmp(c->device, "cuda") == 0) {
    fprintf(stderr, "train: --device cuda: the GPU code could not be loaded "
            "(%s); install NCCL and cuBLAS (or `pip install ddprun[cuda]`), "
            "set CUDA_HOME, or use --device cpu\n", L.why);
    return DR_TRAIN_ECONFIG;
  }
  if (strcmp(c->device, "auto") == 0 && gpu_visible())
    fprintf(stderr, "train: --device auto: a GPU is visible but the GPU code "
            "could not be loaded (%s); running on the CPU\n", L.why);
  /* bf16 and fp16 alike: nothing on the CPU would honour either. */
  if (strcmp(c->precision, "fp32") != 0) {
    fprintf(stderr, "train: --precision %s needs --device cuda and a usable "
            "GPU (the CPU model computes in fp32 only); use --precision fp32 "
            "on the CPU\n", c->precision);
    return DR_TRAIN_ECONFIG;
  }
  return 0;
}

/* Only reached with r->use_gpu, which only the module sets. */
static int unloaded(const char *fn) {
  fprintf(stderr, "train: %s called without the GPU code loaded\n", fn);
  return DR_TRAIN_ECONFIG;
}

int dr_gpu_train_open(dr_run_t *r, dr_reducer_config_t *rc) {
  return L.mod != NULL ? L.mod->open(r, rc) : unloaded(__func__);
}

void dr_gpu_train_close(dr_run_t *r) {
  if (L.mod != NULL)
    L.mod->close(r);
}

uint64_t dr_gpu_train_peak_bytes(dr_run_t *r) {
  return L.mod != NULL ? L.mod->peak_bytes(r) : 0;
}

void dr_gpu_train_summary(dr_run_t *r) {
  if (L.mod == NULL) {
    unloaded(__func__);
    return;
  }
  char d[8 * PATH_MAX];
  dr_gpu_train_describe(d, sizeof(d));
  fprintf(stderr, "train: rank %u: %s\n", r->rank, d);
  L.mod->summary(r);
}

int dr_gpu_train_to_host(dr_run_t *r, int optimizer_too) {
  return L.mod != NULL ? L.mod->to_host(r, optimizer_too) : unloaded(__func__);
}

int dr_gpu_train_from_host(dr_run_t *r) {
  return L.mod != NULL ? L.mod->from_host(r) : unloaded(__func__);
}
