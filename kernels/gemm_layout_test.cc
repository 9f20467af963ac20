// The row-major -> column-major translation the CUDA backend hands to
// cublasGemmEx, checked by running it through OpenBLAS's column-major sgemm
// (same argument conventions) against a row-major reference.

#include "kernels/gemm_layout.h"

#include <cblas.h>

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ps::kernels {
namespace {

TEST(GemmLayout, ColumnMajorCallComputesTheRowMajorProduct) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int shapes[][3] = {{1, 1, 1}, {7, 129, 3}, {129, 7, 20}, {5, 1, 9}};
  for (const auto& s : shapes) {
    const int m = s[0], n = s[1], k = s[2];
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        const bool tra = ta == Transpose::kYes, trb = tb == Transpose::kYes;
        std::vector<float> a(m * k), b(k * n), c(m * n, 0.0f);
        for (float& x : a) x = dist(rng);
        for (float& x : b) x = dist(rng);
        // Row-major leading dimensions, as Backend::Gemm computes them.
        const int lda = tra ? m : k, ldb = trb ? k : n, ldc = n;
        const ColumnMajorGemm g = ToColumnMajor(ta, tb, m, n, k, a.data(), lda,
                                                b.data(), ldb, c.data(), ldc);
        const auto op = [](Transpose t) {
          return t == Transpose::kYes ? CblasTrans : CblasNoTrans;
        };
        cblas_sgemm(CblasColMajor, op(g.trans_a), op(g.trans_b), g.m, g.n, g.k,
                    1.0f, g.a, g.lda, g.b, g.ldb, 0.0f, g.c, g.ldc);
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double ref = 0.0;
            for (int p = 0; p < k; ++p) {
              ref += double{tra ? a[p * m + i] : a[i * k + p]} *
                     double{trb ? b[j * k + p] : b[p * n + j]};
            }
            ASSERT_LE(std::abs(c[i * n + j] - ref), 1e-5 + 1e-5 * std::abs(ref))
                << "m=" << m << " n=" << n << " k=" << k << " ta=" << tra
                << " tb=" << trb << " at (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ps::kernels
