/* PowerSGD's products and orthonormalisation. See powersgd.h. */
#include "powersgd.h"

#include <cblas.h>
#include <math.h>

#include "plan.h"

int dr_psgd_worth(size_t rows, size_t cols, size_t rank) {
  /* The planner's rule, so that its bytes are train's. */
  return dr_plan_psgd_worth((double)rows, (double)cols, (unsigned)rank);
}

void dr_psgd_mq(const float *m, size_t rows, size_t cols, const float *q,
                size_t rank, float *p) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)rank,
              (int)cols, 1.0f, m, (int)cols, q, (int)rank, 0.0f, p,
              (int)rank);
}

void dr_psgd_mtp(const float *m, size_t rows, size_t cols, const float *p,
                 size_t rank, float *q) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)cols, (int)rank,
              (int)rows, 1.0f, m, (int)cols, p, (int)rank, 0.0f, q,
              (int)rank);
}

void dr_psgd_pqt(const float *p, const float *q, size_t rows, size_t cols,
                 size_t rank, float *out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols,
              (int)rank, 1.0f, p, (int)rank, q, (int)rank, 0.0f, out,
              (int)cols);
}

void dr_psgd_sub_pqt(const float *p, const float *q, size_t rows,
                     size_t cols, size_t rank, float *m) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols,
              (int)rank, -1.0f, p, (int)rank, q, (int)rank, 1.0f, m,
              (int)cols);
}

void dr_psgd_orthonormalise(float *p, size_t rows, size_t rank) {
  for (size_t i = 0; i < rank; i++) {
    double nn = 0;
    for (size_t r = 0; r < rows; r++)
      nn += (double)p[r * rank + i] * p[r * rank + i];
    float inv = 1.0f / ((float)sqrt(nn) + DR_PSGD_EPS);
    for (size_t r = 0; r < rows; r++)
      p[r * rank + i] *= inv;
    for (size_t j = i + 1; j < rank; j++) {
      double dot = 0;
      for (size_t r = 0; r < rows; r++)
        dot += (double)p[r * rank + i] * p[r * rank + j];
      float d = (float)dot;
      for (size_t r = 0; r < rows; r++)
        p[r * rank + j] -= d * p[r * rank + i];
    }
  }
}
