#include "kernels/backend.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend_checks.h"
#include "kernels/status_macros.h"

namespace ps::kernels {
using internal::CheckDenseMatrix;
using internal::CheckHalfType;
using internal::CheckMatrix;
using internal::CheckRowsFitInt32;
using internal::CheckSameSize;
using internal::CheckSpan;
using internal::kInt32Max;

namespace {

bool KnownActivation(Activation act) {
  return act == Activation::kRelu || act == Activation::kTanh ||
         act == Activation::kSigmoid;
}

// The checks SigmoidBinaryCrossEntropy and MeanSquaredError share: x and
// target [n >= 1], loss a scalar, grad [n] if given.
absl::Status CheckLossArgs(const char* op, DeviceSpan<const float> x,
                           DeviceSpan<const float> target,
                           DeviceSpan<float> loss,
                           const std::optional<DeviceSpan<float>>& grad) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(op, "input", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(op, "target", target));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(op, "loss", loss));
  if (x.size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the input must be non-empty"));
  }
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(op, "target", target.size, "input", x.size));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(op, "loss", loss.size, "a scalar", 1));
  if (grad.has_value()) {
    PS_KERNELS_RETURN_IF_ERROR(CheckSpan(op, "gradient", *grad));
    PS_KERNELS_RETURN_IF_ERROR(
        CheckSameSize(op, "gradient", grad->size, "input", x.size));
  }
  return absl::OkStatus();
}

}  // namespace

DeviceBuffer::DeviceBuffer(std::shared_ptr<CachingAllocator> allocator,
                           CachingAllocator::Block block, int64_t bytes)
    : allocator_(std::move(allocator)), block_(block), bytes_(bytes) {}

DeviceBuffer::~DeviceBuffer() { Release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : allocator_(std::move(other.allocator_)),
      block_(std::exchange(other.block_, {})),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    allocator_ = std::move(other.allocator_);
    block_ = std::exchange(other.block_, {});
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (allocator_ != nullptr && block_.ptr != nullptr) {
    allocator_->Free(block_);
  }
  allocator_.reset();
  block_ = {};
  bytes_ = 0;
}

absl::StatusOr<DeviceBuffer> Backend::Allocate(int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Allocate: size must be positive, got ", bytes));
  }
  return DoAllocate(bytes);
}

absl::Status Backend::CopyToDevice(const void* host, void* device,
                                   int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("CopyToDevice: bytes < 0");
  if (bytes == 0) return absl::OkStatus();
  if (host == nullptr || device == nullptr) {
    return absl::InvalidArgumentError("CopyToDevice: null buffer");
  }
  return DoCopyToDevice(host, device, bytes);
}

absl::Status Backend::CopyToHost(const void* device, void* host,
                                 int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("CopyToHost: bytes < 0");
  if (bytes == 0) return absl::OkStatus();
  if (host == nullptr || device == nullptr) {
    return absl::InvalidArgumentError("CopyToHost: null buffer");
  }
  return DoCopyToHost(device, host, bytes);
}

absl::Status Backend::CopyOnDevice(const void* src, void* dst, int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("CopyOnDevice: bytes < 0");
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr || dst == nullptr) {
    return absl::InvalidArgumentError("CopyOnDevice: null buffer");
  }
  return DoCopyOnDevice(src, dst, bytes);
}

absl::Status Backend::Synchronize() { return DoSynchronize(); }

