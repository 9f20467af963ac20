#include "kernels/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/activation_math.h"
#include "kernels/cast_math.h"
#include "kernels/cpu_layer_ops.h"
#include "kernels/elementwise_math.h"
#include "kernels/host_gemm.h"
#include "kernels/host_memory.h"
#include "kernels/random_math.h"
#include "kernels/reduction_math.h"
#include "kernels/softmax_math.h"

namespace ps::kernels {
namespace {

template <Activation kAct>
void ForwardLoop(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = ActivationForward<kAct>(x[i]);
}

template <Activation kAct>
void BackwardLoop(const float* y, const float* dy, int64_t n, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = ActivationBackward<kAct>(y[i], dy[i]);
}

class CpuBackend final : public HostGemmBackend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options)
      : HostGemmBackend(std::make_shared<CachingAllocator>(
            NewAlignedHostAllocator(), options.max_cached_bytes)) {}

  std::string Name() const override { return "cpu"; }
  bool HostAddressable() const override { return true; }

 protected:
  absl::Status DoSynchronize() override { return absl::OkStatus(); }

  absl::Status DoBiasAdd(const float* bias, int64_t rows, int64_t cols,
                         float* y) override {
    for (int64_t r = 0; r < rows; ++r) {
      float* row = y + r * cols;
      for (int64_t c = 0; c < cols; ++c)
        row[c] = BiasAddElement(row[c], bias[c]);
    }
    return absl::OkStatus();
  }

