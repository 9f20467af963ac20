#include "kernels/cuda_emulated_backend.h"

// The emulation must come first: it defines the CUDA keywords the kernels use.
#include "kernels/cuda_emulation.h"
// clang-format off
#include "kernels/cuda_kernels.cuh"
// clang-format on

#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/host_gemm.h"
#include "kernels/host_memory.h"

namespace ps::kernels {
namespace {

absl::Status LaunchStatus(const char* op) {
  std::string error = cuda_emulation::TakeLastError();
  if (error.empty()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(op, ": kernel launch failed: ", error));
}

class CudaEmulatedBackend final : public HostMemoryBackend {
 public:
  CudaEmulatedBackend()
      : HostMemoryBackend(
            std::make_shared<CachingAllocator>(NewAlignedHostAllocator())) {}

  std::string Name() const override { return "cuda-emulated"; }

 protected:
  absl::Status DoSynchronize() override { return LaunchStatus("Synchronize"); }

  // cuBLAS in the real backend; the same host GEMM as the CPU backend here.
  absl::Status DoGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                      float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc) override {
    HostGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return absl::OkStatus();
  }

  absl::Status DoBiasAdd(const float* bias, int64_t rows, int64_t cols,
                         float* y) override {
    cuda::LaunchBiasAdd(nullptr, bias, rows, cols, y);
    return LaunchStatus("BiasAdd");
  }
  absl::Status DoBiasGrad(const float* dy, int64_t rows, int64_t cols,
                          float* dbias) override {
    cuda::LaunchBiasGrad(nullptr, dy, rows, cols, dbias);
    return LaunchStatus("BiasGrad");
  }
  absl::Status DoActivationForward(Activation act, const float* x, int64_t n,
                                   float* y) override {
    cuda::LaunchActivationForward(nullptr, act, x, n, y);
    return LaunchStatus("ActivationForward");
  }
  absl::Status DoActivationBackward(Activation act, const float* y,
                                    const float* dy, int64_t n,
                                    float* dx) override {
    cuda::LaunchActivationBackward(nullptr, act, y, dy, n, dx);
    return LaunchStatus("ActivationBackward");
  }
  absl::Status DoSoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                     int64_t rows, int64_t cols, float* loss,
                                     float* dlogits) override {
    absl::StatusOr<DeviceBuffer> scratch = AllocateArray<float>(rows);
    if (!scratch.ok()) return scratch.status();
    cuda::LaunchSoftmaxCrossEntropy(nullptr, logits, labels, rows, cols,
                                    static_cast<float*>(scratch->data()), loss,
                                    dlogits);
    return LaunchStatus("SoftmaxCrossEntropy");
  }
  absl::Status DoArgmax(const float* x, int64_t rows, int64_t cols,
                        int32_t* out) override {
    cuda::LaunchArgmax(nullptr, x, rows, cols, out);
    return LaunchStatus("Argmax");
  }
  absl::Status DoAxpy(float alpha, const float* x, int64_t n,
                      float* y) override {
    cuda::LaunchAxpy(nullptr, alpha, x, n, y);
    return LaunchStatus("Axpy");
  }
  absl::Status DoScale(float alpha, int64_t n, float* x) override {
    cuda::LaunchScale(nullptr, alpha, n, x);
    return LaunchStatus("Scale");
  }
  absl::Status DoFill(float value, int64_t n, float* x) override {
    cuda::LaunchFill(nullptr, value, n, x);
    return LaunchStatus("Fill");
  }
  absl::Status DoInitialize(Initializer kind, uint64_t seed, int64_t fan_in,
                            int64_t fan_out, int64_t n, float* x) override {
    cuda::LaunchInitialize(nullptr, kind, seed, fan_in, fan_out, n, x);
    return LaunchStatus("Initialize");
  }
  absl::Status DoCastFromFloat(const float* x, int64_t n, DType to,
                               uint16_t* y) override {
    cuda::LaunchCastFromFloat(nullptr, x, n, to, y);
    return LaunchStatus("CastFromFloat");
  }
  absl::Status DoCastToFloat(DType from, const uint16_t* x, int64_t n,
                             float* y) override {
    cuda::LaunchCastToFloat(nullptr, from, x, n, y);
    return LaunchStatus("CastToFloat");
  }

 private:
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaEmulatedBackend() {
  return std::unique_ptr<Backend>(std::make_unique<CudaEmulatedBackend>());
}

}  // namespace ps::kernels
