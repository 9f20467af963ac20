#include "kernels/cuda_emulated_backend.h"

// The emulation must come first: it defines the CUDA keywords the kernels use.
#include "kernels/cuda_emulation.h"
// clang-format off
#include "kernels/cuda_kernels.cuh"
#include "kernels/cuda_layer_kernels.cuh"
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

// The GEMMs are HostGemmBackend's (cuBLAS in the real backend, the same host
// GEMM as the CPU backend here).
class CudaEmulatedBackend final : public HostGemmBackend {
 public:
  CudaEmulatedBackend()
      : HostGemmBackend(
            std::make_shared<CachingAllocator>(NewAlignedHostAllocator())) {}

  std::string Name() const override { return "cuda-emulated"; }

 protected:
  absl::Status DoSynchronize() override { return LaunchStatus("Synchronize"); }

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

  // ---- Layer ops.
  absl::Status DoCopyMatrix(const float* src, int64_t ld_src, int64_t rows,
                            int64_t cols, float* dst, int64_t ld_dst) override {
    cuda::LaunchCopyMatrix(nullptr, src, ld_src, rows, cols, dst, ld_dst);
    return LaunchStatus("CopyMatrix");
  }
  absl::Status DoIm2Col(const ConvGeometry& g, const float* images,
                        float* patches) override {
    cuda::LaunchIm2Col(nullptr, g, images, patches);
    return LaunchStatus("Im2Col");
  }
  absl::Status DoCol2Im(const ConvGeometry& g, const float* patches,
                        float* images) override {
    cuda::LaunchCol2Im(nullptr, g, patches, images);
    return LaunchStatus("Col2Im");
  }
  absl::Status DoMaxPool2DForward(const PoolGeometry& g, const float* x,
                                  float* y, int32_t* argmax) override {
    cuda::LaunchMaxPoolForward(nullptr, g, x, y, argmax);
    return LaunchStatus("MaxPool2DForward");
  }
  absl::Status DoMaxPool2DBackward(const PoolGeometry& g, const int32_t* argmax,
                                   const float* dy, float* dx) override {
    cuda::LaunchMaxPoolBackward(nullptr, g, argmax, dy, dx);
    return LaunchStatus("MaxPool2DBackward");
  }
  absl::Status DoAvgPool2DForward(const PoolGeometry& g, const float* x,
                                  float* y) override {
    cuda::LaunchAvgPoolForward(nullptr, g, x, y);
    return LaunchStatus("AvgPool2DForward");
  }
  absl::Status DoAvgPool2DBackward(const PoolGeometry& g, const float* dy,
                                   float* dx) override {
    cuda::LaunchAvgPoolBackward(nullptr, g, dy, dx);
    return LaunchStatus("AvgPool2DBackward");
  }
  absl::Status DoEmbeddingBagForward(EmbeddingBagMode mode, const float* rows,
                                     int64_t num_rows, int64_t dim,
                                     const int32_t* indices, int64_t nnz,
                                     const int32_t* offsets, int64_t num_bags,
                                     const float* weights, float* out,
                                     int64_t ld_out) override {
    cuda::LaunchEmbeddingBagForward(nullptr, mode, rows, num_rows, dim, indices,
                                    nnz, offsets, num_bags, weights, out,
                                    ld_out);
    return LaunchStatus("EmbeddingBagForward");
  }
  absl::Status DoEmbeddingBagBackward(EmbeddingBagMode mode,
                                      const int32_t* indices, int64_t nnz,
                                      const int32_t* offsets, int64_t num_bags,
                                      const float* weights, const float* dout,
                                      int64_t ld_dout, int64_t num_rows,
                                      int64_t dim, float* drows) override {
    cuda::LaunchEmbeddingBagBackward(nullptr, mode, indices, nnz, offsets,
                                     num_bags, weights, dout, ld_dout, num_rows,
                                     dim, drows);
    return LaunchStatus("EmbeddingBagBackward");
  }
  absl::Status DoSigmoidBinaryCrossEntropy(const float* logits,
                                           const float* labels, int64_t n,
                                           float* loss,
                                           float* dlogits) override {
    absl::StatusOr<DeviceBuffer> scratch = AllocateArray<float>(n);
    if (!scratch.ok()) return scratch.status();
    cuda::LaunchSigmoidBinaryCrossEntropy(nullptr, logits, labels, n,
                                          static_cast<float*>(scratch->data()),
                                          loss, dlogits);
    return LaunchStatus("SigmoidBinaryCrossEntropy");
  }
  absl::Status DoMeanSquaredError(const float* predictions,
                                  const float* targets, int64_t n, float* loss,
                                  float* dpredictions) override {
    absl::StatusOr<DeviceBuffer> scratch = AllocateArray<float>(n);
    if (!scratch.ok()) return scratch.status();
    cuda::LaunchMeanSquaredError(nullptr, predictions, targets, n,
                                 static_cast<float*>(scratch->data()), loss,
                                 dpredictions);
    return LaunchStatus("MeanSquaredError");
  }
  absl::Status DoGatherLowerTriangle(const float* gram, int64_t count,
                                     int64_t fields, float* out,
                                     int64_t ld_out) override {
    cuda::LaunchGatherLowerTriangle(nullptr, gram, count, fields, out, ld_out);
    return LaunchStatus("GatherLowerTriangle");
  }
  absl::Status DoScatterLowerTriangle(const float* dout, int64_t ld_dout,
                                      int64_t count, int64_t fields,
                                      float* dgram) override {
    cuda::LaunchScatterLowerTriangle(nullptr, dout, ld_dout, count, fields,
                                     dgram);
    return LaunchStatus("ScatterLowerTriangle");
  }
  absl::Status DoFmInteraction(const float* v, int64_t batch, int64_t fields,
                               int64_t dim, float* out) override {
    cuda::LaunchFmInteraction(nullptr, v, batch, fields, dim, out);
    return LaunchStatus("FmInteraction");
  }
  absl::Status DoFmInteractionBackward(const float* v, int64_t batch,
                                       int64_t fields, int64_t dim,
                                       const float* dout, float* dv) override {
    cuda::LaunchFmInteractionBackward(nullptr, v, batch, fields, dim, dout, dv);
    return LaunchStatus("FmInteractionBackward");
  }
  absl::Status DoRowwiseDot(const float* a, const float* b, int64_t rows,
                            int64_t dim, float* out) override {
    cuda::LaunchRowwiseDot(nullptr, a, b, rows, dim, out);
    return LaunchStatus("RowwiseDot");
  }
  absl::Status DoRowwiseDotBackward(const float* a, const float* b,
                                    int64_t rows, int64_t dim,
                                    const float* dout, float* da,
                                    float* db) override {
    cuda::LaunchRowwiseDotBackward(nullptr, a, b, rows, dim, dout, da, db);
    return LaunchStatus("RowwiseDotBackward");
  }

 private:
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaEmulatedBackend() {
  return std::unique_ptr<Backend>(std::make_unique<CudaEmulatedBackend>());
}

}  // namespace ps::kernels
