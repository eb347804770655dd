/* Which GPU a worker uses, and how it describes it.
 *
 * A worker uses the only visible GPU (under ddprun --gpu-bind isolate,
 * CUDA_VISIBLE_DEVICES names one) or, when several are visible, the one
 * numbered LOCAL_RANK, as torchrun scripts do with cuda:LOCAL_RANK.
 */
#ifndef DR_GPU_DEVICE_H
#define DR_GPU_DEVICE_H

#include <stddef.h>
#include <stdint.h>

/* The number of visible GPUs (0 when the driver is missing or none is
 * visible; why then says which, for messages). */
int dr_gpu_count(char *why, size_t why_len);

/* The device of local_rank (of local_world on this node): 0 and *dev, or
 * DR_GPU_ENODEV with a one-line reason in err when no GPU is visible or
 * ranks would share one (NCCL refuses two ranks on one GPU). */
int dr_gpu_pick(uint32_t local_rank, uint32_t local_world, int *dev,
                char *err, size_t err_len);

/* The summary's description of dev: name, UUID, PCI bus id, memory,
 * compute capability, driver and runtime versions, the NCCL version, the
 * NCCL_* variables set, and the InfiniBand devices present. */
void dr_gpu_describe(int dev, char *buf, size_t len);

/* The GPU's name ("NVIDIA H200"), for benchmark lines. */
void dr_gpu_name(int dev, char *buf, size_t len);

#endif /* DR_GPU_DEVICE_H */