absl::Status Backend::Gemm(Transpose trans_a, Transpose trans_b, float alpha,
                           DeviceMatrix<const float> a,
                           DeviceMatrix<const float> b, float beta,
                           DeviceMatrix<float> c) {
  PS_KERNELS_RETURN_IF_ERROR(CheckMatrix("Gemm", "a", a));
  PS_KERNELS_RETURN_IF_ERROR(CheckMatrix("Gemm", "b", b));
  PS_KERNELS_RETURN_IF_ERROR(CheckMatrix("Gemm", "c", c));
  const bool ta = trans_a == Transpose::kYes;
  const bool tb = trans_b == Transpose::kYes;
  const int64_t m = ta ? a.cols : a.rows;
  const int64_t k = ta ? a.rows : a.cols;
  const int64_t kb = tb ? b.cols : b.rows;
  const int64_t n = tb ? b.rows : b.cols;
  if (k != kb || c.rows != m || c.cols != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm: shapes do not match: op(a) is [", m, ", ", k, "], op(b) is [",
        kb, ", ", n, "], c is [", c.rows, ", ", c.cols, "]"));
  }
  // BLAS and cuBLAS take int dimensions and leading dimensions.
  for (int64_t d : {a.rows, a.cols, b.rows, b.cols, c.rows, c.cols}) {
    if (d > kInt32Max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gemm: dimension ", d, " exceeds the int32 range of BLAS"));
    }
  }
  if ((a.ld != 0 && a.ld < a.cols) || (b.ld != 0 && b.ld < b.cols) ||
      a.ld > kInt32Max || b.ld > kInt32Max || a.ld < 0 || b.ld < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: a row stride must be in [cols, 2^31): a has ", a.ld,
                     " for ", a.cols, " columns, b ", b.ld, " for ", b.cols));
  }
  if (c.ld != 0 && c.ld != c.cols) {
    return absl::InvalidArgumentError("Gemm: c must be a dense matrix");
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  const int lda = static_cast<int>(std::max<int64_t>(a.stride(), 1));
  const int ldb = static_cast<int>(std::max<int64_t>(b.stride(), 1));
  return DoGemm(trans_a, trans_b, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a.data, lda, b.data, ldb, beta,
                c.data, static_cast<int>(n));
}

absl::Status Backend::BiasAdd(DeviceSpan<const float> bias,
                              DeviceMatrix<float> y) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("BiasAdd", "bias", bias));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix("BiasAdd", "y", y));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize("BiasAdd", "bias", bias.size, "y's row", y.cols));
  PS_KERNELS_RETURN_IF_ERROR(CheckRowsFitInt32("BiasAdd", y.rows, y.cols));
  if (y.size() == 0) return absl::OkStatus();
  return DoBiasAdd(bias.data, y.rows, y.cols, y.data);
}

absl::Status Backend::BiasGrad(DeviceMatrix<const float> dy,
                               DeviceSpan<float> dbias) {
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix("BiasGrad", "dy", dy));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("BiasGrad", "dbias", dbias));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize("BiasGrad", "dbias", dbias.size, "dy's row", dy.cols));
  PS_KERNELS_RETURN_IF_ERROR(CheckRowsFitInt32("BiasGrad", dy.rows, dy.cols));
  if (dy.cols == 0) return absl::OkStatus();
  return DoBiasGrad(dy.data, dy.rows, dy.cols, dbias.data);
}

absl::Status Backend::ActivationForward(Activation act,
                                        DeviceSpan<const float> x,
                                        DeviceSpan<float> y) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("ActivationForward", "x", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("ActivationForward", "y", y));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize("ActivationForward", "x", x.size, "y", y.size));
  if (!KnownActivation(act)) {
    return absl::InvalidArgumentError("ActivationForward: unknown activation");
  }
  if (x.size == 0) return absl::OkStatus();
  return DoActivationForward(act, x.data, x.size, y.data);
}

absl::Status Backend::ActivationBackward(Activation act,
                                         DeviceSpan<const float> y,
                                         DeviceSpan<const float> dy,
                                         DeviceSpan<float> dx) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("ActivationBackward", "y", y));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("ActivationBackward", "dy", dy));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("ActivationBackward", "dx", dx));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize("ActivationBackward", "y", y.size, "dy", dy.size));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize("ActivationBackward", "y", y.size, "dx", dx.size));
  if (!KnownActivation(act)) {
    return absl::InvalidArgumentError("ActivationBackward: unknown activation");
  }
  if (y.size == 0) return absl::OkStatus();
  return DoActivationBackward(act, y.data, dy.data, y.size, dx.data);
}

