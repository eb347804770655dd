/* What every kernel file shares: the block size, the grid for n elements
 * (grid-stride loops cover the rest), the launch's error, the loop. */
#ifndef DR_GPU_KERNEL_UTIL_CUH
#define DR_GPU_KERNEL_UTIL_CUH

#include <stddef.h>

#include <cuda_runtime_api.h>

#define BLOCK 256
#define MAX_GRID 65536u

static inline unsigned grid_for(size_t n) {
  size_t g = (n + BLOCK - 1) / BLOCK;
  if (g == 0) g = 1;
  return g > MAX_GRID ? MAX_GRID : (unsigned)g;
}

/* The last launch's error as an int (0 = cudaSuccess). */
static inline int launched(void) { return (int)cudaGetLastError(); }

#define GRID_STRIDE(i, n)                                                   \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);   \
       i += (size_t)gridDim.x * blockDim.x)

#endif /* DR_GPU_KERNEL_UTIL_CUH */
