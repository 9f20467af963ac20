#ifndef PS_KERNELS_GEMM_LAYOUT_H_
#define PS_KERNELS_GEMM_LAYOUT_H_

// Row-major GEMM at the API, column-major GEMM in cuBLAS: the translation,
// kept apart from the .cu so a host test can check it against a column-major
// BLAS call (gemm_layout_test.cc).

#include "kernels/types.h"

namespace ps::kernels {

// Arguments of a column-major GEMM C = op(A) op(B) with C [m, n] (ld ldc),
// in the order cublasGemmEx/cblas_sgemm(ColMajor) take them.
struct ColumnMajorGemm {
  Transpose trans_a;
  Transpose trans_b;
  int m, n, k;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float* c;
  int ldc;
};

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
// row-major matrix read as column-major is its transpose: so swap the
// operands, keep each one's transpose flag, and swap m and n.
inline ColumnMajorGemm ToColumnMajor(Transpose trans_a, Transpose trans_b,
                                     int m, int n, int k, const float* a,
                                     int lda, const float* b, int ldb, float* c,
                                     int ldc) {
  return ColumnMajorGemm{trans_b, trans_a, n, m, k, b, ldb, a, lda, c, ldc};
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_GEMM_LAYOUT_H_
