#ifndef PS_KERNELS_HOST_GEMM_H_
#define PS_KERNELS_HOST_GEMM_H_

// GEMM on host memory through OpenBLAS, shared by the backends that compute
// on the host: the CPU backend, and the test-only CUDA emulation (whose GEMMs
// the real backend hands to cuBLAS).

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "kernels/caching_allocator.h"
#include "kernels/host_memory.h"
#include "kernels/types.h"

namespace ps::kernels {

// Row-major c = alpha * op(a) * op(b) + beta * c with Backend::Gemm's
// contract: op(a) is [m, k], op(b) is [k, n], c is [m, n] with row stride
// ldc. With beta == 0, c's old contents are ignored (NaN included), also
// when k == 0 or alpha == 0, where BLAS would scale c instead. Arguments are
// validated by the caller.
void HostGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
              float alpha, const float* a, int lda, const float* b, int ldb,
              float beta, float* c, int ldc);

// `count` GEMMs of dense row-major matrices stored back to back (a[i] at
// a + i * m * k, b[i] at b + i * k * n, c[i] at c + i * m * n), each with
// HostGemm's contract: a loop of cblas_sgemm (no batched sgemm in OpenBLAS
// 0.3.21).
void HostBatchedGemm(Transpose trans_a, Transpose trans_b, int count, int m,
                     int n, int k, float alpha, const float* a, const float* b,
                     float beta, float* c);

// A HostMemoryBackend whose GEMMs are the two above: the part the CPU backend
// and the CUDA emulation share. Subclasses add the other ops.
class HostGemmBackend : public HostMemoryBackend {
 protected:
  explicit HostGemmBackend(std::shared_ptr<CachingAllocator> allocator)
      : HostMemoryBackend(std::move(allocator)) {}

  absl::Status DoGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                      float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc) override {
    HostGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return absl::OkStatus();
  }
  absl::Status DoBatchedGemm(Transpose trans_a, Transpose trans_b, int count,
                             int m, int n, int k, float alpha, const float* a,
                             const float* b, float beta, float* c) override {
    HostBatchedGemm(trans_a, trans_b, count, m, n, k, alpha, a, b, beta, c);
    return absl::OkStatus();
  }
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_HOST_GEMM_H_
