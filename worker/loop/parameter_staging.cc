#include "worker/loop/parameter_staging.h"

#include "common/platform/status.h"

namespace ps::worker {

ParameterStaging::ParameterStaging(TrainableModel* model, bool direct)
    : model_(model), direct_(direct) {
  for (const ParameterInfo& p : model_->parameters()) {
    weights_.emplace_back(direct_ ? 0 : p.size);
    grads_.emplace_back(direct_ ? 0 : p.size);
  }
}

std::vector<absl::Span<float>> ParameterStaging::Weights() {
  std::vector<absl::Span<float>> spans;
  for (int i = 0; i < model_->num_parameters(); ++i) {
    if (direct_) {
      kernels::DeviceSpan<float> p = model_->parameter(i);
      spans.push_back(absl::MakeSpan(p.data, p.size));
    } else {
      spans.push_back(absl::MakeSpan(weights_[i]));
    }
  }
  return spans;
}

absl::Status ParameterStaging::LoadAll() {
  for (int i = 0; i < model_->num_parameters() && !direct_; ++i) {
    PS_RETURN_IF_ERROR(model_->SetParameterRange(i, 0, weights_[i]));
  }
  return absl::OkStatus();
}

absl::Status ParameterStaging::Load(int index, int64_t begin, int64_t end) {
  if (direct_) return absl::OkStatus();
  if (index < 0 || index >= static_cast<int>(weights_.size())) {
    return absl::InvalidArgumentError("ParameterStaging: bad parameter index");
  }
  return model_->SetParameterRange(
      index, begin,
      absl::MakeConstSpan(weights_[index]).subspan(begin, end - begin));
}

absl::StatusOr<absl::Span<const float>> ParameterStaging::Gradient(
    int index, int64_t begin, int64_t end) {
  if (direct_) {
    kernels::DeviceSpan<const float> d = model_->gradient(index);
    return absl::MakeConstSpan(d.data + begin, end - begin);
  }
  if (index < 0 || index >= static_cast<int>(grads_.size())) {
    return absl::InvalidArgumentError("ParameterStaging: bad parameter index");
  }
  absl::Span<float> host =
      absl::MakeSpan(grads_[index]).subspan(begin, end - begin);
  PS_RETURN_IF_ERROR(model_->GetGradientRange(index, begin, host));
  return absl::Span<const float>(host);
}

}  // namespace ps::worker
