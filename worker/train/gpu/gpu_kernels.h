/* The small CUDA kernels of the GPU model: everything between the GEMMs
 * (which go through cuBLAS), and the fused optimizer updates.
 *
 * Each function enqueues its kernel(s) on stream s and returns the
 * launch's cudaError_t as an int (0 = cudaSuccess); nothing synchronises.
 * Matrices are row-major, as in worker/nn: rows x cols, cols contiguous.
 * Activation-side buffers are fp32 or bf16 (dr_dtype_t); weights, biases,
 * gradients, optimizer state, logits and losses are always fp32. bf16
 * and fp16 values are stored as uint16_t (the bits of __nv_bfloat16 or
 * __half); conversions round to nearest even.
 *
 * Every kernel computes what the CPU model computes (worker/nn/model_pass.c
 * and optim.c), in the same formula; sums may run in another order, so
 * fp32 results agree to rounding, not bit for bit (tests/gpu checks them
 * against CPU references).
 */
#ifndef DR_GPU_KERNELS_H
#define DR_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DR_F32 = 0, DR_BF16 = 1, DR_F16 = 2 } dr_dtype_t;

/* Bytes of one element of t. */
size_t dr_dtype_size(dr_dtype_t t);

/* y[r][c] = act(y[r][c] + bias[c]); act is ReLU when relu, else identity.
 * In bf16 the sum is taken in fp32 and rounded once. */
int dr_k_bias_act_fwd(void *y, dr_dtype_t t, const float *bias, uint32_t rows,
                      uint32_t cols, int relu, cudaStream_t s);

/* g[c] (+)= sum over rows of d[r][c] (fp32 sums): a Linear's bias
 * gradient. scratch holds dr_k_bias_grad_scratch(rows, cols) floats. */
size_t dr_k_bias_grad_scratch(uint32_t rows, uint32_t cols);
int dr_k_bias_grad(const void *d, dr_dtype_t t, uint32_t rows, uint32_t cols,
                   float *g, int accumulate, float *scratch, cudaStream_t s);

/* dx[i] = a[i] > 0 ? dx[i] : 0 (ReLU's derivative read off its output). */
int dr_k_relu_bwd(void *dx, const void *a, dr_dtype_t t, size_t n_elems,
                  cudaStream_t s);

/* In place, row by row: logits -> softmax probabilities (max subtracted),
 * and row_loss[r] = log(sum exp(l - max)) - (l[y] - max), the row's
 * cross-entropy in nats. A label outside [0, classes) counts as class 0,
 * as on the CPU. */
int dr_k_xent_fwd(float *probs, const int32_t *labels, uint32_t rows,
                  uint32_t classes, float *row_loss, cudaStream_t s);

/* *acc += the sum of row_loss[0..rows), divided by rows when mean (the
 * batch's mean loss, kept on the device until it is logged); summed in
 * double by one block in a fixed order. */
int dr_k_loss_add(const float *row_loss, uint32_t rows, int mean,
                  double *acc, cudaStream_t s);

/* d[r][c] = coef * (p[r][c] - (c == y_r)): the gradient of the loss with
 * respect to the logits, coef = scale / rows; times *loss_scale (on the
 * device, the loss scaler's) when loss_scale is not NULL. */
int dr_k_xent_bwd(const float *probs, const int32_t *labels, void *d,
                  dr_dtype_t t, uint32_t rows, uint32_t classes, float coef,
                  const float *loss_scale, cudaStream_t s);

/* x[i][j] = table[tokens[i]][j] for the n_tok tokens (e columns). */
int dr_k_embed_fwd(const float *table, const uint8_t *tokens, size_t n_tok,
                   uint32_t e, void *x, dr_dtype_t t, cudaStream_t s);

/* g[v][j] (+)= sum of dx[i][j] over the tokens i equal to v (256 rows of
 * e). Each (v, j) is summed by one thread in token order: deterministic,
 * no atomics. */
int dr_k_embed_bwd(const void *dx, dr_dtype_t t, const uint8_t *tokens,
                   size_t n_tok, uint32_t e, float *g, int accumulate,
                   cudaStream_t s);

/* optim.c's SGD: d = g + wd w; buf = mu buf + d; w -= lr buf (buf NULL:
 * w -= lr d). w16 (may be NULL) receives the new w in t16 (bf16 or fp16).
 * skip (may be NULL): the loss scaler's agreed flags of the step
 * (gpu_scale.h); nothing changes when either is set. */
int dr_k_sgd(float *w, const float *g, float *buf, size_t n_elems, float lr,
             float mu, float wd, uint16_t *w16, dr_dtype_t t16,
             const float *skip, cudaStream_t s);

/* optim.c's AdamW: w *= decay; m += (1 - b1)(g - m); v = b2 v +
 * (1 - b2) g^2; w -= step_size * m / (sqrt(v) / bc2_sqrt + eps). */
int dr_k_adamw(float *w, const float *g, float *m, float *v, size_t n_elems,
               float decay, float b1, float b2, float step_size,
               float bc2_sqrt, float eps, uint16_t *w16, dr_dtype_t t16,
               const float *skip, cudaStream_t s);

/* out := in in type t (rounded to nearest even), and back. */
int dr_k_cast_from_f32(const float *in, void *out, dr_dtype_t t,
                       size_t n_elems, cudaStream_t s);
int dr_k_cast_to_f32(const void *in, dr_dtype_t t, float *out,
                     size_t n_elems, cudaStream_t s);
int dr_k_cast_f32_bf16(const float *in, uint16_t *out, size_t n_elems,
                       cudaStream_t s);
int dr_k_cast_bf16_f32(const uint16_t *in, float *out, size_t n_elems,
                       cudaStream_t s);

/* *count += rows whose argmax (ties to the lower class) equals the
 * label. */
int dr_k_count_correct(const float *logits, const int32_t *labels,
                       uint32_t rows, uint32_t classes, uint32_t *count,
                       cudaStream_t s);

/* Gradient compression on the wire (--grad-compress fp16|bf16):
 * out[i] := in[i] * mul rounded to fp16 (bf16 when bf16 is set), to
 * nearest even, infinities and NaNs kept; and back, exactly. */
int dr_k_to_half(const float *in, float mul, void *out, int bf16,
                 size_t n_elems, cudaStream_t s);
int dr_k_from_half(const void *in, float *out, int bf16, size_t n_elems,
                   cudaStream_t s);

/* Fills n elements with NaN (tests poison outputs with it). */
int dr_k_fill_nan(void *p, dr_dtype_t t, size_t n_elems, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* DR_GPU_KERNELS_H */