  absl::Status DoBiasGrad(const float* dy, int64_t rows, int64_t cols,
                          float* dbias) override {
    for (int64_t c = 0; c < cols; ++c) dbias[c] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dy + r * cols;
      for (int64_t c = 0; c < cols; ++c) dbias[c] += row[c];
    }
    return absl::OkStatus();
  }

  absl::Status DoActivationForward(Activation act, const float* x, int64_t n,
                                   float* y) override {
    switch (act) {
      case Activation::kRelu:
        ForwardLoop<Activation::kRelu>(x, n, y);
        break;
      case Activation::kTanh:
        ForwardLoop<Activation::kTanh>(x, n, y);
        break;
      case Activation::kSigmoid:
        ForwardLoop<Activation::kSigmoid>(x, n, y);
        break;
    }
    return absl::OkStatus();
  }

  absl::Status DoActivationBackward(Activation act, const float* y,
                                    const float* dy, int64_t n,
                                    float* dx) override {
    switch (act) {
      case Activation::kRelu:
        BackwardLoop<Activation::kRelu>(y, dy, n, dx);
        break;
      case Activation::kTanh:
        BackwardLoop<Activation::kTanh>(y, dy, n, dx);
        break;
      case Activation::kSigmoid:
        BackwardLoop<Activation::kSigmoid>(y, dy, n, dx);
        break;
    }
    return absl::OkStatus();
  }

  absl::Status DoSoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                     int64_t rows, int64_t cols, float* loss,
                                     float* dlogits) override {
    for (int64_t r = 0; r < rows; ++r) {
      if (labels[r] < 0 || labels[r] >= cols) {
        return absl::InvalidArgumentError(
            absl::StrCat("SoftmaxCrossEntropy: label ", labels[r], " of row ",
                         r, " is outside [0, ", cols, ")"));
      }
    }
    const float scale = 1.0f / static_cast<float>(rows);
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits + r * cols;
      float row_max = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < cols; ++c)
        row_max = MaxIgnoringNan(row_max, row[c]);
      const int32_t label = labels[r];
      const float label_logit = row[label];
      float sum = 0.0f;
      if (dlogits == nullptr) {
        for (int64_t c = 0; c < cols; ++c) {
          sum += SoftmaxShiftedExp(row[c], row_max);
        }
      } else {
        // One exp per element, kept in the gradient row (which may alias the
        // logits: each element is read before it is written).
        float* grad = dlogits + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
          grad[c] = SoftmaxShiftedExp(row[c], row_max);
          sum += grad[c];
        }
        const float inv_sum = 1.0f / sum;
        for (int64_t c = 0; c < cols; ++c) {
          grad[c] = SoftmaxXentGradFromExp(grad[c], inv_sum, c == label, scale);
        }
      }
      total += SoftmaxXentRowLoss(label_logit, row_max, sum);
    }
    *loss = static_cast<float>(total / static_cast<double>(rows));
    return absl::OkStatus();
  }

  absl::Status DoArgmax(const float* x, int64_t rows, int64_t cols,
                        int32_t* out) override {
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * cols;
      float best = -std::numeric_limits<float>::infinity();
      int32_t best_index = kArgmaxNone;
      for (int32_t c = 0; c < cols; ++c) {
        if (ArgmaxBetter(row[c], c, best, best_index)) {
          best = row[c];
          best_index = c;
        }
      }
      out[r] = best_index == kArgmaxNone ? 0 : best_index;
    }
    return absl::OkStatus();
  }

  absl::Status DoAxpy(float alpha, const float* x, int64_t n,
                      float* y) override {
    for (int64_t i = 0; i < n; ++i) y[i] = AxpyElement(alpha, x[i], y[i]);
    return absl::OkStatus();
  }
  absl::Status DoScale(float alpha, int64_t n, float* x) override {
    for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
    return absl::OkStatus();
  }
  absl::Status DoFill(float value, int64_t n, float* x) override {
    for (int64_t i = 0; i < n; ++i) x[i] = value;
    return absl::OkStatus();
  }
  absl::Status DoInitialize(Initializer kind, uint64_t seed, int64_t fan_in,
                            int64_t fan_out, int64_t n, float* x) override {
    for (int64_t i = 0; i < n; ++i) {
      x[i] = InitializerValue(kind, seed, static_cast<uint64_t>(i), fan_in,
                              fan_out);
    }
    return absl::OkStatus();
  }
  absl::Status DoCastFromFloat(const float* x, int64_t n, DType to,
                               uint16_t* y) override {
    if (to == DType::kF16) {
      for (int64_t i = 0; i < n; ++i) y[i] = FloatToHalfBits(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = FloatToBf16Bits(x[i]);
    }
    return absl::OkStatus();
  }
  absl::Status DoCastToFloat(DType from, const uint16_t* x, int64_t n,
                             float* y) override {
    if (from == DType::kF16) {
      for (int64_t i = 0; i < n; ++i) y[i] = HalfBitsToFloat(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = Bf16BitsToFloat(x[i]);
    }
    return absl::OkStatus();
  }

  // ---- Layer ops: cpu_layer_ops.h (the GEMMs are HostGemmBackend's).
  absl::Status DoCopyMatrix(const float* src, int64_t ld_src, int64_t rows,
                            int64_t cols, float* dst, int64_t ld_dst) override {
    cpu::CopyMatrix(src, ld_src, rows, cols, dst, ld_dst);
    return absl::OkStatus();
  }
  absl::Status DoIm2Col(const ConvGeometry& g, const float* images,
                        float* patches) override {
    cpu::Im2Col(g, images, patches);
    return absl::OkStatus();
  }
  absl::Status DoCol2Im(const ConvGeometry& g, const float* patches,
                        float* images) override {
    cpu::Col2Im(g, patches, images);
    return absl::OkStatus();
  }
  int64_t ConvWorkspaceSize(const ConvGeometry& g) const override;
  absl::Status DoMaxPool2DForward(const PoolGeometry& g, const float* x,
                                  float* y, int32_t* argmax) override {
    cpu::MaxPool2DForward(g, x, y, argmax);
    return absl::OkStatus();
  }
  absl::Status DoMaxPool2DBackward(const PoolGeometry& g, const int32_t* argmax,
                                   const float* dy, float* dx) override {
    cpu::MaxPool2DBackward(g, argmax, dy, dx);
    return absl::OkStatus();
  }
  absl::Status DoAvgPool2DForward(const PoolGeometry& g, const float* x,
                                  float* y) override {
    cpu::AvgPool2DForward(g, x, y);
    return absl::OkStatus();
  }
  absl::Status DoAvgPool2DBackward(const PoolGeometry& g, const float* dy,
                                   float* dx) override {
    cpu::AvgPool2DBackward(g, dy, dx);
    return absl::OkStatus();
  }
  absl::Status DoEmbeddingBagForward(EmbeddingBagMode mode, const float* rows,
                                     int64_t num_rows, int64_t dim,
                                     const int32_t* indices, int64_t nnz,
                                     const int32_t* offsets, int64_t num_bags,
                                     const float* weights, float* out,
                                     int64_t ld_out) override {
    absl::Status s = cpu::CheckBagIndices("EmbeddingBagForward", indices, nnz,
                                          offsets, num_bags, num_rows);
    if (!s.ok()) return s;
    cpu::EmbeddingBagForward(mode, rows, dim, indices, offsets, num_bags,
                             weights, out, ld_out);
    return absl::OkStatus();
  }
  absl::Status DoEmbeddingBagBackward(EmbeddingBagMode mode,
                                      const int32_t* indices, int64_t nnz,
                                      const int32_t* offsets, int64_t num_bags,
                                      const float* weights, const float* dout,
                                      int64_t ld_dout, int64_t num_rows,
                                      int64_t dim, float* drows) override {
    absl::Status s = cpu::CheckBagIndices("EmbeddingBagBackward", indices, nnz,
                                          offsets, num_bags, num_rows);
    if (!s.ok()) return s;
    cpu::EmbeddingBagBackward(mode, indices, offsets, num_bags, weights, dout,
                              ld_dout, num_rows, dim, drows);
    return absl::OkStatus();
  }
  absl::Status DoSigmoidBinaryCrossEntropy(const float* logits,
                                           const float* labels, int64_t n,
                                           float* loss,
                                           float* dlogits) override {
    *loss = cpu::SigmoidBinaryCrossEntropy(logits, labels, n, dlogits);
    return absl::OkStatus();
  }
  absl::Status DoMeanSquaredError(const float* predictions,
                                  const float* targets, int64_t n, float* loss,
                                  float* dpredictions) override {
    *loss = cpu::MeanSquaredError(predictions, targets, n, dpredictions);
    return absl::OkStatus();
  }
  absl::Status DoGatherLowerTriangle(const float* gram, int64_t count,
                                     int64_t fields, float* out,
                                     int64_t ld_out) override {
    cpu::GatherLowerTriangle(gram, count, fields, out, ld_out);
    return absl::OkStatus();
  }
  absl::Status DoScatterLowerTriangle(const float* dout, int64_t ld_dout,
                                      int64_t count, int64_t fields,
                                      float* dgram) override {
    cpu::ScatterLowerTriangle(dout, ld_dout, count, fields, dgram);
    return absl::OkStatus();
  }
  absl::Status DoFmInteraction(const float* v, int64_t batch, int64_t fields,
                               int64_t dim, float* out) override {
    cpu::FmInteraction(v, batch, fields, dim, out);
    return absl::OkStatus();
  }
  absl::Status DoFmInteractionBackward(const float* v, int64_t batch,
                                       int64_t fields, int64_t dim,
                                       const float* dout, float* dv) override {
    cpu::FmInteractionBackward(v, batch, fields, dim, dout, dv);
    return absl::OkStatus();
  }
  absl::Status DoRowwiseDot(const float* a, const float* b, int64_t rows,
                            int64_t dim, float* out) override {
    cpu::RowwiseDot(a, b, rows, dim, out);
    return absl::OkStatus();
  }
  absl::Status DoRowwiseDotBackward(const float* a, const float* b,
                                    int64_t rows, int64_t dim,
                                    const float* dout, float* da,
                                    float* db) override {
    cpu::RowwiseDotBackward(a, b, rows, dim, dout, da, db);
    return absl::OkStatus();
  }

 private:
};

// im2col one image at a time: its patch matrix (627 KB for the CNN's second
// convolution) stays in the L2 cache from im2col to the GEMM that reads it.
// kernels_benchmark BM_CpuConv2D* measured blocks of 1 to 128 images on one
// thread: 1 was the fastest or within 10 % of it for every pass of both of
// the CNN's convolutions, the whole batch (an 80 MB patch matrix) up to 2x
// slower.
int64_t CpuBackend::ConvWorkspaceSize(const ConvGeometry& g) const {
  return ConvWorkspacePerImage(g);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    const CpuBackendOptions& options) {
  if (options.num_threads < 1 || options.num_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("CpuBackendOptions.num_threads must be in [1, 1024], got ",
                     options.num_threads));
  }
  openblas_set_num_threads(options.num_threads);
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(options));
}

}  // namespace ps::kernels
