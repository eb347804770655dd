/* The optimizer on the GPU: optim.c's SGD and AdamW as fused kernels over
 * device weights, with the state on the device in optim.c's layout (slots
 * x n_elems, slot-major, registration order) so that checkpoints carry it
 * either way: download into the host optimizer's state before a save,
 * upload after a load. The learning rate comes from the host optimizer's
 * schedule (dr_optim_lr), so both devices follow the same one.
 */
#ifndef DR_GPU_OPTIM_H
#define DR_GPU_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "gpu_model.h"
#include "gpu_sync.h"
#include "model.h"
#include "optim.h"

typedef struct dr_gpu_optim dr_gpu_optim_t;

/* host: the host optimizer of the same configuration (borrowed; its
 * schedule and its state buffer are used); cfg: that configuration. The
 * device state starts at zero, as the host's does. */
int dr_gpu_optim_new(const dr_optim_config_t *cfg, dr_optim_t *host,
                     size_t n_elems, cudaStream_t s,
                     const dr_gpu_waiter_t *waiter, dr_gpu_optim_t **out);
void dr_gpu_optim_free(dr_gpu_optim_t **o);

/* Enqueues one update of every parameter of gm at step's learning rate,
 * with the gradients at the host model's param->g (device pointers); the
 * two-byte copy of the weights is refreshed in the same pass. skip (a
 * device pointer, may be NULL): the loss scaler's agreed flags; the
 * kernels change nothing when one is set. */
int dr_gpu_optim_step(dr_gpu_optim_t *o, dr_gpu_model_t *gm,
                      dr_model_t *host_model, uint64_t step,
                      const float *skip);

/* The state between the host optimizer's buffer and the device (both
 * wait for their copies). */
int dr_gpu_optim_upload(dr_gpu_optim_t *o);
int dr_gpu_optim_download(dr_gpu_optim_t *o);

#endif /* DR_GPU_OPTIM_H */