absl::Status Backend::SoftmaxCrossEntropy(
    DeviceMatrix<const float> logits, DeviceSpan<const int32_t> labels,
    DeviceSpan<float> loss, std::optional<DeviceMatrix<float>> dlogits) {
  constexpr char kOp[] = "SoftmaxCrossEntropy";
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "logits", logits));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "labels", labels));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "loss", loss));
  if (logits.rows == 0 || logits.cols == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": logits must be non-empty, got [", logits.rows,
                     ", ", logits.cols, "]"));
  }
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(kOp, "labels", labels.size, "logits' batch", logits.rows));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(kOp, "loss", loss.size, "a scalar", 1));
  PS_KERNELS_RETURN_IF_ERROR(CheckRowsFitInt32(kOp, logits.rows, logits.cols));
  float* grad = nullptr;
  if (dlogits.has_value()) {
    PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "dlogits", *dlogits));
    if (dlogits->rows != logits.rows || dlogits->cols != logits.cols) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": dlogits is [", dlogits->rows, ", ", dlogits->cols,
          "] but logits are [", logits.rows, ", ", logits.cols, "]"));
    }
    grad = dlogits->data;
  }
  return DoSoftmaxCrossEntropy(logits.data, labels.data, logits.rows,
                               logits.cols, loss.data, grad);
}

absl::Status Backend::Argmax(DeviceMatrix<const float> x,
                             DeviceSpan<int32_t> out) {
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix("Argmax", "x", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("Argmax", "out", out));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize("Argmax", "out", out.size, "x's rows", x.rows));
  PS_KERNELS_RETURN_IF_ERROR(CheckRowsFitInt32("Argmax", x.rows, x.cols));
  if (x.cols == 0 && x.rows > 0) {
    return absl::InvalidArgumentError("Argmax: rows have no columns");
  }
  if (x.rows == 0) return absl::OkStatus();
  return DoArgmax(x.data, x.rows, x.cols, out.data);
}

absl::Status Backend::Axpy(float alpha, DeviceSpan<const float> x,
                           DeviceSpan<float> y) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("Axpy", "x", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("Axpy", "y", y));
  PS_KERNELS_RETURN_IF_ERROR(CheckSameSize("Axpy", "x", x.size, "y", y.size));
  if (x.size == 0) return absl::OkStatus();
  return DoAxpy(alpha, x.data, x.size, y.data);
}

absl::Status Backend::Scale(float alpha, DeviceSpan<float> x) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("Scale", "x", x));
  if (x.size == 0) return absl::OkStatus();
  return DoScale(alpha, x.size, x.data);
}

absl::Status Backend::Fill(float value, DeviceSpan<float> x) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("Fill", "x", x));
  if (x.size == 0) return absl::OkStatus();
  return DoFill(value, x.size, x.data);
}

absl::Status Backend::Initialize(Initializer kind, uint64_t seed,
                                 int64_t fan_in, int64_t fan_out,
                                 DeviceSpan<float> x) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("Initialize", "x", x));
  if (fan_in <= 0 || fan_out <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Initialize: fan_in and fan_out must be positive, got ",
                     fan_in, ", ", fan_out));
  }
  switch (kind) {
    case Initializer::kHeUniform:
    case Initializer::kHeNormal:
    case Initializer::kXavierUniform:
    case Initializer::kXavierNormal:
      break;
    default:
      return absl::InvalidArgumentError("Initialize: unknown initializer");
  }
  if (x.size == 0) return absl::OkStatus();
  return DoInitialize(kind, seed, fan_in, fan_out, x.size, x.data);
}

absl::Status Backend::CastFromFloat(DeviceSpan<const float> x, DType to,
                                    DeviceSpan<uint16_t> y) {
  PS_KERNELS_RETURN_IF_ERROR(CheckHalfType("CastFromFloat", to));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("CastFromFloat", "x", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("CastFromFloat", "y", y));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize("CastFromFloat", "x", x.size, "y", y.size));
  if (x.size == 0) return absl::OkStatus();
  return DoCastFromFloat(x.data, x.size, to, y.data);
}

absl::Status Backend::CastToFloat(DType from, DeviceSpan<const uint16_t> x,
                                  DeviceSpan<float> y) {
  PS_KERNELS_RETURN_IF_ERROR(CheckHalfType("CastToFloat", from));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("CastToFloat", "x", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan("CastToFloat", "y", y));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize("CastToFloat", "x", x.size, "y", y.size));
  if (x.size == 0) return absl::OkStatus();
  return DoCastToFloat(from, x.data, x.size, y.data);
}

