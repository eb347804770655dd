/* PowerSGD's arithmetic (Vogels et al., 2019, as PyTorch DDP's
 * powerSGD_hook has it), for one gradient matrix M of rows x cols
 * (row-major) at rank R:
 *
 *   P = M Q          (rows x R)    all-reduced (sum), then orthonormalised
 *   Q = M^T P        (cols x R)    all-reduced (average)
 *   M ~ P Q^T        (rows x cols) the same on every rank
 *
 * with the error feedback M - P Q^T added to the next step's gradient and
 * Q warm-started from the last step. The products go through the BLAS
 * that the model uses (cblas_sgemm); the orthonormalisation is
 * Gram-Schmidt in a fixed order, so every rank that orthonormalises the
 * same P gets the same bits. Matrices are row-major with leading
 * dimension equal to their column count.
 */
#ifndef DR_POWERSGD_H
#define DR_POWERSGD_H

#include <stddef.h>

/* Compression pays when R (rows + cols) is well below rows x cols: more
 * than 2x fewer numbers, as PyTorch's min_compression_rate has it. */
int dr_psgd_worth(size_t rows, size_t cols, size_t rank);

/* P := M Q */
void dr_psgd_mq(const float *m, size_t rows, size_t cols, const float *q,
                size_t rank, float *p);
/* Q := M^T P */
void dr_psgd_mtp(const float *m, size_t rows, size_t cols, const float *p,
                 size_t rank, float *q);
/* out := P Q^T */
void dr_psgd_pqt(const float *p, const float *q, size_t rows, size_t cols,
                 size_t rank, float *out);
/* m := m - P Q^T (the residual of the approximation, in place) */
void dr_psgd_sub_pqt(const float *p, const float *q, size_t rows,
                     size_t cols, size_t rank, float *m);
/* Orthonormalises the columns of P (rows x rank) in place, left to right:
 * each column divided by its norm + eps, then removed from the columns
 * to its right. eps keeps a zero column finite. */
#define DR_PSGD_EPS 1e-8f
void dr_psgd_orthonormalise(float *p, size_t rows, size_t rank);

#endif /* DR_POWERSGD_H */
