#include "worker/model/head.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps::worker::model {
namespace {

template <typename T>
absl::Status Grow(kernels::Backend& b, kernels::DeviceBuffer& buf,
                  int64_t count) {
  if (buf.bytes() >= count * static_cast<int64_t>(sizeof(T))) {
    return absl::OkStatus();
  }
  PS_ASSIGN_OR_RETURN(buf, b.AllocateArray<T>(count));
  return absl::OkStatus();
}

}  // namespace

absl::Status Head::Reserve(kernels::Backend& b, int64_t batch) {
  PS_RETURN_IF_ERROR(Grow<int32_t>(b, classes_, batch));
  PS_RETURN_IF_ERROR(Grow<int32_t>(b, argmax_, batch));
  PS_RETURN_IF_ERROR(Grow<float>(b, targets_, batch));
  return Grow<float>(b, loss_value_, 1);
}

absl::Status Head::SetLabels(kernels::Backend& b,
                             absl::Span<const int32_t> labels) {
  const int64_t n = static_cast<int64_t>(labels.size());
  if (loss_ != HeadSpec::SOFTMAX_CROSS_ENTROPY) {
    return SetTargets(b, std::vector<float>(labels.begin(), labels.end()));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= width_) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", labels[i], " of example ", i,
                       " is outside [0, ", width_, ")"));
    }
  }
  host_labels_.assign(labels.begin(), labels.end());
  return b.CopyToDevice(labels.data(), classes_.data(),
                        n * static_cast<int64_t>(sizeof(int32_t)));
}

absl::Status Head::SetTargets(kernels::Backend& b,
                              absl::Span<const float> targets) {
  if (loss_ == HeadSpec::SOFTMAX_CROSS_ENTROPY) {
    return absl::InvalidArgumentError(
        "a softmax cross-entropy head needs class labels, not real ones");
  }
  host_labels_.assign(targets.begin(), targets.end());
  return b.CopyToDevice(targets.data(), targets_.data(),
                        static_cast<int64_t>(targets.size()) *
                            static_cast<int64_t>(sizeof(float)));
}

absl::Status Head::Loss(kernels::Backend& b, int64_t batch,
                        kernels::DeviceSpan<const float> output,
                        kernels::DeviceSpan<float> doutput) {
  kernels::DeviceSpan<float> loss = loss_value_.Span<float>(1);
  switch (loss_) {
    case HeadSpec::SOFTMAX_CROSS_ENTROPY:
      return b.SoftmaxCrossEntropy(
          kernels::DeviceMatrix<const float>(output.data, batch, width_),
          classes_.Span<int32_t>(batch), loss,
          kernels::DeviceMatrix<float>(doutput.data, batch, width_));
    case HeadSpec::SIGMOID_CROSS_ENTROPY:
      return b.SigmoidBinaryCrossEntropy(output, targets_.Span<float>(batch),
                                         loss, doutput);
    case HeadSpec::MEAN_SQUARED_ERROR:
      return b.MeanSquaredError(output, targets_.Span<float>(batch), loss,
                                doutput);
    default:
      return absl::InvalidArgumentError("the model has no head");
  }
}

absl::StatusOr<float> Head::LastLoss(kernels::Backend& b) {
  float loss = 0.0f;
  PS_RETURN_IF_ERROR(b.CopyToHost(loss_value_.data(), &loss, sizeof(loss)));
  return loss;
}

absl::StatusOr<ModelEvaluation> Head::Evaluate(
    kernels::Backend& b, int64_t batch,
    kernels::DeviceSpan<const float> output) {
  ModelEvaluation e;
  e.head = loss_;
  e.examples = batch;
  kernels::DeviceSpan<float> loss = loss_value_.Span<float>(1);
  if (loss_ == HeadSpec::SOFTMAX_CROSS_ENTROPY) {
    kernels::DeviceMatrix<const float> logits(output.data, batch, width_);
    PS_RETURN_IF_ERROR(b.SoftmaxCrossEntropy(
        logits, classes_.Span<int32_t>(batch), loss, std::nullopt));
    PS_RETURN_IF_ERROR(b.Argmax(logits, argmax_.Span<int32_t>(batch)));
    std::vector<int32_t> predicted(static_cast<size_t>(batch));
    PS_RETURN_IF_ERROR(
        b.CopyToHost(argmax_.data(), predicted.data(),
                     batch * static_cast<int64_t>(sizeof(int32_t))));
    for (int64_t i = 0; i < batch; ++i) {
      if (static_cast<float>(predicted[i]) == host_labels_[i]) ++e.correct;
    }
  } else {
    std::vector<float> out(static_cast<size_t>(batch));
    PS_RETURN_IF_ERROR(b.CopyToHost(
        output.data, out.data(), batch * static_cast<int64_t>(sizeof(float))));
    for (int64_t i = 0; i < batch; ++i) {
      const float y = host_labels_[i];
      if (loss_ == HeadSpec::SIGMOID_CROSS_ENTROPY) {
        const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(out[i])));
        e.auc.Add(out[i], y);
        e.log_loss.AddLogit(out[i], y);
        if ((p >= 0.5) == (y > 0.5f)) ++e.correct;
      } else {
        e.rmse.Add(out[i], y);
      }
    }
    PS_RETURN_IF_ERROR(
        loss_ == HeadSpec::SIGMOID_CROSS_ENTROPY
            ? b.SigmoidBinaryCrossEntropy(output, targets_.Span<float>(batch),
                                          loss, std::nullopt)
            : b.MeanSquaredError(output, targets_.Span<float>(batch), loss,
                                 std::nullopt));
  }
  PS_ASSIGN_OR_RETURN(e.loss, LastLoss(b));
  return e;
}

}  // namespace ps::worker::model