absl::Status Backend::BatchedGemm(Transpose trans_a, Transpose trans_b,
                                  float alpha, DeviceMatrixBatch<const float> a,
                                  DeviceMatrixBatch<const float> b, float beta,
                                  DeviceMatrixBatch<float> c) {
  constexpr char kOp[] = "BatchedGemm";
  if (a.count != b.count || a.count != c.count || a.count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": matrix counts differ or are negative: a ", a.count,
                     ", b ", b.count, ", c ", c.count));
  }
  if (a.count > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": ", a.count, " matrices exceed the int32 range"));
  }
  // One matrix's checks and shapes are Gemm's; the whole batch must be
  // addressable.
  const DeviceMatrix<const float> a0(a.data, a.rows, a.cols);
  const DeviceMatrix<const float> b0(b.data, b.rows, b.cols);
  const DeviceMatrix<float> c0(c.data, c.rows, c.cols);
  PS_KERNELS_RETURN_IF_ERROR(CheckMatrix(kOp, "a", a0));
  PS_KERNELS_RETURN_IF_ERROR(CheckMatrix(kOp, "b", b0));
  PS_KERNELS_RETURN_IF_ERROR(CheckMatrix(kOp, "c", c0));
  for (const DeviceMatrix<const float>& m :
       {a0, b0, DeviceMatrix<const float>(c0)}) {
    if (m.rows > kInt32Max || m.cols > kInt32Max) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": matrix [", m.rows, ", ", m.cols,
                       "] exceeds the int32 range"));
    }
    if (m.size() > 0 &&
        a.count > std::numeric_limits<int64_t>::max() / m.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": batch size overflows int64"));
    }
  }
  const bool ta = trans_a == Transpose::kYes;
  const bool tb = trans_b == Transpose::kYes;
  const int64_t m = ta ? a.cols : a.rows;
  const int64_t k = ta ? a.rows : a.cols;
  const int64_t kb = tb ? b.cols : b.rows;
  const int64_t n = tb ? b.rows : b.cols;
  if (k != kb || c.rows != m || c.cols != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": shapes do not match: op(a) is [", m, ", ", k, "], op(b) is [",
        kb, ", ", n, "], c is [", c.rows, ", ", c.cols, "]"));
  }
  if (a.count == 0 || m == 0 || n == 0) return absl::OkStatus();
  return DoBatchedGemm(trans_a, trans_b, static_cast<int>(a.count),
                       static_cast<int>(m), static_cast<int>(n),
                       static_cast<int>(k), alpha, a.data, b.data, beta,
                       c.data);
}

absl::Status Backend::CopyMatrix(DeviceMatrix<const float> src,
                                 DeviceMatrix<float> dst) {
  PS_KERNELS_RETURN_IF_ERROR(
      internal::CheckStridedMatrix("CopyMatrix", "src", src));
  PS_KERNELS_RETURN_IF_ERROR(
      internal::CheckStridedMatrix("CopyMatrix", "dst", dst));
  PS_KERNELS_RETURN_IF_ERROR(
      internal::CheckShape("CopyMatrix", "dst", dst, src.rows, src.cols));
  if (src.size() == 0) return absl::OkStatus();
  return DoCopyMatrix(src.data, src.stride(), src.rows, src.cols, dst.data,
                      dst.stride());
}

absl::Status Backend::SigmoidBinaryCrossEntropy(
    DeviceSpan<const float> logits, DeviceSpan<const float> labels,
    DeviceSpan<float> loss, std::optional<DeviceSpan<float>> dlogits) {
  PS_KERNELS_RETURN_IF_ERROR(CheckLossArgs("SigmoidBinaryCrossEntropy", logits,
                                           labels, loss, dlogits));
  return DoSigmoidBinaryCrossEntropy(
      logits.data, labels.data, logits.size, loss.data,
      dlogits.has_value() ? dlogits->data : nullptr);
}

absl::Status Backend::MeanSquaredError(
    DeviceSpan<const float> predictions, DeviceSpan<const float> targets,
    DeviceSpan<float> loss, std::optional<DeviceSpan<float>> dpredictions) {
  PS_KERNELS_RETURN_IF_ERROR(CheckLossArgs("MeanSquaredError", predictions,
                                           targets, loss, dpredictions));
  return DoMeanSquaredError(
      predictions.data, targets.data, predictions.size, loss.data,
      dpredictions.has_value() ? dpredictions->data : nullptr);
}

}  // namespace ps::kernels
