/* Device choice and description. See gpu_device.h. */
#include "gpu_device.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_check.h"
#include "nccl_backend.h"

extern char **environ;

int dr_gpu_count(char *why, size_t why_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(why, why_len, "%s", cudaGetErrorString(e));
    cudaGetLastError(); /* not sticky: clear it */
    return 0;
  }
  if (n == 0)
    snprintf(why, why_len, "no GPU visible");
  return n;
}

int dr_gpu_pick(uint32_t local_rank, uint32_t local_world, int *dev,
                char *err, size_t err_len) {
  char why[256] = "";
  int n = dr_gpu_count(why, sizeof(why));
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (n <= 0) {
    snprintf(err, err_len, "--device cuda: no usable GPU (%s; "
             "CUDA_VISIBLE_DEVICES=%s); use --device cpu", why,
             cvd != NULL ? cvd : "(unset)");
    return DR_GPU_ENODEV;
  }
  /* One GPU per rank, as NCCL needs: a lone visible GPU is this rank's own
   * when CUDA_VISIBLE_DEVICES chose it (--gpu-bind isolate), or when this
   * rank is alone on the node. */
  if (n == 1 && (local_world <= 1 || (cvd != NULL && cvd[0] != '\0'))) {
    *dev = 0;
    return 0;
  }
  if (local_world > (uint32_t)n || local_rank >= (uint32_t)n) {
    snprintf(err, err_len, "--device cuda: %u local ranks but %d GPU%s "
             "visible (CUDA_VISIBLE_DEVICES=%s), and NCCL needs one GPU per "
             "rank; run at most %d workers per node (--nproc-per-node gpu), "
             "or use --device cpu", local_world, n, n == 1 ? "" : "s",
             cvd != NULL ? cvd : "(unset)", n);
    return DR_GPU_ENODEV;
  }
  *dev = (int)local_rank;
  return 0;
}

static void version(int v, char *buf, size_t len) {
  snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* "NCCL_DEBUG=INFO NCCL_IB_HCA=mlx5" or "none". */
static void nccl_vars(char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (char **e = environ; e != NULL && *e != NULL; e++) {
    if (strncmp(*e, "NCCL_", 5) != 0 || o >= len)
      continue;
    o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? " " : "", *e);
  }
  if (buf[0] == '\0')
    snprintf(buf, len, "none");
}

/* "mlx5_0 mlx5_1" or "none". */
static void ib_devices(char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  DIR *d = opendir("/sys/class/infiniband");
  if (d != NULL) {
    struct dirent *de;
    while ((de = readdir(d)) != NULL && o < len) {
      if (de->d_name[0] == '.')
        continue;
      o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? " " : "",
                            de->d_name);
    }
    closedir(d);
  }
  if (buf[0] == '\0')
    snprintf(buf, len, "none");
}

void dr_gpu_name(int dev, char *buf, size_t len) {
  struct cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    snprintf(buf, len, "GPU %d", dev);
    return;
  }
  snprintf(buf, len, "%s", p.name);
}

void dr_gpu_describe(int dev, char *buf, size_t len) {
  struct cudaDeviceProp p;
  memset(&p, 0, sizeof(p));
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    snprintf(buf, len, "cuda:%d (properties unavailable)", dev);
    return;
  }
  char uuid[64], pci[32] = "?", drv[16] = "?", rt[16] = "?", nccl[32];
  const unsigned char *u = (const unsigned char *)p.uuid.bytes;
  snprintf(uuid, sizeof(uuid),
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
           u[11], u[12], u[13], u[14], u[15]);
  if (cudaDeviceGetPCIBusId(pci, sizeof(pci), dev) != cudaSuccess)
    snprintf(pci, sizeof(pci), "?");
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess)
    version(v, drv, sizeof(drv));
  if (cudaRuntimeGetVersion(&v) == cudaSuccess)
    version(v, rt, sizeof(rt));
  dr_nccl_version(nccl, sizeof(nccl));
  char vars[1024], ib[256];
  nccl_vars(vars, sizeof(vars));
  ib_devices(ib, sizeof(ib));
  snprintf(buf, len,
           "cuda:%d %s (%s, PCI %s, %.1f GiB, sm_%d%d, %d SMs), driver CUDA "
           "%s, runtime %s, %s, NCCL_* %s, InfiniBand %s",
           dev, p.name, uuid, pci, p.totalGlobalMem / 1073741824.0, p.major,
           p.minor, p.multiProcessorCount, drv, rt, nccl, vars, ib);
}
