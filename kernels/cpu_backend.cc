#include "kernels/cpu_backend.h"

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/activation_math.h"
#include "kernels/cast_math.h"
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

class CpuBackend final : public HostMemoryBackend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options)
      : HostMemoryBackend(std::make_shared<CachingAllocator>(
            NewAlignedHostAllocator(), options.max_cached_bytes)) {}

  std::string Name() const override { return "cpu"; }
  bool HostAddressable() const override { return true; }

 protected:
  absl::Status DoSynchronize() override { return absl::OkStatus(); }

  absl::Status DoGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                      float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc) override {
    HostGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return absl::OkStatus();
  }

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
    if (act == Activation::kRelu) {
      ForwardLoop<Activation::kRelu>(x, n, y);
    } else {
      ForwardLoop<Activation::kTanh>(x, n, y);
    }
    return absl::OkStatus();
  }

  absl::Status DoActivationBackward(Activation act, const float* y,
                                    const float* dy, int64_t n,
                                    float* dx) override {
    if (act == Activation::kRelu) {
      BackwardLoop<Activation::kRelu>(y, dy, n, dx);
    } else {
      BackwardLoop<Activation::kTanh>(y, dy, n, dx);
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

 private:
};

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
