#include "worker/client/parameter_access.h"

#include <optional>
#include <utility>

namespace ps::client {
namespace {

// A call whose parts arrive all at once, with its wait.
class DeferredCall final : public Handle::Call {
 public:
  explicit DeferredCall(std::function<absl::StatusOr<CallResult>()> wait)
      : wait_(std::move(wait)) {}
  absl::Status AwaitPart(int, int64_t, int64_t) override {
    return Wait().status();
  }
  absl::StatusOr<CallResult> Wait() override {
    if (!result_.has_value()) result_ = wait_();
    return *result_;
  }

 private:
  std::function<absl::StatusOr<CallResult>()> wait_;
  std::optional<absl::StatusOr<CallResult>> result_;
};

}  // namespace

Handle Handle::Deferred(std::function<absl::StatusOr<CallResult>()> wait) {
  return Handle(std::make_unique<DeferredCall>(std::move(wait)));
}

absl::Status Handle::AwaitPart(int index, int64_t begin, int64_t end) {
  if (result_.has_value()) return result_->status();
  if (call_ == nullptr) return absl::OkStatus();
  absl::Status s = call_->AwaitPart(index, begin, end);
  if (!s.ok()) return Wait().status();
  return s;
}

absl::StatusOr<CallResult> Handle::Wait() {
  if (!result_.has_value()) {
    result_ = call_ != nullptr ? call_->Wait() : CallResult{};
    call_.reset();
  }
  return *result_;
}

std::vector<TensorGrad> WholeTensors(
    const std::vector<absl::Span<const float>>& grads) {
  std::vector<TensorGrad> out;
  out.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    out.push_back({.tensor_index = static_cast<int>(i), .grad = grads[i]});
  }
  return out;
}

}  // namespace ps::client
