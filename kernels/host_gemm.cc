#include "kernels/host_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>

namespace ps::kernels {

void HostGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
              float alpha, const float* a, int lda, const float* b, int ldb,
              float beta, float* c, int ldc) {
  if (k == 0 || alpha == 0.0f) {
    // BLAS would still scale; keep beta == 0 meaning "overwrite" (NaN too).
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) {
        row[j] = beta == 0.0f ? 0.0f : beta * row[j];
      }
    }
    return;
  }
  cblas_sgemm(CblasRowMajor,
              trans_a == Transpose::kYes ? CblasTrans : CblasNoTrans,
              trans_b == Transpose::kYes ? CblasTrans : CblasNoTrans, m, n, k,
              alpha, a, lda, b, ldb, beta, c, ldc);
}

void HostBatchedGemm(Transpose trans_a, Transpose trans_b, int count, int m,
                     int n, int k, float alpha, const float* a, const float* b,
                     float beta, float* c) {
  const int lda = trans_a == Transpose::kYes ? m : k;
  const int ldb = trans_b == Transpose::kYes ? k : n;
  const int64_t a_size = int64_t{m} * k;
  const int64_t b_size = int64_t{k} * n;
  const int64_t c_size = int64_t{m} * n;
  for (int64_t i = 0; i < count; ++i) {
    HostGemm(trans_a, trans_b, m, n, k, alpha, a + i * a_size, std::max(lda, 1),
             b + i * b_size, std::max(ldb, 1), beta, c + i * c_size, n);
  }
}

}  // namespace ps::kernels
