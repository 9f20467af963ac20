#include "kernels/host_gemm.h"

#include <cblas.h>

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

}  // namespace ps::kernels
